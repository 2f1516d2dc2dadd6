# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for gpufleet.nvidia.persistenced.

Reads the bundled daemon (files/gpufleet-persistenced) from the collection on
the controller and hands its text, compressed, to the module in the same task,
so the host gets it in the module's one round trip (no separate copy task).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._bundled import bundled_source


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = dict(self._task.args)
        if 'bundled_source' in args:
            raise AnsibleActionFail('bundled_source is internal to gpufleet.nvidia.persistenced; do not set it')
        args['bundled_source'] = bundled_source()
        result.update(self._execute_module(module_name='gpufleet.nvidia.persistenced', module_args=args,
                                           task_vars=task_vars))
        return result
