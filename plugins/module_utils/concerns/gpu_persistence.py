# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_persistence concern: its argument spec and run.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time (see ``concerns.base``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import backends
from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import state_dir
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.base import Concern


# This concern, declared once (the keys: concerns/base.py, DECLARATION_KEYS); scripts/sync-roles builds the rest.
DECLARATION = {
    'name': 'gpu_persistence',
    'module': 'gpu_persistence',
    'order': 30,
    'after': ('persistenced',),
    'role': 'gpu_persistence',
    'switch': 'gpu_node_gpu_persistence',
    'off_when': ('persistenced_state', 'stopped'),
    'variables': (
        ('gpu_persistence_gpus', 'gpus', ('without', 'gpu_persistence_modes')),
        ('gpu_persistence_mode', 'mode', ('without', 'gpu_persistence_modes')),
        ('gpu_persistence_modes', 'modes', 'truthy'),
        ('gpu_persistence_persist', 'persist'),
        ('gpu_persistence_state_file', 'state_file'),
        ('gpu_persistence_backend', 'backend'),
    ),
    'module_only': ('service_user', 'socket_path', 'timeout'),
    'drift': 'gpus_off',
    'summary': ('gpus',),
}

SPEC = dict(
    gpus=dict(type='list', elements='raw', default=['all']),
    mode=dict(type='str', choices=['enabled', 'disabled']),
    modes=dict(type='list', elements='dict', options=dict(
        gpu=dict(type='raw', required=True),
        mode=dict(type='str', required=True, choices=['enabled', 'disabled']),
    )),
    persist=dict(type='bool', default=True),
    state_file=dict(type='path', default=state_dir.DEFAULT_PATH),
    service_user=dict(type='str'),
)
SPEC.update(backends.ACCESS_ARGUMENT_SPEC)


def run(module):
    params = module.params
    if params['modes'] is not None and params['gpus'] != ['all']:
        module.fail_json(msg='gpus and modes are mutually exclusive: name each GPU in modes')
    try:
        backend, unused_answers = backends.open_backend(params, 'to set persistence through NVML')
    except backends.GpuError as exc:
        module.fail_json(**exc.fail_json_args())
    run = apply.PersistenceRun(params, backend)
    try:
        run.plan()  # every GPU and the state file first: a bad state file fails before any GPU changes
        if not module.check_mode:
            run.apply()
    except apply.RunError as exc:
        module.fail_json(**exc.fields)
    for warning in run.warnings():
        module.warn(warning)
    return run.result(diff=module._diff)


CONCERN = Concern.declared(DECLARATION, SPEC, run,
                           mutually_exclusive=[['mode', 'modes']], required_one_of=[['mode', 'modes']])
