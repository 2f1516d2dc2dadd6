# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""host.slurm: this host as a Slurm node, read from what Debian 12's Slurm 22.05 prints (fixtures captured on the
lab's cluster, tests/lab/lab slurm), and drained and resumed by our rules. The real cluster: molecule scenario
rollout."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import slurm

FIXTURES = os.path.join(os.path.dirname(__file__), '..', '..', 'fixtures', 'slurm')


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


class Scontrol(object):
    """scontrol and squeue as Slurm 22.05 answers: no --json for scontrol, a node's line, updates recorded."""

    def __init__(self, line, jobs=(), json_ok=False):
        self.line = line
        self.jobs = list(jobs)
        self.json_ok = json_ok
        self.calls = []

    def __call__(self, argv):
        self.calls.append(argv)
        if argv[0] == 'scontrol' and '--json' in argv:
            if not self.json_ok:
                return 1, '', "scontrol: unrecognized option '--json'"
            return 0, json.dumps({'nodes': [{'name': 'h3', 'state': ['IDLE', 'DRAIN'], 'reason': 'fan',
                                             'reason_set_by_user': 'root',
                                             'reason_changed_at': {'set': True, 'number': 1}}]}), ''
        if argv[:2] == ['scontrol', '-o']:
            if argv[-1] not in self.line:
                return 1, '', 'Node %s not found' % argv[-1]
            return 0, self.line, ''
        if argv[0] == 'squeue':
            return 0, ''.join('%s\n' % job for job in self.jobs), ''
        if argv[:2] == ['scontrol', 'update']:
            return 0, '', ''
        raise AssertionError(argv)


def node(name, answers):
    return slurm.SlurmNode(name, answers, 'scontrol', 'squeue', sleep=lambda s: None)


def test_a_persons_drain_is_read_with_its_reason_user_and_time():
    state = node('h3', Scontrol(fixture('show-node-drained-22.05.txt'))).state()
    assert state == {'name': 'h3', 'state': 'IDLE+DRAIN', 'base_state': 'IDLE', 'drain': True, 'down': False,
                     'available': False, 'reason': 'fan replaced Tuesday', 'reason_user': 'root',
                     'reason_time': '2026-12-05T19:53:43', 'ours': False, 'held': True}


def test_a_busy_node_has_no_reason_and_takes_jobs():
    state = node('h2', Scontrol(fixture('show-node-mixed-22.05.txt'))).state()
    assert (state['state'], state['available'], state['reason'], state['held']) == ('MIXED', True, None, False)


def test_an_unknown_node_is_none():
    assert node('h9', Scontrol(fixture('show-node-mixed-22.05.txt'))).state() is None


def test_a_later_slurms_json_is_read_and_remembered_per_binary():
    answers = Scontrol('', json_ok=True)
    state = node('h3', answers).state()
    assert (state['state'], state['reason'], state['reason_time'], state['held']) == ('IDLE+DRAIN', 'fan', '1', True)


def test_jobs_are_squeues_filtered_text_and_a_name_may_hold_the_separator():
    answers = Scontrol('', jobs=['1|root|RUNNING|gpufleet-hold', '2|bob|PENDING|waits', '3|ann|COMPLETING|a|b'])
    jobs = node('h2', answers).jobs()
    assert jobs == [{'id': '1', 'user': 'root', 'state': 'RUNNING', 'name': 'gpufleet-hold'},
                    {'id': '3', 'user': 'ann', 'state': 'COMPLETING', 'name': 'a|b'}]
    # never --json: squeue's JSON ignores --nodelist and would list the whole cluster's jobs
    assert answers.calls == [['squeue', '--noheader', '--nodelist', 'h2', '--format', '%A|%u|%T|%j']]


def test_drain_sets_our_reason_on_a_node_that_takes_jobs_only():
    answers = Scontrol(fixture('show-node-mixed-22.05.txt'))
    changed, before = node('h2', answers).drain('gpufleet: rollout (run x)')
    assert changed and before['state'] == 'MIXED'
    assert answers.calls[-1] == ['scontrol', 'update', 'NodeName=h2', 'State=DRAIN', 'Reason=gpufleet: rollout (run x)']
    # a person's drain: no update at all, its reason kept
    answers = Scontrol(fixture('show-node-drained-22.05.txt'))
    changed, before = node('h3', answers).drain('gpufleet: rollout')
    assert not changed and not [call for call in answers.calls if call[1] == 'update']


def test_resume_only_our_drain_and_only_when_allowed():
    person = Scontrol(fixture('show-node-drained-22.05.txt'))
    changed, unused, why = node('h3', person).resume()
    assert not changed and 'never resumed' in why and not [c for c in person.calls if c[1] == 'update']
    ours = Scontrol(fixture('show-node-drained-22.05.txt').replace('fan replaced Tuesday', 'gpufleet: rollout'))
    assert node('h3', ours).resume(allowed=False)[2] == 'the health verdict is not PASS'
    changed, before, why = node('h3', ours).resume()
    assert changed and why is None and ours.calls[-1] == ['scontrol', 'update', 'NodeName=h3', 'State=RESUME']


@pytest.mark.parametrize('reason, cleaned', [
    ('gpufleet: health xid\n79\x1b[31m', 'gpufleet: health xid 79 [31m'),
    ('x' * 300, 'x' * slurm.MAX_REASON),
])
def test_a_reason_is_one_printable_line(reason, cleaned):
    assert slurm.clean_reason(reason) == cleaned


def test_waiting_for_jobs_ends_when_they_end_or_at_the_deadline():
    answers = Scontrol('', jobs=['1|root|RUNNING|hold'])
    now = [0.0]
    waiting = slurm.SlurmNode('h2', answers, 'scontrol', 'squeue', sleep=lambda s: now.__setitem__(0, now[0] + s),
                              clock=lambda: now[0])
    assert [job['id'] for job in waiting.wait_jobs(10, interval=2)] == ['1'] and now[0] >= 10
    answers.jobs = []
    assert waiting.wait_jobs(10) == []


def test_a_failing_slurm_is_an_error_naming_the_command():
    def failing(argv):
        return 1, '', 'slurm_load_jobs error: Unable to contact slurm controller (connect failure)'
    with pytest.raises(slurm.SlurmError, match='squeue --nodelist h2 failed .*Unable to contact'):
        node('h2', failing).jobs()


def test_drain_and_resume_take_a_state_read_already_and_check_mode_changes_nothing():
    mixed = Scontrol(fixture('show-node-mixed-22.05.txt'))
    before = node('h2', mixed).state()
    mixed.calls[:] = []
    assert node('h2', mixed).drain('gpufleet: rollout', before, check_mode=True) == (True, before)
    assert mixed.calls == []  # neither read again nor updated
    ours = Scontrol(fixture('show-node-drained-22.05.txt').replace('fan replaced Tuesday', 'gpufleet: rollout'))
    drained = node('h3', ours).state()
    ours.calls[:] = []
    assert node('h3', ours).resume(True, drained, check_mode=True) == (True, drained, None)
    assert ours.calls == []


def test_a_slurm_node_is_one_with_a_configuration_and_the_clients(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm, 'CONFIGS', (str(tmp_path / 'slurm.conf'),))
    monkeypatch.delenv('SLURM_CONF', raising=False)
    monkeypatch.setattr(slurm, 'find_binary', lambda name, dirs=slurm.BIN_DIRS: '/usr/bin/' + name)
    assert slurm.local('h2') is None  # no configuration: no Slurm node, whatever clients there are
    (tmp_path / 'slurm.conf').write_text('ClusterName=x\n')
    assert slurm.local('h2').name == 'h2'
    monkeypatch.setattr(slurm, 'find_binary', lambda name, dirs=slurm.BIN_DIRS: None)
    assert slurm.local('h2') is None  # no clients
