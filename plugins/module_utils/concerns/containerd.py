# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The containerd_runtime concern: its argument spec and run.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time (see ``concerns.base``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import facts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import module as concerns_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.engines import verify
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.base import (
    Concern, engine_binary, engine_service)


# This concern, declared once (the keys: concerns/base.py, DECLARATION_KEYS); scripts/sync-roles builds the rest.
DECLARATION = {
    'name': 'containerd',
    'module': 'containerd_runtime',
    'order': 60,
    'role': 'container_runtime',
    'switch': 'gpu_node_container_runtime',
    'engine': True,
    'variables': (
        ('container_runtime_disruption', 'disruption'),
        ('container_runtime_containerd_config', 'path'),
        ('container_runtime_name', 'name'),
        ('container_runtime_path', 'runtime_path'),
        ('container_runtime_default', 'default_runtime'),
        ('container_runtime_cdi', 'cdi'),
        ('container_runtime_cdi_spec_dirs', 'cdi_spec_dirs'),
        ('container_runtime_containerd_take_over', 'take_over'),
        ('container_runtime_state', 'state'),
        ('container_runtime_backup', 'backup'),
        ('container_runtime_apply', 'apply'),
        ('container_runtime_containerd_service_name', 'service_name'),
        ('container_runtime_timeout', 'apply_timeout'),
        ('container_runtime_verify', 'verify'),
        ('container_runtime_verify_image', 'verify_image'),
        ('container_runtime_verify_devices', 'verify_devices'),
    ),
    'module_only': (),
    'drift': 'engines_off',
    'summary': ('containerd_runtimes', 'containerd_action'),
}

SPEC = apply.SPEC


def run(module):
    params = module.params
    containerd = engine_binary(module, 'containerd', 'install the containerd package first.')
    service, run_command = engine_service(
        module, containerd, lambda: facts.find_pid(params['path'], service.processes()),
        log_files=facts.log_files(params['service_name']))
    programs = facts.Tools(run_command, containerd=containerd, ctr=module.get_bin_path('ctr') or 'ctr',
                           state=concerns_module.run_state(module))
    request = apply.Request.from_params(params)
    converge = apply.Converge(request, service, programs, backup=params['backup'] or None,
                              label=files.selinux_labeller(module))
    result = concerns_module.config_run(module, params['path'], lambda: converge.run(check_mode=module.check_mode))
    loaded, why = apply.runtime_loaded(result, params['name'])
    result['verification'] = verify.verify(
        verify.request_from(params, params['runtime_path']), verify.Ctr(module.get_bin_path('ctr'), converge.address, os.getpid()),
        run_command, module.check_mode, params['state'], loaded, loaded_why=why)
    return result


CONCERN = Concern.declared(DECLARATION, SPEC, run)
