# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for gpufleet.nvidia.slurm_node: with ``role_vars: true`` its options come from the roles' variables
(plugins/plugin_utils/_role_action.py), but for the step the task asks for (``action``, ``reason``,
``wait_timeout``), which no role variable gives; otherwise the task's options go to the module unchanged."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._role_action import RoleVarsAction

STEP = ('action', 'reason', 'wait_timeout')


class ActionModule(RoleVarsAction):

    MODULE = 'gpufleet.nvidia.slurm_node'
    CONCERN = 'slurm_node'

    def module_args(self, args, task_vars):
        if not boolean(args.get('role_vars', False), strict=False):
            return args
        step = dict((key, args.pop(key)) for key in STEP if key in args)
        return dict(super(ActionModule, self).module_args(args, task_vars), **step)
