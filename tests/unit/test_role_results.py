# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Roles talk through documented results (<role>_result) and structured keys, never error text.

The roles' conditions and templates are evaluated with Ansible's own templar,
on the results the modules return; nothing runs on this machine.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

import pytest
import yaml

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import _role_options

from core_compat import evaluate_conditional, trust_as_template

from role_templates import site_summary, templar, trusted_tree

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INNER = ('persistenced', 'gpu_persistence', 'container_toolkit', 'container_runtime')


def read(*path):
    with open(os.path.join(ROOT, *path)) as handle:
        return handle.read()


def tasks(role, name='main.yml'):
    return yaml.safe_load(read('roles', role, 'tasks', name))


def role_vars(role):
    """The role's defaults and vars (vars win), as templates."""
    found = {}
    for kind in ('defaults', 'vars'):
        path = os.path.join(ROOT, 'roles', role, kind, 'main.yml')
        if os.path.exists(path):
            found.update(yaml.safe_load(read('roles', role, kind, 'main.yml')) or {})
    return trusted_tree(found)


def registered(role):
    """Every name a role's tasks register, blocks included."""
    names = []

    def walk(items):
        for task in items or []:
            if 'register' in task:
                names.append(task['register'])
            for key in ('block', 'rescue', 'always'):
                walk(task.get(key))

    for name in os.listdir(os.path.join(ROOT, 'roles', role, 'tasks')):
        walk(tasks(role, name))
    return names


def published(role):
    """Every name a role's tasks set with set_fact."""
    names = []
    for name in os.listdir(os.path.join(ROOT, 'roles', role, 'tasks')):
        for task in tasks(role, name) or []:
            names.extend(task.get('ansible.builtin.set_fact', {}))
    return names


@pytest.mark.parametrize('role', INNER)
def test_each_role_registers_its_public_result_and_documents_it(role):
    # The public result once; anything else a role registers for itself is internal (__<role>_*).
    names = registered(role) + published(role)
    assert names.count('%s_result' % role) == 1
    assert [name for name in names if name != '%s_result' % role and not name.startswith('__%s_' % role)] == []
    spec = yaml.safe_load(read('roles', role, 'meta', 'argument_specs.yml'))['argument_specs']['main']
    assert any(line.startswith('Registers ') and 'C(%s_result)' % role in line for line in spec['description'])
    assert '`%s_result`' % role in read('roles', role, 'README.md')


def test_gpu_node_sets_its_public_result_and_documents_it():
    steps = tasks('gpu_node')
    converged, leave, concerns, published = steps[-4:]
    # Where nothing is to run: node_state's verdicts are published, and the node leaves the role (on the
    # controller: a meta task has no worker process); else the concerns run, then the result is published.
    assert converged['ansible.builtin.set_fact'] == {'gpu_node_result': CONVERGED}
    assert converged['when'] == leave['when'] == '__gpu_node_run | length == 0'
    assert leave['ansible.builtin.meta'] == 'end_role'
    assert concerns['ansible.builtin.include_tasks'] == 'concerns.yml' and 'when' not in concerns
    assert published['ansible.builtin.set_fact'] == {'gpu_node_result': '{{ __gpu_node_public }}'}
    assert converged['tags'] == leave['tags'] == published['tags'] == ['always']
    # The inner roles' results, and the device_links module's (registered internally by gpu_node), and
    # node_state's whole result under state: every role result is passed to the one filter that builds it.
    assert sorted(node_result()) == sorted(INNER + ('device_links', 'cdi', 'gpu_health', 'slurm_node', 'drain',
                                                    'health_gate', 'state'))
    public = role_vars('gpu_node')['__gpu_node_public']
    for name in INNER:
        assert '%s=%s_result | default(none)' % (name, name) in public
    assert '`gpu_node_result`' in read('roles', 'gpu_node', 'README.md')


def node_result(**results):
    variables = dict(role_vars('gpu_node'), **results)
    return templar(**variables).template(variables['__gpu_node_public'])


# What a node publishes where nothing is to run (tasks/main.yml): node_state's result alone.
CONVERGED = '{{ gpu_node_state | gpufleet.nvidia.gpu_node_result }}'


def node_result_checked(**results):
    variables = dict(role_vars('gpu_node'), **results)
    return templar(**variables).template(trust_as_template(CONVERGED))


def test_gpu_node_result_holds_each_concern_or_null():
    persistenced = {'changed': False, 'actions': [], 'init_system': 'systemd', 'pid': 42}
    runtime = {'changed': True, 'action': 'reload', 'runtimes': {'nvidia': {}},
               'engines': {'docker': {'changed': True, 'action': 'reload'}}, 'engine_list': ['docker'], 'found': None}
    skipped = {'changed': False, 'skipped': True, 'skip_reason': 'Conditional result was False'}
    links = {'changed': True, 'created': ['195:0', '195:255'], 'exposed_containers': []}
    # gpu_node_evaluate_first: false (node_state skipped): each role's own result.
    assert node_result(persistenced_result=persistenced, gpu_persistence_result=skipped, gpu_node_state=skipped,
                       container_runtime_result=runtime, __gpu_node_device_links=links) == {
        'state': None, 'device_links': links, 'persistenced': persistenced, 'gpu_persistence': None,
        'container_toolkit': None, 'cdi': None, 'container_runtime': runtime, 'gpu_health': None, 'slurm_node': None,
        'drain': None, 'health_gate': None}
    # --tags persistenced: the other tasks never ran, so their results are undefined.
    assert node_result(persistenced_result=persistenced) == {
        'state': None, 'device_links': None, 'persistenced': persistenced, 'gpu_persistence': None,
        'container_toolkit': None, 'cdi': None, 'container_runtime': None, 'gpu_health': None, 'slurm_node': None,
        'drain': None, 'health_gate': None}
    # the toolkit's role ran: its result
    toolkit = {'changed': True, 'converged': True, 'installed': {'nvidia-container-toolkit': '1.20.0-1'},
               'actions': ['install', 'hold']}
    assert node_result(container_toolkit_result=toolkit)['container_toolkit'] == toolkit
    # gpu_node_device_links: false skips the module.
    assert node_result(__gpu_node_device_links=skipped)['device_links'] is None
    # the CDI spec's module ran: its result
    cdi = {'changed': True, 'actions': ['write_spec'], 'devices': ['0', 'all'], 'stale': ['there is no spec yet']}
    assert node_result(__gpu_node_cdi=cdi)['cdi'] == cdi
    assert node_result(__gpu_node_cdi=skipped)['cdi'] is None
    # without node_state the health module ran: its result
    health = {'changed': False, 'verdict': 'PASS', 'action': 'none', 'checks': []}
    assert node_result(__gpu_node_gpu_health=health)['gpu_health'] == health
    # the Slurm node: its concern's result, or its resume step's where the drain step ran (and that one under drain)
    slurm = {'changed': True, 'slurm': True, 'actions': [], 'state': {'state': 'IDLE'}}
    resumed = dict(slurm, actions=['resume'])
    drained = dict(slurm, actions=['drain'], jobs=[], timed_out=False)
    assert node_result(__gpu_node_slurm_node=slurm)['slurm_node'] == slurm
    both = node_result(__gpu_node_slurm_node=skipped, __gpu_node_drain=drained, __gpu_node_resume=resumed)
    assert both['slurm_node'] == resumed and both['drain'] == drained
    assert node_result(__gpu_node_drain=skipped)['drain'] is None


def test_gpu_node_result_takes_node_states_verdict_for_what_did_not_run():
    gpus = {'changed': False, 'gpus': [{'index': 0, 'after': 'enabled'}]}
    docker = {'changed': False, 'action': 'none', 'runtimes': {'nvidia': {}, 'runc': {}}}
    containerd = {'changed': True, 'action': 'restart', 'runtimes': ['nvidia', 'runc']}
    state = {'converged': False, 'drifted': ['containerd'], 'run': ['containerd'], 'engine_list': ['containerd', 'docker'],
             'engines_found': {'docker': {'auto': True}},
             'concerns': {'gpu_persistence': {'converged': True, 'result': gpus},
                          'docker': {'converged': True, 'result': docker},
                          'containerd': {'converged': False, 'result': containerd}}}
    ran = {'changed': True, 'engines': {'containerd': dict(containerd, containerd_pid_after=7)},
           'engine_list': ['containerd'], 'found': None}
    skipped = {'changed': False, 'skipped': True}
    result = node_result(gpu_node_state=state, gpu_persistence_result=skipped, persistenced_result=skipped,
                         container_runtime_result=ran)
    assert result['state'] == state and result['gpu_persistence'] == gpus and result['persistenced'] is None
    # dockerd's converged verdict at the top, containerd's run result under engines, the whole engine list
    assert result['container_runtime'] == dict(docker, changed=True, engines={
        'docker': docker, 'containerd': dict(containerd, containerd_pid_after=7)},
        engine_list=['containerd', 'docker'], found={'docker': {'auto': True}})
    # nothing ran: node_state's verdicts alone, nothing changed
    quiet = node_result(gpu_node_state=dict(state, run=[]), container_runtime_result=skipped)
    assert quiet['container_runtime']['changed'] is False
    assert quiet['container_runtime']['engines'] == {'docker': docker, 'containerd': containerd}


@pytest.mark.parametrize('concerns, engine_list', [
    ({}, []),
    ({'device_links': {'converged': True, 'result': {'changed': False, 'created': []}}}, []),
    ({'persistenced': {'converged': True, 'result': {'changed': False, 'pid': 4}},
      'gpu_persistence': {'converged': False, 'result': {'changed': True, 'gpus': [{'index': 0}]}}}, []),
    ({'docker': {'converged': True, 'result': {'changed': False, 'action': 'none', 'runtimes': {'nvidia': {}}}}},
     ['docker']),
    ({'container_toolkit': {'converged': True, 'result': {'changed': False, 'converged': True,
                                                          'installed': {'nvidia-container-toolkit': '1.20.0-1'}}}},
     []),
    ({'containerd': {'converged': True, 'result': {'changed': False, 'action': 'none', 'runtimes': ['nvidia']}},
      'crio': {'converged': False, 'result': {'changed': True, 'action': 'reload'}}}, ['containerd', 'crio']),
    ({'device_links': {'converged': True, 'result': {'changed': False}},
      'persistenced': {'converged': True, 'result': {'changed': False, 'pid': 4}},
      'gpu_persistence': {'converged': True, 'result': {'changed': False, 'gpus': []}},
      'containerd': {'converged': True, 'result': {'changed': False, 'runtimes': ['nvidia', 'runc']}},
      'docker': {'converged': True, 'result': {'changed': False, 'runtimes': {'nvidia': {}, 'runc': {}}}}},
     ['containerd', 'docker']),
])
def test_what_a_converged_node_publishes_is_the_result_of_nothing_run(concerns, engine_list):
    # A converged node (or gpu_node_drift_only) publishes node_state's verdicts without running a role:
    # the same as __gpu_node_public with every role's task unrun (undefined) or skipped.
    state = {'converged': not any(not c['converged'] for c in concerns.values()), 'run': [],
             'drifted': [name for name, c in concerns.items() if not c['converged']],
             'concerns': concerns, 'engine_list': engine_list, 'engines_found': {'docker': {'auto': True}}}
    skipped = {'changed': False, 'skipped': True}
    expected = node_result(gpu_node_state=state)
    assert node_result_checked(gpu_node_state=state) == expected
    assert node_result(gpu_node_state=state, persistenced_result=skipped, gpu_persistence_result=skipped,
                       container_toolkit_result=skipped, container_runtime_result=skipped,
                       __gpu_node_device_links=skipped) == expected
    assert expected['state'] == state


def test_evaluate_registers_node_state_alone_and_main_imports_it_first():
    # The evaluate entry point: the inner roles' defaults (no tasks), then node_state, registered as the
    # documented gpu_node_state; nothing is published. main runs it first, unless every module is to run.
    steps = tasks('gpu_node', 'evaluate.yml')
    assert [step.get('register') for step in steps if 'ansible.builtin.import_role' not in step] == ['gpu_node_state']
    assert all(step['ansible.builtin.import_role']['tasks_from'] == 'defaults.yml'
               for step in steps if 'ansible.builtin.import_role' in step)
    first = tasks('gpu_node')[0]
    assert first['ansible.builtin.import_tasks'] == 'evaluate.yml'
    assert first['when'] == 'gpu_node_evaluate_first | bool or gpu_node_drift_only | bool'
    # without node_state (which checks the role's arguments in its own task), a check of their own before any
    # concern runs, exactly then; a converged host never reaches it (the role ends before concerns.yml)
    check = tasks('gpu_node', 'concerns.yml')[0]
    assert 'ansible.builtin.validate_argument_spec' in check and check['tags'] == ['always']
    assert check['when'] == 'not __gpu_node_evaluated | bool'
    assert evaluate_conditional(templar(**dict(role_vars('gpu_node'), gpu_node_state=SKIPPED)),
                                trust_as_template(check['when'])) is True
    assert evaluate_conditional(templar(**dict(role_vars('gpu_node'), gpu_node_state={'run': []})),
                                trust_as_template(check['when'])) is False
    specs = yaml.safe_load(read('roles', 'gpu_node', 'meta', 'argument_specs.yml'))['argument_specs']
    assert specs['evaluate']['options'] == specs['main']['options']
    assert '`gpu_node_state`' in read('roles', 'gpu_node', 'README.md')


def no_nvml_retry(**variables):
    """Whether gpu_persistence's rescue fails the play instead of installing nvidia-ml-py and retrying."""
    condition = tasks('gpu_persistence')[0]['rescue'][0]['when']
    return evaluate_conditional(templar(**variables), trust_as_template(condition))


def test_gpu_persistence_retries_on_the_missing_library_key_not_the_message():
    missing = {'failed': True, 'msg': 'Failed to import the required Python library (nvidia-ml-py) on h1',
               'missing_library': 'nvidia-ml-py'}
    wheel = '/srv/wheels/nvidia_ml_py-13.615.71-py3-none-any.whl'
    assert no_nvml_retry(gpu_persistence_nvml_wheel=wheel, ansible_failed_result=missing) is False
    # no wheel given: the play fails (never pip into the host's Python)
    assert no_nvml_retry(gpu_persistence_nvml_wheel=None, ansible_failed_result=missing) is True
    # A message that merely names the library (a state-file error, say) is not a missing library.
    named = {'failed': True, 'msg': 'h1: /var/lib/gpufleet/nvidia-ml-py.json: not a regular file'}
    assert no_nvml_retry(gpu_persistence_nvml_wheel=wheel, ansible_failed_result=named) is True
    other = dict(missing, missing_library='somethingelse')
    assert no_nvml_retry(gpu_persistence_nvml_wheel=wheel, ansible_failed_result=other) is True


def test_gpu_persistence_never_installs_with_pip():
    text = read('roles', 'gpu_persistence', 'tasks', 'main.yml')
    assert 'ansible.builtin.pip' not in text and 'pip:' not in text


def test_site_playbook_reads_only_public_results():
    site = read('playbooks', 'site.yml')
    # gpu_node's public result, and Ansible's own failed result in the rescue that names a host's error.
    assert set(re.findall(r'\b\w+_result\b', site)) == {'gpu_node_result', 'ansible_failed_result'}
    assert not re.search(r'__(%s|gpu_node)_' % '|'.join(INNER), site)


def summary_line(node):
    """The fleet summary's line for one healthy host whose gpu_node_result is ``node``, split in words."""
    lines = site_summary(['h1'], {'h1': {'gpu_node_result': node}})
    assert len(lines) == 1 and lines[0].startswith('h1 ok found=')
    return lines[0].split()[2:]


def test_site_summary_shows_whether_a_container_ran_through_the_runtime():
    def render(node):
        return summary_line(node)

    runtime = {'action': 'none', 'runtimes': {'nvidia': {}, 'runc': {}},
               'verification': {'verified': True, 'status': 'ok'}}
    assert 'nvidia_run=ok' in render({'persistenced': None, 'gpu_persistence': None, 'container_runtime': runtime})
    skipped = dict(runtime, verification={'verified': None, 'status': 'no_image'})
    assert 'nvidia_run=no_image' in render({'persistenced': None, 'gpu_persistence': None, 'container_runtime': skipped})
    assert 'nvidia_run=n/a' in render({'persistenced': None, 'gpu_persistence': None, 'container_runtime': None})


# container_runtime's verification: decided by the engine modules (tests/unit/plugins/module_utils/test_verify.py),
# published in each engine's result as verification; the role only says why nothing ran, or fails.

REGISTERED = {'changed': True, 'action': 'reload',
              'runtimes': {'nvidia': {'path': 'nvidia-container-runtime'}, 'runc': {'path': 'runc'}},
              'default_runtime': 'runc', 'dockerd_pid_before': 41, 'dockerd_pid_after': 41}


def runtime_vars(**variables):
    merged = yaml.safe_load(read('roles', 'container_runtime', 'defaults', 'main.yml'))
    merged.update(trusted_tree(yaml.safe_load(read('roles', 'container_runtime', 'vars', 'main.yml'))))
    merged.update(ansible_check_mode=False, __container_runtime_docker=REGISTERED)
    merged.update(variables)
    return templar(**merged)


def evaluate(name, **variables):
    return runtime_vars(**variables).template(trust_as_template('{{ %s }}' % name))


@pytest.mark.parametrize('engine, registered', [('docker', '__container_runtime_docker'),
                                                ('containerd', '__container_runtime_containerd')])
def test_verification_tasks_pass_the_options_and_fail_only_on_a_failed_run(engine, registered):
    role_tasks = tasks('container_runtime', engine + '.yml')
    module = role_tasks[0]['gpufleet.nvidia.%s_runtime' % engine]
    assert role_tasks[0]['register'] == registered
    assert module == {'role_vars': True}
    read = dict((option, variable) for option, variable, unused in _role_options.OPTIONS[engine])
    assert (read['verify'], read['verify_image'], read['verify_devices']) == (
        'container_runtime_verify', 'container_runtime_verify_image', 'container_runtime_verify_devices')
    assert len(role_tasks) == 3
    conditions = dict((task['name'].split(' ')[0], task['when']) for task in role_tasks[1:])

    def chosen(status):
        values = templar(**{registered: {'verification': {'status': status, 'msg': 'x'}}})
        return [name for name, when in conditions.items() if evaluate_conditional(values, trust_as_template(when))]

    assert chosen('failed') == ['Fail']
    assert chosen('no_image') == chosen('no_client') == ['Say']
    for status in ('ok', 'off', 'check_mode', 'absent', 'not_loaded'):
        assert chosen(status) == []


# container_runtime's engines: the list named, auto from container_engines_info, in the role's order.

FOUND = {'auto': ['containerd', 'docker'],
         'engines': {'containerd': {'installed': True, 'auto': True}, 'crio': {'installed': False, 'auto': False},
                     'docker': {'installed': True, 'auto': True}}}
SKIPPED = {'changed': False, 'skipped': True, 'skip_reason': 'Conditional result was False'}


@pytest.mark.parametrize('engines, found, expected', [
    (['auto'], FOUND, ['containerd', 'docker']),
    (['auto'], dict(FOUND, auto=[]), []),
    (['docker'], SKIPPED, ['docker']),
    (['docker', 'crio', 'containerd'], SKIPPED, ['containerd', 'crio', 'docker']),
    (['auto', 'crio'], FOUND, ['containerd', 'crio', 'docker']),
    (['docker', 'auto', 'docker'], FOUND, ['containerd', 'docker']),
    ([], SKIPPED, []),
])
def test_the_engine_list_is_what_was_named_plus_what_auto_found_in_the_role_order(engines, found, expected):
    assert evaluate('__container_runtime_engine_list', container_runtime_engines=engines,
                    __container_runtime_found=found) == expected


def test_each_engine_runs_only_when_listed_and_auto_asks_the_host_only_when_named():
    role_tasks = tasks('container_runtime')
    conditions = dict((task['name'], task['when']) for task in role_tasks if 'when' in task)
    info = conditions['Find the container engines installed on the host']
    assert evaluate_conditional(runtime_vars(container_runtime_engines=['auto']), trust_as_template(info)) is True
    assert evaluate_conditional(runtime_vars(container_runtime_engines=['docker']), trust_as_template(info)) is False
    imports = dict((task['ansible.builtin.import_tasks'], task['when']) for task in role_tasks
                   if 'ansible.builtin.import_tasks' in task)
    assert sorted(imports) == ['containerd.yml', 'crio.yml', 'docker.yml']
    for listed in (['docker'], ['containerd'], ['crio', 'docker'], []):
        variables = runtime_vars(container_runtime_engines=listed, __container_runtime_found=SKIPPED)
        ran = sorted(name[:-4] for name, when in imports.items()
                     if evaluate_conditional(variables, trust_as_template(when)))
        assert ran == sorted(listed)
    # Each engine's module gets the shared options under its own names.
    for concern in ('containerd', 'crio', 'docker'):
        read = dict((option, variable) for option, variable, unused in _role_options.OPTIONS[concern])
        assert (read['apply_timeout'], read['name'], read['state']) == (
            'container_runtime_timeout', 'container_runtime_name', 'container_runtime_state')


def test_reload_is_refused_before_anything_changes_when_containerd_is_listed():
    refused = evaluate('__container_runtime_apply_refused', container_runtime_apply='reload',
                       container_runtime_engines=['containerd', 'docker'], __container_runtime_found=SKIPPED)
    assert 'containerd has no reload' in refused and 'containerd, docker' in refused
    assert evaluate('__container_runtime_apply_refused', container_runtime_apply='reload',
                    container_runtime_engines=['docker', 'crio'], __container_runtime_found=SKIPPED) == ''
    assert evaluate('__container_runtime_apply_refused', container_runtime_apply='auto',
                    container_runtime_engines=['containerd'], __container_runtime_found=SKIPPED) == ''
    first = [task.get('name') for task in tasks('container_runtime')][:2]
    assert first == ['Find the container engines installed on the host', 'Refuse an apply method an engine does not have']


CONTAINERD = {'changed': True, 'action': 'restart', 'runtimes': ['nvidia', 'runc'], 'default_runtime': 'runc'}
VERIFIED = {'verified': True, 'status': 'ok'}


def test_the_result_has_every_engine_and_keeps_dockerds_at_the_top():
    both = evaluate('__container_runtime_result', container_runtime_engines=['auto'], __container_runtime_found=FOUND,
                    __container_runtime_containerd=CONTAINERD, __container_runtime_crio=SKIPPED,
                    __container_runtime_docker=dict(REGISTERED, changed=False, verification=VERIFIED))
    assert both['engine_list'] == ['containerd', 'docker'] and both['found'] == FOUND['engines']
    assert both['engines'] == {'containerd': CONTAINERD,
                               'docker': dict(REGISTERED, changed=False, verification=VERIFIED)}
    assert both['action'] == 'reload' and both['verification'] == VERIFIED  # dockerd's, as before
    assert both['changed'] is True  # containerd changed
    # containerd alone: nothing of dockerd's, not even a stale verification from an earlier include.
    alone = evaluate('__container_runtime_result', container_runtime_engines=['containerd'],
                     __container_runtime_found=SKIPPED, __container_runtime_containerd=dict(CONTAINERD, changed=False),
                     __container_runtime_docker=SKIPPED)
    assert alone == {'engines': {'containerd': dict(CONTAINERD, changed=False)}, 'engine_list': ['containerd'],
                     'found': None, 'changed': False}


def test_site_summary_names_what_each_engine_runs():
    def render(runtime):
        return summary_line({'persistenced': None, 'gpu_persistence': None, 'container_runtime': runtime})

    docker = dict(REGISTERED, verification=VERIFIED)
    line = render(dict(docker, engines={'containerd': CONTAINERD, 'docker': docker}))
    assert 'containerd_runtimes=nvidia,runc' in line and 'containerd_action=restart' in line
    assert 'docker_runtimes=nvidia,runc' in line and 'nvidia_run=ok' in line
    assert not [token for token in line if token.startswith('crio_')]
    crio = {'changed': False, 'action': 'none', 'runtimes': ['crun', 'nvidia'], 'default_runtime': 'crun'}
    line = render({'engines': {'crio': crio}, 'engine_list': ['crio']})
    assert 'crio_runtimes=crun,nvidia' in line and 'crio_action=none' in line
    assert 'docker_runtimes=n/a' in line and 'nvidia_run=n/a' in line


def runs_gpu_persistence(**variables):
    """Whether gpu_node imports gpu_persistence with these variables (all its conditions together)."""
    step = [task for task in tasks('gpu_node', 'concerns.yml') if task.get('name') == 'Per-GPU persistence'][0]
    values = dict(role_vars('gpu_node'), **dict({'gpu_node_gpu_persistence': True, 'ansible_check_mode': False,
                                                 '__gpu_node_run': ['gpu_persistence']}, **variables))
    return all(evaluate_conditional(templar(**values), trust_as_template(condition)) for condition in step['when'])


def test_gpu_node_leaves_the_gpus_alone_while_the_daemon_is_stopped_for_maintenance():
    assert runs_gpu_persistence() is True
    assert runs_gpu_persistence(persistenced_state='present') is True
    assert runs_gpu_persistence(persistenced_state='stopped') is False
    assert runs_gpu_persistence(gpu_node_gpu_persistence=False) is False
    # node_state found the GPUs converged (and the daemon too): not run.
    assert runs_gpu_persistence(__gpu_node_run=['docker']) is False
    # Check mode before the daemon's first start: nothing can read the modes yet.
    assert runs_gpu_persistence(ansible_check_mode=True, persistenced_result={'actions': ['start']}) is False


def roll_back(before, after):
    """Whether gpu_node's health gate puts a run's changes back, as the role's variable renders it."""
    variables = dict(role_vars('gpu_node'), __gpu_node_health_after=after, gpu_node_state={'concerns': {}})
    variables['__gpu_node_before'] = before
    return templar(**variables).template(trust_as_template('{{ __gpu_node_roll_back | bool }}'))


def test_the_health_gate_rolls_back_only_a_node_that_came_back_worse():
    passed = {'verdict': 'PASS', 'checks': []}
    failed = {'verdict': 'FAIL', 'checks': [{'check': 'ecc', 'verdict': 'FAIL', 'gpu': 0}]}
    # the same verdict, or better: nothing is put back (on every ansible-core: a None is no regression)
    assert roll_back(passed, passed) is False
    assert roll_back(failed, passed) is False
    assert roll_back(passed, failed) is True
    # a verdict that cannot be read stops the rollout but changes nothing on the node
    assert roll_back(passed, {'verdict': 'GREAT'}) is False
