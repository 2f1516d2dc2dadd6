# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The bundled persistence daemon's text, read on the controller for the modules that install or check it.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change at any time.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import os
import zlib

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._role_action import RoleVarsAction

BUNDLED = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                       'files', 'gpufleet-persistenced')


def _read():
    """``files/gpufleet-persistenced`` compressed, or the error that reading it gave (an ``AnsibleActionFail``)."""
    try:
        with open(BUNDLED, 'rb') as handle:
            return 'zlib+base64:' + base64.b64encode(zlib.compress(handle.read(), 9)).decode('ascii')
    except (IOError, OSError) as exc:
        return AnsibleActionFail('cannot read the bundled daemon %s from the collection: %s' % (BUNDLED, exc))


# Read and compressed once, when ansible-playbook's main process imports the action (its strategy loads each
# task's action class before it forks the task's workers): every worker forked after that has it, where each host's
# worker used to read and compress it again (7 ms of CPU a host). The file is the collection's, the same for every
# host of the run.
_SOURCE = _read()


def bundled_source():
    """``files/gpufleet-persistenced`` as the modules' ``bundled_source``: compressed, a quarter of the size on the
    wire, on every run of every host. Read once per process, where the file could be read (else tried again)."""
    global _SOURCE
    if isinstance(_SOURCE, AnsibleActionFail):
        _SOURCE = _read()
        if isinstance(_SOURCE, AnsibleActionFail):
            raise _SOURCE
    return _SOURCE


class BundledDaemonAction(RoleVarsAction):
    """An action that runs its module (``MODULE``) with the bundled daemon's text added when ``wants(args)``."""

    def wants(self, args):
        return True

    def run(self, tmp=None, task_vars=None):
        result = ActionBase.run(self, tmp, task_vars)
        if 'bundled_source' in self._task.args:
            raise AnsibleActionFail('bundled_source is internal to %s; do not set it' % self.MODULE)
        args = self.module_args(dict(self._task.args), task_vars)
        if self.wants(args):
            args['bundled_source'] = bundled_source()
        result = self.execute(result, args, task_vars)
        # The module echoes its options back (invocation.module_args): not the daemon's text, which the
        # controller has already (22 KB a host, to be parsed, registered and templated for nothing).
        # Whether an option that was not sent is echoed (as its default, None) differs between ansible-core
        # releases (2.18-2.20 do, 2.21 does not): only what this action sent is replaced.
        module_args = result.get('invocation', {}).get('module_args')
        if isinstance(module_args, dict) and 'bundled_source' in args:
            module_args['bundled_source'] = '(the bundled daemon, %d bytes as sent)' % len(args['bundled_source'])
        return result
