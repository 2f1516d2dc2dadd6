# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which role variable gives each option of each concern's module: one table, read by the roles and node_state.

Each concern's role calls its module with ``role_vars: true`` and gpu_node calls node_state with
``role_vars: true``: both actions build the options from plugins/plugin_utils/_role_options.py, so
node_state judges exactly the configuration the role applies. (Before the roles read it, the table
was held equal to the roles' own task templates, each variable changed in turn.) These tests hold
the table to the modules' and the roles' argument specs, resolve it with Ansible's own templar over
the roles' defaults, and change each variable it reads in turn.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

import pytest
import yaml

from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import registry
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import _role_options

from core_compat import trust_as_template
from role_templates import templar, trusted_tree

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))

# concern -> (role tasks file, module)
TASKS = {
    'device_links': ('roles/gpu_node/tasks/concerns.yml', 'gpufleet.nvidia.device_links'),
    'persistenced': ('roles/persistenced/tasks/main.yml', 'gpufleet.nvidia.persistenced'),
    'gpu_persistence': ('roles/gpu_persistence/tasks/set.yml', 'gpufleet.nvidia.gpu_persistence'),
    'container_toolkit': ('roles/container_toolkit/tasks/main.yml', 'gpufleet.nvidia.container_toolkit_info'),
    'cdi': ('roles/gpu_node/tasks/concerns.yml', 'gpufleet.nvidia.cdi_spec'),
    'containerd': ('roles/container_runtime/tasks/containerd.yml', 'gpufleet.nvidia.containerd_runtime'),
    'crio': ('roles/container_runtime/tasks/crio.yml', 'gpufleet.nvidia.crio_runtime'),
    'docker': ('roles/container_runtime/tasks/docker.yml', 'gpufleet.nvidia.docker_runtime'),
    'gpu_health': ('roles/gpu_node/tasks/concerns.yml', 'gpufleet.nvidia.gpu_health'),
    'slurm_node': ('roles/gpu_node/tasks/concerns.yml', 'gpufleet.nvidia.slurm_node'),
}


def load(path):
    with open(os.path.join(ROOT, path)) as handle:
        return yaml.safe_load(handle)


def task_args(path, module):
    # the concern's own task: slurm_node's drain and resume steps add the step (action, wait_timeout) to role_vars
    found = [task[module] for task in load(path) if module in task and 'action' not in task[module]]
    # One set of options: the container_toolkit role evaluates twice (before and after its changes), with the
    # same options (a YAML alias).
    assert len(found) >= 1 and all(args == found[0] for args in found), '%s: %d tasks call %s' % (
        path, len(found), module)
    return found[0]


def evaluate_task():
    [task] = [task for task in load('roles/gpu_node/tasks/evaluate.yml') if 'gpufleet.nvidia.node_state' in task]
    return task['gpufleet.nvidia.node_state']


def role_variables(**changed):
    """The five roles' defaults and gpu_node's vars, as Ansible holds them (strings are templates), then ``changed``."""
    found = {}
    for path in ('roles/persistenced/defaults/main.yml', 'roles/gpu_persistence/defaults/main.yml',
                 'roles/container_toolkit/defaults/main.yml',
                 'roles/container_runtime/defaults/main.yml', 'roles/gpu_node/defaults/main.yml',
                 'roles/gpu_node/vars/main.yml'):
        found.update(trusted_tree(load(path) or {}))
    found['gpu_node_container_toolkit'] = True  # off by default; what node_state gets when it is on
    found['gpu_node_cdi'] = True  # the same
    found.update(changed)
    return found


def render(template, **changed):
    return templar(**role_variables(**changed)).template(trusted_tree(template))


def built(**changed):
    """node_state's arguments as its action plugin builds them (role_vars), each variable templated as the action
    does (Ansible's templar, over the same variables)."""
    engine = templar(**role_variables(**changed))
    # a task's variables, as the action gets them (ansible-core 2.18's include its omit placeholder)
    return _role_options.node_state_args(_role_options.resolver(engine, engine.available_variables))


def read_by(concern):
    """The role variables the table reads for the concern's options."""
    return _role_options.variables_read([concern])


def another(value):
    """A value unlike the default ``value``, of its type."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 7
    if isinstance(value, list):
        return [{'gpu': 1, 'mode': 'enabled'}] if value == [] else value + ['x-other']
    return 'x-other' if value in (None, '') else '%s-other' % value


def variations(concern):
    yield 'defaults', {}
    defaults = dict((name, value) for name, value in role_variables().items())
    for name in read_by(concern):
        yield name, {name: another(defaults.get(name))}


def test_every_concern_is_mapped():
    # every concern's options from the table; whether to publish the result (main's) the action decides from the
    # task's variables (tests/unit/test_node_state_publish.py)
    assert evaluate_task() == {'role_vars': True}
    options = set(built()) - {'engines'}
    assert sorted(options) == sorted(_role_options.OPTIONS) == sorted(registry.CONCERNS) == sorted(TASKS)


def test_the_table_reads_what_the_roles_define():
    # every variable the table reads is a role default (or gpu_node's), so node_state never finds one undefined
    assert set(_role_options.variables_read()) <= set(role_variables())


@pytest.mark.parametrize('concern', sorted(TASKS))
def test_each_role_calls_its_module_through_the_table(concern):
    assert task_args(*TASKS[concern]) == {'role_vars': True}
    assert registry.CONCERNS[concern].module == TASKS[concern][1].split('.')[-1]


@pytest.mark.parametrize('concern', sorted(TASKS))
def test_every_variable_of_the_table_reaches_its_option(concern):
    spec = registry.CONCERNS[concern].spec
    defaults = built()[concern]
    varied = 0
    for label, changed in variations(concern):
        options = built(**changed)[concern]
        # only options the concern's module has
        assert set(options) <= set(spec), label
        varied += options != defaults
    # every variable the table reads for the concern changes what the module gets: none is read for nothing
    assert varied == len(read_by(concern)) > 0


def test_containerd_gets_the_role_defaults():
    # one concern written out: what containerd_runtime gets from the container_runtime role's defaults
    assert built()['containerd'] == {
        'path': '/etc/containerd/config.toml', 'name': 'nvidia', 'take_over': False, 'state': 'present',
        'backup': False, 'apply': 'auto', 'service_name': 'containerd', 'apply_timeout': 60, 'verify': True,
        'verify_image': '', 'verify_devices': ['all'], 'cdi_spec_dirs': ['/etc/cdi', '/var/run/cdi'],
        'disruption': 'defer'}
    changed = built(container_runtime_path='/opt/nvidia/runtime', container_runtime_default=True)['containerd']
    assert (changed['runtime_path'], changed['default_runtime']) == ('/opt/nvidia/runtime', True)


@pytest.mark.parametrize('role', ['persistenced', 'gpu_persistence', 'container_toolkit', 'container_runtime'])
def test_every_role_variable_is_read(role):
    # each variable a role documents is read by the table or by the role's own tasks and vars: moving the modules'
    # options into the table left none behind
    options = load('roles/%s/meta/argument_specs.yml' % role)['argument_specs']['main']['options']
    text = ''
    for folder in ('tasks', 'vars'):
        directory = os.path.join(ROOT, 'roles', role, folder)
        for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
            with open(os.path.join(directory, name)) as handle:
                text += handle.read()
    table = set(_role_options.variables_read())
    assert [name for name in options if name not in table and not re.search(r'\b%s\b' % name, text)] == []


@pytest.mark.parametrize('changed, left_out', [
    ({}, []),
    ({'gpu_node_container_toolkit': False}, ['container_toolkit']),
    ({'gpu_node_cdi': False}, ['cdi']),
    ({'gpu_node_device_links': 'no'}, ['device_links']),  # Ansible's bool: 'no' is false
    ({'gpu_node_persistenced': False}, ['persistenced']),
    ({'gpu_node_gpu_persistence': False}, ['gpu_persistence']),
    # a daemon stopped for maintenance: its GPUs' modes are left alone, the daemon itself is still evaluated
    ({'persistenced_state': 'stopped'}, ['gpu_persistence']),
    ({'gpu_node_container_runtime': 'false'}, ['containerd', 'crio', 'docker']),
])
def test_a_concern_switched_off_is_left_out(changed, left_out):
    args = built(**changed)
    assert sorted(set(_role_options.OPTIONS) - set(args)) == left_out
    assert args['engines'] == ([] if 'docker' in left_out else ['auto'])


def test_a_variable_set_to_omit_leaves_the_option_out_as_a_task_template_would():
    names = {('docker', 'name'): 'container_runtime_name', ('persistenced', 'verbose'): 'persistenced_verbose'}
    changed = dict((name, trust_as_template('{{ omit }}')) for name in names.values())
    for (concern, option), name in names.items():
        assert option in built()[concern] and option not in built(**changed)[concern]
        # what a task's own template does with it: the option is gone
        assert render({option: '{{ %s }}' % name, 'other': 1}, **changed) == {'other': 1}


def test_gpu_persistence_modes_replace_gpus_and_mode():
    modes = [{'gpu': 0, 'mode': 'disabled'}]
    assert built(gpu_persistence_modes=modes)['gpu_persistence'] == dict(
        modes=modes, persist=True, state_file='/var/lib/gpufleet/persistence.json', backend='auto')
    assert built()['gpu_persistence']['gpus'] == ['all']


def action(variables):
    from ansible.plugins.action import ActionBase
    from ansible_collections.gpufleet.nvidia.plugins.action.node_state import ActionModule
    module = ActionModule.__new__(ActionModule)  # only module_args runs: no connection, no task executor
    ActionBase.__setattr__(module, '_templar', templar(**variables))
    return module


def test_the_action_builds_the_table_options_and_refuses_both_ways():
    from ansible.errors import AnsibleActionFail
    variables = dict(templar(**role_variables()).available_variables)
    assert action(variables).module_args({'role_vars': True}, variables) == built()
    # the values the argument check templated are the options' values, omit included
    omitted = dict((name, trust_as_template('{{ omit }}')) for name in ('container_runtime_name', 'persistenced_verbose'))
    changed = dict(templar(**role_variables(**omitted)).available_variables)
    assert action(changed).module_args({'role_vars': True}, changed) == built(**omitted)
    assert 'name' not in built(**omitted)['docker']
    # without role_vars the task's own options pass through untouched
    assert action(variables).module_args({'docker': {'name': 'x'}}, variables) == {'docker': {'name': 'x'}}
    with pytest.raises(AnsibleActionFail, match='do not also give docker, engines'):
        action(variables).module_args({'role_vars': True, 'docker': {}, 'engines': []}, variables)
    del variables['container_runtime_cdi']
    with pytest.raises(AnsibleActionFail, match='role variable container_runtime_cdi is not defined'):
        action(variables).module_args({'role_vars': 'yes'}, variables)


def test_the_role_argument_check_is_ansibles_own_on_gpu_nodes_spec():
    from ansible.errors import AnsibleActionFail
    variables = dict(templar(**role_variables()).available_variables)
    assert _role_options.validate(templar(**variables), variables) == []
    # the same spec both entry points and the explicit check of tasks/main.yml read
    specs = load('roles/gpu_node/meta/argument_specs.yml')['argument_specs']
    assert _role_options.role_spec('evaluate') == specs['evaluate']['options'] == specs['main']['options']
    # a wrong value anywhere in the five roles' options fails node_state's task, naming it, before anything runs
    wrong = dict(variables, container_runtime_apply='sometimes', persistenced_start_timeout='soon')
    errors = _role_options.validate(templar(**wrong), wrong)
    assert len(errors) == 2 and any('container_runtime_apply' in e and 'sometimes' in e for e in errors)
    with pytest.raises(AnsibleActionFail, match='(?s)Validation of arguments failed.*container_runtime_apply'):
        action(wrong).module_args({'role_vars': True}, wrong)
    # a template is checked by its value, as Ansible's own check does
    templated = dict(variables, container_runtime_timeout=trust_as_template('{{ 30 + 30 }}'))
    assert _role_options.validate(templar(**templated), templated) == []


def test_the_spec_is_read_once_per_process_and_each_hosts_values_are_checked_and_used():
    from ansible.errors import AnsibleActionFail
    # parsed when the action is imported (ansible-playbook's main process, before it forks the workers)
    specs = load('roles/gpu_node/meta/argument_specs.yml')['argument_specs']
    assert _role_options._SPEC == dict((name, spec['options']) for name, spec in specs.items())
    # nothing about one host's values is kept for the next: in one process, each host's values are checked and
    # make the options
    first = dict(templar(**role_variables()).available_variables)
    assert action(first).module_args({'role_vars': True}, first)['docker']['name'] == 'nvidia'
    renamed = dict(templar(**role_variables(container_runtime_name='other')).available_variables)
    assert action(renamed).module_args({'role_vars': True}, renamed)['docker']['name'] == 'other'
    wrong = dict(templar(**role_variables(container_runtime_apply='sometimes')).available_variables)
    with pytest.raises(AnsibleActionFail, match='(?s)Validation of arguments failed.*container_runtime_apply'):
        action(wrong).module_args({'role_vars': True}, wrong)
    assert action(first).module_args({'role_vars': True}, first) == built()


def test_a_spec_that_could_not_be_read_at_import_is_read_when_needed(monkeypatch, tmp_path):
    monkeypatch.setattr(_role_options, '_SPEC', {})
    monkeypatch.setattr(_role_options, 'SPEC_FILE', str(tmp_path / 'argument_specs.yml'))
    with pytest.raises(IOError):
        _role_options.role_spec()
    (tmp_path / 'argument_specs.yml').write_text('argument_specs:\n  evaluate:\n    options:\n      x: {type: int}\n')
    assert _role_options.role_spec() == {'x': {'type': 'int'}}
