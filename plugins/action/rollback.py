# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for gpufleet.nvidia.rollback: the run to put back is this ansible-playbook run unless the task names
one (``run_id``), the id the changing modules saved their records under (plugins/plugin_utils/_role_action.py); the
rollback's own audit line gets this run's id too."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._role_action import RoleVarsAction, run_id


class ActionModule(RoleVarsAction):

    MODULE = 'gpufleet.nvidia.rollback'

    def module_args(self, args, task_vars):
        """The task's options, with this run's id where no run is named (it has no role variables)."""
        if not args.get('run_id'):
            args['run_id'] = run_id()
        return args
