# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One service manager for every init system: systemd, Upstart and SysV.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. Both ``persistenced`` (the persistence daemon's service) and
``docker_runtime`` (dockerd) drive their service through ``Service``; what
each init system's commands are and what their answers mean is its class's
(``init.systems``), which ``Service`` asks and hands itself to: ``Service``
runs the commands, reads the files and signals the processes.

``run(argv) -> (rc, out, err)`` runs host commands; ``tools`` maps tool names
(systemctl, initctl, update-rc.d, chkconfig, insserv, journalctl) to paths,
as ``init.detect.detect`` finds them; a missing tool is a ServiceError that
names it. ``find_pid()`` returns the service's main process, or None; without
one, ``processes()`` decides.

Which process is the service: the one the init system names (systemd's
MainPID, Upstart's ``initctl status``, else a root-owned pid file: the
script's own ``PIDFILE=`` or ``/run/NAME.pid``), and only when it is root's
process running ``executable``, a file only root can change
(``procs.not_root_running``). Only when the init system has no record of
the service at all are root's processes running ``executable`` taken, and
the evidence says so. Never a process by its name or arguments: anyone can
start a program called ``containerd``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os
import re
import signal
import time

from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import procs
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import systems
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError, ServiceError

# What one `systemctl show` reads of a unit: every query about it (is it loaded, enabled, active, its main process,
# its command) is answered from that one answer, so node_state, which runs each command once per run, asks systemd
# once per unit (each systemctl costs about 10 ms of CPU on the host).
SYSTEMD_PROPERTIES = ('LoadState', 'ActiveState', 'UnitFileState', 'MainPID', 'ExecStart')

UNIT_NAME = re.compile(r'\A[A-Za-z0-9:_.@\\-]{1,255}\Z')
MAX_TOGETHER = 16


class Together(object):
    """node_state's run: the units an earlier run asked systemd about (``units``), shown together in one
    ``systemctl show`` when the first of them is asked (a Service given it as ``together``). One ``systemctl show`` for
    several units, asked once; each block of its answer is what ``systemctl show`` of
    that unit alone prints (blocks come in the order the units were named, a blank line between two)."""

    def __init__(self, units):
        self.units = [name for name in units if UNIT_NAME.match(name) and not name.startswith('-')][:MAX_TOGETHER]
        self.asked = []  # the units this run asked about, in order (for the next run)
        self.shown = None

    def show(self, service, argv):
        """``service``'s block of the one answer (``{}``-able text), or None: not among the units, or the answer
        was not one block per unit."""
        if service.name not in self.asked:
            self.asked.append(service.name)
        if service.name not in self.units:
            return None
        if self.shown is None:
            self.shown = {}
            rc, out, err = service.run(argv + self.units)
            blocks = (out or '').rstrip('\n').split('\n\n')
            if rc == 0 and len(blocks) == len(self.units):
                self.shown = dict(zip(self.units, blocks))
        return self.shown.get(service.name)


def found_by(service, pid, warnings):
    """How ``service``'s process ``pid`` was identified (``Service.evidence``), for a module's result, else None;
    a process the init system named but that was refused becomes a warning."""
    if getattr(service, 'refused', None):
        warnings.append(service.refused)
    return getattr(service, 'evidence', {}).get(pid) if pid else None


class Service(object):
    """The init system's commands for one service: ``init_system`` is init.detect's name of it, ``self.init`` its
    class (``init.systems``), which decides; this object runs. ``together``: the run's ``Together`` (node_state),
    or None."""

    def __init__(self, init_system, name, run, tools, find_pid=None, log_files=(), log_filter=None,
                 script_dir='/etc/init.d', rc_root='/etc', executable=None, pid_files=None, together=None):
        self.init_system = init_system
        self.together = together
        self.init = systems.get(init_system)
        self.name = name
        self.run = run
        self.tools = dict(tools or {})
        self.find_pid = find_pid
        self.executable = executable
        self.pid_files = tuple(pid_files) if pid_files is not None else ('/run/%s.pid' % name, '/var/run/%s.pid' % name)
        self.evidence = {}
        self.refused = None
        self.log_files = tuple(log_files)
        self.log_filter = log_filter
        self.script = os.path.join(script_dir, name)
        self.rc_root = rc_root

    # ---- plumbing: what the init system's class asks of the host --------------
    def tool(self, name):
        path = self.tools.get(name)
        if not path:
            raise ServiceError('%s is needed to manage %s on this %s host but was not found'
                               % (name, self.name, self.init_system))
        return path

    def check(self, argv, what):
        rc, out, err = self.run(argv)
        if rc != 0:
            raise ServiceError('%s failed (rc=%s, `%s`): %s' % (what, rc, ' '.join(argv), (err or out or '').strip()))
        return out

    def start_links(self):
        """The SysV start links of the service in runlevels 2-5 (``rc2.d/S01NAME``...)."""
        return glob.glob('%s/rc[2345].d/S[0-9][0-9]%s' % (self.rc_root, self.name))

    def hangup(self):
        """SIGHUP to the service's main process."""
        pid = self.pid()
        if not pid:
            raise ServiceError('cannot reload %s: it is not running' % self.name)
        try:
            os.kill(pid, signal.SIGHUP)
        except OSError as exc:
            raise ServiceError('cannot send SIGHUP to %s (pid %d): %s' % (self.name, pid, exc))

    # ---- queries --------------------------------------------------------------
    def pid(self):
        if self.find_pid is not None:
            return self.find_pid()
        found = self.processes()
        return found[0] if found else None

    def script_pid_file(self):
        """The ``PIDFILE=`` of the service's SysV script (a root file nobody else can write), or None."""
        try:
            script = files.read_file(self.script, self.script, 1 << 20)
        except GpufleetError:
            return None
        match = re.search(r'^\s*PIDFILE=["\']?(/[^"\'\s$`;]+)["\']?\s*$', script.text, re.M)
        return match.group(1) if match else None

    def systemd_show(self):
        """The unit's ``SYSTEMD_PROPERTIES`` from one ``systemctl show`` (a property's first line where it has
        several); ``{}`` when systemctl fails."""
        argv = [self.tool('systemctl'), 'show']
        for name in SYSTEMD_PROPERTIES:
            argv.extend(('-p', name))
        out = self.together.show(self, argv) if self.together is not None else None
        if out is not None:
            rc = 0
        else:
            rc, out, err = self.run(argv + [self.name])
        values = {}
        if rc == 0:
            for line in (out or '').splitlines():
                key, sep, value = line.partition('=')
                if sep and key not in values:
                    values[key] = value
        return values

    def reported_pid(self):
        """``(pid, evidence)``: the main process as the init system reports it (pid None: not running), else as a
        root-owned pid file names it, or ``(None, None)`` when neither has a record of the service."""
        pid, evidence = self.init.reported_pid(self)
        if evidence is not None:
            return pid, evidence
        for pid_file in filter(None, (self.script_pid_file(),) + self.pid_files):
            pid = procs.read_pid_file(pid_file, owner=0)
            if pid:
                return pid, 'the root-owned pid file %s' % pid_file
        return None, None

    def processes(self):
        """The service's main process as ``[pid]`` (``evidence[pid]`` says how it was found); every root process
        running ``executable`` only when the init system has no record of the service."""
        if not self.executable:
            return []
        pid, evidence = self.reported_pid()
        self.refused = None
        if evidence is not None:
            why = procs.not_root_running(pid, self.executable) if pid else 'not running'
            found = [pid] if why is None else []
            if pid and why:
                self.refused = ('%s names process %d, but %s: it is not taken for %s. If it is the service, make the '
                                'service run %s.' % (evidence, pid, why, self.name, self.executable))
        else:
            found = procs.pids_running(self.executable)
            evidence = 'a root process running %s (the %s init system has no record of %s)' % (
                self.executable, self.init_system, self.name)
        self.evidence = dict((one, evidence) for one in found)
        return found

    def is_enabled(self):
        return self.init.is_enabled(self)

    def is_running(self):
        return self.init.is_running(self)

    def logs(self, since=None, lines=40):
        """The service's recent log lines (for error messages); '' when none are found."""
        found = self.init.logs(self, since, lines)
        if found is not None:
            return found
        for path in self.log_files:
            found = [line for line in files.tail_file(path, 65536).splitlines()
                     if self.log_filter is None or self.log_filter in line]
            if found:
                return '\n'.join(found[-lines:])
        return ''

    def command_words(self):
        """The words the init system starts the service with, where it says (systemd's ExecStart)."""
        return self.init.command_words(self)

    # ---- actions --------------------------------------------------------------
    def reload_init(self):
        """Make the init system read changed service definitions."""
        self.init.reload_init(self)

    def enable(self):
        self.init.enable(self)

    def disable(self):
        self.init.disable(self)

    def start(self):
        self.init.start(self)

    def stop(self, settle=15.0, sleep=time.sleep, clock=time.time):
        self.init.stop(self, settle, sleep, clock)

    def restart(self):
        self.init.restart(self)

    def reload(self):
        """Ask the running daemon to re-read its configuration (SIGHUP, or the init system's reload)."""
        self.init.reload(self)
