# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """The ``role_vars`` option of the modules the collection's roles call: their options from the roles' variables."""

    DOCUMENTATION = r'''
options:
  role_vars:
    description:
      - Take every option of this module from the C(gpufleet.nvidia) roles' variables instead of the task's, as the
        collection's own roles call it. Each option comes from its role variable (for example C(state) from
        C(persistenced_state) or C(container_runtime_state)), by one table on the controller, the same table
        M(gpufleet.nvidia.node_state) evaluates a node with.
      - With V(true) no other option may be given, and the roles' defaults must be in scope (inside the role).
      - Handled by the module's action plugin; the module itself never sees it.
    type: bool
    default: false
attributes:
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the
      controller.
    support: full
    details:
      - With O(role_vars), the action plugin builds the module's options from the roles' variables.
'''
