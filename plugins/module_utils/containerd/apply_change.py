# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""containerd_runtime's change to the running containerd: the restart, and its rollback (``Applier``).

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. ``containerd.apply.Converge`` imports it only when it applies a
change (not in check mode, and only for a restart), so that
node_state's check path, which runs the same ``Converge`` in check mode,
does not compile it on the host (zipimport keeps no bytecode). Ansible's
dependency finder packs it into the module zips all the same.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import time

from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files as host_files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError, ServiceError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd.facts import containerd_error

CRI_PLUGIN = 'cri'


class Applier(object):
    """Restarts containerd on the new file; restores the file and containerd when it does not come back whole."""

    def __init__(self, request, service, tools, real, previous, label, poll, address):
        self.request = request
        self.service = service
        self.tools = tools
        self.real = real
        self.previous = previous
        self.label = label
        self.poll = poll
        self.address = address

    def restore(self):
        if not self.previous.exists:
            try:
                os.unlink(self.real)
            except OSError:
                pass
            return
        host_files.write_atomic(self.real, self.previous.text.encode('utf-8'), like=self.previous.stat, label=self.label)

    def wait(self, pid_before, cri_before):
        """``(True, None)`` once a new containerd answers with the CRI plugin as before, else ``(False, why)``."""
        deadline = time.time() + self.request.timeout
        why = 'containerd did not answer on %s' % self.address
        while time.time() < deadline:
            pid = self.service.pid()
            if pid and pid != pid_before:
                plugins = self.tools.plugins(self.address)
                if plugins is not None:
                    status = plugins.get(CRI_PLUGIN)
                    if cri_before == 'ok' and status != 'ok':
                        return False, 'the CRI plugin did not load (status %s)' % status
                    return True, None
            elif pid_before and not pid:
                why = 'containerd exited'
            time.sleep(self.poll)
        return False, why

    def restart(self, pid_before):
        before = self.tools.plugins(self.address) if pid_before else None
        cri_before = (before or {}).get(CRI_PLUGIN)
        started = time.time()
        error = None
        try:
            self.service.restart()
        except GpufleetError as exc:
            error = str(exc)
        ok, why = self.wait(pid_before, cri_before) if error is None else (False, error)
        if ok:
            return
        said = cd_error(self.service, started) or error or why
        self.restore()
        failed_pid = self.service.pid()
        back_error = None
        try:
            self.service.restart()
        except GpufleetError as exc:
            back_error = str(exc)
        back, back_why = (False, back_error) if back_error else self.wait(failed_pid, None)
        if not back:
            raise ServiceError('%s: containerd did not come back with the new configuration (%s); the previous file '
                               'was restored but containerd did not come back either (%s). containerd said: %s'
                               % (self.request.path, why, back_why, said))
        raise ServiceError('%s: containerd did not come back with the new configuration (%s); the previous file was '
                           'restored and containerd restarted with it. containerd said: %s'
                           % (self.request.path, why, said))


def cd_error(service, since):
    return containerd_error(service.logs(since=since, lines=200))
