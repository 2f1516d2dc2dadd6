# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_node hands node_state each concern's options exactly as that concern's role hands its module.

node_state evaluates what a concern's module would do with the options of its task in
roles/gpu_node/tasks/evaluate.yml (one template per concern); the concern runs with the
options of its own role's task (a template per option). If the two drifted apart, node_state
would judge one configuration and the role apply another. Both are rendered with Ansible's own
templar, with the roles' defaults and with each variable they read changed in turn, and held equal.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

import pytest
import yaml

from ansible_collections.gpufleet.nvidia.plugins.module_utils import _concerns

from role_templates import templar, trusted_tree

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))

# concern -> (role tasks file, module)
TASKS = {
    'device_links': ('roles/gpu_node/tasks/concerns.yml', 'gpufleet.nvidia.device_links'),
    'persistenced': ('roles/persistenced/tasks/main.yml', 'gpufleet.nvidia.persistenced'),
    'gpu_persistence': ('roles/gpu_persistence/tasks/set.yml', 'gpufleet.nvidia.gpu_persistence'),
    'container_toolkit': ('roles/container_toolkit/tasks/main.yml', 'gpufleet.nvidia.container_toolkit_info'),
    'containerd': ('roles/container_runtime/tasks/containerd.yml', 'gpufleet.nvidia.containerd_runtime'),
    'crio': ('roles/container_runtime/tasks/crio.yml', 'gpufleet.nvidia.crio_runtime'),
    'docker': ('roles/container_runtime/tasks/docker.yml', 'gpufleet.nvidia.docker_runtime'),
}


def load(path):
    with open(os.path.join(ROOT, path)) as handle:
        return yaml.safe_load(handle)


def task_args(path, module):
    found = [task[module] for task in load(path) if module in task]
    # One set of options: the container_toolkit role evaluates twice (before and after its changes), with the
    # same options (a YAML alias).
    assert len(found) >= 1 and all(args == found[0] for args in found), '%s: %d tasks call %s' % (
        path, len(found), module)
    return found[0]


def node_state_args():
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
    found.update(changed)
    return found


def render(template, **changed):
    return templar(**role_variables(**changed)).template(trusted_tree(template))


def read_by(concern):
    """The role variables the concern's role task reads."""
    text = yaml.safe_dump(task_args(*TASKS[concern]))
    return sorted(set(re.findall(r'\b(?:persistenced|gpu_persistence|container_toolkit|container_runtime|gpu_node)_\w+', text)))


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
    options = set(node_state_args()) - {'engines'}
    assert sorted(options) == sorted(_concerns.CONCERNS) == sorted(TASKS)


@pytest.mark.parametrize('concern', sorted(TASKS))
def test_node_state_gets_what_the_role_passes(concern):
    role_args = task_args(*TASKS[concern])
    mine = node_state_args()[concern]
    varied = 0
    for label, changed in variations(concern):
        expected = render(role_args, **changed)
        assert render(mine, **changed) == expected, '%s with %s' % (concern, label)
        # and only options the concern's module has
        assert set(expected) <= set(_concerns.CONCERNS[concern].spec)
        varied += expected != render(role_args)
    # every variable the role's task reads changes what it passes, so each comparison above could have failed
    assert varied == len(read_by(concern)) > 0


def test_the_check_would_see_a_changed_option():
    # A role task that stopped reading container_runtime_args (equal under the defaults, [] both) is caught.
    changed = dict(task_args(*TASKS['docker']), runtime_args='{{ [] }}')
    mine = node_state_args()['docker']
    differ = [label for label, varied in variations('docker') if render(changed, **varied) != render(mine, **varied)]
    assert differ == ['container_runtime_args']
