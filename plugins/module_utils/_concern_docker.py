# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The docker_runtime concern: its argument spec and run.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time (see ``_concern``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.nvidia.plugins.module_utils import _docker_apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _dockerd
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _host
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _module
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _verify
from ansible_collections.gpufleet.nvidia.plugins.module_utils._concern import Concern
from ansible_collections.gpufleet.nvidia.plugins.module_utils._docker_api import DockerAPI, socket_path_from_host


SPEC = _docker_apply.SPEC


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
    request = _docker_apply.Request.from_params(params)

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
