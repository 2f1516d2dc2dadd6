# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A real dockerd (Debian's docker.io 20.10) with every path private, for the apply tests.

dockerd runs inside a private mount namespace (``unshare --mount
--propagation private``, held open across restarts by a sleeping process and
entered with ``nsenter``) with tmpfs over ``/etc/docker`` (it writes key.json
there) and ``/run``, and its own ``--config-file``, ``--data-root``,
``--exec-root``, ``--pidfile`` and ``-H unix://<tmp>/docker.sock``, with
``--iptables=false --bridge=none --storage-driver=vfs``: nothing on the host
changes and no network is touched. Every process it leaves behind (containerd
shims, container processes) is found by its private directory and ended by PID.

Needs root, ``unshare`` and ``dockerd`` (requirements/apt-dockerd.txt).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils import _host
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _dockerd as dockerd
from ansible_collections.gpufleet.nvidia.plugins.module_utils._docker_api import DockerAPI, DockerAPIError

DOCKERD = shutil.which('dockerd') or '/usr/sbin/dockerd'
BUSYBOX = '/bin/busybox'


def _skip_reason():
    if os.geteuid() != 0:
        return 'needs root'
    if not os.path.exists(DOCKERD):
        return 'dockerd not installed (apt-get install --no-install-recommends docker.io)'
    if not shutil.which('unshare') or not shutil.which('nsenter'):
        return 'unshare/nsenter not installed (util-linux)'
    if not os.path.isdir('/etc/docker'):
        return '/etc/docker missing (docker.io creates it); not creating it on the real /etc'
    return None


class LabDockerd(object):
    """One private dockerd. ``flags`` are extra dockerd flags."""

    def __init__(self, base, flags=()):
        self.base = base
        self.config = os.path.join(base, 'daemon.json')
        self.pidfile = os.path.join(base, 'docker.pid')
        self.socket = os.path.join(base, 'docker.sock')
        self.log = os.path.join(base, 'dockerd.log')
        self.flags = list(flags)
        self.proc = None
        self.api = DockerAPI(self.socket, timeout=5)
        self.starts = 0
        self.holder = None

    def argv(self):
        return [DOCKERD, '--config-file', self.config, '--data-root', os.path.join(self.base, 'data'),
                '--exec-root', os.path.join(self.base, 'exec'), '--pidfile', self.pidfile,
                '-H', 'unix://' + self.socket, '--iptables=false', '--bridge=none',
                '--storage-driver=vfs'] + self.flags

    def _namespace(self):
        """A private mount namespace that outlives dockerd restarts, as a host's /run does.

        Held by a sleeping process; container shims keep their sockets in its
        /run, so live-restore can reconnect to them after a restart.
        """
        if self.holder is None or self.holder.poll() is not None:
            script = 'mount -t tmpfs tmpfs /etc/docker && mount -t tmpfs tmpfs /run && echo ready && exec sleep 86400'
            self.holder = subprocess.Popen(['unshare', '--mount', '--propagation', 'private', 'sh', '-c', script],
                                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                           stdin=subprocess.DEVNULL)
            if self.holder.stdout.readline().strip() != b'ready':
                raise RuntimeError('could not set up the private mount namespace')
        return self.holder.pid

    def start(self, wait=True, timeout=30):
        holder = self._namespace()
        with open(self.log, 'ab') as log:
            self.proc = subprocess.Popen(['nsenter', '--target', str(holder), '--mount', '--'] + self.argv(),
                                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.starts += 1
        if wait:
            self.wait_up(timeout)

    def wait_up(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError('dockerd exited with %s: %s' % (self.proc.returncode, self.log_tail()))
            try:
                self.api.info()
                return
            except DockerAPIError:
                time.sleep(0.1)
        raise RuntimeError('dockerd did not answer in %ss: %s' % (timeout, self.log_tail()))

    def pid(self):
        pid = _host.read_pid_file(self.pidfile)
        if pid and dockerd.is_dockerd(pid):
            return pid
        return None

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
        """What ``service docker restart`` does on Debian: stop, start, exit 0 even if dockerd then fails."""
        self.stop()
        self.start(wait=False)
        # Give dockerd the chance to die on a bad config or to bind its socket.
        deadline = time.time() + 30
        while time.time() < deadline and self.proc.poll() is None:
            try:
                self.api.info()
                break
            except DockerAPIError:
                time.sleep(0.1)

    def log_tail(self):
        return _host.tail_file(self.log, 4096)

    def docker(self, *args, **kwargs):
        cli = shutil.which('docker')
        return subprocess.run([cli, '-H', 'unix://' + self.socket] + list(args), check=True,
                              capture_output=True, text=True, timeout=kwargs.get('timeout', 60)).stdout.strip()

    def leftovers(self):
        """PIDs of processes (shims, containers) still tied to this dockerd's private directory."""
        found = []
        for entry in os.listdir('/proc'):
            if not entry.isdigit():
                continue
            argv = ' '.join(_host.process_argv(int(entry)))
            if self.base in argv and int(entry) != os.getpid():
                found.append(int(entry))
        return found

    def cleanup(self):
        self.stop()
        for _round in range(3):
            pids = self.leftovers()
            if not pids:
                break
            for pid in pids:
                # Container shims and their children, started by this dockerd: end them by PID.
                for child in _children(pid):
                    _kill(child)
                _kill(pid)
            time.sleep(0.5)
        if self.holder is not None:
            self.holder.kill()
            self.holder.wait()
            self.holder.stdout.close()
        shutil.rmtree(self.base, ignore_errors=True)


def _children(pid):
    try:
        with open('/proc/%d/task/%d/children' % (pid, pid)) as handle:
            return [int(p) for p in handle.read().split()]
    except (IOError, OSError):
        return []


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


class LabService(dockerd.Dockerd):
    """The module's own SysV code path (reload = SIGHUP to the pid file's PID) with the fixture's restart."""

    def __init__(self, lab, flags_visible=True):
        dockerd.Dockerd.__init__(self, run_command=None, init_system='sysvinit', tools={}, pidfiles=(lab.pidfile,),
                                 socket_path=lab.socket)
        self.lab = lab
        self.flags_visible = flags_visible
        self.reloads = 0
        self.restarts = 0

    def pid(self):
        return self.lab.pid()

    def reload(self):
        self.reloads += 1
        dockerd.Dockerd.reload(self)

    def restart(self):
        self.restarts += 1
        self.lab.restart()

    def flags(self):
        if not self.flags_visible:
            return []
        pid = self.pid()
        return _host.process_argv(pid)[1:] if pid else self.lab.argv()[1:]

    def recent_log(self, since=None):
        return self.lab.log_tail()


@pytest.fixture
def lab_dockerd(request):
    reason = _skip_reason()
    if reason:  # a missing prerequisite fails loudly: CI installs everything (scripts/bootstrap)
        pytest.fail('real-dockerd tests cannot run: %s' % reason, pytrace=False)
    marker = request.node.get_closest_marker('dockerd_flags')
    flags = marker.args if marker else ()
    base = tempfile.mkdtemp(prefix='gfdk-', dir='/tmp')
    lab = LabDockerd(base, flags)
    initial = request.node.get_closest_marker('daemon_json')
    with open(lab.config, 'w') as handle:
        handle.write(initial.args[0] if initial else '{\n  "log-level": "info",\n  "max-concurrent-downloads": 3\n}\n')
    try:
        lab.start()
        yield lab
    finally:
        lab.cleanup()


@pytest.fixture
def busybox_image(lab_dockerd, tmp_path):
    """A one-file image imported from busybox-static (no registry needed)."""
    if not os.path.exists(BUSYBOX):
        pytest.fail('busybox-static not installed (requirements/apt-dockerd.txt)', pytrace=False)
    tarball = str(tmp_path / 'rootfs.tar')
    with tarfile.open(tarball, 'w') as tar:
        tar.add(BUSYBOX, arcname='bin/busybox')
        for applet in ('sh', 'sleep'):
            info = tarfile.TarInfo('bin/' + applet)
            info.type = tarfile.SYMTYPE
            info.linkname = 'busybox'
            tar.addfile(info)
    lab_dockerd.docker('import', tarball, 'gpufleet/busybox:1')
    return 'gpufleet/busybox:1'


def pytest_configure(config):
    config.addinivalue_line('markers', 'dockerd_flags(*flags): extra flags for the lab dockerd')
    config.addinivalue_line('markers', 'daemon_json(text): initial daemon.json of the lab dockerd')
