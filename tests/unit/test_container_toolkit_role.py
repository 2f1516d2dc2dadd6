# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The container_toolkit role: which ansible.builtin task runs for what the evaluation found, the files it writes
(the same text the evaluation compares), its result, its spec, and where gpu_node and site.yml run it.

Conditions and templates are evaluated with Ansible's own templar; nothing runs on this machine.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.filter.container_toolkit import (
    container_toolkit_key, container_toolkit_source)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import container_toolkit as concern
from ansible_collections.gpufleet.nvidia.plugins.module_utils.toolkit import rules as tk
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import _results

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import _role_options

from core_compat import evaluate_conditional, trust_as_template
from role_templates import templar, trusted_tree

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEY = '-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmQINBFake\n-----END PGP PUBLIC KEY BLOCK-----'
URL = 'http://10.250.0.1:8765/stable/deb/$(ARCH)'
SKIPPED = {'changed': False, 'skipped': True, 'skip_reason': 'Conditional result was False'}
REGISTERS = ('keyrings', 'key', 'source', 'removed', 'index', 'released', 'installed', 'uninstalled', 'held', 'after')


def load(*path):
    with open(os.path.join(ROOT, *path)) as handle:
        return yaml.safe_load(handle)


def role_tasks():
    return load('roles', 'container_toolkit', 'tasks', 'main.yml')


def variables(**changed):
    found = {}
    for kind in ('defaults', 'vars'):
        found.update(load('roles', 'container_toolkit', kind, 'main.yml'))
    found = trusted_tree(found)
    found.update(container_toolkit_version='1.20.0-1', container_toolkit_repo_url=URL, container_toolkit_repo_key=KEY,
                 ansible_check_mode=False, inventory_hostname='h1')
    found.update(('__container_toolkit_%s' % name, SKIPPED) for name in REGISTERS)
    found.update(changed)
    return found


def found(actions, **more):
    result = {'changed': False, 'converged': not actions, 'actions': actions, 'drift': ['x'] * len(actions),
              'installed': {'nvidia-container-toolkit': None}, 'invocation': {'module_args': {}}}
    result.update(more)
    return result


def run_tasks(actions, **changed):
    """The names of the tasks whose ``when`` holds (for a loop of literal items, for one item at least)."""
    names = []
    for task in role_tasks():
        when = task.get('when', [])
        conditions = when if isinstance(when, list) else [when]
        items = task['loop'] if isinstance(task.get('loop'), list) else [None]
        for item in items:
            values = templar(**variables(__container_toolkit_found=found(actions), item=item, **changed))
            if all(evaluate_conditional(values, trust_as_template(c)) for c in conditions):
                names.append(task['name'])
                break
    return names


ALWAYS = ['Read the toolkit\'s packages, holds and repository files', 'Publish the role\'s result']


def test_a_converged_host_costs_the_evaluation_and_the_result():
    assert run_tasks([]) == ALWAYS


@pytest.mark.parametrize('actions, expected', [
    (['write_key', 'write_source', 'update_index', 'install', 'hold'],
     ['The directory of apt\'s keys', 'The repository\'s signing key',
      'The repository\'s apt source, signed by that key alone', 'Refresh the index of the toolkit\'s source alone',
      'Install the toolkit at the pinned version', 'Hold the packages at that version (or let them go)',
      'Check the outcome']),
    (['install', 'hold'], ['Install the toolkit at the pinned version',
                           'Hold the packages at that version (or let them go)', 'Check the outcome']),
    (['hold'], ['Hold the packages at that version (or let them go)', 'Check the outcome']),
    (['remove_key', 'remove_source'], ['Remove the collection\'s apt source and key (nothing else)',
                                       'Check the outcome']),
])
def test_present_runs_only_what_the_evaluation_found(actions, expected):
    ran = [name for name in run_tasks(actions) if name not in ALWAYS and not name.startswith('Fail where')]
    assert ran == expected


def test_absent_lets_go_then_removes_then_removes_our_files():
    ran = [name for name in run_tasks(['remove_key', 'remove_source', 'unhold', 'remove'],
                                      container_toolkit_state='absent')
           if name not in ALWAYS and not name.startswith('Fail where')]
    assert ran == ['Remove the collection\'s apt source and key (nothing else)',
                   'Let the held packages go before removing them', 'Remove the toolkit packages', 'Check the outcome']


def test_the_index_is_refreshed_when_the_source_changed_even_if_apt_knew_the_version():
    ran = run_tasks(['write_source'], __container_toolkit_source={'changed': True})
    assert 'Refresh the index of the toolkit\'s source alone' in ran


def test_check_mode_cannot_install_a_version_only_the_refresh_would_make_known_and_checks_no_outcome():
    ran = run_tasks(['write_source', 'update_index', 'install', 'hold'], ansible_check_mode=True)
    assert 'Install the toolkit at the pinned version' not in ran and 'Check the outcome' not in ran
    assert 'Install the toolkit at the pinned version' in run_tasks(['install', 'hold'], ansible_check_mode=True)


def test_check_mode_holds_no_package_it_has_not_installed():
    # dpkg_selections fails on a package dpkg does not know (found on the lab: check mode on a fresh host).
    hold = 'Hold the packages at that version (or let them go)'
    assert hold not in run_tasks(['install', 'hold'], ansible_check_mode=True)
    assert hold in run_tasks(['hold'], ansible_check_mode=True)
    assert hold in run_tasks(['install', 'hold'])


def test_no_url_never_refreshes_the_hosts_own_sources():
    ran = run_tasks(['update_index', 'install', 'hold'], container_toolkit_repo_url=None)
    assert 'Refuse to refresh the host\'s own sources' in ran
    assert 'Refuse to refresh the host\'s own sources' not in run_tasks(['update_index', 'install', 'hold'])


def test_the_refresh_reads_our_source_alone_and_keeps_the_other_lists():
    [task] = [t for t in role_tasks() if t['name'] == 'Refresh the index of the toolkit\'s source alone']
    assert task['ansible.builtin.command']['argv'] == [
        'apt-get', 'update', '-o', 'Dir::Etc::SourceList=' + tk.SOURCE_PATH, '-o', 'Dir::Etc::SourceParts=-',
        '-o', 'APT::Get::List-Cleanup=0']


def test_the_files_are_written_where_and_as_the_evaluation_reads_them():
    tasks = dict((t['name'], t) for t in role_tasks())
    key = tasks['The repository\'s signing key']['ansible.builtin.copy']
    source = tasks['The repository\'s apt source, signed by that key alone']['ansible.builtin.copy']
    assert (key['dest'], source['dest']) == (tk.KEY_PATH, tk.SOURCE_PATH)
    for copy in (key, source):
        assert (copy['owner'], copy['group'], int(copy['mode'], 8)) == ('root', 'root', tk.FILE_MODE)
    # The filters (called here directly: the unit templar has no collection loader) on the role's variables
    assert key['content'] == '{{ container_toolkit_repo_key | gpufleet.nvidia.container_toolkit_key }}'
    assert ' '.join(source['content'].split()) == (
        '{{ container_toolkit_repo_url | gpufleet.nvidia.container_toolkit_source(container_toolkit_repo_suite, '
        'container_toolkit_repo_components) }}')
    for suite, components in (('/', []), ('stable', ['main', 'contrib'])):
        request = {'state': 'present', 'repo_url': URL, 'repo_suite': suite, 'repo_components': components,
                   'repo_key': KEY}
        wanted = tk.wanted_files(request)
        assert container_toolkit_key(KEY) == wanted[tk.KEY_PATH]
        assert container_toolkit_source(URL, suite, components) == wanted[tk.SOURCE_PATH]
    removed = tasks['Remove the collection\'s apt source and key (nothing else)']
    assert sorted(item['path'] for item in removed['loop']) == sorted([tk.KEY_PATH, tk.SOURCE_PATH])


def test_apt_installs_the_pinned_version_of_each_package_with_downgrades_and_no_recommends():
    [task] = [t for t in role_tasks() if t['name'] == 'Install the toolkit at the pinned version']
    apt = task['ansible.builtin.apt']
    assert templar(**variables()).template(trust_as_template(apt['name'])) == [
        'nvidia-container-toolkit=1.20.0-1', 'nvidia-container-toolkit-base=1.20.0-1']
    assert (apt['allow_downgrade'], apt['install_recommends'], apt['update_cache']) == (True, False, False)
    assert apt['allow_change_held_packages'] is True


def test_both_evaluations_have_the_same_options_and_those_of_the_concern():
    infos = [t['gpufleet.nvidia.container_toolkit_info'] for t in role_tasks() if 'gpufleet.nvidia.container_toolkit_info' in t]
    assert len(infos) == 2 and infos[0] == infos[1] == {'role_vars': True}
    # the table gives the module every one of its options
    assert sorted(option for option, unused, when in _role_options.OPTIONS['container_toolkit']) == sorted(concern.SPEC)


def test_the_result_is_the_last_evaluation_with_what_was_done():
    before = found(['install', 'hold'])
    after = found([], converged=True, installed={'nvidia-container-toolkit': '1.20.0-1'})
    values = variables(__container_toolkit_found=before, __container_toolkit_after=after,
                       __container_toolkit_installed={'changed': True})
    result = templar(**values).template(trust_as_template('{{ __container_toolkit_result }}'))
    assert result['installed'] == {'nvidia-container-toolkit': '1.20.0-1'} and result['converged'] is True
    assert result['actions'] == ['install', 'hold'] and result['changed'] is True and 'invocation' not in result
    # check mode: the evaluation before, and changed (it would)
    values = variables(__container_toolkit_found=before, ansible_check_mode=True)
    result = templar(**values).template(trust_as_template('{{ __container_toolkit_result }}'))
    assert result['converged'] is False and result['changed'] is True
    # converged: nothing changed
    values = variables(__container_toolkit_found=found([]))
    assert templar(**values).template(trust_as_template('{{ __container_toolkit_result }}'))['changed'] is False


def test_a_host_still_drifted_after_the_role_fails_naming_itself():
    [task] = [t for t in role_tasks() if t['name'] == 'Fail where the host is still not as wanted']
    still = {'converged': False, 'msg': 'drifted: nvidia-container-toolkit is not held'}
    values = variables(__container_toolkit_after=still)
    assert all(evaluate_conditional(templar(**values), trust_as_template(c)) for c in task['when'])
    msg = templar(**values).template(trust_as_template(task['ansible.builtin.fail']['msg']))
    assert msg.startswith('h1: ') and 'not held' in msg
    values = variables(__container_toolkit_after={'converged': True, 'msg': 'converged'})
    assert not all(evaluate_conditional(templar(**values), trust_as_template(c)) for c in task['when'])


@pytest.mark.parametrize('url, suite, components, key', [
    ('http://x/\nTrusted: yes', '/', [], KEY),
    (URL, 'stable main', [], KEY),
    (URL, '/', ['main'], KEY),
])
def test_the_filters_refuse_what_would_break_the_source(url, suite, components, key):
    with pytest.raises(AnsibleFilterError):
        container_toolkit_source(url, suite, components)


def test_the_key_filter_refuses_what_is_not_a_key():
    with pytest.raises(AnsibleFilterError):
        container_toolkit_key('not a key')
    assert container_toolkit_key(KEY + '\n\n') == KEY + '\n'


def test_the_role_spec_documents_every_default_and_the_interface_variables():
    spec = load('roles', 'container_toolkit', 'meta', 'argument_specs.yml')['argument_specs']['main']['options']
    assert sorted(spec) == sorted(['container_toolkit_state', 'container_toolkit_version', 'container_toolkit_packages',
                                   'container_toolkit_repo_url', 'container_toolkit_repo_suite',
                                   'container_toolkit_repo_components', 'container_toolkit_repo_key',
                                   'container_toolkit_hold'])
    assert spec['container_toolkit_state']['choices'] == ['present', 'absent']
    assert spec['container_toolkit_packages']['default'] == list(tk.PACKAGES)
    assert spec['container_toolkit_hold']['default'] is True


# gpu_node and site.yml

def test_gpu_node_runs_the_toolkit_after_the_links_and_before_any_runtime_registration():
    steps = load('roles', 'gpu_node', 'tasks', 'concerns.yml')
    names = [s.get('ansible.builtin.import_role', {}).get('name') or next(
        (k for k in s if k.startswith('gpufleet.')), s['name']) for s in steps]
    assert names.index('gpufleet.nvidia.device_links') < names.index('gpufleet.nvidia.container_toolkit') < \
        names.index('gpufleet.nvidia.container_runtime')
    [step] = [s for s in steps if s.get('ansible.builtin.import_role', {}).get('name') == 'gpufleet.nvidia.container_toolkit']
    assert step['tags'] == ['container_toolkit'] and step['ansible.builtin.import_role']['rolespec_validate'] is False
    assert step['when'] == ['gpu_node_container_toolkit | bool', "'container_toolkit' in __gpu_node_run"]
    # Without node_state, every concern runs, in gpu_node's order (plugin_utils/_results.py).
    assert _results.CONCERNS.index('container_toolkit') < _results.CONCERNS.index('containerd')


def test_the_toolkit_is_off_by_default_and_node_state_leaves_it_out_then():
    assert load('roles', 'gpu_node', 'defaults', 'main.yml')['gpu_node_container_toolkit'] is False
    # node_state's options come from the one table (role_vars), where the toolkit has gpu_node's switch
    assert _role_options.SWITCHES['container_toolkit'] == 'gpu_node_container_toolkit'
    defaults = dict(load('roles', 'gpu_node', 'defaults', 'main.yml'), persistenced_state='present',
                    container_runtime_engines=['auto'])
    defaults.update((variable, None) for variable in _role_options.variables_read() if variable not in defaults)
    assert 'container_toolkit' not in _role_options.node_state_args(defaults.__getitem__)
    defaults['gpu_node_container_toolkit'] = True
    assert 'container_toolkit' in _role_options.node_state_args(defaults.__getitem__)


def test_the_concern_is_tagged_in_gpu_node_and_named_in_site_yml():
    main = load('roles', 'gpu_node', 'tasks', 'main.yml')
    [include] = [t for t in main if t.get('ansible.builtin.include_tasks') == 'concerns.yml']
    assert include['tags'].index('container_toolkit') < include['tags'].index('container_runtime')
    with open(os.path.join(ROOT, 'playbooks', 'site.yml')) as handle:
        assert 'container_toolkit' in handle.read().split('- name:')[0]
