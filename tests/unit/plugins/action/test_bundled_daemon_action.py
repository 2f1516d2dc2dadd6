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

    def execute_module(module_name, module_args, task_vars):
        sent.update(module_name=module_name, module_args=dict(module_args))
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
