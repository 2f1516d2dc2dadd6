# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A private daemon's namespace made a GPU host for NVIDIA's real nvidia-container-runtime (the dockerd and
containerd layers' verification tests).

In the daemon's mount namespace (``privatedaemon``), and nowhere else: a private ``/dev`` (tmpfs; the real null,
zero, full, random, urandom and tty bound in) with the character device nodes a loaded driver gives
(``nvidia0``/``nvidia1`` 195:0/1, ``nvidiactl`` 195:255, ``nvidia-uvm``/``nvidia-uvm-tools`` 510:0/1); the kit's
fake NVML under the driver's versioned names in ``/usr/local/lib`` (an overlay) with ``ld.so.cache`` rebuilt in
the ``/etc`` overlay; NVIDIA's four programs (``tests/toolkit/build``) bound at ``/usr/bin`` (an overlay), where
NVIDIA's packages put them and where the runtime's hooks are looked for; ``/etc/nvidia-container-runtime/
config.toml`` as NVIDIA's package writes it (``nvidia-ctk config default``), logging to the test's directory.
The fake NVML reads the GPUs of a fake host tree (``tests/driverkit/fakehost.py``) through
``GPUFLEET_FAKEDRIVER_ROOT``, which the daemon passes on to its shims and so to the runtime.

Opening a device node still fails (there is no kernel driver): what the tests prove is that the runtime puts
the nodes NVML names into the container, not that a program in it can use a GPU.
"""

import ctypes
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, 'driverkit'))
import fakehost  # noqa: E402

TOOLKIT_BIN = os.path.join(ROOT, '.cache', 'toolkit', 'bin')
TOOLKIT_PROGRAMS = ('nvidia-container-runtime', 'nvidia-ctk', 'nvidia-cdi-hook', 'nvidia-container-runtime-hook')
NVML = os.path.join(fakehost.BUILD_LIB_DIR, 'libnvidia-ml.so.1')
# Directories the GPU namespace writes in (overlays whose writes stay in the namespace).
COPY_ON_WRITE = ('/usr/bin', '/usr/local/lib')
BUSYBOX = '/bin/busybox'
NODES = (('nvidia0', 195, 0), ('nvidia1', 195, 1), ('nvidiactl', 195, 255), ('nvidia-uvm', 510, 0),
         ('nvidia-uvm-tools', 510, 1))


def missing():
    """What this machine lacks for a GPU namespace ('' when nothing)."""
    if not all(os.access(os.path.join(TOOLKIT_BIN, name), os.X_OK) for name in TOOLKIT_PROGRAMS):
        return 'NVIDIA Container Toolkit not built in %s (tests/toolkit/build)' % TOOLKIT_BIN
    if not os.path.exists(NVML):
        return 'the driver kit is not built (%s)' % fakehost.SETUP_HINT
    if not os.path.exists(BUSYBOX):
        return 'busybox-static not installed (requirements/apt-dockerd.txt)'
    return ''


def selects_devices():
    """Why NVIDIA's runtime cannot select a GPU by index or UUID on the kit's fake NVML ('' when it can): it calls
    the MIG queries (nvmlDeviceIsMigDeviceHandle first) and dies at the first one the library lacks."""
    if not hasattr(ctypes.CDLL(NVML), 'nvmlDeviceIsMigDeviceHandle'):
        return ('the driver kit\'s fake NVML (%s) has no nvmlDeviceIsMigDeviceHandle: NVIDIA\'s runtime needs the MIG '
                'queries to select a GPU by index or UUID; rebuild the kit (tests/driverkit/setup) from a tree whose '
                'fake NVML answers them' % NVML)
    return ''


class GpuHost(object):
    """The fake GPU host of one daemon under ``base``: ``description`` (its GPUs), ``env`` (for the daemon) and
    ``setup()`` (the namespace's shell commands)."""

    def __init__(self, base, gpus=2):
        self.base = base
        self.tree = os.path.join(base, 'fh')
        self.description = fakehost.example_description(gpus)
        fakehost.layout(self.tree, self.description, with_libs=False)
        self.runtime_log = os.path.join(base, 'nvidia-container-runtime.log')

    @property
    def uuids(self):
        return [gpu['uuid'] for gpu in self.description['gpus']]

    @property
    def env(self):
        return ['env', 'GPUFLEET_FAKEDRIVER_ROOT=%s' % self.tree]

    def setup(self):
        dev, version = os.path.join(self.base, 'dev'), self.description['driver_version']
        commands = ['mkdir -p %s' % dev, 'mount -t tmpfs -o mode=755 gpudev %s' % dev]
        for name in ('null', 'zero', 'full', 'random', 'urandom', 'tty'):
            commands.append('touch %s/%s && mount --bind /dev/%s %s/%s' % (dev, name, name, dev, name))
        commands.append('mkdir %s/pts %s/shm %s/mqueue' % (dev, dev, dev))
        for link, target in (('fd', '/proc/self/fd'), ('stdin', '/proc/self/fd/0'), ('stdout', '/proc/self/fd/1'),
                             ('stderr', '/proc/self/fd/2'), ('ptmx', 'pts/ptmx')):
            commands.append('ln -s %s %s/%s' % (target, dev, link))
        for name, major, minor in NODES:
            commands.append('mknod -m 666 %s/%s c %d %d' % (dev, name, major, minor))
        commands += ['mount --bind %s /dev' % dev, 'mount -t devpts devpts /dev/pts -o newinstance,ptmxmode=0666',
                     'mount -t tmpfs shm /dev/shm']
        for lib in ('libnvidia-ml', 'libcuda'):
            commands.append('cp %s /usr/local/lib/%s.so.%s && ln -sf %s.so.%s /usr/local/lib/%s.so.1'
                            % (NVML, lib, version, lib, version, lib))
        commands.append('ldconfig -X')
        for name in TOOLKIT_PROGRAMS:
            commands.append('touch /usr/bin/%s && mount --bind %s/%s /usr/bin/%s' % (name, TOOLKIT_BIN, name, name))
        commands += ['mkdir -p /etc/nvidia-container-runtime',
                     "/usr/bin/nvidia-ctk config default | sed 's/^log-level = \"info\"/log-level = \"debug\"/; "
                     "s|^#debug = \"/var/log/nvidia-container-runtime.log\"|debug = \"%s\"|' "
                     "> /etc/nvidia-container-runtime/config.toml" % self.runtime_log]
        return commands

    def log_tail(self, limit=4000):
        try:
            with open(self.runtime_log, 'rb') as handle:
                return handle.read()[-limit:].decode('utf-8', 'replace')
        except (IOError, OSError):
            return ''


class OnGpuHost(object):
    """Mixin for a private daemon class (tests/privatedaemon.py): the daemon runs on a fake GPU host under its
    ``base`` (``self.gpu``, a GpuHost). Put it first: ``class GpuDockerd(OnGpuHost, LabDockerd)``; the class
    adds ``COPY_ON_WRITE`` to its own."""

    def __init__(self, base, *args):
        super(OnGpuHost, self).__init__(base, *args)
        self.gpu = GpuHost(base)

    def argv(self):
        return self.gpu.env + super(OnGpuHost, self).argv()

    def setup(self):
        return self.gpu.setup()


def expected_nodes(minors):
    """What a container given GPUs ``minors`` sees: those GPUs' nodes and the control nodes, sorted."""
    return sorted(['/dev/nvidia%d' % minor for minor in minors] +
                  ['/dev/nvidia-uvm', '/dev/nvidia-uvm-tools', '/dev/nvidiactl'])


# ---- an image with sh and /etc (NVIDIA's hooks write /etc/ld.so.conf), from busybox-static ---------------------

def _add(tar, name, data=None, link=None, directory=False):
    info = tarfile.TarInfo(name)
    info.mtime = int(time.time())
    if directory:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
    elif link:
        info.type, info.linkname = tarfile.SYMTYPE, link
        tar.addfile(info)
    else:
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))


def rootfs_tar():
    """The image's one layer (bin/busybox, bin/sh, etc/), as bytes."""
    with open(BUSYBOX, 'rb') as handle:
        busybox = handle.read()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode='w') as tar:
        for directory in ('bin', 'etc', 'dev', 'proc', 'sys'):
            _add(tar, directory + '/', directory=True)
        _add(tar, 'bin/busybox', busybox)
        _add(tar, 'bin/sh', link='busybox')
    return out.getvalue()


def write_rootfs(path):
    with open(path, 'wb') as handle:
        handle.write(rootfs_tar())
    return path


def write_docker_archive(path, tag):
    """``docker save``'s format (what ``ctr images import`` reads): one layer, a config, a manifest naming ``tag``."""
    layer = rootfs_tar()
    diff_id = 'sha256:' + hashlib.sha256(layer).hexdigest()
    config = json.dumps({'architecture': 'amd64', 'os': 'linux', 'config': {'Cmd': ['/bin/sh']},
                         'rootfs': {'type': 'layers', 'diff_ids': [diff_id]}, 'history': [{}]}).encode()
    config_name = hashlib.sha256(config).hexdigest() + '.json'
    manifest = json.dumps([{'Config': config_name, 'RepoTags': [tag], 'Layers': ['layer.tar']}]).encode()
    with tarfile.open(path, 'w') as tar:
        _add(tar, 'layer.tar', layer)
        _add(tar, config_name, config)
        _add(tar, 'manifest.json', manifest)
    return path
