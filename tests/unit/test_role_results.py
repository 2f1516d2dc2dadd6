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

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INNER = ('persistenced', 'gpu_persistence', 'container_runtime')


def read(*path):
    with open(os.path.join(ROOT, *path)) as handle:
        return handle.read()


def tasks(role, name='main.yml'):
    return yaml.safe_load(read('roles', role, 'tasks', name))


def templar(**variables):
    return Templar(loader=DataLoader(), variables=variables)


def registered(role):
    names = []
    for name in os.listdir(os.path.join(ROOT, 'roles', role, 'tasks')):
        names.extend(task['register'] for task in tasks(role, name) if 'register' in task)
    return names


@pytest.mark.parametrize('role', INNER)
def test_each_role_registers_its_public_result_and_documents_it(role):
    assert registered(role) == ['%s_result' % role]
    spec = yaml.safe_load(read('roles', role, 'meta', 'argument_specs.yml'))['argument_specs']['main']
    assert "Registers the module's result as C(%s_result)." % role in spec['description']
    assert '`%s_result`' % role in read('roles', role, 'README.md')


def test_gpu_node_sets_its_public_result_and_documents_it():
    published = tasks('gpu_node')[-1]
    assert published['tags'] == ['always']
    assert sorted(published['ansible.builtin.set_fact']['gpu_node_result']) == sorted(INNER)
    assert '`gpu_node_result`' in read('roles', 'gpu_node', 'README.md')


def node_result(**results):
    template = tasks('gpu_node')[-1]['ansible.builtin.set_fact']['gpu_node_result']
    return templar(**results).template(dict((key, trust_as_template(value)) for key, value in template.items()))


def test_gpu_node_result_holds_each_concern_or_null():
    persistenced = {'changed': False, 'actions': [], 'init_system': 'systemd', 'pid': 42}
    runtime = {'changed': True, 'action': 'reload', 'runtimes': {'nvidia': {}}}
    skipped = {'changed': False, 'skipped': True, 'skip_reason': 'Conditional result was False'}
    assert node_result(persistenced_result=persistenced, gpu_persistence_result=skipped,
                       container_runtime_result=runtime) == {
        'persistenced': persistenced, 'gpu_persistence': None, 'container_runtime': runtime}
    # --tags persistenced: the other roles' tasks never ran, so their results are undefined.
    assert node_result(persistenced_result=persistenced) == {
        'persistenced': persistenced, 'gpu_persistence': None, 'container_runtime': None}


def no_nvml_retry(**variables):
    """Whether gpu_persistence's rescue fails the play instead of installing nvidia-ml-py and retrying."""
    condition = tasks('gpu_persistence')[0]['rescue'][0]['when']
    return templar(**variables).evaluate_conditional(trust_as_template(condition))


def test_gpu_persistence_retries_on_the_missing_library_key_not_the_message():
    missing = {'failed': True, 'msg': 'Failed to import the required Python library (nvidia-ml-py) on h1',
               'missing_library': 'nvidia-ml-py'}
    assert no_nvml_retry(gpu_persistence_install_nvml=True, ansible_failed_result=missing) is False
    assert no_nvml_retry(gpu_persistence_install_nvml=False, ansible_failed_result=missing) is True
    # A message that merely names the library (a state-file error, say) is not a missing library.
    named = {'failed': True, 'msg': 'h1: /var/lib/gpufleet/nvidia-ml-py.json: not a regular file'}
    assert no_nvml_retry(gpu_persistence_install_nvml=True, ansible_failed_result=named) is True
    other = dict(missing, missing_library='somethingelse')
    assert no_nvml_retry(gpu_persistence_install_nvml=True, ansible_failed_result=other) is True


def test_site_playbook_reads_only_public_results():
    site = read('playbooks', 'site.yml')
    assert set(re.findall(r'\b\w+_result\b', site)) == {'gpu_node_result'}
    assert not re.search(r'__(%s|gpu_node)_' % '|'.join(INNER), site)
