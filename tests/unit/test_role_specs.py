# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_node validates its inner roles' options itself: its spec must hold every one of them, unchanged."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The roles gpu_node imports, in its order (the toolkit's packages before any runtime registration).
INNER = ('persistenced', 'gpu_persistence', 'container_toolkit', 'container_runtime')


def load(role, entry='main'):
    with open(os.path.join(ROOT, 'roles', role, 'meta', 'argument_specs.yml')) as handle:
        return yaml.safe_load(handle)['argument_specs'][entry]


def test_gpu_node_spec_matches_its_generator():
    loader = SourceFileLoader('sync_gpu_node_spec', os.path.join(ROOT, 'scripts', 'sync-gpu-node-spec'))
    module = module_from_spec(spec_from_loader('sync_gpu_node_spec', loader))
    loader.exec_module(module)
    built = module.build()['argument_specs']
    assert sorted(built) == ['evaluate', 'main']
    for entry in built:
        assert load('gpu_node', entry) == built[entry], 'run scripts/sync-gpu-node-spec'
    with open(os.path.join(ROOT, 'roles', 'gpu_node', 'meta', 'argument_specs.yml')) as handle:
        assert handle.read() == module.render(), 'run scripts/sync-gpu-node-spec'


def test_every_inner_option_is_validated_by_gpu_node():
    node = load('gpu_node')['options']
    for role in INNER:
        for name, option in load(role)['options'].items():
            assert node.get(name) == option, '%s.%s differs in gpu_node; run scripts/sync-gpu-node-spec' % (role, name)
    with open(os.path.join(ROOT, 'roles', 'gpu_node', 'tasks', 'concerns.yml')) as handle:
        tasks = yaml.safe_load(handle)
    imports = [t['ansible.builtin.import_role'] for t in tasks if 'ansible.builtin.import_role' in t]
    assert [i['name'] for i in imports] == ['gpufleet.nvidia.%s' % role for role in INNER]
    assert [i.get('rolespec_validate') for i in imports] == [False] * len(INNER)
    # evaluate.yml (main's first step) loads only their defaults (an entry point without tasks, so no spec is
    # validated there either)
    with open(os.path.join(ROOT, 'roles', 'gpu_node', 'tasks', 'evaluate.yml')) as handle:
        defaults = [t['ansible.builtin.import_role'] for t in yaml.safe_load(handle) if 'ansible.builtin.import_role' in t]
    assert [(i['name'], i['tasks_from']) for i in defaults] == [
        ('gpufleet.nvidia.%s' % role, 'defaults.yml') for role in INNER]
    for role in INNER:
        with open(os.path.join(ROOT, 'roles', role, 'tasks', 'defaults.yml')) as handle:
            assert yaml.safe_load(handle) == [], role


def test_each_role_defaults_every_option_its_spec_documents():
    for role in INNER + ('gpu_node',):
        with open(os.path.join(ROOT, 'roles', role, 'defaults', 'main.yml')) as handle:
            defaults = yaml.safe_load(handle)
        options = load(role)['options']
        own = options if role != 'gpu_node' else dict((k, v) for k, v in options.items() if k.startswith('gpu_node_'))
        assert sorted(defaults) == sorted(own), role
        for name, value in defaults.items():
            assert options[name].get('default') == value, '%s: %s' % (role, name)
