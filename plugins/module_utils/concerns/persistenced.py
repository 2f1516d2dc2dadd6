# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The persistenced concern: its argument spec and run.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time (see ``concerns.base``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.nvidia.plugins.module_utils.persistenced import rules as pd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import module as concerns_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.base import Concern
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import RunFailed
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.options import DISRUPTION
from ansible_collections.gpufleet.nvidia.plugins.module_utils.persistenced.deploy import Deployer


# This concern, declared once (the keys: concerns/base.py, DECLARATION_KEYS); scripts/sync-roles builds the rest.
DECLARATION = {
    'name': 'persistenced',
    'module': 'persistenced',
    'order': 20,
    'role': 'persistenced',
    'switch': 'gpu_node_persistenced',
    'variables': (
        ('persistenced_disruption', 'disruption'),
        ('persistenced_state', 'state'),
        ('persistenced_daemon', 'daemon'),
        ('persistenced_driver_path', 'driver_path'),
        ('persistenced_bundled_path', 'bundled_path'),
        ('persistenced_init_system', 'init_system'),
        ('persistenced_service_name', 'service_name'),
        ('persistenced_user', 'user'),
        ('persistenced_group', 'group', 'truthy'),
        ('persistenced_create_user', 'create_user'),
        ('persistenced_allow_other_primary_group', 'allow_other_primary_group'),
        ('persistenced_persistence_mode', 'persistence_mode'),
        ('persistenced_uvm_persistence_mode', 'uvm_persistence_mode'),
        ('persistenced_verbose', 'verbose'),
        ('persistenced_nvidia_cfg_path', 'nvidia_cfg_path', 'truthy'),
        ('persistenced_extra_args', 'extra_args'),
        ('persistenced_state_file', 'state_file'),
        ('persistenced_backup', 'backup'),
        ('persistenced_start_timeout', 'start_timeout'),
        ('persistenced_remove_user', 'remove_user'),
    ),
    'module_only': ('bundled_source',),
    'drift': 'daemon',
    'summary': ('init', 'daemon'),
}

SPEC = dict(
    state=dict(type='str', default='present', choices=['present', 'absent', 'stopped']),
    daemon=dict(type='str', default='auto', choices=['auto', 'driver', 'bundled']),
    driver_path=dict(type='path', default=pd.DRIVER_PATH),
    bundled_path=dict(type='path', default=pd.BUNDLED_PATH),
    init_system=dict(type='str', default='auto', choices=['auto', 'systemd', 'sysvinit', 'upstart']),
    service_name=dict(type='str', default='nvidia-persistenced'),
    user=dict(type='str', default='nvidia-persistenced'),
    group=dict(type='str'),
    create_user=dict(type='bool', default=True),
    allow_other_primary_group=dict(type='bool', default=False),
    persistence_mode=dict(type='bool', default=True),
    uvm_persistence_mode=dict(type='bool'),
    verbose=dict(type='bool', default=False),
    nvidia_cfg_path=dict(type='path'),
    extra_args=dict(type='list', elements='str', default=[]),
    state_file=dict(type='path', default=pd.STATE_FILE),
    backup=dict(type='bool', default=True),
    start_timeout=dict(type='float', default=30.0),
    remove_user=dict(type='bool', default=False),
    disruption=dict(DISRUPTION),
    bundled_source=dict(type='str', no_log=True),
)


def run(module):
    p = module.params
    if p['group'] is None and (p['user'] == 'root' or p['state'] != 'present'):
        # present: an existing user's own primary group (Deployer.resolve_identity); absent and stopped: the group
        # this module would have created for the user
        p['group'] = 'root' if p['user'] == 'root' else p['user']
    if p['state'] == 'present' and not p['bundled_source']:
        module.fail_json(msg='the bundled daemon was not passed in: call this module as gpufleet.nvidia.persistenced '
                             '(its action plugin supplies it), not through a renamed copy')
    try:
        pd.validate(p)
    except pd.ConfigError as exc:
        module.fail_json(msg=str(exc))
    deployer = Deployer(module.params, concerns_module.HostCalls(module))
    try:
        result = deployer.converge()
    except RunFailed as exc:
        module.fail_json(msg=exc.msg, **exc.extra)
    for warning in deployer.warnings:
        module.warn(warning)
    return result


CONCERN = Concern.declared(DECLARATION, SPEC, run)
