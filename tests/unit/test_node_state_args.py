# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_node hands node_state each concern's options exactly as that concern's role hands its module.

node_state evaluates what a concern's module would do with the options in
roles/gpu_node/vars/main.yml (__gpu_node_args); the concern runs with the
options of its own role's task. If the two drifted apart, node_state would
judge one configuration and the role apply another. Read from the YAML files.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest
import yaml

from ansible_collections.gpufleet.nvidia.plugins.module_utils import _concerns

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))

# concern -> (role tasks file, module)
TASKS = {
    'device_links': ('roles/gpu_node/tasks/concerns.yml', 'gpufleet.nvidia.device_links'),
    'persistenced': ('roles/persistenced/tasks/main.yml', 'gpufleet.nvidia.persistenced'),
    'gpu_persistence': ('roles/gpu_persistence/tasks/set.yml', 'gpufleet.nvidia.gpu_persistence'),
    'containerd': ('roles/container_runtime/tasks/containerd.yml', 'gpufleet.nvidia.containerd_runtime'),
    'crio': ('roles/container_runtime/tasks/crio.yml', 'gpufleet.nvidia.crio_runtime'),
    'docker': ('roles/container_runtime/tasks/docker.yml', 'gpufleet.nvidia.docker_runtime'),
}


def load(path):
    with open(os.path.join(ROOT, path)) as handle:
        return yaml.safe_load(handle)


def task_args(path, module):
    found = [task[module] for task in load(path) if module in task]
    assert len(found) == 1, '%s: %d tasks call %s' % (path, len(found), module)
    return found[0]


def test_every_concern_is_mapped():
    assert sorted(load('roles/gpu_node/vars/main.yml')['__gpu_node_args']) == sorted(_concerns.CONCERNS) == sorted(TASKS)


@pytest.mark.parametrize('concern', sorted(TASKS))
def test_node_state_gets_what_the_role_passes(concern):
    mapped = load('roles/gpu_node/vars/main.yml')['__gpu_node_args'][concern]
    assert mapped == task_args(*TASKS[concern])
    # and only options the concern's module has
    assert set(mapped) <= set(_concerns.CONCERNS[concern].spec)


def test_the_check_would_see_a_changed_option():
    mapped = load('roles/gpu_node/vars/main.yml')['__gpu_node_args']['docker']
    changed = dict(mapped, runtime_args='{{ [] }}')
    assert changed != task_args(*TASKS['docker'])
