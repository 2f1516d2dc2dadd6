# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for gpufleet.nvidia.node_state.

The persistence daemon's check compares the installed bundled daemon with the
collection's copy, so, as for gpufleet.nvidia.persistenced, the controller
hands the module that copy in the same task: still one round trip.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._bundled import BundledDaemonAction


class ActionModule(BundledDaemonAction):

    MODULE = 'gpufleet.nvidia.node_state'

    def wants(self, args):
        """Only when the persistence daemon is evaluated with ``state: present`` (the default)."""
        persistenced = args.get('persistenced')
        return isinstance(persistenced, dict) and persistenced.get('state', 'present') == 'present'
