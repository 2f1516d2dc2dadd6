# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The per-GPU state file format, and the daemon's copy of its parser."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import threading
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils import _persistence_state as state

DAEMON_PATH = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', 'files', 'gpufleet-persistenced')
UUID_A = 'GPU-0000a100-1111-2222-3333-000000000000'
UUID_B = 'GPU-0000a101-1111-2222-3333-000000000001'


def load_daemon():
    loader = SourceFileLoader('gpufleet_persistenced', DAEMON_PATH)
    module = module_from_spec(spec_from_loader('gpufleet_persistenced', loader))
    loader.exec_module(module)
    return module


CORPUS = [
    ('', None),
    ('   \n', None),
    ('{"format_version": 1, "gpus": {}}', None),
    ('{"format_version": 1, "default_mode": "enabled", "gpus": {"%s": {"mode": "disabled", "pci_bus_id": "00000000:01:00.0"}}}'
     % UUID_A, None),
    ('{"format_version": 1, "gpus": {"%s": {"mode": "enabled"}}}' % UUID_B, None),
    ('{not json', 'is not valid JSON'),
    ('[1, 2]', 'must hold a JSON object'),
    ('{"format_version": 2, "gpus": {}}', 'format_version 2'),
    ('{"gpus": {}}', 'format_version None'),
    ('{"format_version": 1, "default_mode": "on"}', 'default_mode must be'),
    ('{"format_version": 1, "gpus": []}', '"gpus" must be an object'),
    ('{"format_version": 1, "gpus": {"%s": {"mode": 1}}}' % UUID_A, 'needs "mode"'),
    ('{"format_version": 1, "gpus": {"%s": "enabled"}}' % UUID_A, 'needs "mode"'),
]


@pytest.mark.parametrize('text,error', CORPUS)
def test_module_utils_and_daemon_parsers_agree(text, error):
    daemon = load_daemon()
    if error is None:
        ours = state.parse(text, '/x/persistence.json')
        theirs = daemon.parse_state(text, '/x/persistence.json')
        assert ours == theirs
        assert ours['format_version'] == 1
    else:
        with pytest.raises(state.StateError) as ours:
            state.parse(text, '/x/persistence.json')
        with pytest.raises(daemon.StateError) as theirs:
            daemon.parse_state(text, '/x/persistence.json')
        assert str(ours.value) == str(theirs.value)
        assert '/x/persistence.json' in str(ours.value) and error in str(ours.value)


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
    with pytest.raises(state.StateError, match='must be "enabled" or "disabled"'):
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


def test_daemon_record_and_module_update_share_the_lock(tmp_path):
    """Concurrent writers (module and daemon) lose no entry."""
    daemon = load_daemon()
    path = str(tmp_path / 'persistence.json')
    uuids = ['GPU-%04d' % i for i in range(40)]

    def module_writer():
        for uuid in uuids[:20]:
            state.update(path, lambda st, u=uuid: state.with_modes(st, {u: ('bus', 'enabled')}))

    def daemon_writer():
        for uuid in uuids[20:]:
            daemon.record_state(path, uuid, 'bus', 'disabled')

    threads = [threading.Thread(target=module_writer), threading.Thread(target=daemon_writer)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    final = state.load(path)
    assert sorted(final['gpus']) == sorted(uuids)
    assert all(final['gpus'][u]['mode'] == 'enabled' for u in uuids[:20])
    assert all(final['gpus'][u]['mode'] == 'disabled' for u in uuids[20:])


def test_unreadable_state_names_the_file(tmp_path):
    path = tmp_path / 'persistence.json'
    path.mkdir()
    with pytest.raises(state.StateError, match=str(path)):
        state.load(str(path))


def test_state_file_that_is_not_utf8_is_a_clear_error(tmp_path):
    path = tmp_path / 'persistence.json'
    path.write_bytes(b'{"format_version": 1, "gpus": {"GPU-\xe9": {"mode": "enabled"}}}')
    with pytest.raises(state.StateError, match='is not UTF-8 text'):
        state.load(str(path))
