# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One service manager for every init system: systemd, Upstart and SysV.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. Both ``persistenced`` (the persistence daemon's service) and
``docker_runtime`` (dockerd) drive their service through ``Service``; it
holds what the init systems really do, measured on real systemd, real
Upstart 1.13 and 0.6.5 and Debian's SysV scripts:

* Upstart's ``initctl stop`` / ``start`` exit 1 with "Job has already been
  stopped" / "Unknown instance" / "Job is already running": success here.
* A job whose start failed can sit in ``stop/post-start`` while its
  post-start runs; a ``start`` issued then ends in ``start/running`` with no
  main process. ``stop`` waits for ``stop/waiting``, and only
  ``start/running, process N`` counts as running.
* ``initctl restart`` keeps the old job definition: ``restart`` is stop, then
  start, on Upstart.
* systemd units such as docker.service have a start limit: ``restart``
  clears a failed state first, so a roll-back's restart is not refused.
* SysV scripts have no reliable ``reload`` (Debian's docker script's
  force-reload restarts): ``reload`` signals the daemon's process instead.

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
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError, ServiceError

# What real Upstart's initctl says (exit 1) for a job already stopped or started:
# 1.13 "Job has already been stopped" / "Unknown instance", 0.6.5 "Unknown instance";
# both "Job is already running".
UPSTART_ALREADY_STOPPED = ('Unknown instance', 'Job has already been stopped')
UPSTART_ALREADY_STARTED = ('Job is already running',)
# systemctl is-enabled answers that mean "starts at boot".
SYSTEMD_ENABLED = ('enabled', 'enabled-runtime', 'alias', 'static', 'generated')
# What one `systemctl show` reads of a unit: every query about it (is it loaded, enabled, active, its main process,
# its command) is answered from that one answer, so node_state, which runs each command once per run, asks systemd
# once per unit (each systemctl costs about 10 ms of CPU on the host).
SYSTEMD_PROPERTIES = ('LoadState', 'ActiveState', 'UnitFileState', 'MainPID', 'ExecStart')
# The ActiveState values `systemctl is-active` exits 0 for.
SYSTEMD_ACTIVE = ('active', 'reloading', 'refreshing')
# UnitFileState values that say all of `systemctl is-enabled`'s answer. The others (a unit generated from a SysV
# script, "generated", whose links only `is-enabled` reads through systemd-sysv-install; none, for a unit systemd
# has not loaded) are asked of `is-enabled` itself.
SYSTEMD_FILE_STATES = ('enabled', 'enabled-runtime', 'alias', 'static', 'disabled', 'masked', 'masked-runtime',
                       'indirect', 'linked', 'linked-runtime', 'transient', 'bad')


# node_state: the units an earlier run asked systemd about, shown together in one ``systemctl show`` when the first
# of them is asked (``show_together``); None elsewhere, where each Service asks for its own unit.
TOGETHER = None
UNIT_NAME = re.compile(r'\A[A-Za-z0-9:_.@\\-]{1,255}\Z')
MAX_TOGETHER = 16


class Together(object):
    """One ``systemctl show`` for several units, asked once; each block of its answer is what ``systemctl show`` of
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


def show_together(units):
    """Turn on (``units``, a list) or off (None) asking systemd about these units together (node_state's run)."""
    global TOGETHER
    TOGETHER = Together(units) if units is not None else None
    return TOGETHER


def found_by(service, pid, warnings):
    """How ``service``'s process ``pid`` was identified (``Service.evidence``), for a module's result, else None;
    a process the init system named but that was refused becomes a warning."""
    if getattr(service, 'refused', None):
        warnings.append(service.refused)
    return getattr(service, 'evidence', {}).get(pid) if pid else None


class Service(object):
    """The init system's commands for one service."""

    def __init__(self, init_system, name, run, tools, find_pid=None, log_files=(), log_filter=None,
                 script_dir='/etc/init.d', rc_root='/etc', executable=None, pid_files=None):
        self.init_system = init_system
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

    # ---- plumbing -------------------------------------------------------------
    def tool(self, name):
        path = self.tools.get(name)
        if not path:
            raise ServiceError('%s is needed to manage %s on this %s host but was not found'
                               % (name, self.name, self.init_system))
        return path

    def _check(self, argv, what):
        rc, out, err = self.run(argv)
        if rc != 0:
            raise ServiceError('%s failed (rc=%s, `%s`): %s' % (what, rc, ' '.join(argv), (err or out or '').strip()))
        return out

    def _verb(self, verb):
        if self.init_system == 'systemd':
            argv = [self.tool('systemctl'), verb, self.name]
        elif self.init_system == 'sysvinit':
            argv = [self.script, verb]
        else:
            raise ServiceError('cannot %s %s: no init system manages it here (init system: %s)'
                               % (verb, self.name, self.init_system))
        return self._check(argv, '%s %s' % (verb, self.name))

    def upstart_status(self):
        rc, out, err = self.run([self.tool('initctl'), 'status', self.name])
        return out if rc == 0 else ''

    def _initctl(self, verb, already=()):
        """``initctl VERB``; real Upstart exits 1 when the job is already where it was
        asked to go, which is success here."""
        argv = [self.tool('initctl'), verb, self.name]
        rc, out, err = self.run(argv)
        if rc != 0 and not any(text in (err or '') + (out or '') for text in already):
            raise ServiceError('%s %s failed (rc=%s, `%s`): %s'
                               % (verb, self.name, rc, ' '.join(argv), (err or out or '').strip()))

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
        out = TOGETHER.show(self, argv) if TOGETHER is not None else None
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
        """``(pid, evidence)``: the main process as the init system reports it (pid None: not running), or
        ``(None, None)`` when it has no record of the service."""
        if self.init_system == 'systemd' and self.tools.get('systemctl'):
            values = self.systemd_show()
            if values.get('LoadState') == 'loaded':
                main = values.get('MainPID', '').strip()
                return (int(main) if main.isdigit() and int(main) > 0 else None), 'systemd (MainPID of %s)' % self.name
        if self.init_system == 'upstart' and self.tools.get('initctl'):
            rc, out, err = self.run([self.tools['initctl'], 'status', self.name])
            if rc == 0:
                match = re.search(r'start/running, process (\d+)', out or '')
                return (int(match.group(1)) if match else None), 'Upstart (initctl status %s)' % self.name
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
        if self.init_system == 'systemd':
            state = self.systemd_show().get('UnitFileState', '')
            if state in SYSTEMD_FILE_STATES:
                return state in SYSTEMD_ENABLED
            rc, out, err = self.run([self.tool('systemctl'), 'is-enabled', self.name])
            return rc == 0 and out.strip() in SYSTEMD_ENABLED
        if self.init_system == 'sysvinit':
            return bool(glob.glob('%s/rc[2345].d/S[0-9][0-9]%s' % (self.rc_root, self.name)))
        return True  # Upstart: the job's "start on" stanza starts it at boot

    def is_running(self):
        if self.init_system == 'systemd':
            return self.systemd_show().get('ActiveState') in SYSTEMD_ACTIVE
        if self.init_system == 'upstart':
            # "start/running" alone, with no ", process N", is a job whose main process
            # Upstart has lost (it ended while a post-start ran): not running.
            return 'start/running, process ' in self.upstart_status()
        return self.pid() is not None

    def logs(self, since=None, lines=40):
        """The service's recent log lines (for error messages); '' when none are found."""
        if self.init_system == 'systemd' and self.tools.get('journalctl'):
            argv = [self.tools['journalctl'], '-u', '%s.service' % self.name, '--no-pager', '-o', 'cat',
                    '-n', str(lines)]
            if since:
                argv.append('--since=@%d' % int(since))
            rc, out, err = self.run(argv)
            return (out or '').strip() if rc == 0 else ''
        for path in self.log_files:
            found = [line for line in files.tail_file(path, 65536).splitlines()
                     if self.log_filter is None or self.log_filter in line]
            if found:
                return '\n'.join(found[-lines:])
        return ''

    # ---- actions --------------------------------------------------------------
    def reload_init(self):
        """Make the init system read changed service definitions."""
        if self.init_system == 'systemd':
            self._check([self.tool('systemctl'), 'daemon-reload'], 'systemd daemon-reload')
        elif self.init_system == 'upstart':
            self._check([self.tool('initctl'), 'reload-configuration'], 'Upstart reload-configuration')

    def enable(self):
        if self.init_system == 'systemd':
            self._check([self.tool('systemctl'), 'enable', self.name], 'enabling %s' % self.name)
        elif self.init_system == 'sysvinit':
            if self.tools.get('update-rc.d'):
                # "defaults" keeps links a package left behind (K links of a disabled service): "enable" turns them on.
                self._check([self.tools['update-rc.d'], self.name, 'defaults'], 'update-rc.d defaults')
                self._check([self.tools['update-rc.d'], self.name, 'enable'], 'update-rc.d enable')
            elif self.tools.get('chkconfig'):
                self._check([self.tools['chkconfig'], '--add', self.name], 'chkconfig --add')
                self._check([self.tools['chkconfig'], self.name, 'on'], 'chkconfig on')
            elif self.tools.get('insserv'):
                self._check([self.tools['insserv'], self.name], 'insserv')
            else:
                raise ServiceError('none of update-rc.d, chkconfig or insserv was found to enable %s at boot'
                                   % self.name)

    def disable(self):
        if self.init_system == 'systemd':
            self._check([self.tool('systemctl'), 'disable', self.name], 'disabling %s' % self.name)
        elif self.init_system == 'sysvinit':
            if self.tools.get('update-rc.d'):
                self._check([self.tools['update-rc.d'], '-f', self.name, 'remove'], 'update-rc.d remove')
            elif self.tools.get('chkconfig'):
                self._check([self.tools['chkconfig'], '--del', self.name], 'chkconfig --del')
            elif self.tools.get('insserv'):
                self._check([self.tools['insserv'], '-r', self.name], 'insserv -r')

    def start(self):
        if self.init_system == 'upstart':
            self._initctl('start', UPSTART_ALREADY_STARTED)
        else:
            self._verb('start')

    def stop(self, settle=15.0, sleep=time.sleep, clock=time.time):
        if self.init_system == 'upstart':
            self._initctl('stop', UPSTART_ALREADY_STOPPED)
            # A job whose start failed can still be in stop/post-start while its
            # post-start runs; a start issued then ends in "start/running" with no main
            # process. Wait for stop/waiting.
            give_up = clock() + settle
            while 'stop/waiting' not in self.upstart_status() and clock() < give_up:
                sleep(0.1)
        else:
            self._verb('stop')

    def restart(self):
        if self.init_system == 'upstart':
            # "initctl restart" keeps the old job definition: stop and start to load the new one.
            self.stop()
            self.start()
        elif self.init_system == 'systemd':
            # Units such as docker.service have a start limit: a failed start must not block a roll-back's restart.
            self.run([self.tool('systemctl'), 'reset-failed', self.name])
            self._verb('restart')
        else:
            self._verb('restart')

    def reload(self):
        """Ask the running daemon to re-read its configuration (SIGHUP)."""
        if self.init_system == 'systemd':
            self._check([self.tool('systemctl'), 'reload', self.name], 'reloading %s' % self.name)
        elif self.init_system == 'upstart':
            self._initctl('reload')
        else:
            # SysV scripts have no reliable reload (Debian's docker force-reload restarts): signal the daemon.
            pid = self.pid()
            if not pid:
                raise ServiceError('cannot reload %s: it is not running' % self.name)
            try:
                os.kill(pid, signal.SIGHUP)
            except OSError as exc:
                raise ServiceError('cannot send SIGHUP to %s (pid %d): %s' % (self.name, pid, exc))
