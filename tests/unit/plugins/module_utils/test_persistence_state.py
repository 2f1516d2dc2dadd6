# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The per-GPU state file: format, directory, reading and writing.

The bundled daemon's copy of the format, the reading and the writing is held to these
in test_bundled_daemon_copies.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import state
from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import state_dir

UUID_A = 'GPU-0000a100-1111-2222-3333-000000000000'
UUID_B = 'GPU-0000a101-1111-2222-3333-000000000001'


def test_mode_for_prefers_entry_then_default():
    st = state.parse('{"format_version": 1, "default_mode": "disabled", "gpus": {"%s": {"mode": "enabled"}}}' % UUID_A)
    assert state.mode_for(st, UUID_A) == 'enabled'
    assert state.mode_for(st, UUID_B) == 'disabled'
    assert state.mode_for(state.empty_state(), UUID_B) is None


def test_with_modes_is_pure_and_validates():
    before = state.empty_state()
    after = state.with_modes(before, {UUID_A: ('00000000:01:00.0', 'enabled')}, default_mode='disabled')
    assert before == state.empty_state()
    assert after['gpus'][UUID_A] == {'mode': 'enabled', 'pci_bus_id': '00000000:01:00.0'}
    assert after['default_mode'] == 'disabled'
    assert state.with_modes(after, {})['default_mode'] == 'disabled'
    with pytest.raises(state_dir.StateError, match='must be "enabled" or "disabled"'):
        state.with_modes(before, {UUID_A: ('00000000:01:00.0', 'on')})


def test_update_writes_only_on_change_and_atomically(tmp_path):
    path = str(tmp_path / 'persistence.json')

    def change(current):
        return state.with_modes(current, {UUID_A: ('00000000:01:00.0', 'disabled')})

    before, after = state.update(path, lambda st: st)
    assert before == after and not os.path.exists(path)
    state.update(path, change)
    first = os.stat(path)
    assert oct(first.st_mode & 0o777) == '0o644'
    assert json.load(open(path))['gpus'][UUID_A]['mode'] == 'disabled'
    state.update(path, change)
    assert os.stat(path).st_ino == first.st_ino  # unchanged: not rewritten
    assert sorted(os.listdir(str(tmp_path))) == ['persistence.json', 'persistence.json.lock']


def test_unreadable_state_names_the_file(tmp_path):
    path = tmp_path / 'persistence.json'
    path.mkdir()
    with pytest.raises(state_dir.StateError, match=str(path)):
        state.load(str(path))


def test_state_file_that_is_not_utf8_is_a_clear_error(tmp_path):
    path = tmp_path / 'persistence.json'
    path.write_bytes(b'{"format_version": 1, "gpus": {"GPU-\xe9": {"mode": "enabled"}}}')
    with pytest.raises(state_dir.StateError, match='is not UTF-8 text'):
        state.load(str(path))


# --------------------------------------------------------------------------
# Bad input: refused with the file named, never a traceback
# --------------------------------------------------------------------------

def test_a_huge_state_file_is_refused_without_reading_it_all(tmp_path):
    path = tmp_path / 'persistence.json'
    with open(str(path), 'wb') as handle:
        handle.truncate(50 * 1024 * 1024)
    with pytest.raises(state_dir.StateError, match='more than a state file can be'):
        state.load(str(path))


# --------------------------------------------------------------------------
# The state directory: dedicated, or refused (pure: a fake lstat)
# --------------------------------------------------------------------------

class FakeStat(object):
    def __init__(self, kind, uid=0, gid=0, mode=0o755, nlink=1):
        self.st_mode = {'dir': 0o040000, 'file': 0o100000, 'link': 0o120000}[kind] | mode
        self.st_uid, self.st_gid, self.st_nlink = uid, gid, nlink


def fake_fs(entries):
    def lstat(path):
        if path not in entries:
            raise OSError(2, 'No such file or directory', path)
        return entries[path]
    return lstat


ROOT_TREE = {'/': FakeStat('dir'), '/var': FakeStat('dir'), '/var/lib': FakeStat('dir'),
             '/tmp': FakeStat('dir', mode=0o1777)}


def inspect(directory, extra=None, owners=(999,)):
    entries = dict(ROOT_TREE, **(extra or {}))
    return state_dir.inspect_dir(directory, owners, lstat=fake_fs(entries), realpath=lambda p: p, homes=set())


@pytest.mark.parametrize('path,words', [
    ('relative/persistence.json', 'must be an absolute path'),
    ('/var/lib/gpufleet/../../../etc/persistence.json', 'normalised'),
    ('/var/lib/./gpufleet/persistence.json', 'normalised'),
    ('/var/lib//gpufleet/persistence.json', 'normalised'),
    ('//var/lib/gpufleet/persistence.json', 'normalised'),
    ('/etc/persistence.json', 'directly in /etc'),
    ('/persistence.json', 'directly in /,'),
    ('/var/lib/persistence.json', 'directly in /var/lib'),
    ('/usr/local/persistence.json', 'directly in /usr/local'),
    ('/run/persistence.json', 'directly in /run'),
    ('/var/run/persistence.json', 'directly in /var/run'),
    ('/tmp/persistence.json', 'directly in /tmp'),
    ('/home/persistence.json', 'directly in /home'),
    ('/root/persistence.json', 'directly in /root'),
    ('/srv/persistence.json', 'directly in /srv'),
    ('/opt/persistence.json', 'directly in /opt'),
    ('/proc/self/persistence.json', 'directly in /proc/self'),
    ('/var/lib/gpufleet/.gpufleet-state-dir', 'cannot be a state file name'),
    ('/var/lib/gpufleet/persistence.json.lock', 'cannot be a state file name'),
])
def test_check_path_refuses(path, words):
    with pytest.raises(state_dir.StateError) as exc:
        state_dir.check_path(path)
    assert words in str(exc.value)


def test_check_path_refuses_home_directories(monkeypatch):
    monkeypatch.setattr(state_dir, 'home_dirs', lambda: {'/var/lib/postgresql'})
    with pytest.raises(state_dir.StateError, match='directly in /var/lib/postgresql'):
        state_dir.check_path('/var/lib/postgresql/persistence.json')
    assert state_dir.check_path('/var/lib/gpufleet/persistence.json') == '/var/lib/gpufleet'


def test_inspect_missing_directory_plans_its_creation():
    assert inspect('/var/lib/gpufleet') == {'exists': False, 'create': ['/var/lib/gpufleet']}
    assert inspect('/var/lib/gf/state') == {'exists': False, 'create': ['/var/lib/gf', '/var/lib/gf/state']}


def test_inspect_our_directory_and_the_service_users():
    ours = inspect('/var/lib/gpufleet', {'/var/lib/gpufleet': FakeStat('dir'),
                                         '/var/lib/gpufleet/.gpufleet-state-dir': FakeStat('file', mode=0o644)})
    assert ours['exists'] and ours['uid'] == 0 and ours['marked'] is True
    theirs = inspect('/var/lib/gpufleet', {'/var/lib/gpufleet': FakeStat('dir', uid=999, gid=999)})
    assert theirs['uid'] == 999 and theirs['marked'] is False
    admin = inspect('/var/lib/gpufleet', {'/var/lib/gpufleet': FakeStat('dir')})
    assert admin['marked'] is False
    # a marker the service user could have made (not root's, or a link) does not count
    forged = inspect('/var/lib/gpufleet', {'/var/lib/gpufleet': FakeStat('dir'),
                                           '/var/lib/gpufleet/.gpufleet-state-dir': FakeStat('link')})
    assert forged['marked'] is False


@pytest.mark.parametrize('extra,words', [
    ({'/var/lib/gpufleet': FakeStat('link')}, 'is a symbolic link'),
    ({'/var/lib/gpufleet': FakeStat('file')}, 'is not a directory'),
    ({'/var/lib/gpufleet': FakeStat('dir', uid=4242)}, 'owned by uid 4242'),
    ({'/var/lib': FakeStat('dir', uid=65534)}, 'is owned by nobody (uid 65534), not root'),
    ({'/var/lib': FakeStat('dir', mode=0o777)}, 'writable by group or others'),
    ({'/var/lib': FakeStat('dir', mode=0o775)}, 'writable by group or others'),
    ({'/var/lib': FakeStat('file')}, 'is not a directory'),
])
def test_inspect_refuses_a_directory_that_is_not_dedicated(extra, words):
    with pytest.raises(state_dir.StateError) as exc:
        inspect('/var/lib/gpufleet', extra)
    assert words in str(exc.value) and '/var/lib/gpufleet' in str(exc.value)


def test_inspect_accepts_a_sticky_world_writable_ancestor():
    assert inspect('/tmp/gf/state')['create'] == ['/tmp/gf', '/tmp/gf/state']


def test_inspect_resolves_parent_links_and_checks_the_target():
    entries = dict(ROOT_TREE, **{'/srv': FakeStat('dir')})
    with pytest.raises(state_dir.StateError, match='system or home directory'):
        state_dir.inspect_dir('/data/srv', [999], lstat=fake_fs(entries),
                              realpath=lambda p: '/' if p == '/data' else p, homes=set())


def test_service_owners():
    accounts = {'nvidia-persistenced': 998, 'nobody': 65534}

    class Pw(object):
        def __init__(self, uid):
            self.pw_uid = uid

    def getpwnam(name):
        return Pw(accounts[name])

    run_dir = {'/r': FakeStat('dir', uid=65534)}
    assert state_dir.service_owners('nobody', '/r', getpwnam, fake_fs(run_dir)) == {65534}
    assert state_dir.service_owners(None, '/r', getpwnam, fake_fs(run_dir)) == {65534, 998}
    assert state_dir.service_owners(None, '/r', getpwnam, fake_fs({'/r': FakeStat('link', uid=4242)})) == {998}
    with pytest.raises(state_dir.StateError, match='service_user ghost does not exist'):
        state_dir.service_owners('ghost', '/r', getpwnam, fake_fs(run_dir))


# --------------------------------------------------------------------------
# Creating, handing over, writing (real files, as root)
# --------------------------------------------------------------------------

def test_create_marks_and_hand_over_changes_only_ours(tmp_path):
    directory = str(tmp_path / 'gf')
    facts = state_dir.inspect_dir(directory, [65534])
    os.close(state_dir.create_dir(directory, facts))
    assert os.stat(os.path.join(directory, state_dir.MARKER)).st_uid == 0
    state_dir.hand_over(directory, [65534], 65534, 65534, may_chown=False)  # the marker says it is ours
    st = os.stat(directory)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (65534, 65534, 0o755)
    admin = str(tmp_path / 'admin')
    os.mkdir(admin)
    with pytest.raises(state_dir.StateError, match='was not created by gpufleet.nvidia'):
        state_dir.hand_over(admin, [65534], 65534, 65534, may_chown=False)
    assert os.stat(admin).st_uid == 0


def test_write_failure_leaves_the_file_and_no_temp_file(tmp_path, monkeypatch):
    path = str(tmp_path / 'persistence.json')
    state.update(path, lambda st: state.with_modes(st, {UUID_A: ('b', 'enabled')}))
    before = open(path, 'rb').read()
    real_write = os.write

    def full(fd, data):
        if os.fstat(fd).st_size > 4:
            raise OSError(28, 'No space left on device')
        return real_write(fd, data[:5])

    monkeypatch.setattr(os, 'write', full)
    with pytest.raises(state_dir.StateError) as exc:
        state.update(path, lambda st: state.with_modes(st, {UUID_A: ('b', 'disabled')}))
    monkeypatch.setattr(os, 'write', real_write)
    assert path in str(exc.value) and 'No space left' in str(exc.value) and 'left as it was' in str(exc.value)
    assert open(path, 'rb').read() == before
    assert sorted(os.listdir(str(tmp_path))) == ['persistence.json', 'persistence.json.lock']


def test_take_back_returns_the_directory_and_the_users_files_to_root(tmp_path):
    """Before the service user is removed: nothing may stay owned by a uid about to be free."""
    if os.geteuid() != 0:
        pytest.fail('needs root (chown)')
    directory = str(tmp_path / 'gpufleet')
    os.close(state_dir.create_dir(directory, state_dir.inspect_dir(directory, [])))
    state_dir.hand_over(directory, [4242], 4242, 4242, may_chown=True)
    path = os.path.join(directory, 'persistence.json')
    with open(path, 'w') as handle:
        handle.write('{}')
    os.chown(path, 4242, 4242)
    os.unlink(os.path.join(directory, state_dir.MARKER))  # the user removed root's marker
    os.symlink('/etc/hostname', os.path.join(directory, 'link'))
    os.lchown(os.path.join(directory, 'link'), 4242, 4242)
    root_file = os.path.join(directory, 'roots')
    with open(root_file, 'w') as handle:
        handle.write('x')
    os.chown(root_file, 1, 1)  # someone else's file: left as it is

    assert state_dir.take_back(directory, 4242) is True
    st = os.stat(directory)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (0, 0, 0o755)
    assert os.stat(path).st_uid == 0
    assert os.lstat(os.path.join(directory, 'link')).st_uid == 4242  # a link is never followed or changed
    assert os.stat('/etc/hostname').st_uid == 0
    assert os.stat(root_file).st_uid == 1
    assert state_dir.inspect_dir(directory, [])['marked'] is True  # a later run may hand it over again
    assert state_dir.take_back(directory, 4242) is False  # not the user's any more: nothing to do
