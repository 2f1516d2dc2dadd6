# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for gpufleet.nvidia.node_state.

The persistence daemon's check compares the installed bundled daemon with the
collection's copy, so, as for gpufleet.nvidia.persistenced, the controller
hands the module that copy in the same task: still one round trip.

With ``role_vars: true`` (how roles/gpu_node calls it) the concerns' options are
built here from the roles' variables, by one table (plugin_utils/_role_options.py),
in place of a template per concern rendered for every host.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import _results
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import _role_options
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._bundled import BundledDaemonAction
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._role_action import missing

# The options role_vars builds: none of them may be given with it.
BUILT = _results.CONCERNS + ('engines',)


class ActionModule(BundledDaemonAction):

    MODULE = 'gpufleet.nvidia.node_state'

    def wants(self, args):
        """Only when the persistence daemon is evaluated with ``state: present`` (the default)."""
        persistenced = args.get('persistenced')
        return isinstance(persistenced, dict) and persistenced.get('state', 'present') == 'present'

    def module_args(self, args, task_vars):
        if not boolean(args.pop('role_vars', False), strict=False):
            return args
        given = sorted(name for name in BUILT if name in args)
        if given:
            raise AnsibleActionFail('role_vars builds every concern\'s options from the roles\' variables: do not also '
                                    'give %s' % ', '.join(given))
        variables = task_vars or {}
        # each role variable templated once: for the argument check, and the same values for the options
        given = _role_options.role_arguments(self._templar, variables)
        errors = _role_options.validate(self._templar, variables, given=given)
        if errors:
            raise AnsibleActionFail('Validation of arguments failed (role gpufleet.nvidia.gpu_node):\n%s'
                                    % '\n'.join(errors))
        resolve = _role_options.resolver(self._templar, variables, templated=given)
        try:
            args.update(_role_options.node_state_args(resolve))
        except _role_options.MissingVariable as exc:
            raise missing(exc, self.MODULE)
        return args
