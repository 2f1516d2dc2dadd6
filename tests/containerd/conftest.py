# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A real containerd (this machine's 1.6, or a newer Debian release's: tests/engines) with every path private, for the containerd_runtime tests.

Like tests/dockerd: containerd runs inside a private mount namespace
(``unshare --mount --propagation private``, held open across restarts by a
sleeping process and entered with ``nsenter``) with tmpfs over
``/etc/containerd``, ``/run/containerd``, ``/var/lib/containerd`` and
``/run``, and its config file sets its own ``root``, ``state`` and gRPC
socket under a private directory: the host's containerd, its files and its
service are never touched. ``containerd config dump`` runs in the same
namespace. Every process it leaves behind (shims, container processes) is
found by its private directory and ended by PID.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import subprocess
import tempfile

import pytest

import gpuhost
from privatedaemon import COPY_ON_WRITE, PrivateDaemon, host_left_untouched, private_lock_dir  # noqa: F401 (fixtures)

import engines  # noqa: E402 (privatedaemon puts tests/engines on the path)

from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import config as cd


CONTAINERD = shutil.which('containerd') or '/usr/bin/containerd'
CTR = shutil.which('ctr') or '/usr/bin/ctr'
BUSYBOX = '/bin/busybox'

# The containerd under test (GPUFLEET_ENGINE, tests/engines): 1.6 and 1.7 dump version 2 ids, 2.x version 3 ids.
CONTAINERD2 = engines.major('containerd') >= 2
# Where that containerd's `config dump` keeps what the tests look at.
CRI_RUNTIME = ('plugins', 'io.containerd.cri.v1.runtime' if CONTAINERD2 else 'io.containerd.grpc.v1.cri')
RUNTIMES = CRI_RUNTIME + ('containerd', 'runtimes')
DEFAULT = CRI_RUNTIME + ('containerd', 'default_runtime_name')
SANDBOX_IMAGE = (('plugins', 'io.containerd.cri.v1.images', 'pinned_images', 'sandbox') if CONTAINERD2
                 else ('plugins', 'io.containerd.grpc.v1.cri', 'sandbox_image'))


def _skip_reason():
    if os.geteuid() != 0:
        return 'needs root'
    for tool in (CONTAINERD, CTR):
        if not os.path.exists(tool):
            return '%s not installed (apt-get install containerd)' % tool
    if not shutil.which('unshare') or not shutil.which('nsenter'):
        return 'unshare/nsenter not installed (util-linux)'
    return None


def settings(base):
    """The lab's own paths, as the top of its config.toml."""
    return ('root = "%s/root"\nstate = "%s/state"\n\n[grpc]\n  address = "%s/containerd.sock"\n'
            % (base, base, base))


class LabContainerd(PrivateDaemon):
    """One private containerd reading ``base/config.toml``."""

    PRIVATE = ('/etc/containerd', '/run/containerd', '/var/lib/containerd', '/run')
    NAME = 'containerd'

    def __init__(self, base):
        PrivateDaemon.__init__(self, base, 'containerd.log')
        self.config = os.path.join(base, 'config.toml')
        self.socket = os.path.join(base, 'containerd.sock')

    def argv(self):
        return [CONTAINERD, '--config', self.config]

    def run(self, argv, data=None):
        """``run(argv, data=None) -> (rc, out, err)`` inside the namespace (containerd config dump, ctr)."""
        proc = subprocess.run(self.inside(argv), capture_output=True, text=True, timeout=60, input=data)
        return proc.returncode, proc.stdout, proc.stderr

    def answers(self):
        rc, out, err = self.run([CTR, '--address', self.socket, '--timeout', '2s', 'version'])
        return rc == 0

    def pid(self):
        if self.proc is not None and self.proc.poll() is None:
            return self.proc.pid
        return None

    def dump(self, path=None):
        """The effective configuration of ``path`` (default: the lab's config.toml), as containerd computes it."""
        rc, out, err = self.run([CONTAINERD, '--config', path or self.config, 'config', 'dump'])
        assert rc == 0, err
        return cd.loads_dump(out, 'dump')

    def ctr(self, *args):
        rc, out, err = self.run([CTR, '--address', self.socket] + list(args))
        assert rc == 0, '%s: %s' % (args, err or out)
        return out

    def release(self):
        subprocess.run(['umount', '-R', os.path.join(self.base, 'rootfs')], capture_output=True, check=False)


class LabService(object):
    """The init system's side for the module (pid, restart, logs), played by the fixture."""

    def __init__(self, lab):
        self.lab = lab
        self.restarts = 0

    def pid(self):
        return self.lab.pid()

    def restart(self):
        self.restarts += 1
        self.lab.restart()

    def logs(self, since=None, lines=200):
        return self.lab.log_tail()


class GpuContainerd(gpuhost.OnGpuHost, LabContainerd):
    """A private containerd on a fake GPU host with NVIDIA's real runtime (``gpuhost``)."""

    COPY_ON_WRITE = COPY_ON_WRITE + gpuhost.COPY_ON_WRITE


@pytest.fixture
def gpu_containerd():
    """A private containerd on a fake GPU host (``GpuContainerd``) reading a config.toml with its own paths."""
    reason = _skip_reason() or gpuhost.missing()
    if reason:
        pytest.fail('real-runtime tests cannot run: %s' % reason, pytrace=False)
    base = tempfile.mkdtemp(prefix='gfcg-', dir='/tmp')
    os.chmod(base, 0o755)
    lab = GpuContainerd(base)
    with open(lab.config, 'w') as handle:
        handle.write('version = 2\n' + settings(base))
    try:
        lab.start()
        yield lab
    finally:
        lab.cleanup()


@pytest.fixture
def lab_containerd(request):
    reason = _skip_reason()
    if reason:  # a missing prerequisite fails loudly: CI installs everything (scripts/bootstrap)
        pytest.fail('real-containerd tests cannot run: %s' % reason, pytrace=False)
    base = tempfile.mkdtemp(prefix='gfcd-', dir='/tmp')
    os.chmod(base, 0o755)
    lab = LabContainerd(base)
    marker = request.node.get_closest_marker('config_toml')
    body = marker.args[0] if marker else ''
    head = marker.kwargs.get('head', '') if marker else ''
    newline = marker.kwargs.get('newline', '\n') if marker else '\n'
    text = 'version = 2\n' + head + settings(base) + body
    if marker and marker.kwargs.get('grpc_last'):  # the lab's [grpc] table after the body's tables
        top, grpc = settings(base).split('\n\n', 1)
        text = 'version = 2\n' + head + top + '\n' + body + '\n' + grpc
    if marker and marker.kwargs.get('final_newline') is False:
        text = text.rstrip('\n')
    for name, content in (marker.kwargs.get('files', {}) if marker else {}).items():
        with open(os.path.join(base, name), 'w') as handle:
            handle.write(content)
    with open(lab.config, 'wb') as handle:
        handle.write(text.replace('\n', newline).encode('utf-8'))
    try:
        lab.start()
        yield lab
    finally:
        lab.cleanup()


@pytest.fixture
def busybox_rootfs(lab_containerd):
    """A one-binary root file system (busybox-static) for ``ctr run --rootfs``: no registry, no image."""
    if not os.path.exists(BUSYBOX):
        pytest.fail('busybox-static not installed (requirements/apt-dockerd.txt)', pytrace=False)
    return make_busybox_rootfs(lab_containerd)


def make_busybox_rootfs(lab):
    """``lab.base``/rootfs: busybox-static with its ``sh`` and ``sleep`` links (``release`` unmounts it)."""
    rootfs = os.path.join(lab.base, 'rootfs')
    os.makedirs(os.path.join(rootfs, 'bin'))
    shutil.copy(BUSYBOX, os.path.join(rootfs, 'bin', 'busybox'))
    for applet in ('sh', 'sleep'):
        os.symlink('busybox', os.path.join(rootfs, 'bin', applet))
    return rootfs


def pytest_configure(config):
    config.addinivalue_line('markers', 'config_toml(body, head=, newline=, files=, grpc_last=, final_newline=): the '
                            'lab config.toml (version, head, its own paths, body) and files beside it')
