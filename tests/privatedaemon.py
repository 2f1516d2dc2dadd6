# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A real daemon (dockerd, containerd) with every path private, for the real-daemon test layers.

The daemon runs inside a private mount namespace (``unshare --mount
--propagation private``, held open across restarts by a sleeping process and
entered with ``nsenter``) with tmpfs over ``PRIVATE`` (the daemon's own
directories under /etc, /var/lib and /run), and its own files under ``base``:
nothing on the host changes. Every process it leaves behind (shims,
container processes) is found by its private directory and ended by PID.

Subclasses give ``PRIVATE``, ``argv()`` (the daemon's command line),
``answers()`` (it serves its API) and ``pid()``.
"""

import os
import shutil
import signal
import subprocess
import time

RESTART_WAIT = 30


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
    NAME = 'the daemon'

    def __init__(self, base, log_name):
        self.base = base
        self.log = os.path.join(base, log_name)
        self.proc = None
        self.holder = None
        self.starts = 0

    # ---- what a daemon is -------------------------------------------------------
    def argv(self):
        raise NotImplementedError

    def answers(self):
        raise NotImplementedError

    # ---- the namespace ------------------------------------------------------------
    def namespace(self):
        """The holder's PID: a private mount namespace that outlives daemon restarts, as a host's /run does.

        Container shims keep their sockets in its /run, so a restarted daemon finds them again.
        """
        if self.holder is None or self.holder.poll() is not None:
            mounts = ' && '.join('{ [ ! -d %s ] || mount -t tmpfs tmpfs %s; }' % (path, path)
                                 for path in self.PRIVATE)
            script = '%s && echo ready && exec sleep 86400' % (mounts or 'true')
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
