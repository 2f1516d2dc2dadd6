# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_node validates its inner roles' options itself: its spec must hold every one of them, unchanged."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import subprocess
import sys
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader

import pytest
import yaml

from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import registry
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import _role_options, _role_table

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The roles gpu_node imports, in its order (the toolkit's packages before any runtime registration).
INNER = ('persistenced', 'gpu_persistence', 'container_toolkit', 'container_runtime')


def load(role, entry='main'):
    with open(os.path.join(ROOT, 'roles', role, 'meta', 'argument_specs.yml')) as handle:
        return yaml.safe_load(handle)['argument_specs'][entry]


def generator():
    loader = SourceFileLoader('sync_roles', os.path.join(ROOT, 'scripts', 'sync-roles'))
    module = module_from_spec(spec_from_loader('sync_roles', loader))
    loader.exec_module(module)
    return module


def test_the_generated_files_are_up_to_date():
    module = generator()
    files = module.planned()
    assert sorted(files) == sorted([
        'docs/role-variables.md', 'plugins/module_utils/concerns/registry.py',
        'plugins/plugin_utils/_role_table.py', 'roles/gpu_node/defaults/main.yml',
        'roles/gpu_node/meta/argument_specs.yml'] + ['roles/%s/%s' % (role, name) for role in INNER
                                                     for name in ('defaults/main.yml', 'meta/argument_specs.yml')])
    assert module.stale(files) == [], 'run .venv/bin/python scripts/sync-roles'
    # gpu_node's two entry points take the same options: its own, then every inner role's
    specs = yaml.safe_load(files['roles/gpu_node/meta/argument_specs.yml'])['argument_specs']
    assert sorted(specs) == ['evaluate', 'main'] and specs['main']['options'] == specs['evaluate']['options']
    names = list(specs['main']['options'])
    assert names[:len(module.OWN)] == list(module.OWN)


def test_the_table_knows_every_option_of_every_module():
    # the controller's table is every concern's declaration, in the declared order, with its module's options
    assert [declared['name'] for declared in _role_table.DECLARED] == list(registry.ORDER)
    for declared in _role_table.DECLARED:
        concern = registry.CONCERNS[declared['name']]
        assert declared['options'] == tuple(concern.spec) and declared['module'] == concern.module
        assert dict(declared, options=None) == dict(concern.declaration, options=None)  # the file's literal itself
        given = [row[1] for row in declared['variables']]
        # every option once: given by a role variable, or kept from the roles
        assert sorted(given + list(declared['module_only'])) == sorted(declared['options']), declared['name']


def module_options(module):
    return generator().module_doc(module)


def test_each_role_variable_has_its_options_type():
    # a role variable is checked by the role's spec as its modules check the option: the same type and elements,
    # and the choices every engine sharing it has (container_runtime_apply's reload is dockerd's)
    specs = {}
    for role in INNER + ('gpu_node',):
        specs.update(load(role)['options'])
    given = {}
    for concern, rows in _role_options.OPTIONS.items():
        docs = module_options(registry.CONCERNS[concern].module)
        for option, variable, unused in rows:
            given.setdefault(variable, []).append(docs[option])
    for variable, docs in given.items():
        for doc in docs:
            assert (specs[variable].get('type'), specs[variable].get('elements')) == (doc.get('type'), doc.get('elements')), variable
        choices = set()
        for doc in docs:
            choices.update(doc.get('choices') or ())
        assert set(specs[variable].get('choices') or ()) == choices, variable
    assert len(given) > 60 and sum(len(docs) > 1 for docs in given.values()) >= 10


def test_a_role_default_of_null_is_the_modules_default():
    # null leaves the option out (SET), so the module's default applies: a role default may be null only where that
    # is what the role's documentation says its null means (each engine's own runtime path), or the module's own
    defaults = {}
    for role in INNER + ('gpu_node',):
        with open(os.path.join(ROOT, 'roles', role, 'defaults', 'main.yml')) as handle:
            defaults.update(yaml.safe_load(handle))
    for concern, rows in _role_options.OPTIONS.items():
        spec = registry.CONCERNS[concern].spec
        for option, variable, when in rows:
            if defaults[variable] is None and spec[option].get('default') is not None:
                assert (option, when) == ('runtime_path', _role_options.SET), (concern, option)


@pytest.fixture(scope='module')
def added(tmp_path_factory):
    """A copy of the collection's files where crio_runtime got two new options, ``frobnicate`` and
    ``frobnicate_level``, in its documentation, its argument spec and its declaration (a row each), after
    scripts/sync-roles ran there; and what the script said before the declaration had them."""
    top = tmp_path_factory.mktemp('sync') / 'tree'
    for folder in ('plugins', 'roles', 'scripts', 'docs'):
        shutil.copytree(os.path.join(ROOT, folder), str(top / folder), symlinks=True)
    module = top / 'plugins' / 'modules' / 'crio_runtime.py'
    text = module.read_text()
    assert '\noptions:\n' in text
    module.write_text(text.replace('\noptions:\n', '\noptions:\n  frobnicate:\n    description: Frobnicate the drop-in.\n'
                                   '    type: list\n    elements: str\n    choices: [a, b]\n    default: [a]\n'
                                   '  frobnicate_level:\n    description: How much.\n    type: int\n    default: 3\n', 1))
    spec = top / 'plugins' / 'module_utils' / 'crio' / 'config.py'
    text = spec.read_text()
    assert 'SPEC = dict(\n' in text
    spec.write_text(text.replace('SPEC = dict(\n', "SPEC = dict(\n    frobnicate=dict(type='list', elements='str', "
                                 "choices=['a', 'b'], default=['a']),\n    frobnicate_level=dict(type='int', default=3),\n", 1))
    undeclared = subprocess.run([sys.executable, str(top / 'scripts' / 'sync-roles')], check=False,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    declaration = top / 'plugins' / 'module_utils' / 'concerns' / 'crio.py'
    text = declaration.read_text()
    assert "        ('container_runtime_cdi', 'cdi'),\n" in text
    declaration.write_text(text.replace("        ('container_runtime_cdi', 'cdi'),\n", "        ('container_runtime_cdi', 'cdi'),\n"
                                        "        ('container_runtime_frobnicate', 'frobnicate'),\n"
                                        "        ('container_runtime_frobnicate_level', 'frobnicate_level'),\n", 1))
    run = subprocess.run([sys.executable, str(top / 'scripts' / 'sync-roles')], check=False, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, universal_newlines=True)
    assert run.returncode == 0, run.stdout
    again = subprocess.run([sys.executable, str(top / 'scripts' / 'sync-roles'), '--check'], check=False, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, universal_newlines=True)
    return top, run.stdout, again, undeclared


def test_an_option_no_declaration_gives_is_refused_naming_the_file(added):
    # no naming rule: an option reaches a role only through a row of its concern's declaration, or is module_only
    undeclared = added[3]
    assert undeclared.returncode != 0
    assert ("plugins/module_utils/concerns/crio.py: DECLARATION: the options ['frobnicate', 'frobnicate_level'] are "
            "neither given by a role variable (variables) nor module_only") in undeclared.stdout


def test_an_option_added_to_a_module_reaches_its_role(added):
    top, printed, again, unused_undeclared = added
    # the files the script wrote: the controller's table, the role's spec and default, gpu_node's spec, the table
    # for people (hand-edited: the module's documentation, its argument spec, its declaration's row, and the code
    # that uses the option)
    assert sorted(printed.split()) == sorted(['wrote'] * 5 + [
        'plugins/plugin_utils/_role_table.py', 'roles/container_runtime/meta/argument_specs.yml',
        'roles/container_runtime/defaults/main.yml', 'roles/gpu_node/meta/argument_specs.yml',
        'docs/role-variables.md'])
    assert again.returncode == 0 and again.stdout == ''
    with open(str(top / 'roles' / 'container_runtime' / 'meta' / 'argument_specs.yml')) as handle:
        entry = yaml.safe_load(handle)['argument_specs']['main']['options']['container_runtime_frobnicate']
    assert entry == {'description': ['Frobnicate the drop-in.', "The role passes it as M(gpufleet.nvidia.crio_runtime)'s "
                                     'O(gpufleet.nvidia.crio_runtime#module:frobnicate).'],
                     'type': 'list', 'elements': 'str', 'choices': ['a', 'b'], 'default': ['a']}
    with open(str(top / 'roles' / 'container_runtime' / 'defaults' / 'main.yml')) as handle:
        text = handle.read()
    assert yaml.safe_load(text)['container_runtime_frobnicate'] == ['a']
    # each default on one line of its own: a list in flow style, a scalar plainly
    assert text.endswith('container_runtime_frobnicate: [a]\ncontainer_runtime_frobnicate_level: 3\n'), text[-200:]
    with open(str(top / 'roles' / 'gpu_node' / 'meta' / 'argument_specs.yml')) as handle:
        specs = yaml.safe_load(handle)['argument_specs']
    assert specs['main']['options']['container_runtime_frobnicate'] == entry
    assert specs['evaluate']['options']['container_runtime_frobnicate'] == entry
    # and the table of the copy maps it: the role variable to crio's new option, for crio only
    probe = ('import sys; sys.path.insert(0, sys.argv[1]); '
             'from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import _role_options as r; '
             'print(sorted((c, o, v, w) for c, rows in r.OPTIONS.items() for o, v, w in rows if o == "frobnicate"))')
    link = top.parent / 'collections' / 'ansible_collections' / 'gpufleet'
    link.mkdir(parents=True)
    (link / 'nvidia').symlink_to(top)
    out = subprocess.run([sys.executable, '-c', probe, str(top.parent / 'collections')], check=False, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, universal_newlines=True, env=dict(os.environ, PYTHONPATH=''))
    assert out.stdout.strip() == "[('crio', 'frobnicate', 'container_runtime_frobnicate', 'set')]", out.stdout


def test_every_inner_option_is_validated_by_gpu_node():
    node = load('gpu_node')['options']
    for role in INNER:
        for name, option in load(role)['options'].items():
            assert node.get(name) == option, '%s.%s differs in gpu_node; run .venv/bin/python scripts/sync-roles' % (role, name)
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


# The inner roles' variables whose default is one of gpu_node's (one policy for every concern), and its value alone.
FOLLOWS = {'persistenced_disruption': ('gpu_node_disruption', 'defer'),
           'container_runtime_disruption': ('gpu_node_disruption', 'defer')}


def test_each_role_defaults_every_option_its_spec_documents():
    for role in INNER + ('gpu_node',):
        with open(os.path.join(ROOT, 'roles', role, 'defaults', 'main.yml')) as handle:
            defaults = yaml.safe_load(handle)
        options = load(role)['options']
        own = options if role != 'gpu_node' else dict((k, v) for k, v in options.items() if k.startswith('gpu_node_'))
        assert sorted(defaults) == sorted(own), role
        for name, value in defaults.items():
            # an inner role's option that follows one of gpu_node's by default documents that option's default
            followed = FOLLOWS.get(name)
            if followed:
                assert value == "{{ %s | default('%s') }}" % followed and options[name].get('default') == followed[1]
                continue
            assert options[name].get('default') == value, '%s: %s' % (role, name)


def test_a_copied_description_refers_to_the_role_or_to_the_module_by_full_name():
    # A role's spec is rendered on its own page: a bare O(name) or RV(name) copied from a module would name an
    # option of the role that does not exist (antsibull-docs' linter and the docs layer fail on it).
    refer = generator().role_references
    variable_of = {('gpu_health', 'textfile_directory'): 'gpu_node_health_textfile_directory'}
    assert refer('Create O(textfile_directory) first.', 'gpu_health', variable_of) == \
        'Create O(gpu_node_health_textfile_directory) first.'
    assert refer('With O(textfile_directory=/x) or O(metrics.path).', 'gpu_health', variable_of) == \
        'With O(gpu_node_health_textfile_directory=/x) or O(gpufleet.nvidia.gpu_health#module:metrics.path).'
    assert refer('See RV(verdict) and RV(action=deferred).', 'gpu_health', {}) == \
        'See RV(gpufleet.nvidia.gpu_health#module:verdict) and RV(gpufleet.nvidia.gpu_health#module:action=deferred).'
    full = 'M(gpufleet.nvidia.cdi_spec)\'s O(gpufleet.nvidia.cdi_spec#module:state), V(textfile_directory)'
    assert refer(full, 'gpu_health', variable_of) == full
