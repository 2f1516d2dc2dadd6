# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU work on a host (host.workload) in a fake /proc: processes holding NVIDIA device files, containers granted GPUs
(another mount namespace with a /dev of its own holding an nvidia<N> node), and the deferral the policy makes of it.

Device nodes are regular files holding "c MAJOR MINOR", read through a patched lstat (mknod needs root)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import workload

# Device nodes as test_dev_char reads them: a regular file holding "c MAJOR MINOR" is that character device.
from test_dev_char import fake_lstat  # noqa: E402 (rootdir-relative import, as test_crio's tests do)


@pytest.fixture
def proc(tmp_path, monkeypatch):
    monkeypatch.setattr(workload, '_lstat', fake_lstat)
    root = tmp_path / 'proc'
    root.mkdir()
    return root


def process(root, pid, name, ns, dev=None, fds=(), cgroup='0::/init.scope\n', uid=0):
    base = root / str(pid)
    (base / 'ns').mkdir(parents=True)
    (base / 'fd').mkdir()
    os.symlink('mnt:[%d]' % ns, str(base / 'ns' / 'mnt'))
    (base / 'comm').write_text(name + '\n')
    (base / 'status').write_text('Name:\t%s\nUid:\t%d\t%d\t%d\t%d\n' % (name, uid, uid, uid, uid))
    (base / 'cgroup').write_text(cgroup)
    for number, target in enumerate(fds):
        os.symlink(target, str(base / 'fd' / str(number)))
    if dev is not None:
        (base / 'root' / 'dev').mkdir(parents=True)
        for node, content in dev.items():
            (base / 'root' / 'dev' / node).write_text(content)


DOCKER_ID = 'a' * 64


def test_a_container_granted_a_gpu_is_work_even_holding_nothing(proc):
    process(proc, 1, 'init', 1)
    process(proc, 50, 'sshd', 1, fds=['/dev/null'])
    # a sandboxed service: its own mount namespace, but its /dev is the host's (no root/dev of its own here: skipped)
    process(proc, 60, 'logind', 2)
    process(proc, 100, 'python', 3, dev={'nvidia0': 'c 195 0', 'nvidiactl': 'c 195 255', 'null': 'c 1 3'},
            cgroup='0::/system.slice/docker-%s.scope\n' % DOCKER_ID)
    process(proc, 101, 'python', 3, dev={'nvidia0': 'c 195 0'})  # the same container: one entry
    process(proc, 200, 'sh', 4, dev={'null': 'c 1 3', 'nvidia1': 'not a device'})  # a container without a GPU
    work = workload.find(proc=str(proc))
    assert work == {'holders': [], 'containers': [
        {'pid': 100, 'name': 'python', 'container': 'a' * 12, 'devices': ['/dev/nvidia0']}]}
    assert workload.describe(work) == 'container aaaaaaaaaaaa (pid 100, python) with /dev/nvidia0'


def test_a_process_holding_a_device_file_is_work_unless_excluded(proc):
    process(proc, 1, 'init', 1)
    process(proc, 300, 'nvidia-persiste', 1, fds=['/dev/nvidia0', '/dev/nvidiactl'], uid=107)
    process(proc, 400, 'train.py', 1, fds=['/dev/nvidia3', 'socket:[99]'], uid=1000)
    work = workload.find(exclude=(300,), proc=str(proc))
    assert [(h['pid'], h['uid'], h['paths']) for h in work['holders']] == [(400, 1000, ['/dev/nvidia3'])]
    assert 'pid 400 (train.py, uid 1000) holding /dev/nvidia3' in workload.describe(work)


def test_the_policy_decides_and_the_result_says_why(proc):
    process(proc, 1, 'init', 1)
    process(proc, 400, 'train.py', 1, fds=['/dev/nvidia0'])
    assert workload.deferral('force', 'restart', 'Restarting dockerd', proc=str(proc)) is None
    deferred = workload.deferral('defer', 'restart', 'Restarting dockerd', proc=str(proc))
    assert deferred['action'] == 'restart' and deferred['policy'] == 'defer'
    assert deferred['msg'].startswith('Restarting dockerd deferred (disruption: defer): GPU work runs on this host: '
                                      'pid 400 (train.py')
    result = {'changed': True, 'action': 'restart', 'before': 'a', 'after': 'b', 'file_changed': True,
              'actions': ['restart']}
    workload.defer(result, deferred, actions_key='actions')
    assert result == {'changed': False, 'action': 'deferred', 'before': 'a', 'after': 'a', 'file_changed': False,
                      'actions': [], 'deferred': deferred, 'msg': deferred['msg']}
    # no work: nothing deferred
    os.unlink(str(proc / '400' / 'fd' / '0'))
    assert workload.deferral('defer', 'restart', 'Restarting dockerd', proc=str(proc)) is None


def test_many_pieces_of_work_are_listed_ten_and_counted(proc):
    process(proc, 1, 'init', 1)
    for pid in range(500, 515):
        process(proc, pid, 'job', 1, fds=['/dev/nvidia0'])
    words = workload.describe(workload.find(proc=str(proc)))
    assert words.count('holding /dev/nvidia0') == 10 and words.endswith('; and 5 more')


def test_the_persistence_daemon_is_no_work_by_its_user_or_nvidias_binary_never_its_name(proc):
    import pwd
    nobody = pwd.getpwnam('nobody').pw_uid
    process(proc, 1, 'init', 1)
    process(proc, 300, 'nvidia-persiste', 1, fds=['/dev/nvidia0'], uid=nobody)  # its service user
    process(proc, 301, 'nvidia-persiste', 1, fds=['/dev/nvidia1'], uid=0)
    os.symlink('/usr/bin/nvidia-persistenced', str(proc / '301' / 'exe'))  # NVIDIA's binary, as root (GH200)
    process(proc, 302, 'nvidia-persistenced', 1, fds=['/dev/nvidia2'], uid=1000)  # a job that only takes the name
    os.symlink('/home/u/job', str(proc / '302' / 'exe'))
    work = workload.find(proc=str(proc), daemon_users=('nobody',))
    assert [holder['pid'] for holder in work['holders']] == [302]
    assert [holder['pid'] for holder in workload.find(proc=str(proc), daemon_users=())['holders']] == [300, 302]


def test_check_mode_never_defers(proc):
    process(proc, 1, 'init', 1)
    process(proc, 400, 'train.py', 1, fds=['/dev/nvidia0'])
    assert workload.deferral('defer', 'restart', 'Restarting dockerd', proc=str(proc), check_mode=True) is None
    assert workload.deferral('defer', 'restart', 'Restarting dockerd', proc=str(proc)) is not None
