# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""docker_runtime's change to the running dockerd: the reload or restart, and its rollback (``Applier``).

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. ``docker.apply.Converge`` imports it only when it applies a
change (not in check mode, and only for a reload or a restart), so that
node_state's check path, which runs the same ``Converge`` in check mode,
does not compile it on the host (zipimport keeps no bytecode). Ansible's
dependency finder packs it into the module zips all the same.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import time

from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker import dockerd as docker_dockerd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker.daemon_json import DaemonJsonError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import workload
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError


def wait_for(api, predicate, timeout, poll=0.2, alive=None, grace=8.0):
    """Poll ``GET /info`` until ``predicate(info)``; returns ``(info or None, last_error)``.

    ``alive()`` (e.g. "is there a dockerd process") lets the wait end early
    when dockerd has been gone for ``grace`` seconds: it died on its config.
    """
    deadline = time.time() + timeout
    last_error = None
    gone_since = None
    while True:
        try:
            info = api.info()
            if predicate(info):
                return info, None
            last_error = None
        except Exception as exc:  # DockerAPIError and socket errors alike
            info = None
            last_error = str(exc)
        now = time.time()
        if alive is not None and info is None:
            if alive():
                gone_since = None
            elif gone_since is None:
                gone_since = now
            elif now - gone_since >= grace:
                return None, 'dockerd exited'
        if now >= deadline:
            return info, last_error
        time.sleep(poll)


class Applier(object):
    """Makes the running dockerd take the written file; restores the file and dockerd when it does not."""

    def __init__(self, request, service, api, real, previous_text, label, compare, after_cfg, flags, poll,
                 reload_wait):
        self.request = request
        self.service = service
        self.api = api
        self.real = real
        self.previous_text = previous_text
        self.label = label
        self.compare = compare
        self.after_cfg = after_cfg
        self.flags = flags
        self.poll = poll
        self.reload_wait = reload_wait

    def matches(self, info):
        return not self.compare(self.after_cfg, info, self.request.name, self.request.state, self.flags)[0]

    def restore(self):
        """Put the previous file back (remove the file when there was none); keeps its mode and owner."""
        if self.previous_text is None:
            try:
                os.unlink(self.real)
            except OSError:
                pass
            return
        files.write_atomic(self.real, self.previous_text.encode('utf-8'), label=self.label)

    def apply(self, action, result):
        """Reload or restart; returns dockerd's ``/info`` once it runs the new configuration."""
        if action == 'reload':
            info = self.reload(result)
            if info is not None or result.get('deferred'):
                return info
        return self.restart(result['dockerd_pid_before'], reloaded=action == 'reload')

    def reload(self, result):
        """SIGHUP; the new ``/info``, or None when a restart must finish the job (apply=auto)."""
        request, service = self.request, self.service
        try:
            service.reload()
        except GpufleetError as exc:
            # Nothing reached dockerd: put the file back so it still describes what dockerd runs.
            self.restore()
            raise DaemonJsonError('%s: %s. The previous file was restored; dockerd keeps running its previous '
                                  'configuration.' % (request.path, exc))
        info, error = wait_for(self.api, self.matches, min(request.timeout, self.reload_wait), self.poll)
        if info is not None and self.matches(info):
            return info
        if request.apply == 'reload' and info is not None and service.pid():
            self.restore()
            service.reload()
            raise DaemonJsonError('%s: dockerd did not take the new configuration by reload (%s); the previous '
                                  'file was restored. dockerd said: %s'
                                  % (request.path, error or 'still differs',
                                     docker_dockerd.dockerd_error(service.recent_log(time.time() - 60)) or 'nothing'))
        deferred = workload.deferral(request.disruption, 'restart', 'Restarting dockerd (a reload did not apply '
                                     'the change: %s)' % (error or 'the running configuration still differs'))
        if deferred:
            # No restart under GPU work: the previous file back, and dockerd reloaded with it, as before this run.
            self.restore()
            service.reload()
            result['deferred'] = deferred
            return None
        result['action'] = 'restart'
        result['warnings'].append('a reload did not apply the change (%s); dockerd was restarted instead'
                                  % (error or 'the running configuration still differs'))
        return None

    def restart(self, pid_before, reloaded):
        request, service = self.request, self.service
        started = time.time()
        restart_error = None
        try:
            service.restart()
        except GpufleetError as exc:
            restart_error = str(exc)
            if pid_before and service.pid() == pid_before:
                # The restart never happened and dockerd still runs: put the file back and leave it running.
                self.restore()
                if reloaded:
                    service.reload()
                raise DaemonJsonError('%s: %s. The previous file was restored; dockerd (pid %s) keeps running its '
                                      'previous configuration. Restart dockerd by hand, or use apply=none to only '
                                      'write the file.' % (request.path, restart_error, pid_before))

        def restarted(info):
            pid = service.pid()
            return bool(pid) and pid != pid_before and self.matches(info)

        if restart_error and not service.pid():
            info, error = None, restart_error
        else:
            info, error = wait_for(self.api, restarted, request.timeout, self.poll, alive=lambda: bool(service.pid()))
        if info is not None and restarted(info):
            return info
        self.roll_back(started, error, restart_error)

    def roll_back(self, started, error, restart_error):
        """Restore the file, restart dockerd with it, and fail with dockerd's own words."""
        request, service = self.request, self.service
        why = docker_dockerd.dockerd_error(service.recent_log(started)) or restart_error or error or 'no message'
        failure = error or restart_error
        self.restore()
        rollback_error = None
        try:
            service.restart()
        except GpufleetError as exc:
            rollback_error = str(exc)
        back, back_error = wait_for(self.api, lambda _info: bool(service.pid()), request.timeout, self.poll,
                                    alive=lambda: bool(service.pid()))
        if back is None:
            raise DaemonJsonError('%s: dockerd did not come back with the new configuration (%s); the previous file '
                                  'was restored but dockerd did not come back either (%s). dockerd said: %s'
                                  % (request.path, failure or 'verification failed', rollback_error or back_error, why))
        raise DaemonJsonError('%s: dockerd did not come back with the new configuration (%s); the previous file was '
                              'restored and dockerd restarted with it. dockerd said: %s'
                              % (request.path, failure or 'the running configuration differs', why))
