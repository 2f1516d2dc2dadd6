# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The containerd_runtime concern: its argument spec and run.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time (see ``_concern``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpufleet.nvidia.plugins.module_utils import _containerd_apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _host
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _module
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _verify
from ansible_collections.gpufleet.nvidia.plugins.module_utils._concern import Concern, engine_binary, engine_service


SPEC = _containerd_apply.SPEC


def run(module):
    params = module.params
    containerd = engine_binary(module, 'containerd', 'install the containerd package first.')
    service, run_command = engine_service(
        module, containerd, lambda: _containerd_apply.find_pid(params['path'], service.processes()),
        log_files=_containerd_apply.log_files(params['service_name']))
    programs = _containerd_apply.Tools(run_command, containerd=containerd,
                                       ctr=module.get_bin_path('ctr') or 'ctr')
    request = _containerd_apply.Request.from_params(params)
    converge = _containerd_apply.Converge(request, service, programs, backup=params['backup'] or None,
                                          label=_host.selinux_labeller(module))
    result = _module.config_run(module, params['path'], lambda: converge.run(check_mode=module.check_mode))
    loaded, why = _containerd_apply.runtime_loaded(result, params['name'])
    result['verification'] = _verify.verify(
        _verify.request_from(params, params['runtime_path']), _verify.Ctr(module.get_bin_path('ctr'), converge.address, os.getpid()),
        run_command, module.check_mode, params['state'], loaded, loaded_why=why)
    return result


CONCERN = Concern('containerd', 'containerd_runtime', SPEC, run)
