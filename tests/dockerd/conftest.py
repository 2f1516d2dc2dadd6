# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A real dockerd (Debian's docker.io 20.10) with every path private, for the apply tests.

dockerd runs inside a private mount namespace (``unshare --mount
--propagation private``, held open across restarts by a sleeping process and
entered with ``nsenter``) with tmpfs over ``/etc/docker`` (it writes key.json
there) and ``/run``, and its own ``--config-file``, ``--data-root``,
``--exec-root``, ``--pidfile`` and ``-H unix://<tmp>/docker.sock``, with
``--iptables=false --ip-forward=false --bridge=none --storage-driver=vfs``: nothing on the host
changes and no network is touched. Every process it leaves behind (containerd
shims, container processes) is found by its private directory and ended by PID.

Needs root, ``unshare`` and ``dockerd`` (requirements/apt-dockerd.txt).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import subprocess
import tarfile
import tempfile

import pytest

import gpuhost
from privatedaemon import COPY_ON_WRITE, PrivateDaemon, host_left_untouched, private_lock_dir  # noqa: F401 (fixtures)

from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import procs
from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker import dockerd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker.api import DockerAPI, DockerAPIError

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


class LabDockerd(PrivateDaemon):
    """One private dockerd. ``flags`` are extra dockerd flags."""

    PRIVATE = ('/etc/docker', '/run')  # dockerd writes key.json in /etc/docker
    NAME = 'dockerd'

    def __init__(self, base, flags=()):
        PrivateDaemon.__init__(self, base, 'dockerd.log')
        self.config = os.path.join(base, 'daemon.json')
        self.pidfile = os.path.join(base, 'docker.pid')
        self.socket = os.path.join(base, 'docker.sock')
        self.flags = list(flags)
        self.api = DockerAPI(self.socket, timeout=5)

    def argv(self):
        return [DOCKERD, '--config-file', self.config, '--data-root', os.path.join(self.base, 'data'),
                '--exec-root', os.path.join(self.base, 'exec'), '--pidfile', self.pidfile,
                '-H', 'unix://' + self.socket, '--iptables=false', '--ip-forward=false', '--bridge=none',
                '--storage-driver=vfs'] + self.flags

    def answers(self):
        try:
            self.api.info()
            return True
        except DockerAPIError:
            return False

    def pid(self):
        pid = procs.read_pid_file(self.pidfile)
        if pid and procs.process_name(pid) == 'dockerd':
            return pid
        return None

    def log_tail(self, limit=4096):
        return PrivateDaemon.log_tail(self, limit)

    def docker(self, *args, **kwargs):
        # The engine's own CLI, in the namespace (``privatedaemon.ENGINE_ROOT``).
        return subprocess.run(self.inside(['/usr/bin/docker', '-H', 'unix://' + self.socket] + list(args)), check=True,
                              capture_output=True, text=True, timeout=kwargs.get('timeout', 60)).stdout.strip()


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
        return procs.process_argv(pid)[1:] if pid else self.lab.argv()[1:]

    def recent_log(self, since=None):
        return self.lab.log_tail()


class GpuDockerd(gpuhost.OnGpuHost, LabDockerd):
    """A private dockerd on a fake GPU host with NVIDIA's real runtime (``gpuhost``)."""

    COPY_ON_WRITE = COPY_ON_WRITE + gpuhost.COPY_ON_WRITE


@pytest.fixture
def gpu_dockerd(tmp_path):
    """A private dockerd on a fake GPU host (``GpuDockerd``) with an image that has sh and /etc, gpufleet/gpu:1."""
    reason = _skip_reason() or gpuhost.missing()
    if reason:
        pytest.fail('real-runtime tests cannot run: %s' % reason, pytrace=False)
    base = tempfile.mkdtemp(prefix='gfdg-', dir='/tmp')
    os.chmod(base, 0o755)
    lab = GpuDockerd(base)
    with open(lab.config, 'w') as handle:
        handle.write('{}\n')
    try:
        lab.start()
        lab.docker('import', gpuhost.write_rootfs(str(tmp_path / 'rootfs.tar')), 'gpufleet/gpu:1')
        yield lab
    finally:
        lab.cleanup()


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
    return import_busybox(lab_dockerd, str(tmp_path / 'rootfs.tar'))


def import_busybox(lab, tarball):
    """Import busybox-static (``tarball``: where to write its one-file root) as ``gpufleet/busybox:1``."""
    with tarfile.open(tarball, 'w') as tar:
        tar.add(BUSYBOX, arcname='bin/busybox')
        for applet in ('sh', 'sleep'):
            info = tarfile.TarInfo('bin/' + applet)
            info.type = tarfile.SYMTYPE
            info.linkname = 'busybox'
            tar.addfile(info)
    lab.docker('import', tarball, 'gpufleet/busybox:1')
    return 'gpufleet/busybox:1'


def pytest_configure(config):
    config.addinivalue_line('markers', 'dockerd_flags(*flags): extra flags for the lab dockerd')
    config.addinivalue_line('markers', 'daemon_json(text): initial daemon.json of the lab dockerd')
