# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils is the packages docs/architecture.md names, lowest first, and every import points down.

Read from the source files with ``ast`` (nothing is imported), so a new import that breaks a layer fails here,
naming the file and the import. The order of the packages is read from the documentation's table, so the table
and the code cannot part. The sizes a newcomer can read are held here too: no file over 600 lines (the vendored
TOML reader aside), no class over 250.
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
DOC = os.path.join(ROOT, 'docs', 'architecture.md')

# Pure rules (text in, text and findings out): no host access at all.
PURE = ('engines.names', 'gpu.pci', 'init.systems', 'formats.json_splice', 'formats.toml_splice', 'formats.take_over',
        'engines.verify', 'toolkit.rules', 'cdi.spec', 'cdi.boot', 'cdi.dirs', 'cdi.mode', 'init.boot', 'docker.daemon_json',
        'containerd.config', 'containerd.plan', 'containerd.cdi', 'containerd.effective', 'crio.config', 'crio.takeover',
        'health.verdicts', 'health.xid', 'health.contract', 'health.rules')
HOST_MODULES = {'os', 'subprocess', 'socket', 'fcntl', 'signal', 'shutil', 'glob'}
VENDORED = ('formats._tomli',)
MAX_FILE_LINES = 600
MAX_CLASS_LINES = 250


def source_files():
    """{dotted module name under module_utils: path} for every source file but the packages' (empty) __init__."""
    found = {}
    for directory, unused_dirs, names in os.walk(UTILS):
        for name in names:
            if name.endswith('.py') and name != '__init__.py':
                path = os.path.join(directory, name)
                found[os.path.relpath(path, UTILS)[:-3].replace(os.sep, '.')] = path
    return found


def tree(path):
    with open(path) as handle:
        return ast.parse(handle.read(), path)


def ours(path):
    """The module_utils modules (dotted, under module_utils) a source file imports."""
    found = set()
    for node in ast.walk(tree(path)):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PREFIX + '.'):
            rest = node.module[len(PREFIX) + 1:]
            names = [rest] if '.' in rest else [rest + '.' + alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name[len(PREFIX) + 1:] for alias in node.names if alias.name.startswith(PREFIX + '.')]
        found.update(names)
    return found


def graph():
    return dict((name, ours(path)) for name, path in source_files().items())


def documented_packages():
    """The packages of docs/architecture.md's table, lowest first."""
    with open(DOC) as handle:
        text = handle.read()
    table = text[text.index('## The packages'):]
    found = re.findall(r'^\| `(\w+)/` \|', table, re.M)
    assert found and len(found) == len(set(found)), found
    return found


def package(name):
    return name.split('.')[0]


def test_every_module_is_in_a_documented_package_and_every_package_is_there():
    packages = documented_packages()
    files = source_files()
    assert sorted(name for name in files if '.' not in name or package(name) not in packages) == []
    on_disk = sorted(name for name in os.listdir(UTILS) if os.path.isdir(os.path.join(UTILS, name))
                     and name != '__pycache__')
    assert sorted(packages) == on_disk


def test_every_package_has_an_empty_init():
    # Ansible's module zip carries a package's __init__ with any of its modules; ansible-test wants it empty.
    for name in documented_packages():
        path = os.path.join(UTILS, name, '__init__.py')
        assert os.path.isfile(path) and os.path.getsize(path) == 0, path


def test_every_import_names_an_existing_module():
    edges = graph()
    for name, imported in edges.items():
        assert imported <= set(edges), '%s imports %s, which is not in module_utils' % (
            name, sorted(imported - set(edges)))


def upward_imports(edges, packages):
    rank = dict((name, index) for index, name in enumerate(packages))
    return sorted((name, other) for name, imported in edges.items() for other in imported
                  if rank[package(other)] > rank[package(name)])


def test_no_import_points_to_a_higher_package():
    assert upward_imports(graph(), documented_packages()) == []


def test_the_direction_check_finds_an_upward_import():
    # Worth something only if it can fail: a planted import of a higher package is named.
    edges = {'host.files': {'concerns.base'}, 'concerns.base': {'host.files'}}
    assert upward_imports(edges, ['host', 'concerns']) == [('host.files', 'concerns.base')]


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
    assert find_cycle({'a.x': {'a.y'}, 'a.y': {'a.z'}, 'a.z': {'a.x'}, 'a.w': set()}) == ['a.x', 'a.y', 'a.z', 'a.x']
    assert find_cycle({'a.x': {'a.y'}, 'a.y': set()}) is None


@pytest.mark.parametrize('name', PURE)
def test_pure_rules_touch_no_host(name):
    stdlib = set()
    for node in ast.walk(tree(source_files()[name])):
        if isinstance(node, ast.Import):
            stdlib.update(alias.name.split('.')[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            stdlib.add(node.module.split('.')[0])
    assert not stdlib & HOST_MODULES, '%s imports %s: host access belongs outside the rules' % (
        name, sorted(stdlib & HOST_MODULES))
    impure = sorted(other for other in graph()[name] if other not in PURE and package(other) != 'common'
                    and other not in VENDORED)
    assert impure == [], '%s imports %s, which touch the host' % (name, impure)


def test_no_file_is_too_long_to_read():
    long_files = []
    for name, path in sorted(source_files().items()):
        with open(path) as handle:
            count = sum(1 for unused_line in handle)
        if count > MAX_FILE_LINES and name not in VENDORED:
            long_files.append((name, count))
    assert long_files == []


def test_no_class_is_too_long_to_read():
    long_classes = []
    for name, path in sorted(source_files().items()):
        for node in ast.walk(tree(path)):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES:
                long_classes.append((name, node.name, node.end_lineno - node.lineno + 1))
    assert long_classes == []


def test_modules_hold_no_host_logic():
    # Modules stay thin: the work is in module_utils, where pytest drives it directly.
    for name in sorted(os.listdir(MODULES)):
        if not name.endswith('.py') or name == '__init__.py':
            continue
        classes = [node.name for node in tree(os.path.join(MODULES, name)).body if isinstance(node, ast.ClassDef)]
        assert not classes, '%s defines %s: host logic belongs in module_utils' % (name, classes)
