# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cdi concern (module cdi_spec): its argument spec and run.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time (see ``concerns.base``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import boot as cdi_boot
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import systems
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import module as concerns_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.base import Concern
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError

# This concern, declared once (the keys: concerns/base.py, DECLARATION_KEYS); scripts/sync-roles builds the rest.
DECLARATION = {
    'name': 'cdi',
    'module': 'cdi_spec',
    'order': 50,
    # Run again after the persistence daemon or the toolkit changed: NVIDIA's generator mounts the daemon's socket
    # only while it exists (a spec naming a socket that is gone fails every GPU container), and a new nvidia-ctk
    # may write another spec.
    'after': ('persistenced', 'container_toolkit'),
    'role': 'gpu_node',
    'switch': 'gpu_node_cdi',
    'variables': (
        ('gpu_node_cdi_state', 'state'),
        ('gpu_node_cdi_path', 'path'),
        ('gpu_node_cdi_device_name_strategy', 'device_name_strategy'),
        ('gpu_node_cdi_boot', 'boot'),
        ('gpu_node_cdi_runtime_mode', 'runtime_mode'),
    ),
    'module_only': ('boot_unit', 'init_system', 'nvidia_ctk', 'runtime_config'),
    'drift': 'cdi',
    'drift_optional': True,
}

SPEC = apply.SPEC


def run(module):
    request = apply.Request.from_params(module.params)
    run_command = concerns_module.runner(module)
    init, tools = None, {}
    if request.boot:
        init, tools, detected = concerns_module.init_system(module, run_command, request.init_system)
        if init not in systems.SYSTEMS:
            module.warn('%s: no init system recognised (%s): the CDI spec is not refreshed at boot; set init_system '
                        'if this host runs systemd, SysV or Upstart' % (os.uname()[1], detected['reason']))
            init = None
    cdi = apply.CdiRun(request, run_command, concerns_module.runner(module, cdi_boot.ENVIRONMENT), init, tools, check_mode=module.check_mode, diff=module._diff,
                       host=os.uname()[1], label=files.selinux_labeller(module),
                       together=concerns_module.run_state(module).together)
    try:
        result = cdi.converge()
    except GpufleetError as exc:
        module.fail_json(msg=str(exc), **cdi.result)
    for warning in result.pop('warnings'):
        module.warn(warning)
    return result


CONCERN = Concern.declared(DECLARATION, SPEC, run)
