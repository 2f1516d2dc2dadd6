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

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._bundled import BundledDaemonAction


class ActionModule(BundledDaemonAction):

    MODULE = 'gpufleet.nvidia.persistenced'
    CONCERN = 'persistenced'
