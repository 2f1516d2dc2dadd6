# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""crio_runtime's change to the running CRI-O: the reload or restart, and its rollback (``Applier``).

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. ``crio.apply.Converge`` imports it only when it applies a
change (not in check mode: the writes' rollback, and a reload or a restart), so that
node_state's check path, which runs the same ``Converge`` in check mode,
does not compile it on the host (zipimport keeps no bytecode). Ansible's
dependency finder packs it into the module zips all the same.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import re
import time

from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files as host_files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError, HostFileError, \
    ServiceError

RELOAD_FAILED = 'Unable to reload configuration'  # server/server.go's log line for a failed SIGHUP reload


def crio_error(log):
    """CRI-O's own words from its log: a failed reload, else the last fatal or error line."""
    found = None
    for line in (log or '').splitlines():
        if RELOAD_FAILED in line:
            found = line.strip()
        elif 'level=fatal' in line or 'level=error' in line:
            found = found if found and RELOAD_FAILED in found else line.strip()
    if found:
        match = re.search(r'msg="((?:[^"\\]|\\.)*)"', found)
        return match.group(1).replace('\\"', '"') if match else found
    return None


def restore_file(previous, real_dir, label):
    """``previous`` (a HostFile of a file that existed, as read) written back."""
    with host_files.temp_directory(real_dir, previous.real) as temp_dir:
        host_files.write_atomic(previous.real, previous.text.encode('utf-8'), like=previous.stat, label=label,
                                temp_dir=temp_dir)


def remove(real):
    try:
        os.unlink(real)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise HostFileError('%s: cannot remove: %s. Nothing more was done.' % (real, exc.strerror))
    host_files.fsync_directory(os.path.dirname(real))


class Applier(object):
    """Reloads or restarts CRI-O on the new file; restores the file and CRI-O when that fails."""

    def __init__(self, request, service, real, previous, label, poll, settle=2.0, real_dir=None, others=()):
        self.request = request
        self.others = list(others)  # the files take_over changed, as they were (HostFile)
        self.real_dir = real_dir if real_dir is not None else os.path.dirname(real)
        self.service = service
        self.real = real
        self.previous = previous
        self.label = label
        self.poll = poll
        self.settle = settle

    def restore(self):
        for previous in self.others:
            restore_file(previous, self.real_dir, self.label)
        if not self.previous.exists:
            remove(self.real)
            return
        with host_files.temp_directory(self.real_dir, self.real) as temp_dir:
            host_files.write_atomic(self.real, self.previous.text.encode('utf-8'), like=self.previous.stat,
                                    label=self.label, temp_dir=temp_dir)

    def wait_restart(self, pid_before):
        """``(True, None)`` once a new crio runs and stays up ``settle`` seconds, else ``(False, why)``."""
        deadline = time.time() + self.request.timeout
        since = None
        why = 'crio did not start'
        while time.time() < deadline:
            pid = self.service.pid()
            if pid and pid != pid_before and self.service.is_running():
                since = since or time.time()
                if time.time() - since >= self.settle:
                    return True, None
            else:
                if since is not None:
                    why = 'crio exited after it started'
                since = None
            time.sleep(self.poll)
        return False, why

    def wait_reload(self, pid_before, started):
        """After a SIGHUP: the same crio still runs and its log names no failed reload."""
        time.sleep(self.settle)
        if self.service.pid() != pid_before:
            return False, 'crio exited on SIGHUP'
        log = self.service.logs(since=started, lines=200) or ''
        if RELOAD_FAILED in log:
            return False, crio_error(log)
        return True, None

    def apply(self, action, pid_before):
        started = time.time()
        error = None
        try:
            self.service.reload() if action == 'reload' else self.service.restart()
        except GpufleetError as exc:
            error = str(exc)
        if error is None:
            ok, why = self.wait_reload(pid_before, started) if action == 'reload' else self.wait_restart(pid_before)
            if ok:
                return
        else:
            why = error
        said = crio_error(self.service.logs(since=started, lines=200)) or error or why
        self.restore()
        failed_pid = self.service.pid()
        back_error = None
        try:
            if action == 'reload' and failed_pid:
                self.service.reload()
            else:
                self.service.restart()
        except GpufleetError as exc:
            back_error = str(exc)
        if back_error:
            back, back_why = False, back_error
        elif action == 'reload' and failed_pid:
            back, back_why = (self.service.pid() == failed_pid), 'crio exited'
        else:
            back, back_why = self.wait_restart(failed_pid)
        verb = 'reload' if action == 'reload' else 'restart'
        if not back:
            raise ServiceError('%s: crio did not take the new configuration (%s failed: %s); the previous file was '
                               'restored but crio did not come back either (%s). crio said: %s'
                               % (self.request.path, verb, why, back_why, said))
        raise ServiceError('%s: crio did not take the new configuration (%s failed: %s); the previous file was '
                           'restored and crio %s with it. crio said: %s'
                           % (self.request.path, verb, why, 'reloaded' if action == 'reload' else 'restarted', said))
