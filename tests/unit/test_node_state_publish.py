# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_state's action publishes gpu_node_result itself where nothing runs after it (publish_result).

A converged node then costs gpu_node's node_state task alone: no set_fact task, which would cost the controller a
forked worker per host. The value is tasks/main.yml's set_fact's own expression (``gpu_node_state |
gpufleet.nvidia.gpu_node_result``) over the registered result, set at set_fact's precedence (ansible-core 2.21's
``register_host_variables``), never as a fact; earlier releases, and an evaluation that failed, leave it to that task.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess
import sys
from unittest import mock

import pytest
import yaml
from ansible.errors import AnsibleActionFail
from ansible.playbook.play_context import PlayContext
from ansible.playbook.task import Task

from ansible_collections.gpufleet.nvidia.plugins.action import node_state
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import _results

from core_compat import evaluate_conditional, trust_as_template
from role_templates import templar, trusted_tree

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLES = ('persistenced', 'gpu_persistence', 'container_toolkit', 'container_runtime', 'gpu_node')
PUBLISHES = node_state.VariableLayer is not None  # ansible-core 2.21 and later
needs_layers = pytest.mark.skipif(not PUBLISHES, reason='ansible-core before 2.21: the role publishes in a task')

CONVERGED = {
    'changed': False, 'converged': True, 'drifted': [], 'run': [], 'evaluated': ['persistenced', 'docker'],
    'concerns': {'persistenced': {'converged': True, 'failed': False, 'result': {'changed': False, 'pid': 42}},
                 'docker': {'converged': True, 'failed': False,
                            'result': {'changed': False, 'action': 'none', 'runtimes': {'nvidia': {}}}}},
    'engine_list': ['docker'], 'engines_found': None, 'msg': 'converged'}
DRIFTED = dict(CONVERGED, converged=False, drifted=['docker'], run=['docker'], msg='drifted: docker')


def load(*path):
    with open(os.path.join(ROOT, *path)) as handle:
        return yaml.safe_load(handle)


def role_variables(**changed):
    """The five roles' defaults and gpu_node's vars, as Ansible holds them, then ``changed``."""
    found = {}
    for role in ROLES:
        for kind in ('defaults', 'vars'):
            if os.path.exists(os.path.join(ROOT, 'roles', role, kind, 'main.yml')):
                found.update(trusted_tree(load('roles', role, kind, 'main.yml') or {}))
    found.update(changed)
    return dict(templar(**found).available_variables)


def action(args, module_result, **changed):
    """node_state's action on a task with ``args``, its module answering ``module_result``; what it registered."""
    task = Task()
    task.args = args
    task.register = 'gpu_node_state'
    plugin = node_state.ActionModule(task, mock.MagicMock(), PlayContext(), loader=None, templar=None,
                                     shared_loader_obj=None)
    variables = role_variables(**changed)
    plugin._templar = templar(**variables)
    sent = {}

    def execute_module(module_name, module_args, task_vars, wrap_async=False):
        sent.update(module_args)
        return dict(module_result, invocation={'module_args': dict(module_args)}, _ansible_no_log=False)

    plugin._execute_module = execute_module
    plugin._remove_tmp_path = lambda path: None
    calls = []
    # Ansible applies them when the task ends (TaskContext); each call replaces the last one of the same layer
    plugin.register_host_variables = lambda values, layer: calls.append((layer, dict(values)))
    return plugin, variables, sent, calls


def run(args, module_result, **changed):
    plugin, variables, sent, calls = action(args, module_result, **changed)
    return plugin.run(task_vars=variables), sent, calls


def role_task_expression():
    """What the role's own task publishes where nothing is to run (tasks/main.yml)."""
    [task] = [t for t in load('roles', 'gpu_node', 'tasks', 'main.yml') if 'ansible.builtin.set_fact' in t and
              t.get('when') == '__gpu_node_run | length == 0']
    return task['ansible.builtin.set_fact']['gpu_node_result']


@needs_layers
def test_a_converged_node_gets_the_role_tasks_own_expression():
    result, sent, calls = run({'role_vars': True, 'publish_result': True}, CONVERGED)
    assert 'publish_result' not in sent and 'role_vars' not in sent and result['run'] == []
    layer = node_state.VariableLayer.EPHEMERAL_FACT  # set_fact's, not a fact: never cached, never deprecated
    assert calls[0] == (layer, {'__gpu_node_published': False})
    assert calls[-1][0] == layer and calls[-1][1]['__gpu_node_published'] is True
    # over the registered result (Ansible's, which the action's is not: Ansible adds to it), templated where read
    published = calls[-1][1]['gpu_node_result']
    assert published == role_task_expression() == node_state.EXPRESSION
    registered = dict(CONVERGED, failed=False, warnings=['a warning'])
    value = templar(gpu_node_state=registered, gpu_node_result=published).template(
        trust_as_template('{{ gpu_node_result }}'))
    assert value == _results.node_result(registered) and value['state'] == registered
    assert value['persistenced'] == {'changed': False, 'pid': 42} and value['container_runtime']['engine_list'] == ['docker']


@needs_layers
@pytest.mark.parametrize('drift_only, module_result, publishes', [
    (False, DRIFTED, False),
    (True, DRIFTED, True),  # gpu_node_drift_only: nothing runs after node_state, drifted or not
    (True, CONVERGED, True),
    (False, dict(CONVERGED, failed=True, msg='no daemon'), False),  # the role's own task handles a failure
    (True, dict(failed=True, msg='bad options'), False),
])
def test_published_only_where_nothing_runs_after_node_state(drift_only, module_result, publishes):
    calls = run({'role_vars': True, 'publish_result': True}, module_result, gpu_node_drift_only=drift_only)[2]
    assert calls[0][1] == {'__gpu_node_published': False}
    assert (calls[-1][1]['__gpu_node_published'] is True) is publishes
    assert ('gpu_node_result' in calls[-1][1]) is publishes


def test_without_publish_result_nothing_is_published_and_async_stays():
    plugin, variables, sent, calls = action({'role_vars': True}, CONVERGED)
    assert plugin._supports_async is True
    plugin.run(task_vars=variables)
    assert calls == [] and 'publish_result' not in sent
    # publishing sets host variables, which Ansible records only from an action that cannot run async
    assert action({'role_vars': True, 'publish_result': True}, CONVERGED)[0]._supports_async is False


def test_publish_result_is_gpu_nodes_and_needs_role_vars_and_its_register():
    with pytest.raises(AnsibleActionFail, match='publish_result.*needs role_vars'):
        run({'publish_result': True, 'docker': {}}, CONVERGED)
    plugin, variables = action({'role_vars': True, 'publish_result': True}, CONVERGED)[:2]
    plugin._task.register = 'state'
    with pytest.raises(AnsibleActionFail, match='needs register: gpu_node_state'):
        plugin.run(task_vars=variables)


def test_before_ansible_core_2_21_the_action_publishes_nothing():
    with mock.patch.object(node_state, 'VariableLayer', None):
        plugin, variables = action({'role_vars': True, 'publish_result': True}, CONVERGED)[:2]
        plugin.register_host_variables = mock.Mock(side_effect=AssertionError('no such API before 2.21'))
        plugin.run(task_vars=variables)


def main_steps():
    return load('roles', 'gpu_node', 'tasks', 'main.yml')


def evaluate_task():
    [task] = [t for t in load('roles', 'gpu_node', 'tasks', 'evaluate.yml') if 'gpufleet.nvidia.node_state' in t]
    return task


def main_import_vars():
    """What tasks/main.yml sets on its import of evaluate.yml (``__gpu_node_main``)."""
    step = main_steps()[0]
    assert step['ansible.builtin.import_tasks'] == 'evaluate.yml'
    return step['vars']


def test_main_asks_for_it_and_the_evaluate_entry_point_alone_does_not():
    # The task gives neither publish_result nor diff (each a template, compiled anew in every host's worker): the
    # action decides from the task's variables, main's import setting __gpu_node_main
    task = evaluate_task()
    assert task['gpufleet.nvidia.node_state'] == {'role_vars': True} and 'diff' not in task
    assert main_import_vars() == {'__gpu_node_main': True}
    plugin, variables, sent, calls = action({'role_vars': True}, CONVERGED)
    assert plugin._supports_async is True  # before it runs, from the task's arguments alone, as before
    plugin.run(task_vars=variables)
    assert calls == [] and plugin._supports_async is True and 'publish_result' not in sent
    plugin, variables, sent, calls = action({'role_vars': True}, CONVERGED, **main_import_vars())
    plugin.run(task_vars=variables)
    assert plugin._supports_async is False and 'publish_result' not in sent
    if PUBLISHES:
        assert calls[0][1] == {'__gpu_node_published': False} and calls[-1][1]['__gpu_node_published'] is True
    # the task's own publish_result, where given, decides (other callers)
    plugin, variables, sent, calls = action({'role_vars': True, 'publish_result': False}, CONVERGED,
                                            **main_import_vars())
    plugin.run(task_vars=variables)
    assert calls == [] and plugin._supports_async is True


def module_diff(args, module_result, task_diff=None, **changed):
    """The diff mode node_state's module gets (``_ansible_diff``, from Ansible's own ``_update_module_args``), the
    task's own diff (inherited from the play, or the command line's --diff) being ``task_diff``."""
    plugin, variables = action(args, module_result, **changed)[:2]
    plugin._task.diff = task_diff
    plugin.run(task_vars=variables)
    module_args = {}
    plugin._update_module_args(node_state.ActionModule.MODULE, module_args, variables)
    return module_args['_ansible_diff']


@pytest.mark.parametrize('diff_mode, drift_only, in_main, shown', [
    (False, False, True, False), (False, True, True, False), (True, False, True, False), (True, True, True, True),
    # The evaluate entry point alone: nothing runs after node_state.
    (False, False, False, False), (True, False, False, True), (True, True, False, True)])
@pytest.mark.parametrize('task_diff', [None, False, True])
def test_node_state_shows_diffs_only_where_no_module_runs_after_it(diff_mode, drift_only, in_main, shown, task_diff):
    # With --diff (ansible_diff_mode), a drifted concern's module shows its own diff when it runs: node_state's module
    # returns a diff only where nothing runs after it, whatever diff the task inherits (as the task's own keyword
    # was: a task's keyword overrides the play's)
    changed = dict(ansible_diff_mode=diff_mode, gpu_node_drift_only=drift_only)
    if in_main:
        changed.update(main_import_vars())
    assert module_diff({'role_vars': True}, DRIFTED, task_diff=task_diff, **changed) is shown


def test_without_role_vars_the_modules_diff_is_the_tasks():
    for task_diff in (True, False):
        assert module_diff({'docker': {}}, CONVERGED, task_diff=task_diff, ansible_diff_mode=not task_diff) is task_diff


@pytest.mark.parametrize('drift_only', ['y', 't', ' true'])
def test_drift_only_is_read_as_the_roles_bool_filter_reads_it(drift_only):
    # Values the role's argument check takes as booleans, which the role's `| bool` does not (its templates then run
    # the concerns): node_state neither publishes nor shows a diff as if nothing ran after it
    changed = dict(main_import_vars(), gpu_node_drift_only=drift_only, ansible_diff_mode=True)
    assert module_diff({'role_vars': True}, DRIFTED, **changed) is False
    calls = run({'role_vars': True}, DRIFTED, **changed)[2]
    if PUBLISHES:
        assert calls[-1][1] == {'__gpu_node_published': False}
    assert templar(**role_variables(gpu_node_state=DRIFTED, **changed)).template(
        trust_as_template('{{ __gpu_node_run }}')) == ['docker']


FAILED = {'failed': True, 'changed': False, 'msg': 'MODULE FAILURE'}
UNREACHABLE = {'unreachable': True, 'changed': False, 'msg': 'Failed to connect to the host via ssh'}
SKIPPED = {'changed': False, 'skipped': True, 'skip_reason': 'Conditional result was False',
           'false_condition': 'gpu_node_evaluate_first | bool or gpu_node_drift_only | bool'}


def after_node_state(earlier, outcome, module_result, drift_only):
    """The host's variables after gpu_node's node_state task: ``earlier`` its __gpu_node_published from an earlier
    run of the role in the play (None: none), ``outcome`` how the task ended. Ansible applies the action's host
    variables only to a task that succeeded (neither failed, unreachable nor skipped)."""
    changed = dict(main_import_vars(), gpu_node_drift_only=drift_only)
    if earlier is not None:
        changed['__gpu_node_published'] = earlier
    if outcome == 'ok':
        calls = run({'role_vars': True}, module_result, **changed)[2]
        for unused_layer, values in calls[-1:]:
            changed.update(values)
        changed['gpu_node_state'] = dict(module_result, failed=False)
    else:
        changed['gpu_node_state'] = {'failed': FAILED, 'unreachable': UNREACHABLE, 'skipped': SKIPPED}[outcome]
    return role_variables(**changed)


@pytest.mark.parametrize('earlier', [None, False, True])
@pytest.mark.parametrize('outcome, module_result', [
    ('ok', CONVERGED), ('ok', DRIFTED), ('failed', None), ('unreachable', None), ('skipped', None)])
@pytest.mark.parametrize('drift_only', [False, True])
def test_a_node_with_nothing_to_run_leaves_the_role_on_the_controller(earlier, outcome, module_result, drift_only):
    leave, publish, leave_after = main_steps()[1:4]
    assert leave['ansible.builtin.meta'] == leave_after['ansible.builtin.meta'] == 'end_role'
    assert 'ansible.builtin.set_fact' in publish
    assert leave['tags'] == publish['tags'] == leave_after['tags'] == ['always']
    if outcome == 'skipped' and drift_only:
        return  # gpu_node_drift_only runs node_state (main.yml's import: when)
    if earlier and not PUBLISHES:
        return  # before ansible-core 2.21 nothing sets __gpu_node_published
    variables = after_node_state(earlier, outcome, module_result, drift_only)
    engine = templar(**variables)
    leaves_first = evaluate_conditional(engine, trust_as_template(leave['when']))
    nothing_to_run = engine.template(trust_as_template('{{ __gpu_node_run }}')) == []
    # the role leaves at once exactly where node_state published the result, this time (ansible-core 2.21 and later)
    published_now = PUBLISHES and outcome == 'ok' and variables['__gpu_node_published'] is True
    assert leaves_first is published_now
    # ... which is where the role's own test (the one this task had: __gpu_node_run, over the registered result)
    # holds, but for a stale __gpu_node_published (an earlier run's) with gpu_node_drift_only after a failure whose
    # errors were ignored: that node is left to the next task, which publishes its own result
    before = bool(variables.get('__gpu_node_published')) and nothing_to_run
    stale = earlier is True and outcome in ('failed', 'unreachable') and drift_only
    assert leaves_first is (before and not stale)
    # a node that does not leave first publishes in the next task where nothing is to run
    assert evaluate_conditional(engine, trust_as_template(publish['when'])) is nothing_to_run


PLAYBOOK = '''
- name: A node's evaluation, published by the action
  hosts: nodes
  gather_facts: false
  vars_files: %(vars_files)s
  tasks:
    - name: Evaluate, as gpu_node's main does
      stub_node_state:
        role_vars: true
        publish_result: true
      register: gpu_node_state
    - name: The same value as the role's own task would publish (its warnings included), not a fact
      ansible.builtin.assert:
        that:
          - __gpu_node_published
          - gpu_node_result == gpu_node_state | gpufleet.nvidia.gpu_node_result
          - gpu_node_result.state == gpu_node_state
          - gpu_node_state.warnings == [inventory_hostname ~ ' warns']
          - ansible_facts.gpu_node_result is not defined

- name: The fleet summary's view
  hosts: nodes
  gather_facts: false
  tasks:
    - name: Another play reads each host's through hostvars, as the fleet summary does (run_once)
      ansible.builtin.assert:
        that:
          - hostvars['a'].gpu_node_result.state.host == 'a'
          - hostvars['b'].gpu_node_result.state.host == 'b'
          - hostvars['b'].gpu_node_result.persistenced.pid == 42
      run_once: true
    - name: A later set_fact (the path where concerns ran) replaces it
      ansible.builtin.set_fact:
        gpu_node_result: {state: null}
    - name: Replaced
      ansible.builtin.assert:
        that: hostvars[inventory_hostname].gpu_node_result.state is none
'''

STUB = '''
from ansible_collections.gpufleet.nvidia.plugins.action.node_state import ActionModule as NodeState


class ActionModule(NodeState):
    """node_state's action, its module answering a converged node, with a warning as a module gives one."""

    def execute(self, result, args, task_vars):
        result.update(%r, host=task_vars['inventory_hostname'])
        result['warnings'] = [task_vars['inventory_hostname'] + ' warns']
        return result
''' % (CONVERGED,)


@needs_layers
def test_ansible_applies_it_at_set_facts_precedence_without_a_fact(tmp_path):
    (tmp_path / 'action_plugins').mkdir()
    (tmp_path / 'action_plugins' / 'stub_node_state.py').write_text(STUB)
    files = [os.path.join(ROOT, 'roles', role, kind, 'main.yml') for role in ROLES for kind in ('defaults', 'vars')]
    (tmp_path / 'site.yml').write_text(PLAYBOOK % {'vars_files': [path for path in files if os.path.exists(path)]})
    local = 'ansible_connection=local ansible_python_interpreter=%s' % sys.executable
    (tmp_path / 'inventory.ini').write_text('[nodes]\na %s\nb %s\n' % (local, local))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, '.build', 'collections'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_LOCAL_TEMP=str(tmp_path / 'tmp'), ANSIBLE_REMOTE_TEMP=str(tmp_path / 'tmp'),
               ANSIBLE_STDOUT_CALLBACK='default', ANSIBLE_DEPRECATION_WARNINGS='true')
    argv = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', 'inventory.ini', 'site.yml']
    for inject in ('true', 'false'):
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=str(tmp_path), timeout=300, check=False,
                              env=dict(env, ANSIBLE_INJECT_FACT_VARS=inject))
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out
        # a fact read as a top-level variable is deprecated (2.20+); a host variable is not
        assert 'DEPRECATION' not in out and 'INJECT_FACTS_AS_VARS' not in out, out


DIFF_PLAYBOOK = '''
- name: gpu_node's evaluation, each host another of its cases
  hosts: nodes
  gather_facts: false
  %(play_diff)s
  vars_files: %(vars_files)s
  tasks:
    - name: Each host's case (above the roles' defaults, which vars_files holds)
      ansible.builtin.set_fact:
        gpu_node_drift_only: "{{ drift_only | default(false) }}"
    - name: Evaluate the node's concerns in one round trip, as gpu_node's tasks/evaluate.yml does
      stub_node_state:
        role_vars: true
      register: gpu_node_state
    - name: The module returned a diff exactly where the strategy was to show it
      ansible.builtin.assert:
        that: (gpu_node_state.diff is defined) == (inventory_hostname in shown.split(','))
'''

DIFF_STUB = '''
from ansible_collections.gpufleet.nvidia.plugins.action.node_state import ActionModule as NodeState


class ActionModule(NodeState):
    """node_state's action, its module (given the arguments Ansible gives a module) answering a drifted node, with a
    diff in diff mode as the module does."""

    def _execute_module(self, module_name=None, module_args=None, task_vars=None, **kwargs):
        module_args = dict(module_args)
        self._update_module_args(module_name, module_args, task_vars)
        result = dict(%r)
        if module_args['_ansible_diff']:
            result['diff'] = [{'before': 'a\\n', 'after': 'b\\n', 'before_header': task_vars['inventory_hostname']}]
        return result
''' % (DRIFTED,)

DIFF_CALLBACK = '''
from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'aggregate'
    CALLBACK_NAME = 'shown_diffs'
    CALLBACK_NEEDS_ENABLED = True

    def v2_on_file_diff(self, result):
        self._display.display('SHOWN DIFF ' + result._host.get_name())
'''


@pytest.mark.parametrize('diff_option, play_diff, shown', [
    # --diff: the evaluate entry point alone (c) and main with gpu_node_drift_only (b) show node_state's diff, main
    # (a) does not (its concerns' modules show theirs); a play's diff: false does not hide it (the task's keyword
    # overrode it)
    (True, '', 'b,c'), (True, 'diff: false', 'b,c'),
    # without --diff, a play's diff: true does not show node_state's (the task's keyword overrode it)
    (False, 'diff: true', ''), (False, '', '')])
def test_what_diff_mode_prints_is_what_the_task_keyword_printed(tmp_path, diff_option, play_diff, shown):
    for folder, name, text in (('action_plugins', 'stub_node_state.py', DIFF_STUB),
                               ('callback_plugins', 'shown_diffs.py', DIFF_CALLBACK)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / name).write_text(text)
    files = [os.path.join(ROOT, 'roles', role, kind, 'main.yml') for role in ROLES for kind in ('defaults', 'vars')]
    (tmp_path / 'site.yml').write_text(DIFF_PLAYBOOK % {
        'vars_files': [path for path in files if os.path.exists(path)], 'play_diff': play_diff})
    local = 'ansible_connection=local ansible_python_interpreter=%s' % sys.executable
    (tmp_path / 'inventory.ini').write_text('[nodes]\na %s __gpu_node_main=true\nb %s __gpu_node_main=true '
                                            'drift_only=true\nc %s\n' % (local, local, local))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, '.build', 'collections'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_LOCAL_TEMP=str(tmp_path / 'tmp'), ANSIBLE_REMOTE_TEMP=str(tmp_path / 'tmp'),
               ANSIBLE_STDOUT_CALLBACK='default', ANSIBLE_CALLBACKS_ENABLED='shown_diffs')
    argv = [sys.executable, '-m', 'ansible', 'playbook', '-i', 'inventory.ini', 'site.yml', '-e', 'shown=%s' % shown]
    argv += ['--diff'] if diff_option else []
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=str(tmp_path), timeout=300, check=False, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    printed = sorted(line.split()[-1] for line in out.splitlines() if line.startswith('SHOWN DIFF '))
    assert printed == sorted(host for host in shown.split(',') if host), out
