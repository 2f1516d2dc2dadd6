# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The module_utils import graph has the layers docs/architecture.md names, and no cycle.

Read from the source files with ``ast`` (nothing is imported), so a new
import that breaks a layer fails here, naming the file and the import. The
layers are read from the documentation's table of files, so the table and
the code cannot part.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ast
import os
import re

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
UTILS = os.path.join(ROOT, 'plugins', 'module_utils')
MODULES = os.path.join(ROOT, 'plugins', 'modules')
PREFIX = 'ansible_collections.gpufleet.nvidia.plugins.module_utils'

# What each bottom-layer file may import of ours: nothing but the shared error types.
BOTTOM = {
    '_errors': set(),
    '_tomli': set(),
    '_json_splice': {'_errors'},
    '_toml_splice': {'_errors', '_tomli'},  # parse: the reader beside the editor
    '_host': {'_errors'},
    '_options': set(),
    '_engine_names': set(),
    '_init_files': set(),
    '_compile_once': set(),
    '_cdi_dirs': set(),
}

# Pure rules (text in, text and findings out): what each may import of ours, and no host access at all.
PURE = {
    '_containerd': {'_cdi_dirs', '_errors', '_tomli', '_toml_splice'},
    '_crio': {'_cdi_dirs', '_errors', '_options', '_toml_splice'},
    '_verify': set(),
    '_toolkit': {'_errors'},
    '_cdi': {'_errors'},
    '_cdi_boot': {'_boot_files', '_cdi', '_engine_names', '_init_files'},
    '_boot_files': set(),
}
HOST_MODULES = {'os', 'subprocess', 'socket', 'fcntl', 'signal', 'shutil', 'glob'}


def ours(path):
    """The module_utils names a source file imports."""
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == PREFIX:
                found.update(alias.name for alias in node.names)
            elif node.module.startswith(PREFIX + '.'):
                found.add(node.module[len(PREFIX) + 1:].split('.')[0])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PREFIX + '.'):
                    found.add(alias.name[len(PREFIX) + 1:].split('.')[0])
    return found


def graph():
    names = sorted(name[:-3] for name in os.listdir(UTILS) if name.endswith('.py') and name != '__init__.py')
    return dict((name, ours(os.path.join(UTILS, name + '.py'))) for name in names)


@pytest.mark.parametrize('name', sorted(BOTTOM))
def test_bottom_layer_imports_nothing_of_ours_but_errors(name):
    imported = graph()[name]
    assert imported <= BOTTOM[name], '%s.py imports %s: the bottom layer may import only %s' % (
        name, sorted(imported - BOTTOM[name]), sorted(BOTTOM[name]) or 'nothing of ours')


@pytest.mark.parametrize('name', sorted(PURE))
def test_pure_rules_touch_no_host(name):
    imported = graph()[name]
    assert imported <= PURE[name], '%s.py imports %s: pure rules may import only %s' % (
        name, sorted(imported - PURE[name]), sorted(PURE[name]))
    with open(os.path.join(UTILS, name + '.py')) as handle:
        tree = ast.parse(handle.read())
    stdlib = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            stdlib.update(alias.name.split('.')[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            stdlib.add(node.module.split('.')[0])
    assert not stdlib & HOST_MODULES, '%s.py imports %s: host access belongs in the operation layer' % (
        name, sorted(stdlib & HOST_MODULES))


def test_every_import_names_an_existing_module_utils_file():
    edges = graph()
    for name, imported in edges.items():
        assert imported <= set(edges), '%s.py imports %s, which is not in module_utils' % (
            name, sorted(imported - set(edges)))


def find_cycle(edges):
    """One import cycle as a list of names (first == last), or None."""
    done, path = set(), []

    def visit(name):
        if name in path:
            return path[path.index(name):] + [name]
        if name in done:
            return None
        path.append(name)
        for child in sorted(edges.get(name, ())):
            found = visit(child)
            if found:
                return found
        path.pop()
        done.add(name)
        return None

    for name in sorted(edges):
        found = visit(name)
        if found:
            return found
    return None


def test_module_utils_have_no_import_cycle():
    cycle = find_cycle(graph())
    assert cycle is None, 'import cycle: %s' % ' -> '.join(cycle)


def test_the_cycle_check_finds_a_cycle():
    # The check above is only worth something if it can fail: a planted three-file cycle is found.
    assert find_cycle({'_a': {'_b'}, '_b': {'_c'}, '_c': {'_a'}, '_d': set()}) == ['_a', '_b', '_c', '_a']
    assert find_cycle({'_a': {'_b'}, '_b': set()}) is None


def test_modules_hold_no_host_logic():
    # Modules stay thin: the work is in module_utils, where pytest drives it directly.
    for name in sorted(os.listdir(MODULES)):
        if not name.endswith('.py') or name == '__init__.py':
            continue
        with open(os.path.join(MODULES, name)) as handle:
            tree = ast.parse(handle.read())
        classes = [node.name for node in tree.body if isinstance(node, ast.ClassDef)]
        assert not classes, '%s defines %s: host logic belongs in module_utils' % (name, classes)


# Lowest first: a file imports only files of its own layer or below (docs/architecture.md).
LAYERS = ('bottom', 'rules', 'host', 'facts', 'operation', 'module')
# Upward imports known and left for now, named in the documentation (none since the operations that run a whole
# module get what they ask of the AnsibleModule handed in, ``_module.HostCalls``). A new one fails the test below.
KNOWN_UPWARD = set()
DOC = os.path.join(ROOT, 'docs', 'architecture.md')


def documented_layers():
    """{file: layer} from the table of files in docs/architecture.md (``_concern_<name>``: every concern's file)."""
    with open(DOC) as handle:
        text = handle.read()
    table = text[text.index('## The files'):]
    found = dict((name, layer) for layer, name in re.findall(r'^\| (\w+) \| `(_[\w<>]+)\.py` \|', table, re.M))
    assert found and set(found.values()) <= set(LAYERS), found
    return found


def layer_of(name, documented):
    if name in documented:
        return documented[name]
    if name.startswith('_concern_') and '_concern_<name>' in documented:
        return documented['_concern_<name>']
    return None


def test_every_file_is_in_the_documented_table():
    documented = documented_layers()
    assert [name for name in sorted(graph()) if layer_of(name, documented) is None] == []
    # and the table names no file that is gone
    assert [name for name in documented if name != '_concern_<name>' and name not in graph()] == []


def test_no_import_points_to_a_higher_layer():
    documented = documented_layers()
    upward = set()
    for name, imported in graph().items():
        mine = LAYERS.index(layer_of(name, documented))
        upward.update((name, other) for other in imported if LAYERS.index(layer_of(other, documented)) > mine)
    assert upward == KNOWN_UPWARD, 'imports that point upward: %s' % sorted(upward - KNOWN_UPWARD)


def test_the_layers_this_file_checks_are_the_documented_ones():
    documented = documented_layers()
    assert dict((name, documented[name]) for name in BOTTOM) == dict((name, 'bottom') for name in BOTTOM)
    assert dict((name, documented[name]) for name in PURE) == dict((name, 'rules') for name in PURE)
