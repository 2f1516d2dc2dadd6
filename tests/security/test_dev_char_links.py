"""Root (device_links) makes /dev/char links: an unprivileged user must not steer them.

The links tell systemd which device a container may open, and root creates
them, so nobody else may change the way: a device directory, a ``char``
directory or an ``nvidia-caps`` directory another user can write is refused
before anything is made. Here a stranger owns one of them and races root,
looping until the deadline: it swaps ``char`` for a link to a root-only
vault, plants links to the vault inside ``char``, or hard-links a device it
can open (a null device) into ``nvidia-caps``. Root runs the collection's own
code (``concerns.device_links.run``, what the module runs) in a loop meanwhile; every
run must refuse, and nothing may appear in the vault or in ``char``.
"""

import errno
import os
import stat
import sys
import time

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import device_links as concerns_device_links

# Runs as the stranger until argv[3] (a wall-clock time): keeps changing what it owns.
ATTACK = r'''
import os, sys, time
dev, kind, end, vault = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
char = os.path.join(dev, "char")
n = 0
while time.time() < end:
    n += 1
    try:
        if kind == "dev_root":
            # swap char between a directory of mine and a link to root's vault
            if os.path.islink(char):
                os.unlink(char)
                os.mkdir(char, 0o755)
            else:
                os.rmdir(char)
                os.symlink(vault, char)
        elif kind == "char":
            name = os.path.join(char, "195:%d" % (n % 2))
            if os.path.lexists(name):
                os.unlink(name)
            else:
                os.symlink(os.path.join(vault, "x"), name)
        else:
            cap = os.path.join(dev, "nvidia-caps", "nvidia-cap1")
            if os.path.lexists(cap):
                os.unlink(cap)
            else:
                os.link(os.path.join(dev, "spare-null"), cap)  # a device anyone may open
    except OSError:
        pass
'''


class Module(object):
    def __init__(self, dev):
        self.params = {'state': 'present', 'dev_root': dev, 'boot': False, 'init_system': 'auto',
                       'report_containers': False, 'docker_host': 'unix:///nowhere'}
        self.check_mode = False
        self._diff = False

    def warn(self, msg):
        pass

    def run_command(self, argv, environ_update=None):
        raise AssertionError('no command may run: %s' % argv)

    def fail_json(self, **kwargs):
        raise Refused(kwargs['msg'])

    def selinux_enabled(self):
        return False


class Refused(Exception):
    pass


def build(sandbox, stranger, kind):
    """A device directory with two NVIDIA nodes, and the part ``kind`` owned by the stranger."""
    dev = os.path.join(sandbox, 'dev')
    vault = os.path.join(sandbox, 'vault')
    os.mkdir(vault, 0o755)
    os.mkdir(dev, 0o755)
    os.mknod(os.path.join(dev, 'nvidia0'), 0o600 | stat.S_IFCHR, os.makedev(195, 0))
    os.mknod(os.path.join(dev, 'nvidiactl'), 0o600 | stat.S_IFCHR, os.makedev(195, 255))
    os.mkdir(os.path.join(dev, 'char'), 0o755)
    os.mkdir(os.path.join(dev, 'nvidia-caps'), 0o755)
    os.mknod(os.path.join(dev, 'spare-null'), 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.chmod(os.path.join(dev, 'spare-null'), 0o666)
    owned = {'dev_root': dev, 'char': os.path.join(dev, 'char'), 'nvidia_caps': os.path.join(dev, 'nvidia-caps')}
    os.chown(owned[kind], stranger.uid, stranger.gid)
    return dev, vault


def made_by_root(char, vault):
    """Entries of ``char`` that are not the stranger's links to the vault (the stranger removes its own
    links all the time: an entry gone while we look was one of them)."""
    found = []
    for name in os.listdir(char):
        try:
            if os.readlink(os.path.join(char, name)).startswith(vault):
                continue
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                continue
        found.append(name)
    return found


@pytest.mark.parametrize('kind', ['dev_root', 'char', 'nvidia_caps'])
def test_a_directory_a_stranger_owns_is_refused_in_every_race(sandbox, stranger, deadline, kind):
    dev, vault = build(sandbox, stranger, kind)
    end = time.time() + 60
    attacker = stranger.python_popen(ATTACK, dev, kind, end, vault)
    runs = refused = 0
    try:
        for _ in deadline():
            runs += 1
            try:
                concerns_device_links.run(Module(dev))
            except Refused as exc:
                refused += 1
                assert 'refusing' in str(exc) or 'symbolic link' in str(exc) or 'not a directory' in str(exc), exc
            assert os.listdir(vault) == [], 'root wrote into the vault through a %s the stranger owns' % kind
            if kind != 'dev_root':
                assert not made_by_root(os.path.join(dev, 'char'), vault), \
                    'root made a link in a directory the stranger controls'
    finally:
        attacker.kill()
        attacker.wait()
    assert runs > 10 and refused == runs, '%d of %d runs were not refused' % (runs - refused, runs)
    print('%s: %d runs, all refused' % (kind, runs), file=sys.stderr)


def test_root_owned_directories_get_the_links_and_a_stranger_cannot_change_them(sandbox, stranger):
    dev, vault = build(sandbox, stranger, 'nvidia_caps')
    os.chown(os.path.join(dev, 'nvidia-caps'), 0, 0)
    result = concerns_device_links.run(Module(dev))
    assert sorted(result['created']) == [os.path.join(dev, 'char', '195:0'), os.path.join(dev, 'char', '195:255')]
    for name in ('195:0', '195:255'):
        res = stranger.python('import os, sys; os.unlink(sys.argv[1])', os.path.join(dev, 'char', name))
        assert res.returncode != 0 and 'Permission denied' in res.stderr
    res = stranger.python('import os, sys; os.symlink("/etc", sys.argv[1])', os.path.join(dev, 'char', '1:3'))
    assert res.returncode != 0 and 'Permission denied' in res.stderr
