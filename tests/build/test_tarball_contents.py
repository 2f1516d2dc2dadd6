# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What `ansible-galaxy collection build` puts in the tarball: exactly the allowed set, nothing missing.

Run by scripts/test's build layer. The tarball is built here, from this tree, into a temporary directory
and listed. The allowed set:

- the trees plugins/, roles/, playbooks/, docs/ (less docs/benchmark/: the measurements' data and plots
  stay in the repository), meta/ and files/ (the bundled daemon the persistenced action plugin reads
  from the installed collection at run time);
- README.md, LICENSE (or COPYING), CHANGELOG.rst when the tree has one, and antsibull-changelog's
  changelogs/changelog.yaml and changelogs/config.yaml, never the fragments (folded into changelog.yaml
  at each release) nor its plugin cache;
- MANIFEST.json and FILES.json, which ansible-galaxy writes;
- never a dotfile or dot directory, a __pycache__ or compiled Python, at any depth.

Required: every file of those trees that git lists (tracked, or new and not ignored) must be in it, with
the files the collection reads at run time named besides.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess
import sys
import tarfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SHIPPED_TREES = ('plugins', 'roles', 'playbooks', 'docs', 'meta', 'files')
NOT_SHIPPED = ('docs/benchmark',)
SHIPPED_FILES = ('MANIFEST.json', 'FILES.json', 'README.md', 'LICENSE', 'COPYING', 'CHANGELOG.rst',
                 'changelogs/changelog.yaml', 'changelogs/config.yaml')
SHIPPED_DIRS = ('changelogs',)  # the directory entry alone: only the two files above under it

# Named besides git's list: what ansible-galaxy, ansible-test and the plugins need from an installed copy.
REQUIRED = (
    'MANIFEST.json', 'FILES.json', 'README.md', 'LICENSE', 'meta/runtime.yml',
    'changelogs/changelog.yaml', 'changelogs/config.yaml',
    'plugins/modules/gpu_health.py',
    'files/gpufleet-persistenced',               # plugins/plugin_utils/_bundled.py
    'roles/gpu_node/meta/argument_specs.yml',    # plugins/plugin_utils/_role_options.py
    'meta/execution-environment.yml', 'meta/ee-requirements.txt', 'meta/ee-bindep.txt',  # ansible-builder
    'playbooks/site.yml', 'playbooks/drift.yml',
)


def allowed(name):
    """Whether a tarball member (its name, without a trailing slash) belongs to the allowed set."""
    parts = name.split('/')
    if any(part.startswith('.') for part in parts) or '__pycache__' in parts or name.endswith(('.pyc', '.pyo')):
        return False
    if name in SHIPPED_FILES or name in SHIPPED_DIRS:
        return True
    if any(name == tree or name.startswith(tree + '/') for tree in NOT_SHIPPED):
        return False
    return parts[0] in SHIPPED_TREES


def outside(names):
    """The members outside the allowed set, each folded into its first ancestor outside it: {root: [members]}."""
    found = {}
    for name in names:
        if allowed(name):
            continue
        parts = name.split('/')
        root = next('/'.join(parts[:i]) for i in range(1, len(parts) + 1) if not allowed('/'.join(parts[:i])))
        found.setdefault(root, []).append(name)
    return found


def project_files():
    """The files git lists under the shipped trees (tracked, or new and not ignored), that exist."""
    out = subprocess.run(['git', 'ls-files', '-z', '--cached', '--others', '--exclude-standard', '--'] + list(SHIPPED_TREES),
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True).stdout
    names = [name for name in out.decode('utf-8', 'surrogateescape').split('\0') if name]
    return sorted(name for name in set(names) if allowed(name) and os.path.isfile(os.path.join(ROOT, name)))


@pytest.fixture(scope='module')
def members(tmp_path_factory):
    """{name: TarInfo} of the tarball built from this tree."""
    out = tmp_path_factory.mktemp('build')
    # ansible-galaxy of the ansible-core this test runs with
    proc = subprocess.run([sys.executable, '-m', 'ansible.cli.galaxy', 'collection', 'build', '--output-path', str(out), ROOT],
                          cwd=str(out), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    assert proc.returncode == 0, 'ansible-galaxy collection build failed:\n%s' % proc.stdout
    [tarball] = out.glob('gpufleet-nvidia-*.tar.gz')
    with tarfile.open(str(tarball)) as handle:
        found = dict((info.name.rstrip('/'), info) for info in handle.getmembers())
    sys.stdout.write('%s: %d KiB, %d entries\n' % (tarball.name, tarball.stat().st_size // 1024, len(found)))
    return found


def test_allowed_set_rule():
    # the rule itself, on names the tree has or may grow
    for name in ('plugins/modules/gpu_health.py', 'docs/security.md', 'docs/examples/x.yml', 'docs/benchmarking.md',
                 'files/gpufleet-persistenced', 'meta/runtime.yml', 'roles/gpu_node/templates/a.j2', 'changelogs',
                 'changelogs/changelog.yaml', 'CHANGELOG.rst', 'MANIFEST.json', 'LICENSE'):
        assert allowed(name), name
    for name in ('docs/benchmark', 'docs/benchmark/fleet.png', 'changelogs/fragments', 'changelogs/fragments/a.yml',
                 'changelogs/.plugin-cache.yaml', 'molecule/default/molecule.yml', 'tests/unit/conftest.py', 'scripts',
                 'requirements/dev.txt', '.hypothesis/constants/x', 'gpufleet-drift.json', 'galaxy.yml',
                 'plugins/modules/__pycache__/x.cpython-312.pyc', 'plugins/x.pyc', 'roles/gpu_node/.keep', '.gitignore'):
        assert not allowed(name), name
    assert outside(['docs', 'docs/benchmark', 'docs/benchmark/a.png', 'tests', 'tests/unit', 'tests/unit/b.py']) == {
        'docs/benchmark': ['docs/benchmark', 'docs/benchmark/a.png'],
        'tests': ['tests', 'tests/unit', 'tests/unit/b.py']}


def test_tarball_ships_nothing_outside_the_allowed_set(members):
    found = outside(members)
    lines = []
    for root, names in sorted(found.items()):
        inside = sorted(name for name in names if name != root)
        lines.append(root + ('/ (%d entries under it: %s)' % (len(inside), ', '.join(inside[:3]) + (', ...' if len(inside) > 3 else ''))
                             if inside else ''))
    if found:
        pytest.fail('the tarball ships %d members outside the allowed set:\n  %s' % (
            sum(len(names) for names in found.values()), '\n  '.join(lines)), pytrace=False)


def test_tarball_ships_every_required_member(members):
    required = set(REQUIRED) | set(project_files())
    if os.path.isfile(os.path.join(ROOT, 'CHANGELOG.rst')):
        required.add('CHANGELOG.rst')
    missing = sorted(name for name in required if name not in members or not members[name].isfile())
    if missing:
        pytest.fail('the tarball lacks %d required files:\n  %s' % (len(missing), '\n  '.join(missing)), pytrace=False)
    # the bundled daemon is deployed from these bytes: the same as the tree's
    assert members['files/gpufleet-persistenced'].size == os.path.getsize(os.path.join(ROOT, 'files', 'gpufleet-persistenced'))
