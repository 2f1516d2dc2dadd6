# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for gpufleet.nvidia.gpu_health: with ``role_vars: true`` its options come from the roles' variables
(plugins/plugin_utils/_role_action.py), but for ``verdict_before`` (the health gate's), which no role variable gives;
otherwise the task's options go to the module unchanged. The run's id for the audit trail is given either way."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._role_action import RoleVarsAction


class ActionModule(RoleVarsAction):

    MODULE = 'gpufleet.nvidia.gpu_health'
    CONCERN = 'gpu_health'

    def module_args(self, args, task_vars):
        if not boolean(args.get('role_vars', False), strict=False) or 'verdict_before' not in args:
            return super(ActionModule, self).module_args(args, task_vars)
        before = args.pop('verdict_before')
        return dict(super(ActionModule, self).module_args(args, task_vars), verdict_before=before)
