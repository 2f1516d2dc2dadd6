# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet's drift report (playbooks/drift.yml) from node_state results."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._drift import drift_report

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import HostFileError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files


def verdict(result, converged=True, failed=False):
    return {'converged': converged, 'failed': failed, 'result': result, 'changes': ''}


CONVERGED = {
    'converged': True, 'drifted': [],
    'concerns': {
        'persistenced': verdict({'init_system': 'systemd', 'daemon': 'driver', 'actions': []}),
        'gpu_persistence': verdict({'gpus': [{'index': 0, 'before': 'enabled', 'after': 'enabled', 'changed': False}]}),
        'docker': verdict({'action': 'none'}),
    }}

DRIFTED = {
    'converged': False, 'drifted': ['persistenced', 'gpu_persistence', 'containerd'],
    'concerns': {
        'persistenced': verdict({'init_system': 'upstart', 'daemon': 'driver', 'actions': ['start']}, False),
        'gpu_persistence': verdict({'gpus': [{'index': 0, 'before': 'enabled', 'after': 'enabled', 'changed': False},
                                             {'index': 1, 'before': 'disabled', 'after': 'enabled', 'changed': True}]},
                                   False),
        'containerd': verdict({'action': 'restart'}, False),
        'docker': verdict({'action': 'none'}),
    }}

BROKEN = {
    'converged': False, 'drifted': ['persistenced'],
    'concerns': {'persistenced': verdict({'msg': 'h3: /usr/bin/nvidia-persistenced is missing'}, False, True)}}


def test_one_row_per_host_and_a_table():
    report = drift_report({'h2': DRIFTED, 'h1': CONVERGED, 'h3': BROKEN, 'h4': None}, {'h4': 'unreachable: ssh'})
    rows = dict((row['host'], row) for row in report['hosts'])
    assert [row['host'] for row in report['hosts']] == ['h1', 'h2', 'h3', 'h4']
    assert rows['h1']['status'] == 'converged' and rows['h1']['daemon'] == 'driver ok'
    assert rows['h1']['gpus_off'] == [] and rows['h1']['engines_off'] == []
    assert rows['h2']['status'] == 'drifted' and rows['h2']['init'] == 'upstart' and rows['h2']['daemon'] == 'start'
    assert rows['h2']['gpus_off'] == ['1:disabled->enabled'] and rows['h2']['engines_off'] == ['containerd:restart']
    assert rows['h3']['status'] == 'failed' and rows['h3']['errors'] == {
        'persistenced': 'h3: /usr/bin/nvidia-persistenced is missing'}
    assert rows['h4']['status'] == 'failed' and rows['h4']['errors'] == {'host': 'unreachable: ssh'}
    assert report['counts'] == {'converged': 1, 'drifted': 1, 'failed': 2}
    table = report['table']
    assert table[0].split() == ['host', 'status', 'init', 'daemon', 'gpus_off', 'engines_off', 'health']
    assert table[2].split() == ['h2', 'drifted', 'upstart', 'start', '1:disabled->enabled', 'containerd:restart', 'n/a']
    assert table[-2] == 'h3 persistenced: h3: /usr/bin/nvidia-persistenced is missing'


def test_a_host_without_a_result_and_no_error_is_unreachable():
    report = drift_report({'h9': None})
    assert report['hosts'][0]['status'] == 'unreachable'


def test_a_host_that_failed_has_its_message_and_no_state():
    # the registered result of a node_state that failed (drift.yml's rescue then names the host's error) is not read
    report = drift_report({'h1': CONVERGED, 'h2': DRIFTED}, {'h2': 'node_state: boom'})
    rows = dict((row['host'], row) for row in report['hosts'])
    assert rows['h2']['status'] == 'failed' and rows['h2']['errors'] == {'host': 'node_state: boom'}
    assert rows['h1']['status'] == drift_report({'h1': CONVERGED})['hosts'][0]['status']
    assert report['counts']['failed'] == 1


def test_the_report_file_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    from ansible_collections.gpufleet.nvidia.plugins.action import drift_report as action
    path = str(tmp_path / 'drift.json')
    report = drift_report({'h1': CONVERGED})
    action.write_report(path, report)
    assert json.load(open(path)) == report
    assert oct(os.stat(path).st_mode & 0o777) == '0o644'
    assert os.listdir(str(tmp_path)) == ['drift.json']

    def broken(*args, **kwargs):
        raise IOError(28, 'No space left on device')
    monkeypatch.setattr(files, 'write_all', broken)
    with pytest.raises(HostFileError, match='drift.json: cannot write: No space left on device'):
        action.write_report(path, drift_report({'h2': DRIFTED}))
    # the old report stays, and no temp file is left
    assert json.load(open(path)) == report
    assert os.listdir(str(tmp_path)) == ['drift.json']


def test_the_report_replaces_a_link_at_its_name_and_never_writes_through_it(tmp_path):
    from ansible_collections.gpufleet.nvidia.plugins.action import drift_report as action
    victim = tmp_path / 'victim'
    victim.write_text('root only')
    victim.chmod(0o600)
    path = tmp_path / 'drift.json'
    path.symlink_to(victim)
    action.write_report(str(path), drift_report({'h1': CONVERGED}))
    assert not path.is_symlink() and json.loads(path.read_text())['hosts'][0]['host'] == 'h1'
    assert victim.read_text() == 'root only' and oct(victim.stat().st_mode & 0o777) == '0o600'


@pytest.mark.parametrize('make', ['fifo', 'directory'])
def test_a_device_pipe_or_directory_at_the_path_is_refused_and_left_alone(tmp_path, make):
    # /dev/null given as the report's path was replaced by a regular file holding the report (the rename): a
    # pipe stands for a device here (no device node is made by a test).
    from ansible_collections.gpufleet.nvidia.plugins.action import drift_report as action
    path = tmp_path / 'sink'
    os.mkfifo(str(path)) if make == 'fifo' else path.mkdir()
    with pytest.raises(HostFileError, match='sink is not a regular file \\((a pipe|a directory)\\).*empty path'):
        action.write_report(str(path), drift_report({'h1': CONVERGED}))
    assert (path.is_fifo() if make == 'fifo' else path.is_dir()) and os.listdir(str(tmp_path)) == ['sink']


# A host's result is untrusted data: whatever shape it has, the other hosts keep their rows and the table its lines.
HOSTILE_SHAPES = [
    'x', ['concerns'], 42,
    {'concerns': 'x'},
    {'concerns': ['persistenced']},
    {'concerns': {'persistenced': 'x'}},
    {'concerns': {'persistenced': {'result': 'x', 'converged': False}}},
    {'concerns': {'persistenced': {'result': {'actions': 'start'}, 'converged': False}}},
    {'concerns': {'persistenced': {'result': {'msg': {'a': 1}}, 'failed': True}}},
    {'concerns': {'persistenced': {'result': {}, 'converged': 'yes'}}},
    {'concerns': {'gpu_persistence': {'result': {'gpus': 'x'}}}},
    {'concerns': {'gpu_persistence': {'result': {'gpus': ['x']}}}},
    {'concerns': {'gpu_persistence': {'result': {'gpus': [{'index': [0], 'changed': True}]}}}},
    {'concerns': {'docker': {'result': {'action': ['reload']}, 'converged': False}}},
    {'drifted': 'persistenced', 'concerns': {}},
    {'converged': 'no', 'concerns': {}},
]


@pytest.mark.parametrize('hostile', HOSTILE_SHAPES, ids=[repr(shape)[:60] for shape in HOSTILE_SHAPES])
def test_a_host_result_of_the_wrong_shape_fails_that_host_alone(hostile):
    report = drift_report({'h1': CONVERGED, 'bad': hostile, 'h2': DRIFTED, 'h4': None}, {'h4': 'unreachable: ssh'})
    honest = drift_report({'h1': CONVERGED, 'h2': DRIFTED, 'h4': None}, {'h4': 'unreachable: ssh'})
    rows = dict((row['host'], row) for row in report['hosts'])
    assert rows['bad']['status'] == 'failed'
    assert rows['bad']['errors']['host'].startswith('its node_state result was malformed (')
    assert [row for row in report['hosts'] if row['host'] != 'bad'] == honest['hosts']
    assert report['counts'] == dict(honest['counts'], failed=honest['counts']['failed'] + 1)
    assert len(report['table']) == len(honest['table']) + 2  # its row and its error line


def test_a_failure_message_that_is_not_text_is_reported_as_malformed():
    row = drift_report({'h1': None}, {'h1': {'msg': 'x'}})['hosts'][0]
    assert row['status'] == 'failed'
    assert row['errors'] == {'host': 'its failure message was malformed (a mapping, not a string)'}


FORGED = 'gone\nh0            converged    systemd  driver ok  -  -\r\x1b[2K\x1b[1A\u202e'
ESCAPED = 'gone\\nh0            converged    systemd  driver ok  -  -\\r\\x1b[2K\\x1b[1A\\u202e'


def test_host_text_is_printed_escaped_one_line_per_row():
    forging = {
        'converged': False, 'drifted': ['persistenced\nh0 converged'],
        'concerns': {
            'persistenced': verdict({'init_system': 'systemd\x1b[31m', 'daemon': 'driver', 'actions': ['start\r']},
                                    False),
            'gpu_persistence': verdict({'gpus': [{'index': '0\n', 'before': 'a\x1b', 'after': 'b', 'changed': True}]},
                                       False),
            'docker': verdict({'action': 'reload\nh0 converged'}, False),
            'containerd': verdict({'msg': FORGED}, False, True),
        }}
    report = drift_report({'h1': forging, 'h2': None, 'h3': CONVERGED}, {'h2': FORGED})
    rows = dict((row['host'], row) for row in report['hosts'])
    assert rows['h1']['init'] == 'systemd\\x1b[31m' and rows['h1']['daemon'] == 'start\\r'
    assert rows['h1']['gpus_off'] == ['0\\n:a\\x1b->b'] and rows['h1']['drifted'] == ['persistenced\\nh0 converged']
    assert rows['h1']['engines_off'] == ['containerd:error', 'docker:reload\\nh0 converged']
    assert rows['h1']['errors'] == {'containerd': ESCAPED} and rows['h2']['errors'] == {'host': ESCAPED}
    table = report['table']
    assert len(table) == 1 + 3 + 2
    assert table[-2:] == ['h1 containerd: ' + ESCAPED, 'h2 host: ' + ESCAPED]
    for line in table:
        assert line.isprintable(), line


# NVIDIA's container toolkit: a column only where a host evaluated it; versions from hosts checked for shape.

def toolkit(converged, installed, actions=(), failed=False, version='1.20.0-1'):
    result = {'converged': converged, 'installed': installed, 'version': version,
              'actions': list(actions) if isinstance(actions, tuple) else actions,
              'msg': 'container_toolkit_info: no apt' if failed else ''}
    return verdict(result, converged, failed)


BOTH = {'nvidia-container-toolkit': '1.20.0-1', 'nvidia-container-toolkit-base': '1.20.0-1'}


def with_toolkit(state, toolkit_verdict):
    return dict(state, concerns=dict(state['concerns'], container_toolkit=toolkit_verdict))


def test_the_toolkit_column_appears_only_when_a_host_evaluated_it():
    without = drift_report({'h1': CONVERGED})
    assert 'toolkit' not in without['table'][0] and without['hosts'][0]['toolkit'] == 'n/a'
    report = drift_report({
        'h1': with_toolkit(CONVERGED, toolkit(True, BOTH)),
        'h2': with_toolkit(DRIFTED, toolkit(False, dict(BOTH, **{'nvidia-container-toolkit': '1.19.0-1'}),
                                            ['install', 'hold'])),
        'h3': with_toolkit(DRIFTED, toolkit(False, dict.fromkeys(BOTH), ['write_key', 'write_source', 'update_index',
                                                                         'install', 'hold'])),
        'h4': with_toolkit(DRIFTED, toolkit(False, BOTH, ['hold'])),
        'h5': with_toolkit(CONVERGED, toolkit(False, {}, failed=True)),
        'h6': CONVERGED})
    cells = dict((row['host'], row['toolkit']) for row in report['hosts'])
    assert cells == {'h1': '1.20.0-1', 'h2': 'mixed->1.20.0-1:install,hold',
                     'h3': 'none->1.20.0-1:write_key,write_source,update_index,install,hold', 'h4': '1.20.0-1:hold',
                     'h5': 'error', 'h6': 'n/a'}
    assert report['table'][0].split()[-1] == 'toolkit'
    assert report['table'][1].split()[-1] == '1.20.0-1' and report['table'][6].split()[-1] == 'n/a'


@pytest.mark.parametrize('installed, actions', [
    ({'nvidia-container-toolkit': '1.20.0-1\nh9 converged'}, []),
    ({'nvidia-container-toolkit': '$(reboot)'}, []),
    ({'nvidia-container-toolkit': 120}, []),
    ('1.20.0-1', []),
    (BOTH, ['install\x1b[2J']),
    (BOTH, 'install'),
])
def test_a_hostile_toolkit_result_fails_that_row_alone(installed, actions):
    report = drift_report({'h1': with_toolkit(DRIFTED, toolkit(False, installed, actions)), 'h2': CONVERGED})
    rows = dict((row['host'], row) for row in report['hosts'])
    assert rows['h1']['status'] == 'failed' and 'malformed' in rows['h1']['errors']['host']
    assert rows['h2']['status'] == 'converged'
    assert all(line.isprintable() for line in report['table'])


# NVIDIA's CDI spec: a column only where a host evaluated it; the reason a spec is stale comes from the host.

def cdi(converged, stale=(), actions=(), failed=False):
    return {'converged': converged, 'failed': failed,
            'result': {'changed': not converged, 'stale': list(stale), 'actions': list(actions),
                       'msg': 'cdi_spec: nvidia-ctk failed' if failed else ''}}


def with_cdi(state, cdi_verdict):
    return dict(state, concerns=dict(state['concerns'], cdi=cdi_verdict))


def test_the_cdi_column_says_fresh_stale_and_why_or_error_only_where_evaluated():
    without = drift_report({'h1': CONVERGED})
    assert 'cdi' not in without['table'][0] and without['hosts'][0]['cdi'] == 'n/a'
    report = drift_report({
        'h1': with_cdi(CONVERGED, cdi(True)),
        'h2': with_cdi(DRIFTED, cdi(False, ['driver 570.172.08, the spec names 535.171.04'], ['write_spec'])),
        'h3': with_cdi(DRIFTED, cdi(False, [], ['write_script', 'write_unit', 'enable'])),
        'h4': with_cdi(DRIFTED, cdi(False, failed=True)),
        'h5': CONVERGED,
    })
    assert dict((row['host'], row['cdi']) for row in report['hosts']) == {
        'h1': 'fresh', 'h2': 'stale: driver 570.172.08, the spec names 535.171.04',
        'h3': 'write_script,write_unit,enable', 'h4': 'error', 'h5': 'n/a'}
    assert report['table'][0].split()[-1] == 'cdi'


@pytest.mark.parametrize('stale', [['one\nh9 converged'], [42], 'not a list'])
def test_a_hostile_cdi_result_is_escaped_or_fails_that_row_alone(stale):
    verdict = cdi(False, actions=['write_spec'])
    verdict['result']['stale'] = stale
    report = drift_report({'h1': with_cdi(DRIFTED, verdict), 'h2': CONVERGED})
    rows = dict((row['host'], row) for row in report['hosts'])
    assert rows['h2']['status'] == 'converged'
    assert all('\n' not in line for line in report['table'])
    if isinstance(stale, list) and isinstance(stale[0], str):
        assert rows['h1']['cdi'] == 'stale: one\\nh9 converged'
    else:
        assert rows['h1']['status'] == 'failed' and 'malformed' in rows['h1']['errors']['host']


def test_the_health_column_and_a_host_value_outside_the_verdicts():
    def state(result, failed=False):
        return {'converged': True, 'drifted': [], 'concerns': {'gpu_health': {
            'converged': not failed, 'failed': failed, 'result': result}}}
    rows = dict((row['host'], row) for row in drift_report({
        'ok': state({'verdict': 'PASS', 'action': 'none'}), 'bad': state({'verdict': 'WARN', 'action': 'drain'}),
        'err': state({'msg': 'no'}, failed=True), 'odd': state({'verdict': 'FINE', 'action': 'none'})})['hosts'])
    assert (rows['ok']['health'], rows['bad']['health'], rows['err']['health']) == ('PASS', 'WARN:drain', 'error')
    assert rows['odd']['status'] == 'failed' and 'FINE' in rows['odd']['errors']['host']
