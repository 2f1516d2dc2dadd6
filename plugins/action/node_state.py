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

With ``publish_result: true`` it also publishes the role's result where nothing is to run after it (a converged
node, or ``gpu_node_drift_only``), so that such a node costs no set_fact task (each task a host goes through costs a
forked worker on the controller): ``gpu_node_result``, as a host variable at set_fact's precedence, whose value is the
role's own expression, ``gpu_node_state | gpufleet.nvidia.gpu_node_result``. That is the value tasks/main.yml's
set_fact gives it, exactly: the action's result is not what Ansible registers (Ansible adds ``changed`` and
``failed``, and ansible-core 2.21 keeps the module's warnings apart until then), so the expression is set, templated
where it is read, over the registered result. Only ansible-core 2.21 and later let an action set host variables that
way (``register_host_variables``), and not as ``ansible_facts``, which would go to the fact cache (kept across runs by
a persistent one: an unreachable host would show an old result) and, read as a top-level variable, be deprecated
since 2.20 and gone with ``INJECT_FACTS_AS_VARS: false``. Whether it published is set beside it
(``__gpu_node_published``): the role publishes in a task of its own where it did not (earlier releases, a failed
evaluation).

gpu_node's task (roles/gpu_node/tasks/evaluate.yml) gives neither ``publish_result`` nor a ``diff`` keyword: each
would be a template compiled anew in every host's worker (ansible-core 2.19 and later compile every template each
time). With ``role_vars: true`` the action decides both from the task's variables instead, as those templates did:

- ``publish_result``, where the task does not give it: whether the task is gpu_node's main entry point's (the
  variable ``__gpu_node_main``, which tasks/main.yml sets on its import of evaluate.yml);
- the module's diff mode: in ``--diff`` mode (``ansible_diff_mode``) only where nothing runs after node_state (the
  ``evaluate`` entry point alone, or main with ``gpu_node_drift_only``): elsewhere each drifted concern's module
  shows its own diff when it runs, so that no diff is printed twice. The module returns a diff only in ``--diff``
  mode, where Ansible prints every result's diff (strategy: ``--diff`` or the task's own ``diff``), so what is
  printed is what it returns, as with the keyword.

``gpu_node_drift_only`` is read as the role's templates read it (Ansible's ``bool`` filter, the running release's),
from the role's arguments this action templates anyway: tasks/main.yml leaves the role on ``__gpu_node_published``
(where the registered result is this action's: it has ``run``), without its own ``__gpu_node_run``, which is empty
exactly there.
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

try:  # the ``bool`` filter of the running release, which the role's templates apply to gpu_node_drift_only
    from ansible.plugins.filter.core import to_bool
except ImportError:  # pragma: no cover - every supported release has it
    def to_bool(value):
        return boolean(value, strict=False)

# The options role_vars builds: none of them may be given with it.
BUILT = _results.CONCERNS + ('engines',)

# What publish_result sets: gpu_node's public result (README), and whether this task published it (internal to the
# role, whose tasks/main.yml leaves the role on it; set to false first, so that a run that does not publish says so:
# Ansible applies an action's host variables only where its task succeeded, neither failed nor skipped).
RESULT = 'gpu_node_result'
PUBLISHED = '__gpu_node_published'
# The result's expression: tasks/main.yml's set_fact, over what this task registers (REGISTER).
REGISTER = 'gpu_node_state'
EXPRESSION = '{{ %s | gpufleet.nvidia.gpu_node_result }}' % REGISTER
# Set (true) by gpu_node's tasks/main.yml on its import of evaluate.yml: the task is the main entry point's, where the
# concerns that drifted run after it.
MAIN = '__gpu_node_main'


def nothing_to_run(result, drift_only):
    """Whether nothing runs after node_state, whose action returned ``result``: the role then leaves at once (its
    ``__gpu_node_run`` is empty), with gpu_node_result published. A failed evaluation is left to the role."""
    return not result.get('failed') and not _results.node_run(result, drift_only)


class ActionModule(BundledDaemonAction):

    MODULE = 'gpufleet.nvidia.node_state'
    AUDITED = False  # it evaluates, changing nothing: no audit trail
    _publish = None  # run's decision (publish_result), once it has the task's variables
    _module_diff = None  # the module's diff mode where this action decides it (role_vars), else the task's

    @property
    def _supports_async(self):
        # Ansible records host variables only from an action that cannot run async (ActionBase refuses both):
        # node_state that does not publish keeps async, as it had before it published anything.
        return not (self._publishing() if self._publish is None else self._publish)

    def _publishing(self, task_vars=None):
        """publish_result: the task's, else, with role_vars, whether the task is gpu_node's main entry point's."""
        args = self._task.args
        if 'publish_result' in args:
            return boolean(args['publish_result'], strict=False)
        return task_vars is not None and boolean(args.get('role_vars', False), strict=False) and self._main(task_vars)

    def _main(self, task_vars):
        return boolean(self._templar.template(task_vars.get(MAIN, False)), strict=False)

    def _register(self, variables):
        if VariableLayer is not None:
            self.register_host_variables(variables, VariableLayer.EPHEMERAL_FACT)  # set_fact's own layer

    def _update_module_args(self, module_name, module_args, task_vars, *args, **kwargs):
        super(ActionModule, self)._update_module_args(module_name, module_args, task_vars, *args, **kwargs)
        if self._module_diff is not None and module_name == self.MODULE:
            module_args['_ansible_diff'] = self._module_diff

    def wants(self, args):
        """Only when the persistence daemon is evaluated with ``state: present`` (the default)."""
        persistenced = args.get('persistenced')
        return isinstance(persistenced, dict) and persistenced.get('state', 'present') == 'present'

    def run(self, tmp=None, task_vars=None):
        self._publish = publish = self._publishing(task_vars or {})
        self._drift_only = False
        self._module_diff = None
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

        def drift_only():
            # gpu_node_drift_only (the role's, checked above) as the role's templates read it (`| bool`), where they
            # would: nothing runs after node_state, so its result is published and its diff shown
            return bool(to_bool(given.get('gpu_node_drift_only', False)))
        self._drift_only = bool(self._publish) and drift_only()
        # --diff: shown only where nothing runs after node_state (the evaluate entry point alone, or main with
        # gpu_node_drift_only), each drifted concern's module showing its own diff when it runs
        self._module_diff = (bool(to_bool(self._templar.template(variables.get('ansible_diff_mode', False))))
                             and (not self._main(variables) or drift_only()))
        resolve = _role_options.resolver(self._templar, variables, templated=given)
        try:
            args.update(_role_options.node_state_args(resolve))
        except _role_options.MissingVariable as exc:
            raise missing(exc, self.MODULE)
        return args
