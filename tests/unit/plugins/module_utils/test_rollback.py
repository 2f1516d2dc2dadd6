# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rollback store (host.rollback): a changing concern run saves each file's text before and the hash after, and
a restore puts them back byte for byte, removes what the run created, leaves what changed since, and brings the
services back with their files (systemd's commands recorded from a fake run_command)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import stat

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import HostFileError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.base import Concern
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import rollback
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import systems
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init.service import Service

RUN = 'ctl-20261205T170000Z-4242'


def digest(data):
    return hashlib.sha256(data).hexdigest()


class Host(object):
    """A host in ``tmp``: its files, systemd units under ``tmp/units`` (a Systemd whose unit directory is there), and
    a run_command that records every argv (``failing``: the verbs that fail)."""

    def __init__(self, tmp, failing=()):
        self.tmp = tmp
        self.store = str(tmp / 'store')
        self.argv = []
        self.failing = failing
        self.init = systems.Systemd()
        self.init.unit = str(tmp / 'units' / '%s.service')
        (tmp / 'units').mkdir()

    def path(self, name):
        return str(self.tmp / name)

    def unit(self, name):
        return self.init.unit % name

    def run(self, argv):
        self.argv.append(argv[1:])
        return (1, '', 'Job failed') if argv[1] in self.failing else (0, '', '')

    def service(self, name, init_system=None):
        svc = Service(init_system or 'systemd', name or 'init', self.run, {'systemctl': '/bin/systemctl'})
        svc.init = self.init
        return svc

    def restore(self, check_mode=False, run_id=RUN):
        return rollback.restore(run_id, self.store, self.service, check_mode)


def write(path, data):
    with open(path, 'wb') as handle:
        handle.write(data)


def read(path):
    with open(path, 'rb') as handle:
        return handle.read()


def change(host, concern, path, after, service=None, actions=(), init_system=None):
    """A concern run that changed ``path`` to ``after`` (bytes; None: removed it) and saved its record."""
    before = read(path).decode('utf-8') if os.path.exists(path) else ''
    if after is None:
        os.unlink(path)
    else:
        write(path, after)
    result = {'changed': True, 'actions': list(actions),
              'diff': {'before': before, 'after': '' if after is None else after.decode('utf-8'),
                       'before_header': path, 'after_header': path}}
    if init_system:
        result['init_system'] = init_system
    return rollback.save(RUN, concern, concern + '_module', result, {'service_name': service}, host.store)


@pytest.fixture
def host(tmp_path):
    return Host(tmp_path)


# ---- the store ------------------------------------------------------------------------------------------------

def test_a_record_is_one_json_line_in_a_root_only_file_named_by_a_hash_of_the_run(host):
    path = host.path('daemon.json')
    write(path, b'{}\n')
    entry = change(host, 'docker', path, b'{"runtimes": {}}\n', service='docker', actions=['restart'])
    name = 'run-%s.jsonl' % digest(RUN.encode())
    assert os.listdir(host.store) == [name] and RUN not in name
    assert stat.S_IMODE(os.stat(host.store).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(os.path.join(host.store, name)).st_mode) == 0o600
    with open(os.path.join(host.store, name)) as handle:
        (line,) = [json.loads(text) for text in handle]
    assert line == entry
    assert line['files'] == [{'path': path, 'before': '{}\n', 'sha256_after': digest(b'{"runtimes": {}}\n')}]
    assert (line['service'], line['init_system'], line['service_actions']) == ('docker', None, ['restart'])
    assert (line['run_id'], line['concern'], line['module']) == (RUN, 'docker', 'gpufleet.nvidia.docker_module')


def test_a_created_file_has_no_text_before_and_a_removed_one_no_hash_after(host):
    created, removed = host.path('created.yaml'), host.path('removed.conf')
    write(removed, b'old\n')
    assert change(host, 'cdi', created, b'spec\n')['files'][0]['before'] is None  # its diff's before is ''
    entry = change(host, 'persistenced', removed, None)
    assert entry['files'] == [{'path': removed, 'before': 'old\n', 'sha256_after': None}]


def test_what_is_no_file_the_run_wrote_is_never_recorded(host):
    directory = host.path('char')
    os.mkdir(directory)
    result = {'changed': True, 'diff': [
        {'before': '', 'after': '195:0 -> ../nvidia0\n', 'before_header': directory, 'after_header': directory},
        {'before': 'GPU 0 disabled\n', 'after': 'GPU 0 enabled\n', 'before_header': 'GPU persistence modes'},
        {'before': 'a\n', 'after': 'b\n', 'after_header': host.path('missing.conf')}]}
    assert rollback.save(RUN, 'device_links', 'device_links', result, {}, host.store) is None
    assert not os.path.exists(host.store)
    path = host.path('real.conf')
    write(path, b'b\n')
    result['diff'].append({'before': 'a\n', 'after': 'b\n', 'after_header': path})
    entry = rollback.save(RUN, 'device_links', 'device_links', result, {}, host.store)
    assert [one['path'] for one in entry['files']] == [path]
    assert [one['path'] for one in entry['skipped']] == [directory, host.path('missing.conf')]
    assert 'not a regular file' in entry['skipped'][0]['why']


def test_no_run_id_or_no_change_saves_nothing(host):
    path = host.path('f')
    write(path, b'b\n')
    result = {'changed': True, 'diff': {'before': 'a\n', 'after': 'b\n', 'after_header': path}}
    assert rollback.save(None, 'docker', 'docker_runtime', result, {}, host.store) is None
    assert rollback.save(RUN, 'docker', 'docker_runtime', {'changed': True}, {}, host.store) is None
    assert not os.path.exists(host.store)


def test_a_record_too_large_is_refused_naming_the_concern(host, monkeypatch):
    monkeypatch.setattr(rollback, 'MAX_RECORD', 300)
    path = host.path('big.toml')
    write(path, b'x' * 400)
    with pytest.raises(HostFileError, match='rollback record of containerd is .* more than the 300'):
        change(host, 'containerd', path, b'y' * 400)
    assert not os.path.exists(host.store) or os.listdir(host.store) == []


def test_the_newest_runs_are_kept(host):
    path = host.path('f')
    write(path, b'0\n')
    for number in range(12):
        write(path, b'%d\n' % (number + 1))
        result = {'changed': True, 'diff': {'before': '%d\n' % number, 'after': '%d\n' % (number + 1),
                                            'after_header': path}}
        rollback.save('run-%d' % number, 'docker', 'docker_runtime', result, {}, host.store, keep=3)
        os.utime(os.path.join(host.store, rollback.run_file('run-%d' % number)), (number, number))
    assert sorted(os.listdir(host.store)) == sorted(rollback.run_file('run-%d' % n) for n in (9, 10, 11))


def test_a_link_in_place_of_the_runs_file_is_never_followed(host):
    os.mkdir(host.store, 0o700)
    target = host.path('secret')
    write(target, b'root only\n')
    os.symlink(target, os.path.join(host.store, rollback.run_file(RUN)))
    path = host.path('f')
    write(path, b'a\n')
    with pytest.raises(HostFileError, match='never followed'):
        change(host, 'docker', path, b'b\n')
    with pytest.raises(HostFileError, match='never followed'):
        host.restore()
    assert read(target) == b'root only\n'


def test_a_store_anyone_else_can_open_is_refused(host):
    os.mkdir(host.store)
    os.chmod(host.store, 0o750)
    path = host.path('f')
    write(path, b'a\n')
    with pytest.raises(HostFileError, match='refusing to use the directory %s' % host.store):
        change(host, 'docker', path, b'b\n')
    assert os.listdir(host.store) == []


# ---- restoring files -----------------------------------------------------------------------------------------------

def test_a_run_with_no_record_changes_nothing(host):
    result = host.restore()
    assert result['changed'] is False and result['records'] == 0 and 'no rollback record of run' in result['msg']
    assert not os.path.exists(host.store)  # not even made


@pytest.mark.parametrize('before', [b'{\n  "a": 1\n}', b'line\r\nother\r\n', '\u00e9t\u00e9 \u2603\n'.encode(), b'',
                                    b'\x00nul\n'])
def test_a_file_is_restored_byte_identical_with_its_mode_and_owner(host, before):
    path = host.path('config')
    write(path, before or b'x')
    if not before:
        write(path, b'')  # an empty file the run filled: shown as created (see the notes); removed
    os.chmod(path, 0o640)
    change(host, 'docker', path, b'{"runtimes": {"nvidia": {}}}\n')
    result = host.restore()
    assert result['changed'] is True and result['errors'] == [] and result['conflicts'] == []
    if before:
        assert read(path) == before and result['restored'] == [path]
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    else:
        assert not os.path.exists(path) and result['removed'] == [path]


def test_a_created_file_is_removed_and_a_removed_one_made_again(host):
    created, removed = host.path('nvidia.yaml'), host.path('gone.conf')
    write(removed, b'kept\n')
    change(host, 'cdi', created, b'spec\n')
    change(host, 'persistenced', removed, None)
    result = host.restore()
    assert result['removed'] == [created] and result['restored'] == [removed]
    assert not os.path.exists(created) and read(removed) == b'kept\n'
    assert stat.S_IMODE(os.stat(removed).st_mode) == 0o644


def test_two_runs_on_one_file_are_put_back_newest_first(host):
    path = host.path('config.toml')
    write(path, b'version = 2\n')
    change(host, 'containerd', path, b'version = 2\n[runtime]\n')
    change(host, 'cdi', path, b'version = 2\n[runtime]\ncdi = true\n')
    result = host.restore()
    assert read(path) == b'version = 2\n' and result['restored'] == [path] and result['records'] == 2


def test_a_file_changed_since_the_run_is_a_conflict_left_as_it_is(host):
    path, other = host.path('daemon.json'), host.path('other.json')
    write(path, b'{}\n')
    write(other, b'1\n')
    change(host, 'docker', path, b'{"a": 1}\n')
    change(host, 'docker', other, b'2\n')
    write(path, b'{"by": "hand"}\n')
    result = host.restore()
    assert read(path) == b'{"by": "hand"}\n' and read(other) == b'1\n'
    (conflict,) = result['conflicts']
    assert conflict['path'] == path and 'changed since the run' in conflict['problem'] and digest(b'{"a": 1}\n') in \
        conflict['problem']
    assert result['restored'] == [other] and result['errors'] == []


def test_a_file_that_is_not_utf8_now_is_a_conflict_left_byte_identical(host):
    # The concerns read every file as UTF-8 and refuse any other: a record's texts are UTF-8, so is what they left.
    path = host.path('daemon.json')
    write(path, b'{}\n')
    change(host, 'docker', path, b'{"a": 1}\n')
    write(path, b'\xff\xfe binary\n')
    result = host.restore()
    assert result['changed'] is False and 'not valid UTF-8' in result['conflicts'][0]['problem']
    assert read(path) == b'\xff\xfe binary\n'


def test_a_second_restore_changes_nothing(host):
    path, created = host.path('daemon.json'), host.path('new.conf')
    write(path, b'{}')
    change(host, 'docker', path, b'{"a": 1}\n', service='docker', actions=['restart'])
    change(host, 'cdi', created, b'x\n')
    assert host.restore()['changed'] is True
    del host.argv[:]
    again = host.restore()
    assert again['changed'] is False and again['restored'] == again['removed'] == again['conflicts'] == []
    assert again['services'] == [] and host.argv == [] and read(path) == b'{}'


def test_check_mode_changes_nothing_and_says_what_it_would_do(host):
    path, created = host.path('daemon.json'), host.path('new.conf')
    write(path, b'{}\n')
    change(host, 'docker', path, b'{"a": 1}\n', service='docker', actions=['restart'])
    change(host, 'cdi', created, b'x\n')
    listing = sorted(os.listdir(str(host.tmp)))
    result = host.restore(check_mode=True)
    assert result['changed'] is True and result['restored'] == [path] and result['removed'] == [created]
    assert result['services'] == ['restart docker'] and host.argv == []
    assert read(path) == b'{"a": 1}\n' and read(created) == b'x\n' and sorted(os.listdir(str(host.tmp))) == listing
    assert {(one['before_header'], one['before'], one['after']) for one in result['diff']} == {
        (path, '{"a": 1}\n', '{}\n'), (created, 'x\n', '')}


# ---- services ------------------------------------------------------------------------------------------------------

def test_an_engine_the_run_restarted_is_restarted_with_its_file_and_one_it_reloaded_reloaded(host):
    daemon, config = host.path('daemon.json'), host.path('config.toml')
    write(daemon, b'{}\n')
    write(config, b'version = 2\n')
    change(host, 'docker', daemon, b'{"a": 1}\n', service='docker', actions=['restart'])
    change(host, 'containerd', config, b'version = 3\n', service='containerd', actions=['reload'])
    result = host.restore()
    assert host.argv == [['reset-failed', 'docker'], ['restart', 'docker'], ['reload', 'containerd']]
    assert result['services'] == ['restart docker', 'reload containerd']


def test_a_service_two_changes_touched_is_brought_back_once_the_stronger_way(host):
    daemon, drop_in = host.path('daemon.json'), host.path('flags.conf')
    write(daemon, b'{}\n')
    write(drop_in, b'a\n')
    change(host, 'docker', daemon, b'{"a": 1}\n', service='docker', actions=['reload'])
    change(host, 'docker', drop_in, b'b\n', service='docker', actions=['restart'])
    assert host.restore()['services'] == ['restart docker']
    assert host.argv == [['reset-failed', 'docker'], ['restart', 'docker']]


def test_without_a_service_maker_only_the_files_are_put_back(host):
    path = host.path('daemon.json')
    write(path, b'{}\n')
    change(host, 'docker', path, b'{"a": 1}\n', service='docker', actions=['restart'])
    result = rollback.restore(RUN, host.store, None)
    assert read(path) == b'{}\n' and result['services'] == [] and result['errors'] == []


def test_a_changed_unit_reloads_systemd_before_its_service_restarts(host):
    unit = host.unit('nvidia-persistenced')
    write(unit, b'[Service]\nExecStart=/usr/bin/nvidia-persistenced\n')
    change(host, 'persistenced', unit, b'[Service]\nExecStart=/usr/local/sbin/gpufleet-persistenced\n',
           service='nvidia-persistenced', actions=['write_unit', 'reload_init', 'restart'], init_system='systemd')
    result = host.restore()
    assert host.argv == [['daemon-reload'], ['reset-failed', 'nvidia-persistenced'], ['restart', 'nvidia-persistenced']]
    assert result['services'] == ['reload_init systemd', 'restart nvidia-persistenced']


def test_a_drop_in_counts_as_a_definition_and_a_service_the_run_made_is_stopped_before_its_unit_goes(host):
    drop_in_dir = host.unit('docker') + '.d'
    os.mkdir(drop_in_dir)
    drop_in = os.path.join(drop_in_dir, 'gpufleet.conf')
    change(host, 'cdi', drop_in, b'[Unit]\nBefore=docker.service\n', actions=['write_dropin', 'reload_init'])
    unit = host.unit('nvidia-persistenced')
    change(host, 'persistenced', unit, b'[Service]\n', service='nvidia-persistenced',
           actions=['write_unit', 'reload_init', 'enable', 'start'])
    result = host.restore()
    assert not os.path.exists(unit) and not os.path.exists(drop_in)
    assert host.argv == [['stop', 'nvidia-persistenced'], ['daemon-reload']]
    assert result['services'] == ['stop nvidia-persistenced', 'reload_init systemd']


def test_a_service_the_run_stopped_is_started_with_its_unit_made_again(host):
    unit = host.unit('nvidia-persistenced')
    write(unit, b'[Service]\n')
    change(host, 'persistenced', unit, None, service='nvidia-persistenced',
           actions=['stop', 'disable', 'remove_unit', 'reload_init'])
    host.restore()
    assert read(unit) == b'[Service]\n'
    assert host.argv == [['daemon-reload'], ['start', 'nvidia-persistenced']]


def test_a_deferred_change_or_a_conflict_touches_no_service(host):
    deferred, conflicted = host.path('daemon.json'), host.path('config.toml')
    write(deferred, b'{}\n')
    write(conflicted, b'a\n')
    change(host, 'docker', deferred, b'{"a": 1}\n', service='docker', actions=['deferred'])
    change(host, 'containerd', conflicted, b'b\n', service='containerd', actions=['restart'])
    write(conflicted, b'c\n')
    result = host.restore()
    assert read(deferred) == b'{}\n' and host.argv == [] and result['services'] == []


def test_a_file_changed_while_the_rollback_runs_is_left_and_its_service_untouched(host):
    path = host.path('daemon.json')
    write(path, b'{}\n')
    change(host, 'docker', path, b'{"a": 1}\n', service='docker', actions=['restart'])
    reads = []

    def racing_read(name):
        reads.append(name)
        if len(reads) > 1:  # under the lock, before the write: another writer was faster
            write(name, b'{"b": 2}\n')
        return rollback.read_host_file(name)
    result = rollback.restore(RUN, host.store, host.service, read=racing_read)
    assert read(path) == b'{"b": 2}\n' and result['restored'] == [] and host.argv == [] and result['diff'] == []
    assert 'changed while the rollback ran' in result['errors'][0]


def test_a_service_that_does_not_come_back_is_an_error_after_everything_else(tmp_path):
    host = Host(tmp_path, failing=('restart',))
    daemon, config = host.path('daemon.json'), host.path('config.toml')
    write(daemon, b'{}\n')
    write(config, b'a\n')
    change(host, 'docker', daemon, b'{"a": 1}\n', service='docker', actions=['restart'])
    change(host, 'containerd', config, b'b\n', service='containerd', actions=['reload'])
    result = host.restore()
    assert read(daemon) == b'{}\n' and read(config) == b'a\n'
    assert result['services'] == ['reload containerd'] and len(result['errors']) == 1
    assert 'restart docker failed' in result['errors'][0] and 'Job failed' in result['errors'][0]
    assert 'failed: restart docker failed' in result['msg']


def test_the_audit_line_of_a_restore_names_the_run_and_its_actions(host):
    path = host.path('daemon.json')
    write(path, b'{}\n')
    change(host, 'docker', path, b'{"a": 1}\n', service='docker', actions=['restart'])
    entry = rollback.audit_entry(host.restore(), 'ctl-later-1', by='alice')
    assert (entry['concern'], entry['module'], entry['rollback_of'], entry['run_id']) == (
        'rollback', 'gpufleet.nvidia.rollback', RUN, 'ctl-later-1')
    assert entry['actions'] == ['restore_files', 'restart'] and entry['service_actions'] == ['restart']
    assert entry['files'] == [{'path': path, 'sha256_before': digest(b'{"a": 1}\n'), 'sha256_after': digest(b'{}\n')}]


# ---- Concern.execute -----------------------------------------------------------------------------------------------

class FakeModule(object):
    def __init__(self, params, check_mode=False):
        self.params = params
        self.check_mode = check_mode
        self._diff = False
        self.warnings = []

    def warn(self, text):
        self.warnings.append(text)


def concern_writing(path, after):
    def run(module):
        before = read(path).decode() if os.path.exists(path) else ''
        if not module.check_mode:
            write(path, after)
        result = {'changed': True, 'action': 'restart'}
        if module._diff:
            result['diff'] = {'before': before, 'after': after.decode(), 'before_header': path, 'after_header': path}
        return result
    return Concern('docker', 'docker_runtime', {}, run)


def test_a_changing_concern_run_saves_its_record_and_the_restore_puts_it_back(host):
    path = host.path('daemon.json')
    write(path, b'{"log-level": "warn"}')
    params = {'audit_log': '', 'rollback_store': host.store, 'audit_run_id': RUN, 'service_name': 'docker'}
    result = concern_writing(path, b'{"log-level": "warn", "runtimes": {}}\n').execute(FakeModule(params))
    assert 'diff' not in result and 'rollback_error' not in result
    host.restore()
    assert read(path) == b'{"log-level": "warn"}' and host.argv == [['reset-failed', 'docker'], ['restart', 'docker']]


def test_no_record_in_check_mode_or_without_a_store(host):
    path = host.path('daemon.json')
    write(path, b'{}')
    concern_writing(path, b'{"a": 1}').execute(FakeModule({'rollback_store': host.store, 'audit_run_id': RUN},
                                                          check_mode=True))
    concern_writing(path, b'{"a": 1}').execute(FakeModule({'rollback_store': '', 'audit_run_id': RUN}))
    assert not os.path.exists(host.store)


def test_a_record_that_cannot_be_saved_is_a_warning_and_the_change_stands(host):
    os.symlink(host.path('elsewhere'), host.store)
    path = host.path('daemon.json')
    write(path, b'{}')
    module = FakeModule({'rollback_store': host.store, 'audit_run_id': RUN})
    result = concern_writing(path, b'{"a": 1}').execute(module)
    assert result['changed'] and read(path) == b'{"a": 1}' and 'rollback_error' in result
    assert module.warnings and 'nothing was saved to roll this change back' in module.warnings[0]


def test_concern_modules_have_the_store_option():
    spec = Concern('docker', 'docker_runtime', {}, None).argument_spec()
    assert spec['rollback_store'] == {'type': 'path', 'default': rollback.DEFAULT_STORE}
    # not under the persistence state directory, which the daemon's service user owns
    assert not rollback.DEFAULT_STORE.startswith('/var/lib/gpufleet/')
