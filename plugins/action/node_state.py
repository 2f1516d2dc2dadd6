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

With ``publish_result: true`` (gpu_node's main entry point) it also publishes the role's result where nothing is to
run after it (a converged node, or ``gpu_node_drift_only``), so that such a node costs no set_fact task (each task a
host goes through costs a forked worker on the controller): ``gpu_node_result``, as a host variable at set_fact's
precedence, whose value is the role's own expression, ``gpu_node_state | gpufleet.nvidia.gpu_node_result``. That is
the value tasks/main.yml's set_fact gives it, exactly: the action's result is not what Ansible registers (Ansible adds
``changed`` and ``failed``, and ansible-core 2.21 keeps the module's warnings apart until then), so the expression is
set, templated where it is read, over the registered result. Only ansible-core 2.21 and later let an action set host
variables that way (``register_host_variables``), and not as ``ansible_facts``, which would go to the fact cache
(kept across runs by a persistent one: an unreachable host would show an old result) and, read as a top-level
variable, be deprecated since 2.20 and gone with ``INJECT_FACTS_AS_VARS: false``. Whether it published is set
beside it (``__gpu_node_published``): the role publishes in a task of its own where it did not (earlier releases,
a failed evaluation).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import _results
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import _role_options
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._bundled import BundledDaemonAction
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._role_action import missing

try:  # ansible-core 2.21 and later: host variables an action sets, at a precedence it chooses
    from ansible.plugins.action import VariableLayer
    from ansible.template import trust_as_template
except ImportError:
    VariableLayer = None

# The options role_vars builds: none of them may be given with it.
BUILT = _results.CONCERNS + ('engines',)

# What publish_result sets: gpu_node's public result (README), and whether this task published it (internal to the
# role, whose tasks/main.yml leaves the role on it; set to false first, so that a failed task says so too).
RESULT = 'gpu_node_result'
PUBLISHED = '__gpu_node_published'
# The result's expression: tasks/main.yml's set_fact, over what this task registers (REGISTER).
REGISTER = 'gpu_node_state'
EXPRESSION = '{{ %s | gpufleet.nvidia.gpu_node_result }}' % REGISTER


def nothing_to_run(result, drift_only):
    """Whether nothing runs after node_state, whose action returned ``result``: the role then leaves at once (its
    ``__gpu_node_run`` is empty), with gpu_node_result published. A failed evaluation is left to the role."""
    return not result.get('failed') and not _results.node_run(result, drift_only)


class ActionModule(BundledDaemonAction):

    MODULE = 'gpufleet.nvidia.node_state'
    AUDITED = False  # it evaluates, changing nothing: no audit trail

    @property
    def _supports_async(self):
        # Ansible records host variables only from an action that cannot run async (ActionBase refuses both):
        # node_state without publish_result keeps async, as it had before it published anything.
        return not self._publishing()

    def _publishing(self):
        return boolean(self._task.args.get('publish_result', False), strict=False)

    def _register(self, variables):
        if VariableLayer is not None:
            self.register_host_variables(variables, VariableLayer.EPHEMERAL_FACT)  # set_fact's own layer

    def wants(self, args):
        """Only when the persistence daemon is evaluated with ``state: present`` (the default)."""
        persistenced = args.get('persistenced')
        return isinstance(persistenced, dict) and persistenced.get('state', 'present') == 'present'

    def run(self, tmp=None, task_vars=None):
        publish = self._publishing()
        self._drift_only = False
        if publish:
            register = self._task.register  # ansible-core 2.21: {name: expression}, where it was the name
            if REGISTER not in (register if isinstance(register, dict) else [register]):
                raise AnsibleActionFail('publish_result publishes gpu_node_result from this task\'s result: it needs '
                                        'register: %s' % REGISTER)
            self._register({PUBLISHED: False})
        result = super(ActionModule, self).run(tmp, task_vars)
        if publish and VariableLayer is not None and nothing_to_run(result, self._drift_only):
            self._register({RESULT: trust_as_template(EXPRESSION), PUBLISHED: True})
        return result

    def module_args(self, args, task_vars):
        publish = boolean(args.pop('publish_result', False), strict=False)
        if not boolean(args.pop('role_vars', False), strict=False):
            if publish:
                raise AnsibleActionFail('publish_result publishes gpu_node\'s result: it needs role_vars: true')
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
        # gpu_node_drift_only (the role's, checked above): nothing runs after node_state, so its result is published
        self._drift_only = boolean(given.get('gpu_node_drift_only', False), strict=False)
        resolve = _role_options.resolver(self._templar, variables, templated=given)
        try:
            args.update(_role_options.node_state_args(resolve))
        except _role_options.MissingVariable as exc:
            raise missing(exc, self.MODULE)
        return args
