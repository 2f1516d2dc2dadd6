# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""ansible-builder makes an execution environment build context from docs/execution-environment.yml and the tarball.

Run by scripts/test's build layer with GPUFLEET_EE_TARBALL set to the tarball it built (else the
tarball is built here). Building the image needs a base image, which this machine cannot pull:
instead the context's galaxy stage command and its builder stage introspection (the scripts
ansible-builder put in the context) run here, on the tarball, as the image build would run them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import filecmp
import os
import shutil
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REGISTRIES = ('quay.io', 'registry.redhat.io', 'docker.io', 'ghcr.io', 'gcr.io', 'nvcr.io')


def run(cmd, cwd, collections_path=None):
    env = dict(os.environ, ANSIBLE_GALAXY_DISABLE_GPG_VERIFY='1')
    env.pop('PYTHONPATH', None)
    # like the image build: only the collections path being filled, never the test tree's copy
    env.pop('ANSIBLE_COLLECTIONS_PATH', None)
    if collections_path:
        env['ANSIBLE_COLLECTIONS_PATH'] = collections_path
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, check=False)
    assert proc.returncode == 0, '%s failed (rc=%d):\n%s' % (' '.join(cmd), proc.returncode, proc.stdout)
    return proc.stdout


def galaxy_bin():
    path = shutil.which('ansible-galaxy') or os.path.join(os.path.dirname(sys.executable), 'ansible-galaxy')
    assert os.path.isfile(path), 'ansible-galaxy not found (run through scripts/test, which puts .venv/bin on PATH)'
    return path


@pytest.fixture(scope='module')
def tarball(tmp_path_factory):
    given = os.environ.get('GPUFLEET_EE_TARBALL')
    if given:
        return given
    out = tmp_path_factory.mktemp('tarball')
    run([galaxy_bin(), 'collection', 'build', '--output-path', str(out), ROOT], cwd=str(out))
    return str(next(out.glob('gpufleet-nvidia-*.tar.gz')))


@pytest.fixture(scope='module')
def context(tarball, tmp_path_factory):
    """The build context, made as docs/awx.md says: the definition and the tarball in one folder."""
    work = tmp_path_factory.mktemp('ee')
    shutil.copy(os.path.join(ROOT, 'docs', 'execution-environment.yml'), str(work))
    shutil.copy(tarball, str(work))
    run([sys.executable, '-m', 'ansible_builder', 'create', '--output-filename', 'Containerfile',
         '-f', 'execution-environment.yml', '-c', 'context'], cwd=str(work))
    return work / 'context'


@pytest.fixture(scope='module')
def installed(context, tmp_path_factory):
    """The collection tree the galaxy stage makes (its command, in its working directory /build = _build)."""
    dest = tmp_path_factory.mktemp('collections')
    out = run([galaxy_bin(), 'collection', 'install', '--offline', '-r', 'requirements.yml', '--collections-path', str(dest)],
              cwd=str(context / '_build'), collections_path=str(dest))
    assert 'gpufleet.nvidia:' in out and 'was installed successfully' in out, out
    return dest


def introspect(context, collections):
    """The builder stage's introspection, with the script ansible-builder put in the context."""
    out = run([sys.executable, str(context / '_build' / 'scripts' / 'introspect.py'), 'introspect', str(collections)],
              cwd=str(context))
    return yaml.safe_load(out[out.index('---'):])


def test_containerfile_takes_the_base_image_as_a_build_argument(context):
    text = (context / 'Containerfile').read_text()
    assert 'ARG EE_BASE_IMAGE="localhost/gpufleet-ee-base:latest"' in text.splitlines()
    assert 'FROM $EE_BASE_IMAGE AS base' in text
    assert not [r for r in REGISTRIES if r in text], 'the Containerfile names a registry'
    assert 'ARG ANSIBLE_INSTALL_REFS="ansible-core>=2.18.0 ansible-runner"' in text
    for step in ('ansible-galaxy collection install $ANSIBLE_GALAXY_CLI_COLLECTION_OPTS -r requirements.yml',
                 '/output/scripts/introspect.py introspect', '/output/scripts/check_ansible $PYCMD'):
        assert step in text, step


def test_context_holds_the_tarball_and_the_requirement_naming_it(context, tarball):
    copied = context / '_build' / 'collections' / os.path.basename(tarball)
    assert copied.is_file() and filecmp.cmp(str(copied), tarball, shallow=False)
    requirements = yaml.safe_load((context / '_build' / 'requirements.yml').read_text())
    assert requirements == {'collections': [{'name': 'collections/' + os.path.basename(tarball), 'type': 'file'}]}
    scripts = sorted(p.name for p in (context / '_build' / 'scripts').iterdir())
    assert {'assemble', 'check_ansible', 'check_galaxy', 'install-from-bindep', 'introspect.py'} <= set(scripts)


def test_galaxy_stage_installs_the_collection_with_its_ee_metadata(installed):
    tree = installed / 'ansible_collections' / 'gpufleet' / 'nvidia'
    manifest = yaml.safe_load((tree / 'MANIFEST.json').read_text())
    with open(os.path.join(ROOT, 'galaxy.yml')) as handle:
        assert manifest['collection_info']['version'] == yaml.safe_load(handle)['version']
    meta = yaml.safe_load((tree / 'meta' / 'execution-environment.yml').read_text())
    for relpath in meta['dependencies'].values():
        assert (tree / relpath).is_file(), '%s is not in the tarball (build_ignore?)' % relpath


def test_builder_stage_gathers_no_requirements_from_the_collection(context, installed):
    # nothing beyond ansible-core and ansible-runner goes into the image for this collection
    assert introspect(context, installed) == {'python': [], 'system': []}


def test_builder_stage_reads_the_collection_metadata(context, installed, tmp_path):
    # control: a line added to the files meta/execution-environment.yml names does reach the image
    copy = tmp_path / 'collections'
    shutil.copytree(str(installed), str(copy))
    meta = copy / 'ansible_collections' / 'gpufleet' / 'nvidia' / 'meta'
    with (meta / 'ee-requirements.txt').open('a') as handle:
        handle.write('probe-package==1.0\n')
    with (meta / 'ee-bindep.txt').open('a') as handle:
        handle.write('probe-tool [platform:rpm]\n')
    found = introspect(context, copy)
    assert found['python'] == ['probe-package==1.0  # from collection gpufleet.nvidia']
    assert found['system'] == ['probe-tool [platform:rpm]  # from collection gpufleet.nvidia']
