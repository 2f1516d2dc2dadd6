# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_persistence run (plan, set, record) over a fake backend and a real state file in tmp."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import backends
from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import apply
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.test_gpu import FakeBackend, make_gpus


class Backend(FakeBackend):
    """The fake backend, usable as the module uses a backend (``with backend:``)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def params(tmp_path, **overrides):
    values = dict(gpus=['all'], mode='enabled', modes=None, persist=True,
                  state_file=str(tmp_path / 'state' / 'persistence.json'), service_user='root',
                  socket_path='/nonexistent/socket')
    values.update(overrides)
    return values


def test_plan_then_apply_sets_every_gpu_and_records_them(tmp_path):
    backend = Backend(make_gpus(2))
    run = apply.PersistenceRun(params(tmp_path), backend)
    run.plan()
    assert backend.sets == [] and run.state_changed
    assert not os.path.exists(str(tmp_path / 'state'))  # planning writes nothing
    run.apply()
    assert sorted(backend.sets) == [('00000000:1B:00.0', 'enabled'), ('00000000:2B:00.0', 'enabled')]
    recorded = json.load(open(str(tmp_path / 'state' / 'persistence.json')))
    assert recorded['default_mode'] == 'enabled'
    assert sorted(gpu['mode'] for gpu in recorded['gpus'].values()) == ['enabled', 'enabled']
    result = run.result(diff=True)
    assert result['changed'] and result['state_changed'] and result['backend'] == 'fake'
    assert result['diff'][0]['before'] == ('GPU 0 (GPU-0000a100-0000-0000-0000-000000000000, 00000000:1B:00.0): '
                                           'disabled\nGPU 1 (GPU-0000a101-0000-0000-0000-000000000001, '
                                           '00000000:2B:00.0): disabled\n')
    assert result['diff'][1]['before_header'] == str(tmp_path / 'state' / 'persistence.json')

    again = apply.PersistenceRun(params(tmp_path), backend)
    again.plan()
    again.apply()
    assert not again.result()['changed'] and len(backend.sets) == 2


def test_a_bad_state_file_fails_before_any_gpu_changes(tmp_path):
    (tmp_path / 'state').mkdir()
    (tmp_path / 'state' / 'persistence.json').write_text('{"version": 1, "gpus": [')
    backend = Backend(make_gpus(2))
    run = apply.PersistenceRun(params(tmp_path), backend)
    with pytest.raises(apply.RunError) as exc:
        run.plan()
    assert str(tmp_path / 'state' / 'persistence.json') in exc.value.fields['msg']
    assert 'gpus' not in exc.value.fields and backend.sets == []


def test_a_gpu_that_fails_reports_the_planned_gpus_and_records_nothing(tmp_path):
    backend = Backend(make_gpus(2), fail_on='00000000:2B:00.0')
    run = apply.PersistenceRun(params(tmp_path), backend)
    run.plan()
    with pytest.raises(apply.RunError) as exc:
        run.apply()
    assert 'boom on GPU 1' in exc.value.fields['msg']
    assert [gpu['after'] for gpu in exc.value.fields['gpus']] == ['enabled', 'enabled']  # the plan
    assert not os.path.exists(str(tmp_path / 'state' / 'persistence.json'))


def test_without_persist_the_state_file_is_not_read_and_nvml_warns(tmp_path):
    backend = Backend(make_gpus(1))
    backend.name = 'nvml'
    run = apply.PersistenceRun(params(tmp_path, persist=False, state_file='/nonexistent/dir/x.json'), backend)
    run.plan()
    run.apply()
    result = run.result(diff=True)
    assert result['state_file'] is None and not result['state_changed'] and len(result['diff']) == 1
    assert run.warnings() and 'legacy kernel path' in run.warnings()[0] and '/nonexistent/socket' in run.warnings()[0]


def test_recorded_modes_default_only_when_all_gpus_are_selected():
    report = [{'uuid': 'GPU-a', 'pci_bus_id': '00000000:1B:00.0', 'after': 'enabled'}, {'uuid': None}]
    assert apply.recorded_modes(report, {'modes': None, 'gpus': ['all'], 'mode': 'enabled'}) == (
        {'GPU-a': ('00000000:1B:00.0', 'enabled')}, 'enabled')
    assert apply.recorded_modes(report, {'modes': None, 'gpus': [0], 'mode': 'enabled'})[1] is False
    assert backends.describe({'index': 0, 'uuid': 'GPU-a', 'pci_bus_id': 'x'}) == 'GPU 0 (GPU-a, x)'
