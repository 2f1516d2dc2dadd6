# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The crio_runtime concern: its argument spec and run.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time (see ``concerns.base``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpufleet.nvidia.plugins.module_utils.crio import config
from ansible_collections.gpufleet.nvidia.plugins.module_utils.crio import apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import module as concerns_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.base import (
    Concern, engine_binary, engine_service)


# This concern, declared once (the keys: concerns/base.py, DECLARATION_KEYS); scripts/sync-roles builds the rest.
DECLARATION = {
    'name': 'crio',
    'module': 'crio_runtime',
    'order': 70,
    'role': 'container_runtime',
    'switch': 'gpu_node_container_runtime',
    'engine': True,
    'variables': (
        ('container_runtime_disruption', 'disruption'),
        ('container_runtime_crio_dropin', 'path'),
        ('container_runtime_crio_config', 'config_path'),
        ('container_runtime_crio_config_dir', 'config_dir'),
        ('container_runtime_name', 'name'),
        ('container_runtime_path', 'runtime_path'),
        ('container_runtime_default', 'default_runtime'),
        ('container_runtime_cdi', 'cdi'),
        ('container_runtime_cdi_spec_dirs', 'cdi_spec_dirs'),
        ('container_runtime_crio_take_over', 'take_over'),
        ('container_runtime_state', 'state'),
        ('container_runtime_backup', 'backup'),
        ('container_runtime_apply', 'apply'),
        ('container_runtime_crio_service_name', 'service_name'),
        ('container_runtime_timeout', 'apply_timeout'),
    ),
    'module_only': (),
    'drift': 'engines_off',
    'summary': ('crio_runtimes', 'crio_action'),
}

SPEC = config.SPEC


def run(module):
    params = module.params
    crio = engine_binary(module, 'crio', 'install CRI-O first.')
    service, run_command = engine_service(module, crio, lambda: apply.find_pid(service.processes())[0])
    request = config.Request.from_params(params)
    converge = apply.Converge(request, service, apply.Tools(run_command, crio=crio),
                              backup=params['backup'] or None,
                              backup_dir=os.path.dirname(params['config_dir'].rstrip('/')),
                              label=files.selinux_labeller(module))
    return concerns_module.config_run(module, params['path'], lambda: converge.run(check_mode=module.check_mode))


CONCERN = Concern.declared(DECLARATION, SPEC, run)
