# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A real daemon (dockerd, containerd) with every path private, for the real-daemon test layers.

The daemon runs inside a private mount namespace (``unshare --mount
--propagation private``, held open across restarts by a sleeping process and
entered with ``nsenter``) where ``COPY_ON_WRITE`` (/etc, /opt, /var/lib) are
overlays whose writes land in a tmpfs of the namespace (containerd makes
/opt/containerd and /etc/cni/net.d wherever its config does not say
otherwise), with tmpfs over ``PRIVATE`` (the daemon's own directories, /run),
and its own files under ``base``: nothing on the host changes.
``host.paths``/``new_host_paths`` let a test layer check that (its session
fails when a run leaves a new path there). Every process it leaves behind
(shims, container processes) is found by its private directory and ended by
PID.

The engine under test (``GPUFLEET_ENGINE``, ``tests/engines/engines.py``) is
this machine's own (Debian 12's) or a newer Debian suite's: its ``/usr`` is
then bound over ``/usr`` first thing in the namespace, so the daemon, its
shims, runc and its clients are that release's, with its glibc.

Subclasses give ``PRIVATE``, ``argv()`` (the daemon's command line),
``answers()`` (it serves its API) and ``pid()``.
"""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), 'engines'))
import engines  # noqa: E402

# The engine's root (None: this machine's own); an engine that is not built fails the import, loudly.
ENGINE_ROOT = engines.root()
RESTART_WAIT = 30
# Host directories the daemon sees as they are but writes only in its namespace (overlayfs, upper in a tmpfs).
COPY_ON_WRITE = ('/etc', '/opt', '/var/lib')
# How deep host_paths looks: /opt/containerd and /etc/cni/net.d are two levels down.
WATCH_DEPTH = 2


@pytest.fixture(scope='session', autouse=True)
def private_lock_dir(tmp_path_factory):
    """``host.locks.LOCK_DIR`` (/run/gpufleet-locks) for a test session: a private 0700 directory, for every module run
    in-process or as a child process; the machine's /run is never touched. A conftest imports it to use it. So is
    node_state's memo (``host.memo.MEMO_DIR``, /run/gpufleet-memo) and the modules' kept bytecode
    (``common.compile_once.BYTECODE_DIR``, /run/gpufleet-bytecode), in directories beside it."""
    path = str(tmp_path_factory.mktemp('gpufleet-locks'))
    os.chmod(path, 0o700)
    memo = str(tmp_path_factory.mktemp('gpufleet-memo'))
    os.chmod(memo, 0o700)
    os.environ['GPUFLEET_LOCK_DIR'] = path
    os.environ['GPUFLEET_MEMO_DIR'] = os.path.join(memo, 'memo')
    os.environ['GPUFLEET_BYTECODE_DIR'] = os.path.join(memo, 'bytecode')
    yield path
    for name in ('GPUFLEET_LOCK_DIR', 'GPUFLEET_MEMO_DIR', 'GPUFLEET_BYTECODE_DIR'):
        os.environ.pop(name, None)


@pytest.fixture(scope='session', autouse=True)
def host_left_untouched():
    """The run fails when it leaves a new path in /etc, /opt or /var/lib (two levels down): every daemon's writes
    stay in its namespace. (Something else running on the machine at the same time would show here too.) A conftest
    imports it to use it."""
    before = host_paths()
    yield
    left = new_host_paths(before)
    assert not left, 'this test run left new paths on the host, outside its namespaces: %s' % ', '.join(left)


def host_paths(roots=COPY_ON_WRITE, depth=WATCH_DEPTH):
    """Every path ``depth`` levels down (and above) under ``roots``, as a set (symlinks not followed)."""
    found = set()
    pending = [(root, 0) for root in roots]
    while pending:
        path, level = pending.pop()
        if level >= depth:
            continue
        try:
            names = os.listdir(path)
        except OSError:
            continue
        for name in names:
            child = os.path.join(path, name)
            found.add(child)
            if os.path.isdir(child) and not os.path.islink(child):
                pending.append((child, level + 1))
    return found


def new_host_paths(before, roots=COPY_ON_WRITE, depth=WATCH_DEPTH):
    """The paths under ``roots`` that ``host.paths`` did not list in ``before``, sorted."""
    return sorted(host_paths(roots, depth) - before)


def process_argv(pid):
    try:
        with open('/proc/%d/cmdline' % pid, 'rb') as handle:
            return handle.read().replace(b'\0', b' ').decode('utf-8', 'replace')
    except (IOError, OSError):
        return ''


def children(pid):
    try:
        with open('/proc/%d/task/%d/children' % (pid, pid)) as handle:
            return [int(p) for p in handle.read().split()]
    except (IOError, OSError):
        return []


def kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


class PrivateDaemon(object):
    """One private daemon under ``base``, logging to ``base/<log_name>``."""

    PRIVATE = ()
    COPY_ON_WRITE = COPY_ON_WRITE
    NAME = 'the daemon'

    def __init__(self, base, log_name):
        self.base = base
        self.log = os.path.join(base, log_name)
        self.proc = None
        self.holder = None
        self.starts = 0
        # The engine whose /usr the namespace binds (None: this machine's own); a test may set another before start.
        self.engine_root = ENGINE_ROOT

    # ---- what a daemon is -------------------------------------------------------
    def argv(self):
        raise NotImplementedError

    def answers(self):
        raise NotImplementedError

    def setup(self):
        """Shell commands run in the new namespace after its mounts, before anything else (``gpuhost``)."""
        return []

    # ---- the namespace ------------------------------------------------------------
    def namespace(self):
        """The holder's PID: a private mount namespace that outlives daemon restarts, as a host's /run does.

        Container shims keep their sockets in its /run, so a restarted daemon finds them again.
        """
        if self.holder is None or self.holder.poll() is not None:
            # The overlays' upper and work directories live in a tmpfs mounted (in the namespace only) on base/.cow.
            cow = os.path.join(self.base, '.cow')
            os.makedirs(cow, exist_ok=True)
            mounts = ['mount -t tmpfs tmpfs %s' % cow]
            if self.engine_root:
                mounts.insert(0, 'mount --bind %s/usr /usr' % self.engine_root)
            for index, path in enumerate(self.COPY_ON_WRITE):
                upper, work = '%s/%d/upper' % (cow, index), '%s/%d/work' % (cow, index)
                mounts.append('{ [ ! -d %s ] || { mkdir -p %s %s && mount -t overlay overlay -o '
                              'lowerdir=%s,upperdir=%s,workdir=%s %s; }; }' % (path, upper, work, path, upper, work,
                                                                               path))
            mounts += ['{ [ ! -d %s ] || mount -t tmpfs tmpfs %s; }' % (path, path) for path in self.PRIVATE]
            mounts += self.setup()
            script = '%s && echo ready && exec sleep 86400' % ' && '.join(mounts)
            self.holder = subprocess.Popen(['unshare', '--mount', '--propagation', 'private', 'sh', '-c', script],
                                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                           stdin=subprocess.DEVNULL)
            if self.holder.stdout.readline().strip() != b'ready':
                raise RuntimeError('could not set up the private mount namespace')
        return self.holder.pid

    def inside(self, argv):
        return ['nsenter', '--target', str(self.namespace()), '--mount', '--'] + list(argv)

    # ---- life -------------------------------------------------------------------------
    def start(self, wait=True, timeout=30):
        with open(self.log, 'ab') as log:
            # nsenter without --fork execs the daemon itself: the Popen PID is the daemon's.
            self.proc = subprocess.Popen(self.inside(self.argv()), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        self.starts += 1
        if wait:
            self.wait_up(timeout)

    def wait_up(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError('%s exited with %s: %s' % (self.NAME, self.proc.returncode, self.log_tail()))
            if self.answers():
                return
            time.sleep(0.1)
        raise RuntimeError('%s did not answer in %ss: %s' % (self.NAME, timeout, self.log_tail()))

    def stop(self, timeout=30):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self):
        """What an init system's restart does: stop, start, and return whether or not the daemon then dies."""
        self.stop()
        self.start(wait=False)
        # Give the daemon the chance to die on a bad config or to answer.
        deadline = time.time() + RESTART_WAIT
        while time.time() < deadline and self.proc.poll() is None:
            if self.answers():
                break
            time.sleep(0.1)

    def log_tail(self, limit=8192):
        try:
            with open(self.log, 'rb') as handle:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(0, handle.tell() - limit))
                return handle.read().decode('utf-8', 'replace')
        except (IOError, OSError):
            return ''

    def leftovers(self):
        """PIDs of processes (shims, containers) still tied to this daemon's private directory."""
        return [int(entry) for entry in os.listdir('/proc')
                if entry.isdigit() and int(entry) != os.getpid() and self.base in process_argv(int(entry))]

    def cleanup(self):
        self.stop()
        for _round in range(3):
            pids = self.leftovers()
            if not pids:
                break
            for pid in pids:
                # Shims and their children, started by this daemon: end them by PID.
                for child in children(pid):
                    kill(child)
                kill(pid)
            time.sleep(0.5)
        if self.holder is not None:
            self.holder.kill()
            self.holder.wait()
            self.holder.stdout.close()
        self.release()
        shutil.rmtree(self.base, ignore_errors=True)

    def release(self):
        """What a subclass unmounts before its directory is removed."""
