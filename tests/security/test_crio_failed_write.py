# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""crio_runtime on a read-only or full /etc/crio: the error names the drop-in, and nothing is left behind.

CRI-O reads its drop-in directory whole, so the drop-in's temp file is made in a root-only sibling,
``/etc/crio/.crio.conf.d.gpufleet`` (``host.files.private_directory``), created when missing. On the code before this
fix a read-only /etc/crio failed naming that temp directory (``.crio.conf.d.gpufleet: cannot create the directory
for temp files``), not the drop-in the user asked about, and a full one failed naming the drop-in but left the temp
directory it had just created in /etc/crio. Now the message starts with the drop-in, and a temp directory the
failed run created (and that is still empty) is removed again (``host.files.temp_directory``).

The failures are real: each run is a child process in a private mount namespace (``unshare --mount``) where
``<sandbox>/etc/crio`` is a read-only bind mount of itself, or a 64 KiB tmpfs filled to the last block; nothing
outside the namespace changes. CRI-O's own process is not needed (``apply: none``; no crio runs).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap

import pytest

from conftest import COLLECTIONS

from ansible_collections.gpufleet.nvidia.plugins.module_utils.crio import config
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files as host_files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import HostFileError

TYPICAL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'unit', 'fixtures', 'crio',
                       'typical.crio.conf')
# An earlier run's drop-in (ours: the header) that this run replaces
OLD_DROP_IN = '%s\n[crio.runtime]\n' % config.HEADER[0]

# Runs inside a private mount namespace: makes /etc/crio fail (argv[2]), runs crio_runtime's converge once
# (argv[3]: the drop-in's text before, or '' for none), prints its result or error and what /etc/crio holds after.
DRIVER = textwrap.dedent(r'''
    import json, os, shutil, subprocess, sys
    sys.path.insert(0, sys.argv[1])
    kind, etc_crio, before, typical = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
    dropins = os.path.join(etc_crio, 'crio.conf.d')
    path = os.path.join(dropins, '99-nvidia.conf')

    def fill():
        shutil.copy(typical, os.path.join(etc_crio, 'crio.conf'))
        os.mkdir(dropins, 0o755)
        if before:
            with open(path, 'w') as handle:
                handle.write(before)

    if kind == 'full-tmpfs':
        subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=64k,mode=0755', 'tmpfs', etc_crio], check=True)
        fill()
        subprocess.run(['dd', 'if=/dev/zero', 'of=' + os.path.join(etc_crio, 'filler'), 'bs=4k'],
                       stderr=subprocess.DEVNULL)
    else:
        fill()
        if kind == 'read-only-after-a-run':  # an earlier run made the temp directory: it stays
            os.mkdir(os.path.join(etc_crio, '.crio.conf.d.gpufleet'), 0o700)
        subprocess.run(['mount', '--bind', etc_crio, etc_crio], check=True)
        subprocess.run(['mount', '-o', 'remount,bind,ro', etc_crio], check=True)

    from ansible_collections.gpufleet.nvidia.plugins.module_utils.crio import apply
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError

    class NoService(object):
        evidence = {}
        def pid(self): return None
        def processes(self): return []
        def flags(self): return []

    class Version(object):
        def version(self): return (1, 29, 1)

    request = apply.Request(path=path, config_path=os.path.join(etc_crio, 'crio.conf'), config_dir=dropins,
                            runtime_path='/bin/true', apply='none')
    try:
        result = apply.Converge(request, NoService(), Version(), find=lambda *a: (None, None, None)).run()
        outcome = {'failed': False, 'msg': result['msg']}
    except GpufleetError as exc:
        outcome = {'failed': True, 'msg': str(exc)}
    outcome['drop_in'] = None
    if os.path.exists(path):
        with open(path) as handle:
            outcome['drop_in'] = handle.read()
    outcome['etc_crio'] = sorted(os.listdir(etc_crio))
    outcome['dropins'] = sorted(os.listdir(dropins))
    print(json.dumps(outcome))
''')


def failed_run(sandbox, kind, before):
    etc_crio = os.path.join(sandbox, 'etc', 'crio')
    os.makedirs(etc_crio, 0o755)
    proc = subprocess.run(['unshare', '--mount', '--propagation', 'private', sys.executable, '-c', DRIVER,
                           COLLECTIONS, kind, etc_crio, before or '', TYPICAL],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    assert proc.returncode == 0 and 'Traceback' not in proc.stderr, proc.stdout + proc.stderr
    return etc_crio, json.loads(proc.stdout)


@pytest.mark.parametrize('before', [None, OLD_DROP_IN], ids=['new drop-in', 'drop-in replaced'])
@pytest.mark.parametrize('kind', ['read-only-bind-mount', 'read-only-after-a-run', 'full-tmpfs'])
def test_a_failed_write_names_the_drop_in_and_leaves_nothing(sandbox, kind, before):
    etc_crio, seen = failed_run(sandbox, kind, before)
    path = os.path.join(etc_crio, 'crio.conf.d', '99-nvidia.conf')
    assert seen['failed'], seen
    # the file the user asked about first, then why
    assert seen['msg'].startswith(path + ': cannot '), seen['msg']
    reason = 'No space left on device' if kind == 'full-tmpfs' else 'Read-only file system'
    assert reason in seen['msg'], seen['msg']
    # the drop-in as it was, no temp file among the drop-ins, and no temp directory this run made left in /etc/crio
    assert seen['drop_in'] == before
    assert seen['dropins'] == (['99-nvidia.conf'] if before else [])
    expected = {'read-only-bind-mount': [], 'read-only-after-a-run': ['.crio.conf.d.gpufleet'],
                'full-tmpfs': ['filler']}[kind]
    assert seen['etc_crio'] == sorted(['crio.conf', 'crio.conf.d'] + expected), \
        'left behind in /etc/crio: %s' % seen['etc_crio']


# ---------------------------------------------------------------- the shared mechanism, host_files.temp_directory


@pytest.fixture
def etc_crio(sandbox):
    directory = os.path.join(sandbox, 'crio')
    os.makedirs(os.path.join(directory, 'crio.conf.d'), 0o755)
    return directory


def private(etc_crio):
    return os.path.join(etc_crio, '.crio.conf.d' + host_files.PRIVATE_SUFFIX)


def test_a_temp_directory_this_run_made_is_removed_when_the_block_fails(etc_crio):
    dropins = os.path.join(etc_crio, 'crio.conf.d')
    path = os.path.join(dropins, '99-nvidia.conf')
    with pytest.raises(HostFileError):
        with host_files.temp_directory(dropins, path) as temp:
            assert temp == private(etc_crio)
            st = os.lstat(temp)
            assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o700)
            raise HostFileError('%s: the write failed' % path)
    assert sorted(os.listdir(etc_crio)) == ['crio.conf.d']
    # after a good write it stays (the next write uses it)
    with host_files.temp_directory(dropins, path) as temp:
        pass
    assert os.path.isdir(temp)


def test_a_temp_directory_that_was_there_or_is_not_empty_is_kept(etc_crio):
    dropins = os.path.join(etc_crio, 'crio.conf.d')
    path = os.path.join(dropins, '99-nvidia.conf')
    os.mkdir(private(etc_crio), 0o700)
    with pytest.raises(HostFileError):
        with host_files.temp_directory(dropins, path):
            raise HostFileError('failed')
    assert os.path.isdir(private(etc_crio))  # not made by this run
    shutil.rmtree(private(etc_crio))
    with pytest.raises(HostFileError):
        with host_files.temp_directory(dropins, path) as temp:
            with open(os.path.join(temp, '.99-nvidia.conf.leftover.tmp'), 'w'):
                pass  # another run's temp file: never removed
            raise HostFileError('failed')
    assert os.listdir(private(etc_crio)) == ['.99-nvidia.conf.leftover.tmp']


def test_a_temp_directory_on_another_file_system_is_refused_naming_the_file_and_removed(etc_crio, monkeypatch):
    dropins = os.path.join(etc_crio, 'crio.conf.d')
    path = os.path.join(dropins, '99-nvidia.conf')
    real_stat = os.stat

    class Elsewhere(object):
        def __init__(self, st):
            self.st = st

        def __getattr__(self, name):
            return self.st.st_dev + 1 if name == 'st_dev' else getattr(self.st, name)

    monkeypatch.setattr(host_files.os, 'stat', lambda p, *a, **k: Elsewhere(real_stat(p)) if p == dropins
                        else real_stat(p, *a, **k))
    with pytest.raises(HostFileError) as exc:
        with host_files.temp_directory(dropins, path):
            pytest.fail('the block ran')
    assert str(exc.value).startswith(path + ': ') and 'another file system' in str(exc.value)
    assert sorted(os.listdir(etc_crio)) == ['crio.conf.d']
