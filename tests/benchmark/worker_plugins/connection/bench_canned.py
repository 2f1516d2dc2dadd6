# Copyright: gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A connection for tests/benchmark/worker_cpu.py that never leaves the controller and runs nothing.

Not shipped with the collection. Every module Ansible pipes to the "host" gets a canned reply: node_state the JSON
in $BENCH_CANNED_NODE_STATE (a converged host's result), with the options it was sent echoed back as a module does
(``invocation.module_args``); ping its pong. The payload is built and sent as for a real host (AnsiballZ, from
Ansible's module cache), but no module code runs: what a worker costs is its own work alone.
"""

from __future__ import annotations

import ast
import json
import os
import re

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.connection import ConnectionBase

DOCUMENTATION = """
name: bench_canned
short_description: canned module replies, nothing executed (worker CPU benchmark)
description:
  - Answers each pipelined module with a canned result; runs nothing, transfers nothing.
author: gpufleet.nvidia contributors
extends_documentation_fragment:
  - connection_pipelining
"""

_CANNED = {}


def _sent_args(in_data):
    """The options in an AnsiballZ payload (its ``params=`` line), as the module would echo them."""
    match = re.search(rb"^params=(.*),$", in_data, re.M)
    if not match:
        return None
    return json.loads(ast.literal_eval(match.group(1).decode()))['ANSIBLE_MODULE_ARGS']


def reply(action, in_data):
    if action in ('ansible.builtin.ping', 'ping'):
        return {'ping': 'pong', 'invocation': {'module_args': {'data': 'pong'}}}
    if action == 'gpufleet.nvidia.node_state':
        if 'node_state' not in _CANNED:
            with open(os.environ['BENCH_CANNED_NODE_STATE']) as handle:
                _CANNED['node_state'] = handle.read()
        result = json.loads(_CANNED['node_state'])
        args = _sent_args(in_data)
        if args is not None:
            result['invocation'] = {'module_args': dict((key, value) for key, value in args.items()
                                                        if not key.startswith('_ansible'))}
        return result
    raise AnsibleConnectionFailure('bench_canned has no reply for %s' % action)


class Connection(ConnectionBase):

    transport = 'bench_canned'
    has_pipelining = True

    def _connect(self):
        self._connected = True
        return self

    def exec_command(self, cmd, in_data=None, sudoable=True):
        super(Connection, self).exec_command(cmd, in_data=in_data, sudoable=sudoable)
        if not in_data:
            raise AnsibleConnectionFailure('bench_canned runs no command (pipelining only): %s' % cmd)
        from ansible.executor.process import worker  # the task this worker runs
        task = worker.current_worker._task
        return 0, json.dumps(reply(task.action, in_data)).encode(), b''

    def put_file(self, in_path, out_path):
        raise AnsibleConnectionFailure('bench_canned transfers no file')

    def fetch_file(self, in_path, out_path):
        raise AnsibleConnectionFailure('bench_canned transfers no file')

    def close(self):
        self._connected = False
