# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for gpufleet.nvidia.drift_report: the fleet's drift report, built and written on the controller.

No module runs anywhere: the report comes from the play hosts' gpu_node_result.state (node_state's results), and
the JSON file is written on the controller by this plugin, atomically.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import stat

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._drift import drift_report
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import HostFileError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host.files import write_atomic


def write_report(path, report):
    """Write ``report`` as JSON to ``path`` on the controller, mode 0644, with the hosts' atomic writer: a temp file
    beside it created O_EXCL|O_NOFOLLOW, its mode set on the descriptor, renamed into place (a link at ``path`` is
    replaced, never written through); a failure leaves the old report and no temp file. Links on the way to the
    report's directory (the operator's choice, on the controller) are followed. Anything else already at ``path`` (a
    device such as /dev/null, a pipe, a directory) is refused and left as it is: the rename would replace it. Raises
    HostFileError."""
    directory, name = os.path.split(os.path.abspath(path))
    target = os.path.join(os.path.realpath(directory), name)
    try:
        mode = os.lstat(target).st_mode
    except OSError:
        mode = None  # nothing there yet (or the directory is missing: write_atomic says so)
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise HostFileError('%s is not a regular file (%s): the report is written to a file, atomically, which would '
                            'replace it; give the path of a file, or an empty path to write no report'
                            % (target, _kind(mode)))
    data = (json.dumps(report, indent=2, sort_keys=True) + '\n').encode('utf-8')
    write_atomic(target, data, mode=0o644, shared=True)  # the operator may share the report's directory


def _kind(mode):
    for test, word in ((stat.S_ISCHR, 'a character device'), (stat.S_ISBLK, 'a block device'), (stat.S_ISFIFO, 'a pipe'),
                       (stat.S_ISDIR, 'a directory'), (stat.S_ISSOCK, 'a socket')):
        if test(mode):
            return word
    return 'not a file'


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = dict(self._task.args)
        path = args.pop('path', None)
        path = os.path.expanduser(path) if path else None
        errors = args.pop('errors', None) or {}
        states = args.pop('states', None)
        if args:
            raise AnsibleActionFail('drift_report: unknown option(s) %s' % ', '.join(sorted(args)))
        if not isinstance(errors, dict):
            raise AnsibleActionFail('drift_report: errors must be a dict of host name to error message')
        if not isinstance(states, dict):
            raise AnsibleActionFail('drift_report: states must be a dict of host name to node_state result (or null)')
        report = drift_report(states, errors)
        if path:
            try:
                write_report(path, report)
            except HostFileError as exc:
                raise AnsibleActionFail('drift_report: the report on the controller: %s' % exc)
        result.update(changed=False, report=report, table=report['table'], path=path)
        return result
