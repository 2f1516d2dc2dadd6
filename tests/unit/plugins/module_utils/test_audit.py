# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The audit trail: the line a concern run makes (pure), the writer (links, modes, rotation) and a concern module's
``execute`` (a line per change, none in check mode or for a run that changed nothing)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import stat

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import HostFileError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.base import Concern
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import audit


def digest(text):
    return hashlib.sha256(text.encode()).hexdigest()


def lines(path):
    with open(path) as handle:
        return [json.loads(line) for line in handle]


def test_a_runtime_registration_by_reload_is_one_line_with_the_files_hashes():
    result = {'changed': True, 'action': 'reload', 'changes': ['runtime "nvidia" added'],
              'diff': {'before': '{}\n', 'after': '{"runtimes": {}}\n', 'before_header': '/etc/docker/daemon.json',
                       'after_header': '/etc/docker/daemon.json'}}
    entry = audit.record('docker', 'docker_runtime', result, 'ctl-20261205T170000Z-42', now=1764954000.25,
                         host='h1', by='alice')
    assert entry == {
        'format': 1, 'time': '2025-12-05T17:00:00.250000Z', 'run_id': 'ctl-20261205T170000Z-42', 'host': 'h1',
        'by': 'alice', 'concern': 'docker', 'module': 'gpufleet.nvidia.docker_runtime', 'actions': ['reload'],
        'changes': ['runtime "nvidia" added'],
        'files': [{'path': '/etc/docker/daemon.json', 'sha256_before': digest('{}\n'),
                   'sha256_after': digest('{"runtimes": {}}\n')}],
        'service_actions': ['reload'], 'policy': 'force'}
    assert audit.line(entry).count('\n') == 1 and json.loads(audit.line(entry)) == entry


def test_only_the_files_that_changed_and_the_service_verbs_among_the_actions():
    result = {'changed': True, 'actions': ['write_unit', 'reload_init', 'restart', 'install_binary', 'start_service'],
              'diff': [{'before': 'a', 'after': 'a', 'after_header': '/same'},
                       {'before': None, 'after': 'new\n', 'after_header': '/etc/init/x.conf'}]}
    entry = audit.record('persistenced', 'persistenced', result)
    assert entry['files'] == [{'path': '/etc/init/x.conf', 'sha256_before': None, 'sha256_after': digest('new\n')}]
    assert entry['service_actions'] == ['reload_init', 'restart', 'start_service']
    assert entry['run_id'] is None and entry['host'] == os.uname()[1]
    # an engine that did nothing to its service
    assert audit.record('docker', 'docker_runtime', {'changed': True, 'action': 'none'})['actions'] == []


def test_append_makes_a_root_only_directory_and_file_and_appends(tmp_path):
    path = str(tmp_path / 'log' / 'gpufleet' / 'audit.jsonl')
    audit.append([{'n': 1}], path)
    audit.append([{'n': 2}, {'n': 3}], path)
    assert [entry['n'] for entry in lines(path)] == [1, 2, 3]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(os.path.dirname(os.path.dirname(path))).st_mode) == 0o700


def test_a_log_with_another_mode_is_put_back_to_0600_through_its_descriptor(tmp_path):
    path = str(tmp_path / 'audit.jsonl')
    with open(path, 'w') as handle:
        handle.write('{"n": 0}\n')
    os.chmod(path, 0o644)
    audit.append([{'n': 1}], path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and len(lines(path)) == 2


def test_a_link_in_the_logs_place_is_never_followed(tmp_path):
    target = tmp_path / 'secret'
    target.write_text('root only\n')
    path = tmp_path / 'audit.jsonl'
    os.symlink(str(target), str(path))
    with pytest.raises(HostFileError, match='never followed'):
        audit.append([{'n': 1}], str(path))
    assert target.read_text() == 'root only\n'


def test_a_second_hard_link_to_the_log_is_refused(tmp_path):
    path = tmp_path / 'audit.jsonl'
    path.write_text('')
    os.link(str(path), str(tmp_path / 'other'))
    with pytest.raises(HostFileError, match='2 links'):
        audit.append([{'n': 1}], str(path))
    assert path.read_text() == ''


def test_a_directory_others_can_write_is_refused_naming_it(tmp_path):
    directory = tmp_path / 'open'
    directory.mkdir()
    os.chmod(str(directory), 0o777)
    with pytest.raises(HostFileError, match=str(directory)):
        audit.append([{'n': 1}], str(directory / 'audit.jsonl'))
    assert os.listdir(str(directory)) == []


def test_past_its_size_the_log_rotates_and_keeps_so_many(tmp_path):
    path = str(tmp_path / 'audit.jsonl')
    for number in range(10):
        audit.append([{'n': number, 'pad': 'x' * 40}], path, max_bytes=120, keep=3)
    names = sorted(os.listdir(str(tmp_path)))
    assert names == ['audit.jsonl', 'audit.jsonl.1', 'audit.jsonl.2', 'audit.jsonl.3']
    numbers = [entry['n'] for name in reversed(names[1:]) for entry in lines(str(tmp_path / name))]
    numbers += [entry['n'] for entry in lines(path)]
    assert numbers == list(range(10))[-len(numbers):] and numbers[-1] == 9
    assert all(stat.S_IMODE(os.stat(str(tmp_path / name)).st_mode) == 0o600 for name in names)


class FakeModule(object):
    def __init__(self, params, check_mode=False, diff=False):
        self.params = params
        self.check_mode = check_mode
        self._diff = diff
        self.warnings = []

    def warn(self, text):
        self.warnings.append(text)


SEEN_DIFF = []


def concern(result):
    def run(module):
        SEEN_DIFF.append(module._diff)  # whether the run computed its diffs
        return dict(result)
    return Concern('docker', 'docker_runtime', {}, run)


CHANGED = {'changed': True, 'action': 'restart', 'diff': {'before': 'a\n', 'after': 'b\n', 'after_header': '/f'}}


def test_a_concern_run_that_changed_the_host_writes_one_line_with_the_run_id(tmp_path):
    path = str(tmp_path / 'audit.jsonl')
    del SEEN_DIFF[:]
    result = concern(CHANGED).execute(FakeModule({'audit_log': path, 'audit_run_id': 'run-7'}))
    assert SEEN_DIFF == [True]  # the diffs are computed for the trail's hashes
    assert 'diff' not in result  # not asked for
    (entry,) = lines(path)
    assert entry['run_id'] == 'run-7' and entry['service_actions'] == ['restart']
    assert entry['files'] == [{'path': '/f', 'sha256_before': digest('a\n'), 'sha256_after': digest('b\n')}]
    result = concern(CHANGED).execute(FakeModule({'audit_log': path, 'audit_run_id': 'run-8'}, diff=True))
    assert result['diff']['after'] == 'b\n' and len(lines(path)) == 2


def test_no_line_in_check_mode_for_an_unchanged_run_or_without_a_log(tmp_path):
    path = str(tmp_path / 'audit.jsonl')
    del SEEN_DIFF[:]
    concern(CHANGED).execute(FakeModule({'audit_log': path}, check_mode=True))
    concern({'changed': False, 'action': 'none'}).execute(FakeModule({'audit_log': path}))
    concern(CHANGED).execute(FakeModule({'audit_log': ''}))
    assert not os.path.exists(path)
    # no trail to write in check mode or without a log: no diffs computed for it
    assert SEEN_DIFF == [False, True, False]


def test_a_trail_that_cannot_be_written_is_a_warning_and_the_change_stands(tmp_path):
    target = tmp_path / 'secret'
    target.write_text('x')
    os.symlink(str(target), str(tmp_path / 'audit.jsonl'))
    module = FakeModule({'audit_log': str(tmp_path / 'audit.jsonl')})
    result = concern(CHANGED).execute(module)
    assert result['changed'] and 'never followed' in result['audit_error']
    assert module.warnings and 'audit trail was not written' in module.warnings[0]
    assert target.read_text() == 'x'


def test_read_only_concerns_have_no_audit_options():
    read_only = Concern('gpu_health', 'gpu_health', {'x': {}}, lambda module: {}, audited=False)
    assert 'audit_log' not in read_only.argument_spec()
    assert set(concern(CHANGED).argument_spec()) == {'role_vars', 'audit_log', 'audit_run_id', 'rollback_store'}
    assert 'rollback_store' not in read_only.argument_spec()
