# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The execution environment metadata says what controller-side code needs, and the EE definition agrees with galaxy.yml.

meta/ee-requirements.txt must list exactly the packages that code running on the controller
(plugins other than modules and module_utils, and the module_utils those import) imports beyond
the standard library and ansible-core: today none. The building itself is checked from the
tarball by tests/ee (scripts/test build).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ast
import os
import re
import sys
from importlib.metadata import packages_distributions

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OWN_PREFIX = 'ansible_collections.gpufleet.nvidia.'
HOST_SIDE = ('modules', 'module_utils')


def read_yaml(*parts):
    with open(os.path.join(ROOT, *parts)) as handle:
        return yaml.safe_load(handle)


def requirement_lines(relpath):
    with open(os.path.join(ROOT, relpath)) as handle:
        return [line.strip() for line in handle if line.strip() and not line.lstrip().startswith('#')]


def controller_files():
    """Plugins that run on the controller: every plugin type except modules and module_utils."""
    base = os.path.join(ROOT, 'plugins')
    for kind in sorted(os.listdir(base)):
        if kind in HOST_SIDE or not os.path.isdir(os.path.join(base, kind)):
            continue
        for name in sorted(os.listdir(os.path.join(base, kind))):
            if name.endswith('.py'):
                yield os.path.join(base, kind, name)


def imported_names(path):
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
            for alias in node.names:
                yield '%s.%s' % (node.module, alias.name)


def own_file(name):
    """The collection file an ansible_collections.gpufleet.nvidia.* import loads, if any."""
    path = os.path.join(ROOT, *name[len(OWN_PREFIX):].split('.')) + '.py'
    return path if os.path.isfile(path) else None


def third_party_imports():
    """Top-level names of third-party packages imported by controller-side code, following own imports."""
    found, seen, todo = {}, set(), list(controller_files())
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in imported_names(path):
            top = name.split('.')[0]
            if name.startswith(OWN_PREFIX):
                if own_file(name):
                    todo.append(own_file(name))
            elif top not in sys.stdlib_module_names and top not in ('ansible', 'ansible_collections'):
                found.setdefault(top, os.path.relpath(path, ROOT))
    return found


def distribution_names(requirements):
    return {re.split(r'[\s<>=!~;\[]', line, maxsplit=1)[0].lower().replace('_', '-') for line in requirements}


def test_collection_metadata_points_at_its_requirement_files():
    meta = read_yaml('meta', 'execution-environment.yml')
    assert meta['version'] == 1
    assert meta['dependencies'] == {'python': 'meta/ee-requirements.txt', 'system': 'meta/ee-bindep.txt'}
    for relpath in meta['dependencies'].values():
        assert os.path.isfile(os.path.join(ROOT, relpath)), relpath


def test_controller_side_code_needs_exactly_the_listed_python_packages():
    listed = distribution_names(requirement_lines('meta/ee-requirements.txt'))
    providers = packages_distributions()
    needed = {}
    for top, where in third_party_imports().items():
        dists = {dist.lower().replace('_', '-') for dist in providers.get(top, [top])}
        assert dists & listed, '%s imports %s on the controller: list its package in meta/ee-requirements.txt' % (where, top)
        needed.update(dict.fromkeys(dists & listed))
    assert listed == set(needed), 'meta/ee-requirements.txt lists packages no controller-side code imports: %s' % (
        sorted(listed - set(needed)))


def test_controller_side_code_is_found():
    # the action plugin is what runs on the controller today; an empty walk would prove nothing
    assert os.path.join(ROOT, 'plugins', 'action', 'persistenced.py') in list(controller_files())
    assert 'zlib' in set(imported_names(os.path.join(ROOT, 'plugins', 'plugin_utils', '_bundled.py')))


def test_no_system_packages_are_listed():
    # every command the collection runs, runs on the managed hosts through a module
    assert requirement_lines('meta/ee-bindep.txt') == []


def test_ee_definition_installs_this_version_with_the_supported_ansible_core():
    definition = read_yaml('docs', 'execution-environment.yml')
    galaxy = read_yaml('galaxy.yml')
    runtime = read_yaml('meta', 'runtime.yml')
    tarball = '%s-%s-%s.tar.gz' % (galaxy['namespace'], galaxy['name'], galaxy['version'])
    assert definition['version'] == 3
    assert definition['dependencies']['ansible_core'] == {'package_pip': 'ansible-core' + runtime['requires_ansible']}
    assert definition['dependencies']['galaxy'] == {'collections': [{'name': 'collections/' + tarball, 'type': 'file'}]}
    assert definition['additional_build_files'] == [{'src': tarball, 'dest': 'collections'}]


def test_ee_definition_names_no_registry():
    base = read_yaml('docs', 'execution-environment.yml')['images']['base_image']['name']
    # localhost/ is a local image name: podman and docker never pull it from a registry
    assert base.startswith('localhost/'), base
