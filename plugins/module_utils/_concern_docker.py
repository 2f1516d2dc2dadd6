# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The docker_runtime concern: its argument spec and run.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time (see ``_concern``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.nvidia.plugins.module_utils import _daemon_json
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _docker_apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _dockerd
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _host
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _module
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _verify
from ansible_collections.gpufleet.nvidia.plugins.module_utils._concern import Concern
from ansible_collections.gpufleet.nvidia.plugins.module_utils._docker_api import DockerAPI, socket_path_from_host


SPEC = dict(
    path=dict(type='path', default=_daemon_json.DEFAULT_PATH),
    name=dict(type='str', default='nvidia'),
    runtime_path=dict(type='str', default='nvidia-container-runtime'),
    runtime_args=dict(type='list', elements='str'),
    default_runtime=dict(type='bool'),
    cdi=dict(type='bool'),
    state=dict(type='str', default='present', choices=['present', 'absent']),
    backup=dict(type='bool', default=False),
    apply=dict(type='str', default='auto', choices=['auto', 'reload', 'restart', 'none']),
    docker_host=dict(type='str', default='unix:///var/run/docker.sock'),
    service_name=dict(type='str', default='docker'),
    apply_timeout=dict(type='int', default=60, aliases=['timeout']),
    **_verify.SPEC
)


def build_dockerd(module, socket_path):
    """``(dockerd service, run_command)`` on this host."""
    run_command = _module.runner(module)
    init, tools, unused_detected = _module.init_system(module, run_command)
    return _dockerd.Dockerd(run_command, init, tools, service=module.params['service_name'],
                            socket_path=socket_path, executable=module.get_bin_path('dockerd')), run_command


def run(module):
    params = module.params
    socket_path = socket_path_from_host(params['docker_host'])
    service, run_command = build_dockerd(module, socket_path)
    api = DockerAPI(socket_path, timeout=min(10, max(1, params['apply_timeout'])))
    request = _docker_apply.Request(
        path=params['path'], name=params['name'], runtime_path=params['runtime_path'],
        runtime_args=params['runtime_args'], default_runtime=params['default_runtime'], cdi=params['cdi'],
        state=params['state'], apply=params['apply'], timeout=params['apply_timeout'])

    def dockerd_checks():
        dockerd_path = module.get_bin_path('dockerd')
        help_text = _dockerd.dockerd_help(run_command, dockerd_path)
        if help_text is None:  # no dockerd here, or one too old to say: nothing to check against
            return None, None
        return (_dockerd.dockerd_validator(run_command, dockerd_path, help_text=help_text),
                _dockerd.option_keys_from_help(help_text))

    result = _module.config_run(module, params['path'], lambda: _docker_apply.converge(
        request, service, api, check_mode=module.check_mode, backup=params['backup'] or None,
        label=_host.selinux_labeller(module), dockerd_checks=dockerd_checks))
    loaded, why = _docker_apply.runtime_loaded(result, params['name'])
    client = _verify.Docker(module.get_bin_path('docker'))
    result['verification'] = _verify.verify(
        _verify.request_from(params, params['runtime_path']), client,
        _module.runner(module, {'DOCKER_HOST': params['docker_host']}), module.check_mode, params['state'], loaded,
        loaded_why=why, default_runtime=result['default_runtime'])
    return result


CONCERN = Concern('docker', 'docker_runtime', SPEC, run)
