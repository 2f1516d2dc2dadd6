# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for gpufleet.nvidia.container_toolkit_info: with ``role_vars: true`` its options come from the roles' variables
(plugins/plugin_utils/_role_action.py); otherwise the task's options go to the module unchanged."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._role_action import RoleVarsAction


class ActionModule(RoleVarsAction):

    MODULE = 'gpufleet.nvidia.container_toolkit_info'
    CONCERN = 'container_toolkit'
    AUDITED = False  # read-only: no audit trail
