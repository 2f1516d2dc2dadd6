# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The docker_runtime concern: its argument spec and run.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time (see ``concerns.base``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker import apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker import dockerd as docker_dockerd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import module as concerns_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.engines import verify
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.base import Concern
from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker.api import DockerAPI, socket_path_from_host


# This concern, declared once (the keys: concerns/base.py, DECLARATION_KEYS); scripts/sync-roles builds the rest.
DECLARATION = {
    'name': 'docker',
    'module': 'docker_runtime',
    'order': 80,
    'role': 'container_runtime',
    'switch': 'gpu_node_container_runtime',
    'engine': True,
    'variables': (
        ('container_runtime_disruption', 'disruption'),
        ('container_runtime_daemon_json', 'path'),
        ('container_runtime_name', 'name'),
        ('container_runtime_path', 'runtime_path'),
        ('container_runtime_args', 'runtime_args'),
        ('container_runtime_default', 'default_runtime'),
        ('container_runtime_cdi', 'cdi'),
        ('container_runtime_state', 'state'),
        ('container_runtime_backup', 'backup'),
        ('container_runtime_apply', 'apply'),
        ('container_runtime_docker_host', 'docker_host'),
        ('container_runtime_service_name', 'service_name'),
        ('container_runtime_timeout', 'apply_timeout'),
        ('container_runtime_verify', 'verify'),
        ('container_runtime_verify_image', 'verify_image'),
        ('container_runtime_verify_devices', 'verify_devices'),
    ),
    'module_only': (),
    'drift': 'engines_off',
    'summary': ('docker_runtimes', 'docker_action', 'nvidia_run'),
}

SPEC = apply.SPEC


def build_dockerd(module, socket_path):
    """``(dockerd service, run_command)`` on this host."""
    run_command = concerns_module.runner(module)
    init, tools, unused_detected = concerns_module.init_system(module, run_command)
    return docker_dockerd.Dockerd(run_command, init, tools, service=module.params['service_name'],
                                  socket_path=socket_path, executable=module.get_bin_path('dockerd'),
                                  together=concerns_module.run_state(module).together), run_command


def run(module):
    params = module.params
    socket_path = socket_path_from_host(params['docker_host'])
    service, run_command = build_dockerd(module, socket_path)
    api = DockerAPI(socket_path, timeout=min(10, max(1, params['apply_timeout'])))
    request = apply.Request.from_params(params)

    def dockerd_checks():
        dockerd_path = module.get_bin_path('dockerd')
        help_text = docker_dockerd.dockerd_help(run_command, dockerd_path)
        if help_text is None:  # no dockerd here, or one too old to say: nothing to check against
            return None, None
        return (docker_dockerd.dockerd_validator(run_command, dockerd_path, help_text=help_text),
                docker_dockerd.option_keys_from_help(help_text))

    result = concerns_module.config_run(module, params['path'], lambda: apply.converge(
        request, service, api, check_mode=module.check_mode, backup=params['backup'] or None,
        label=files.selinux_labeller(module), dockerd_checks=dockerd_checks))
    loaded, why = apply.runtime_loaded(result, params['name'])
    client = verify.Docker(module.get_bin_path('docker'))
    result['verification'] = verify.verify(
        verify.request_from(params, params['runtime_path']), client,
        concerns_module.runner(module, {'DOCKER_HOST': params['docker_host']}), module.check_mode, params['state'], loaded,
        loaded_why=why, default_runtime=result['default_runtime'])
    return result


CONCERN = Concern.declared(DECLARATION, SPEC, run)
