# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""site.yml's health gate on the controller: a node that came back worse, read from untrusted verdicts; the stop
and the summary lines it gives. The gate on real hosts: molecule scenario rollout."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import _rollout
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._fleet_summary import fleet_summary


def health(verdict, *checks):
    return {'verdict': verdict, 'checks': [dict(check=name, verdict=found, gpu=gpu) for name, found, gpu in checks]}


CONFIG_WARN = ('configuration', 'WARN', None)


def test_a_node_no_worse_is_no_regression():
    # node_state's configuration check is WARN whenever the node is about to change: left out
    assert _rollout.regression(health('WARN', CONFIG_WARN), health('PASS')) is None
    assert _rollout.regression(health('WARN', ('temperature', 'WARN', 1)), health('WARN', ('temperature', 'WARN', 1))) is None
    # better is no regression either
    assert _rollout.regression(health('FAIL', ('ecc', 'FAIL', 0)), health('PASS')) is None


def test_a_check_worse_after_is_a_regression_naming_it_and_its_gpu():
    found = _rollout.regression(health('WARN', CONFIG_WARN),
                                health('FAIL', ('ecc_volatile_uncorrected', 'FAIL', 0), ('pcie_width', 'WARN', 1)))
    assert found['before'] == 'PASS' and found['after'] == 'FAIL'
    assert found['checks'] == ['ecc_volatile_uncorrected GPU 0: PASS -> FAIL', 'pcie_width GPU 1: PASS -> WARN']
    assert found['msg'] == 'health PASS -> FAIL (ecc_volatile_uncorrected GPU 0: PASS -> FAIL; pcie_width GPU 1: PASS -> WARN)'
    # the same check on another GPU, or worse on the same one, counts; the node verdict alone is not compared
    assert _rollout.regression(health('WARN', ('temperature', 'WARN', 1)),
                               health('WARN', ('temperature', 'WARN', 2)))['checks'] == ['temperature GPU 2: PASS -> WARN']


@pytest.mark.parametrize('before, after', [
    ('PASS', health('PASS')),
    (health('PASS'), {'verdict': 'GREAT'}),
    (health('PASS'), {'verdict': 'PASS', 'checks': 'all'}),
    (health('PASS'), {'verdict': 'PASS', 'checks': [{'check': 1, 'verdict': 'PASS'}]}),
    (health('PASS'), {'verdict': 'PASS', 'checks': [{'check': 'x', 'verdict': 'x'}] * 300}),
])
def test_a_verdict_that_cannot_be_read_is_said_and_stops(before, after):
    found = _rollout.regression(before, after)
    assert 'malformed' in found and found['msg'].startswith('the health gate could not read a verdict')
    assert _rollout.gate(before, after)['stop'] is True


def test_the_gate_record():
    gate = _rollout.gate(health('PASS'), health('FAIL', ('xid', 'FAIL', 0)), {'restored': ['/x']})
    assert gate['stop'] and gate['before'] == 'PASS' and gate['after'] == 'FAIL' and gate['rollback'] == {'restored': ['/x']}
    assert _rollout.gate(health('PASS'), health('PASS'), 'no dict') == {
        'before': 'PASS', 'after': 'PASS', 'regression': None, 'stop': False, 'msg': None, 'rollback': None}


def test_changed_reads_each_concern_but_node_states_and_healths():
    assert _rollout.changed({'persistenced': {'changed': True}})
    assert not _rollout.changed({'state': {'changed': True}, 'gpu_health': {'changed': True}, 'docker': None})
    assert not _rollout.changed('not a dict') and not _rollout.changed({'x': {'changed': 'yes'}})


def test_stops_are_the_hosts_whose_gate_says_stop():
    gate = _rollout.gate(health('PASS'), health('FAIL', ('xid', 'FAIL', 0)))
    hostvars = {'h1': {'gpu_node_result': {'health_gate': gate}},
                'h2': {'gpu_node_result': {'health_gate': dict(gate, stop='true')}},
                'h3': {'gpu_node_result': None}, 'h4': {}}
    assert _rollout.stops(['h1', 'h2', 'h3', 'h4', 'h5'], hostvars) == {'h1': gate}


def test_the_summary_names_the_host_that_stopped_the_rollout_and_the_hosts_not_reached():
    gate = _rollout.gate(health('PASS'), health('FAIL', ('ecc', 'FAIL', 0)),
                         {'restored': ['/etc/init.d/nvidia-persistenced'], 'removed': [], 'conflicts': [],
                          'services': ['restart nvidia-persistenced']})
    lines = fleet_summary(['h1', 'h2', 'h3'], {'h1': {}}, {}, {'h1': gate})
    assert lines == [
        'h1 stopped the rollout: health PASS -> FAIL (ecc GPU 0: PASS -> FAIL); rolled back: 1 file(s) restored, '
        '0 removed, 0 conflict(s), services restart nvidia-persistenced',
        'h2 not reached: the rollout stopped at h1',
        'h3 not reached: the rollout stopped at h1',
    ]
    # without a stop, a host without a result is unreachable, as before
    assert fleet_summary(['h2'], {}, {}) == ['h2 unreachable']
    # a stop whose rollback failed says so; a malformed record says that, one line still
    failed = dict(gate, rollback={'failed': True, 'msg': 'restart nvidia-persistenced failed\n'})
    assert fleet_summary(['h1'], {}, {}, {'h1': failed})[0].endswith('the rollback failed: restart nvidia-persistenced failed\\n')
    assert fleet_summary(['h1'], {}, {}, {'h1': dict(gate, msg=['x'])})[0].startswith('h1 stopped the rollout (its record was malformed')
