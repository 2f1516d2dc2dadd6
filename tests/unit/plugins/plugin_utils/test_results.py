# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The roles' decisions and results as plain Python (plugin_utils/_results.py). tests/unit/test_role_results.py
holds the roles' templates, which call these through the filters, to the same answers."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import _results

SKIPPED = {'changed': False, 'skipped': True}


@pytest.mark.parametrize('result, ran', [(None, False), (SKIPPED, False), ({'changed': False}, True), ('x', False)])
def test_a_result_ran_when_registered_and_not_skipped(result, ran):
    assert _results.ran(result) is ran


def test_engines_come_in_the_roles_order_once():
    assert _results.runtime_engines(['docker', 'auto', 'docker'], {'auto': ['containerd', 'docker']}) == [
        'containerd', 'docker']
    assert _results.runtime_engines(['auto'], None) == []
    assert _results.runtime_engines(None) == []


def test_the_runtime_result_of_no_engine_is_empty_and_unchanged():
    assert _results.runtime_result([]) == {'engines': {}, 'engine_list': [], 'found': None, 'changed': False}
    # An engine listed whose result is missing (its task never registered) changes nothing.
    assert _results.runtime_result(['crio'])['changed'] is False


def test_without_node_state_every_concern_runs_and_drift_only_runs_none():
    assert _results.node_run(None) == list(_results.CONCERNS)
    assert _results.node_run(SKIPPED) == list(_results.CONCERNS)
    assert _results.node_run({'run': ['docker']}) == ['docker']
    assert _results.node_run({'run': ['docker']}, drift_only=True) == []


def test_a_node_with_nothing_evaluated_and_nothing_run_publishes_nulls():
    assert _results.node_result(None) == {'state': None, 'device_links': None, 'persistenced': None,
                                          'gpu_persistence': None, 'container_toolkit': None, 'cdi': None,
                                          'container_runtime': None, 'gpu_health': None, 'slurm_node': None,
                                          'drain': None, 'health_gate': None}
    # node_state's concerns of the wrong shape are not verdicts.
    assert _results.node_result({'run': [], 'concerns': {'persistenced': 'x'}})['persistenced'] is None


def test_host_values_takes_one_variable_of_each_host():
    hostvars = {'h1': {'gpu_node_result': {'state': 1}}, 'h2': {'other': 1},
                'h3': {'gpu_node_result': None, '__site_node_error': {'failed': True, 'msg': 'gone'}},
                'h4': {'__site_node_error': {'failed': True}}, 'h5': {'__site_node_error': 'not a mapping'}}
    hosts = ['h1', 'h2', 'h3', 'h4', 'h5', 'h6']  # h6: no variables at all (a host Ansible never reached)
    assert _results.host_values(hosts, hostvars, 'gpu_node_result') == {'h1': {'state': 1}, 'h3': None}
    assert _results.host_values(hosts, hostvars, 'gpu_node_result', every=True) == {
        'h1': {'state': 1}, 'h2': None, 'h3': None, 'h4': None, 'h5': None, 'h6': None}
    # a key of the variable, the fallback where the variable has none or is no mapping (what default() gave)
    assert _results.host_values(hosts, hostvars, '__site_node_error', 'msg', 'no message') == {
        'h3': 'gone', 'h4': 'no message', 'h5': 'no message'}
    # in the order of the hosts given, each once
    assert list(_results.host_values(['h3', 'h1', 'h3'], hostvars, 'gpu_node_result')) == ['h3', 'h1']


def test_the_filter_is_host_values():
    from ansible_collections.gpufleet.nvidia.plugins.filter.results import FilterModule
    assert FilterModule().filters()['host_values'](['h1'], {'h1': {'x': {'k': 2}}}, 'x', key='k') == {'h1': 2}
