# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action in front of each concern module: ``role_vars: true`` takes its options from the roles' variables.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change at any time. The roles call their
concern's module with ``role_vars: true``; the options come from ``_role_options.OPTIONS``, the one table of which
role variable gives which option, which node_state's evaluation reads too. Without ``role_vars`` the task's own
options go to the module unchanged.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import socket
import time

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.utils.vars import merge_hash

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import _role_options


def missing(exc, module):
    """The failure for a role variable the table reads that is not defined where the task runs."""
    return AnsibleActionFail('role_vars: the role variable %s is not defined here; %s with role_vars: true runs '
                             'inside the gpufleet.nvidia role that has it among its defaults' % (exc.args[0], module))


def run_id(pid=None):
    """This ansible-playbook run's id for the audit trail: the controller's name, and the start time (from /proc)
    and pid of the process that forked the task's worker, the same for every host and task of the run."""
    pid = os.getppid() if pid is None else pid
    started = ''
    try:
        with open('/proc/%d/stat' % pid) as handle:
            ticks = int(handle.read().rsplit(')', 1)[1].split()[19])
        with open('/proc/stat') as handle:
            boot = next(int(line.split()[1]) for line in handle if line.startswith('btime '))
        started = time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(boot + ticks // os.sysconf('SC_CLK_TCK'))) + '-'
    except (OSError, IOError, ValueError, IndexError, StopIteration):
        pass
    return '%s-%s%d' % (socket.gethostname().split('.')[0], started, pid)


class RoleVarsAction(ActionBase):
    """Runs ``MODULE``, whose options, with ``role_vars: true``, are concern ``CONCERN``'s from the roles'
    variables."""

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = True  # as the modules had before they had an action: a task may run them with async
    MODULE = None
    CONCERN = None
    AUDITED = True  # the module writes the audit trail (its audit_run_id is given here)

    def module_args(self, args, task_vars):
        """The module's arguments from the task's (``args``, a copy, may be changed)."""
        if not boolean(args.pop('role_vars', False), strict=False):
            return args
        if args:
            raise AnsibleActionFail('role_vars takes every option of %s from the roles\' variables: do not also give %s'
                                    % (self.MODULE, ', '.join(sorted(args))))
        try:
            return _role_options.concern_options(self.CONCERN, _role_options.resolver(self._templar, task_vars or {}))
        except _role_options.MissingVariable as exc:
            raise missing(exc, self.MODULE)

    def execute(self, result, args, task_vars):
        """Run the module with ``args`` into ``result``, in the background with the task's ``async`` (as Ansible's
        own action for a module without one does)."""
        wrap_async = self._task.async_val
        if self.AUDITED and not args.get('audit_run_id'):
            args = dict(args, audit_run_id=run_id())
        result = merge_hash(result, self._execute_module(module_name=self.MODULE, module_args=args, task_vars=task_vars,
                                                         wrap_async=wrap_async))
        if not wrap_async:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result

    def run(self, tmp=None, task_vars=None):
        result = super(RoleVarsAction, self).run(tmp, task_vars)
        return self.execute(result, self.module_args(dict(self._task.args), task_vars), task_vars)
