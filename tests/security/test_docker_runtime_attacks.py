"""docker_runtime (root) against a local user who can write where daemon.json lives.

dockerd runs as root and obeys daemon.json, and the module writes it, its
temporary file and its backups as root. Where the directory (or the file) is
misconfigured so that another user can change it, that user must gain
nothing: the module refuses, naming the path and what to fix, and touches no
file. Each attack is made by a real unprivileged process (uid 4242, no
groups, no capabilities); races run until the deadline, the module running
for real (``python -m ...docker_runtime args.json``) again and again while
the attacker plants symbolic and hard links.

On the code before this hardening every test here failed: the module writes through
the planted link (the root-only "secret" becomes daemon.json), keeps the
attacker as the file's owner, creates the directory through the attacker's
link, and never refuses.
"""

import contextlib
import json
import os
import stat
import subprocess
import sys

import pytest

from conftest import COLLECTIONS

MODULE = 'ansible_collections.gpufleet.nvidia.plugins.modules.docker_runtime'
SECRET = '{"root-only": "secret"}\n'
ORIGINAL = '{\n  "log-driver": "local"\n}\n'


def run_module(workdir, **args):
    """Run the module as root, for real; returns its JSON result (or fails on anything else, e.g. a traceback)."""
    args.setdefault('apply', 'none')
    args.setdefault('docker_host', 'unix://%s/no-docker.sock' % workdir)
    args_file = os.path.join(workdir, 'args.json')
    with open(args_file, 'w') as handle:
        json.dump({'ANSIBLE_MODULE_ARGS': args}, handle)
    env = dict(os.environ, PYTHONPATH=COLLECTIONS, PYTHONDONTWRITEBYTECODE='1')
    proc = subprocess.run([sys.executable, '-m', MODULE, args_file], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=env, timeout=120)
    assert 'Traceback' not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


# The attacker's interpreter: the system one. (The test's own interpreter may live under /root, which uid 4242
# cannot read: conftest's Attacker.python would then die at once and attack nothing.)
ATTACKER_PYTHON = '/usr/bin/python3'


@contextlib.contextmanager
def attacking(attacker, code, *args):
    """Run ``code`` as ``attacker`` for the duration of the block; it must be attacking all along."""
    proc = attacker.popen([ATTACKER_PYTHON, '-c', code] + [str(arg) for arg in args], stderr=subprocess.PIPE)
    try:
        try:
            proc.wait(0.3)
            raise AssertionError('the attacker died at once: %s' % proc.stderr.read().decode())
        except subprocess.TimeoutExpired:
            pass
        yield proc
        assert proc.poll() is None, 'the attacker stopped: %s' % proc.stderr.read().decode()
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()


def make_secret(sandbox):
    """A root-only file (0600) the attacker wants to overwrite or expose."""
    path = os.path.join(sandbox, 'secret')
    with open(path, 'w') as handle:
        handle.write(SECRET)
    os.chmod(path, 0o600)
    return path


def assert_intact(secret):
    st = os.lstat(secret)
    assert stat.S_ISREG(st.st_mode) and (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o600), \
        'the root-only file was changed: uid %d mode %o' % (st.st_uid, stat.S_IMODE(st.st_mode))
    with open(secret) as handle:
        assert handle.read() == SECRET, 'the root-only file was overwritten'


def open_directory(sandbox, how, stranger):
    """``sandbox/docker``, misconfigured so that the stranger can write it."""
    directory = os.path.join(sandbox, 'docker')
    os.mkdir(directory)
    if how == 'world-writable':
        os.chmod(directory, 0o777)
    elif how == 'sticky':
        os.chmod(directory, 0o1777)
    elif how == 'owned':
        os.chown(directory, stranger.uid, stranger.gid)
    elif how == 'group-writable':
        os.chown(directory, 0, stranger.gid)
        os.chmod(directory, 0o775)
    return directory


def assert_refused(result, directory):
    assert result.get('failed'), 'the module wrote in a directory another user can write: %s' % result
    assert 'refusing to use the directory %s' % directory in result['msg'], result['msg']


# An attacker that, until killed, replaces daemon.json, every temporary file and
# every backup in the directory with a link to the target (symbolic or hard).
PLANTER = r'''
import os, sys, time
directory, target, kind = sys.argv[1], sys.argv[2], sys.argv[3]
link = os.symlink if kind == 'symlink' else os.link
while True:
    names = ['daemon.json'] + [n for n in os.listdir(directory) if n != 'daemon.json' and
                               (n.startswith('.daemon.json.') or n.startswith('daemon.json.'))]
    for name in names:
        path = os.path.join(directory, name)
        try:
            if os.path.islink(path) or (kind == 'hardlink' and os.path.exists(path) and
                                        os.stat(path).st_ino == os.stat(target).st_ino):
                continue
            os.rename(path, path + '.moved') if os.path.exists(path) else None
        except OSError:
            pass
        try:
            link(target, path)
        except OSError:
            pass
'''


def _race(sandbox, stranger, deadline, how, kind, target):
    directory = open_directory(sandbox, how, stranger)
    path = os.path.join(directory, 'daemon.json')
    with open(path, 'w') as handle:
        handle.write(ORIGINAL)
    with attacking(stranger, PLANTER, directory, target, kind):
        for index in deadline():
            result = run_module(sandbox, path=path, runtime_path='/opt/nvidia/%d' % index, backup=True)
            assert_intact(os.path.join(sandbox, 'secret'))
            assert_refused(result, directory)


@pytest.mark.parametrize('how', ['world-writable', 'sticky', 'owned', 'group-writable'])
def test_symlinks_planted_during_writes_in_a_writable_directory(sandbox, stranger, deadline, how):
    """The stranger swaps daemon.json, the temp file and backups for links to a root-only file, over and over."""
    secret = make_secret(sandbox)
    _race(sandbox, stranger, deadline, how, 'symlink', secret)


def test_hard_links_planted_during_writes(sandbox, stranger, deadline):
    """Hard links: the kernel lets the stranger link only files it may write, so its own file becomes daemon.json.

    The module must not keep the stranger's file as dockerd's configuration (the old code copied its owner to the
    new file: the stranger owned dockerd's configuration, and so root).
    """
    make_secret(sandbox)
    own = os.path.join(sandbox, 'stranger-file')
    with open(own, 'w') as handle:
        handle.write('{"runtimes": {"evil": {"path": "/tmp/evil"}}}\n')
    os.chown(own, stranger.uid, stranger.gid)
    _race(sandbox, stranger, deadline, 'world-writable', 'hardlink', own)
    directory = os.path.join(sandbox, 'docker')
    for name in os.listdir(directory):
        with open(os.path.join(directory, name)) as handle:
            assert '/opt/nvidia/' not in handle.read(), 'root wrote dockerd\'s configuration into %s' % name


def test_symlink_planted_before_the_run(sandbox, stranger):
    """daemon.json is already the stranger's link to a root-only file: nothing is written through it."""
    secret = make_secret(sandbox)
    directory = open_directory(sandbox, 'world-writable', stranger)
    path = os.path.join(directory, 'daemon.json')
    assert stranger.run(['ln', '-s', secret, path]).returncode == 0 and os.path.islink(path)
    result = run_module(sandbox, path=path)
    assert_intact(secret)
    assert_refused(result, directory)


def test_file_owned_or_writable_by_the_stranger(sandbox, stranger):
    """A daemon.json another user can write is theirs to fill with any runtime: refused, not adopted."""
    directory = os.path.join(sandbox, 'docker')
    os.mkdir(directory)
    path = os.path.join(directory, 'daemon.json')
    for owner, mode in ((stranger.uid, 0o644), (0, 0o666), (0, 0o664)):
        with open(path, 'w') as handle:
            handle.write(ORIGINAL)
        os.chown(path, owner, stranger.gid if mode == 0o664 else 0)
        os.chmod(path, mode)
        if owner == 0:
            assert stranger.run([ATTACKER_PYTHON, '-c', 'open(__import__("sys").argv[1], "a").write(" ")',
                                 path]).returncode == 0
        result = run_module(sandbox, path=path)
        assert result.get('failed'), 'a daemon.json writable by uid %d was used: %s' % (stranger.uid, result)
        assert 'refusing to use the file %s' % path in result['msg'], result['msg']
        os.unlink(path)


# The stranger races root to the missing directory: it keeps making it a link to a root-only directory.
DIRECTORY_PLANTER = r'''
import os, sys
parent, target = sys.argv[1], sys.argv[2]
while True:
    for name in os.listdir(parent):
        path = os.path.join(parent, name)
        if name.startswith('docker-') and not os.path.islink(path):
            try:
                os.rename(path, path + '.moved')
            except OSError:
                pass
    for index in range(int(open(os.path.join(parent, '.next')).read() or 0), 10 ** 6):
        try:
            os.symlink(target, os.path.join(parent, 'docker-%d' % index))
            break
        except OSError:
            continue
'''


def test_missing_directory_created_under_a_writable_parent(sandbox, stranger, deadline):
    """Root must not create (or chmod) its directory where the stranger can put a link first."""
    parent = os.path.join(sandbox, 'etc')
    os.mkdir(parent, 0o777)
    os.chmod(parent, 0o777)
    with open(os.path.join(parent, '.next'), 'w') as handle:
        handle.write('0')
    private = os.path.join(sandbox, 'private')
    os.mkdir(private, 0o700)
    with attacking(stranger, DIRECTORY_PLANTER, parent, private):
        for index in deadline():
            with open(os.path.join(sandbox, '.next'), 'w') as handle:  # the planter reads it: renamed in whole
                handle.write(str(index))
            os.rename(os.path.join(sandbox, '.next'), os.path.join(parent, '.next'))
            result = run_module(sandbox, path=os.path.join(parent, 'docker-%d' % index, 'daemon.json'))
            assert stat.S_IMODE(os.stat(private).st_mode) == 0o700 and os.listdir(private) == [], \
                'root wrote through the stranger\'s link: %s' % os.listdir(private)
            assert result.get('failed') and 'refusing to use the directory %s' % parent in result['msg'], result
