"""docker_runtime (root) with bad input, real write failures and concurrent runs.

* Any daemon.json, however deep or large, gives ``failed`` naming the file,
  never a traceback (RecursionError, MemoryError), and the file is unchanged.
* Every write failure, made real: a read-only bind mount and a full tmpfs
  (inside a private mount namespace, ``unshare --mount``), ``chattr +i`` on the
  file and on its directory (ext4 here; the test says so if the file system
  refuses it), and a permission failure (root without CAP_DAC_OVERRIDE in a
  0555 directory). Each gives ``failed`` naming the file, the file
  byte-identical, and no temporary file or partial backup left.
* Runs that create the same missing directory at the same moment all succeed
  (no FileExistsError), looping until the deadline.

The module runs for real (``python -m ...docker_runtime args.json``). On the
code before this hardening every test here failed with a traceback in the module's
output (RecursionError, MemoryError, OSError, FileExistsError, or Ansible's
atomic_move exception).
"""

import json
import os
import resource
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import COLLECTIONS

MODULE = 'ansible_collections.gpufleet.nvidia.plugins.modules.docker_runtime'
ORIGINAL = b'{\n  "log-driver": "local",\n  "x-big": 123456789012345678901234567890\n}\n'


def module_command(workdir, **args):
    args.setdefault('apply', 'none')
    args.setdefault('docker_host', 'unix://%s/no-docker.sock' % workdir)
    args_file = os.path.join(workdir, 'args-%d.json' % len(os.listdir(workdir)))
    with open(args_file, 'w') as handle:
        json.dump({'ANSIBLE_MODULE_ARGS': args}, handle)
    return [sys.executable, '-m', MODULE, args_file]


def module_env():
    return dict(os.environ, PYTHONPATH=COLLECTIONS, PYTHONDONTWRITEBYTECODE='1')


def parse(proc):
    output = proc.stdout + proc.stderr
    assert 'Traceback' not in output, output
    return json.loads(proc.stdout)


def run_module(workdir, prefix=(), preexec_fn=None, **args):
    proc = subprocess.run(list(prefix) + module_command(workdir, **args), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=module_env(), timeout=120, preexec_fn=preexec_fn)
    return parse(proc)


def daemon_json(sandbox, content):
    """A root-owned 0755 ``<sandbox>/docker`` holding ``daemon.json`` with ``content``; returns (directory, path)."""
    directory = os.path.join(sandbox, 'docker')
    os.mkdir(directory, 0o755)
    path = os.path.join(directory, 'daemon.json')
    with open(path, 'wb') as handle:
        handle.write(content)
    return directory, path


def assert_failed_cleanly(result, path, directory, original, allowed=('daemon.json',)):
    assert result.get('failed'), result
    assert result['msg'].startswith(path + ':'), result['msg']
    with open(path, 'rb') as handle:
        assert handle.read() == original
    assert sorted(os.listdir(directory)) == sorted(allowed), 'left behind: %s' % os.listdir(directory)


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize('text', [b'[' * 100000, b'{"a":' * 100000 + b'1' + b'}' * 100000,
                                  b'{"runtimes": ' + b'{"x": ' * 5000 + b'{}' + b'}' * 5001],
                         ids=['100000-arrays', '100000-objects', 'deep-runtimes'])
def test_deep_json_is_failed_naming_the_file(sandbox, text):
    directory, path = daemon_json(sandbox, text)
    result = run_module(sandbox, path=path)
    assert_failed_cleanly(result, path, directory, text)
    assert 'nested deeper than' in result['msg']


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def test_huge_file_is_failed_naming_the_file(sandbox):
    """A 4 GiB daemon.json (sparse) on a host that gives the module 1 GiB of address space."""
    directory, path = daemon_json(sandbox, b'{"labels": ["')
    os.truncate(path, 4 << 30)
    before = os.stat(path)
    result = run_module(sandbox, preexec_fn=_limit_memory, path=path)
    assert result.get('failed') and result['msg'].startswith(path + ': the file is %d bytes' % (4 << 30)), result
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
    assert os.listdir(directory) == ['daemon.json']


# ---------------------------------------------------------------- write failures

# Runs inside a private mount namespace: sets the failure up, runs the module, reports what it left.
NAMESPACE_DRIVER = textwrap.dedent(r'''
    import json, os, subprocess, sys
    kind, directory, original, command = sys.argv[1], sys.argv[2], sys.argv[3].encode(), json.loads(sys.argv[4])
    path = os.path.join(directory, 'daemon.json')
    if kind == 'full-tmpfs':
        subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=64k,mode=0755', 'tmpfs', directory], check=True)
        with open(path, 'wb') as handle:
            handle.write(original)
        subprocess.run(['dd', 'if=/dev/zero', 'of=' + os.path.join(directory, 'filler'), 'bs=4k'],
                       stderr=subprocess.DEVNULL)
    elif kind == 'read-only-bind-mount':
        subprocess.run(['mount', '--bind', directory, directory], check=True)
        subprocess.run(['mount', '-o', 'remount,bind,ro', directory], check=True)
    proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with open(path, 'rb') as handle:
        content = handle.read().decode()
    print(json.dumps({'stdout': proc.stdout, 'stderr': proc.stderr, 'content': content,
                      'entries': sorted(os.listdir(directory))}))
''')


@pytest.mark.parametrize('backup', [False, True], ids=['write', 'backup'])
@pytest.mark.parametrize('kind', ['read-only-bind-mount', 'full-tmpfs'])
def test_write_failure_in_a_namespace(sandbox, kind, backup):
    directory, path = daemon_json(sandbox, ORIGINAL)
    command = module_command(sandbox, path=path, backup=backup)
    proc = subprocess.run(['unshare', '--mount', '--propagation', 'private', sys.executable, '-c', NAMESPACE_DRIVER,
                           kind, directory, ORIGINAL.decode(), json.dumps(command)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=module_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    result = parse(subprocess.CompletedProcess([], 0, seen['stdout'], seen['stderr']))
    assert result.get('failed') and result['msg'].startswith(path + ':'), result
    assert 'read-only' in result['msg'] if kind == 'read-only-bind-mount' else 'No space left' in result['msg']
    assert seen['content'].encode() == ORIGINAL
    assert seen['entries'] == (['daemon.json', 'filler'] if kind == 'full-tmpfs' else ['daemon.json'])


def _chattr(flag, path):
    proc = subprocess.run(['chattr', flag, path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.returncode == 0, 'this file system does not support chattr %s (%s): %s' % (flag, path, proc.stdout)


@pytest.mark.parametrize('target', ['file', 'directory'])
def test_immutable_file_or_directory(sandbox, target):
    directory, path = daemon_json(sandbox, ORIGINAL)
    immutable = path if target == 'file' else directory
    _chattr('+i', immutable)
    try:
        result = run_module(sandbox, path=path, backup=True)
    finally:
        _chattr('-i', immutable)
    assert_failed_cleanly(result, path, directory, ORIGINAL)
    assert 'Operation not permitted' in result['msg'] and 'chattr -i' in result['msg']


def test_permission_denied_to_root_without_dac_override(sandbox):
    directory, path = daemon_json(sandbox, ORIGINAL)
    os.chmod(directory, 0o555)
    caps = '-dac_override,-dac_read_search,-fowner'
    result = run_module(sandbox, prefix=['setpriv', '--inh-caps=' + caps, '--bounding-set=' + caps, '--'], path=path)
    assert_failed_cleanly(result, path, directory, ORIGINAL)
    assert 'Permission denied' in result['msg']


# ---------------------------------------------------------------- concurrent runs

# A root run of the module's logic that waits for the go signal of each round, so that all runs of a
# round create the same missing directory at the same moment.
WORKER = textwrap.dedent(r'''
    import os, sys, time, traceback
    sys.path.insert(0, sys.argv[1])
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker import apply

    class NoDockerd(object):
        def pid(self): return None
        def flags(self): return []

    base, name = sys.argv[2], sys.argv[3]
    round_ = 0
    while True:
        go = os.path.join(base, 'go-%d' % round_)
        while not os.path.exists(go):
            if os.path.exists(os.path.join(base, 'stop')):
                sys.exit(0)
            time.sleep(0)
        path = os.path.join(base, 'round-%d' % round_, 'a', 'b', 'c', 'daemon.json')
        try:
            apply.converge(apply.Request(path=path, name=name, apply='none'), NoDockerd(), api=None)
            outcome = 'ok'
        except Exception:
            outcome = traceback.format_exc()
        done = os.path.join(base, 'done-%d-%s' % (round_, name))
        with open(done + '.tmp', 'w') as handle:  # the test reads the marker once it exists: whole or not at all
            handle.write(outcome)
        os.rename(done + '.tmp', done)
        round_ += 1
''')


def test_concurrent_runs_create_the_same_directory(sandbox, deadline):
    names = ['gpu-a', 'gpu-b', 'gpu-c', 'gpu-d']
    workers = [subprocess.Popen([sys.executable, '-c', WORKER, COLLECTIONS, sandbox, name]) for name in names]
    rounds = 0
    try:
        for index in deadline():
            open(os.path.join(sandbox, 'go-%d' % index), 'w').close()
            done = [os.path.join(sandbox, 'done-%d-%s' % (index, name)) for name in names]
            waited_until = time.monotonic() + 120
            while not all(os.path.exists(p) for p in done):
                assert all(w.poll() is None for w in workers), 'a worker died'
                assert time.monotonic() < waited_until, 'round %d: no %s after 120 s' % (
                    index, [p for p in done if not os.path.exists(p)])
                time.sleep(0.01)
            for name, marker in zip(names, done):
                with open(marker) as handle:
                    assert handle.read() == 'ok', '%s, round %d' % (name, index)
            path = os.path.join(sandbox, 'round-%d' % index, 'a', 'b', 'c', 'daemon.json')
            with open(path) as handle:
                assert sorted(json.load(handle)['runtimes']) == names
            rounds += 1
    finally:
        open(os.path.join(sandbox, 'stop'), 'w').close()
        for worker in workers:
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
    assert rounds > 1
