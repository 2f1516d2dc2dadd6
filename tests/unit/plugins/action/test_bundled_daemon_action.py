# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action plugins that hand a module the bundled daemon's text: they send it and do not take it back."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import zlib
from unittest import mock

import pytest
from ansible.errors import AnsibleActionFail
from ansible.playbook.play_context import PlayContext
from ansible.playbook.task import Task

from ansible_collections.gpufleet.nvidia.plugins.action.node_state import ActionModule as NodeStateAction
from ansible_collections.gpufleet.nvidia.plugins.action.persistenced import ActionModule as PersistencedAction
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import _bundled


def action(cls, args):
    task = Task()
    task.args = args
    plugin = cls(task, mock.MagicMock(), PlayContext(), loader=None, templar=None, shared_loader_obj=None)
    sent = {}

    def execute_module(module_name, module_args, task_vars, wrap_async=False):
        sent.update(module_name=module_name, module_args=dict(module_args), wrap_async=wrap_async)
        # as AnsibleModule.exit_json does: the options echoed back
        return {'changed': False, 'invocation': {'module_args': dict(module_args)}}

    plugin._execute_module = execute_module
    return plugin, sent


def daemon_text(value):
    assert value.startswith('zlib+base64:')
    return zlib.decompress(base64.b64decode(value[len('zlib+base64:'):]))


@pytest.mark.parametrize('cls, args', [
    (PersistencedAction, {'daemon': 'bundled'}),
    (NodeStateAction, {'persistenced': {'daemon': 'auto'}, 'docker': {}}),
])
def test_the_daemon_goes_to_the_module_and_is_not_echoed_back(cls, args):
    plugin, sent = action(cls, args)
    result = plugin.run(task_vars={})
    with open(_bundled.BUNDLED, 'rb') as handle:
        assert daemon_text(sent['module_args']['bundled_source']) == handle.read()
    echoed = result['invocation']['module_args']['bundled_source']
    assert echoed.startswith('(the bundled daemon, ') and len(echoed) < 100
    # every other option comes back as the module saw it
    echoed_args = dict(result['invocation']['module_args'], bundled_source=None)
    assert echoed_args == dict(sent['module_args'], bundled_source=None)


def test_node_state_sends_the_daemon_only_when_the_daemon_is_evaluated_present():
    for args in ({'docker': {}}, {'persistenced': {'state': 'absent'}}):
        plugin, sent = action(NodeStateAction, args)
        result = plugin.run(task_vars={})
        assert 'bundled_source' not in sent['module_args']
        assert 'bundled_source' not in result['invocation']['module_args']


def test_a_user_cannot_hand_over_a_daemon_of_their_own():
    plugin, sent = action(PersistencedAction, {'bundled_source': 'zlib+base64:AAAA'})
    with pytest.raises(AnsibleActionFail, match='internal'):
        plugin.run(task_vars={})
    assert not sent


def test_a_concern_action_takes_the_roles_variables_and_keeps_async():
    from ansible_collections.gpufleet.nvidia.plugins.action.containerd_runtime import ActionModule as ContainerdAction
    from ansible.template import Templar
    from ansible.parsing.dataloader import DataLoader
    variables = {'container_runtime_containerd_config': '/etc/containerd/config.toml', 'container_runtime_name': 'nvidia',
                 'container_runtime_path': None, 'container_runtime_default': True,
                 'container_runtime_containerd_take_over': False, 'container_runtime_state': 'present',
                 'container_runtime_backup': False, 'container_runtime_apply': 'auto',
                 'container_runtime_containerd_service_name': 'containerd', 'container_runtime_timeout': 60,
                 'container_runtime_verify': True, 'container_runtime_verify_image': '',
                 'container_runtime_verify_devices': ['all'], 'container_runtime_cdi': None,
                 'container_runtime_cdi_spec_dirs': ['/etc/cdi', '/var/run/cdi'], 'container_runtime_disruption': 'defer'}
    plugin, sent = action(ContainerdAction, {'role_vars': True})
    plugin._templar = Templar(loader=DataLoader(), variables=variables)
    plugin._task.async_val = 30
    plugin.run(task_vars=variables)
    assert sent['module_name'] == 'gpufleet.nvidia.containerd_runtime' and sent['wrap_async'] == 30
    assert sent['module_args']['default_runtime'] is True and 'runtime_path' not in sent['module_args']
    assert sent['module_args']['path'] == '/etc/containerd/config.toml' and 'role_vars' not in sent['module_args']
    assert sent['module_args']['disruption'] == 'defer'
    # a task's own options, without role_vars, go to the module as they are
    plugin, sent = action(ContainerdAction, {'path': '/x.toml', 'apply': 'none'})
    plugin.run(task_vars={})
    # (and the run's id for the audit trail, the same for every task of this process's run)
    from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._role_action import run_id
    assert sent['module_args'] == {'path': '/x.toml', 'apply': 'none', 'audit_run_id': run_id()}
    assert sent['wrap_async'] == 0
    # a run id the task gives is kept; a read-only concern's module gets none
    plugin, sent = action(ContainerdAction, {'path': '/x.toml', 'audit_run_id': 'change-1234'})
    plugin.run(task_vars={})
    assert sent['module_args']['audit_run_id'] == 'change-1234'
    plugin, sent = action(ContainerdAction, {'role_vars': True, 'path': '/x.toml'})
    with pytest.raises(AnsibleActionFail, match='do not also give path'):
        plugin.run(task_vars=variables)


def test_the_daemon_is_read_and_compressed_once_per_process(monkeypatch):
    # read when the action is imported (ansible-playbook's main process, before it forks the workers), not per host
    with open(_bundled.BUNDLED, 'rb') as handle:
        assert daemon_text(_bundled._SOURCE) == handle.read()
    with mock.patch.object(_bundled, 'open', side_effect=AssertionError('read again'), create=True):
        assert _bundled.bundled_source() is _bundled._SOURCE


def test_a_daemon_that_could_not_be_read_is_read_again_and_fails_the_task(monkeypatch, tmp_path):
    monkeypatch.setattr(_bundled, 'BUNDLED', str(tmp_path / 'missing'))
    monkeypatch.setattr(_bundled, '_SOURCE', _bundled._read())  # as an import that could not read it leaves it
    assert isinstance(_bundled._SOURCE, AnsibleActionFail)
    with pytest.raises(AnsibleActionFail, match='cannot read the bundled daemon .*missing'):
        _bundled.bundled_source()
    (tmp_path / 'missing').write_bytes(b'#!/usr/bin/python3\n')
    assert daemon_text(_bundled.bundled_source()) == b'#!/usr/bin/python3\n'
    plugin, sent = action(PersistencedAction, {'daemon': 'bundled'})
    plugin.run(task_vars={})
    assert daemon_text(sent['module_args']['bundled_source']) == b'#!/usr/bin/python3\n'
