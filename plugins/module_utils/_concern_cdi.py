# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cdi concern (module cdi_spec): its argument spec and run.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time (see ``_concern``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpufleet.nvidia.plugins.module_utils import _cdi_apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _cdi_boot
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _host
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _module
from ansible_collections.gpufleet.nvidia.plugins.module_utils._concern import Concern
from ansible_collections.gpufleet.nvidia.plugins.module_utils._errors import GpufleetError

SPEC = _cdi_apply.SPEC


def run(module):
    request = _cdi_apply.Request.from_params(module.params)
    run_command = _module.runner(module)
    init, tools = None, {}
    if request.boot:
        init, tools, detected = _module.init_system(module, run_command, request.init_system)
        if init not in ('systemd', 'sysvinit', 'upstart'):
            module.warn('%s: no init system recognised (%s): the CDI spec is not refreshed at boot; set init_system '
                        'if this host runs systemd, SysV or Upstart' % (os.uname()[1], detected['reason']))
            init = None
    cdi = _cdi_apply.CdiRun(request, run_command, _module.runner(module, _cdi_boot.ENVIRONMENT), init, tools, check_mode=module.check_mode, diff=module._diff,
                            host=os.uname()[1], label=_host.selinux_labeller(module))
    try:
        result = cdi.converge()
    except GpufleetError as exc:
        module.fail_json(msg=str(exc), **cdi.result)
    for warning in result.pop('warnings'):
        module.warn(warning)
    return result


CONCERN = Concern('cdi', 'cdi_spec', SPEC, run)
