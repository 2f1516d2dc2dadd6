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
                                          'container_runtime': None}
    # node_state's concerns of the wrong shape are not verdicts.
    assert _results.node_result({'run': [], 'concerns': {'persistenced': 'x'}})['persistenced'] is None
