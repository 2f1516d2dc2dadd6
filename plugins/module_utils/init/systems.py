# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The init systems, one class each: their paths, their verbs, what their answers mean, what a changed unit needs.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It is pure: each class says which commands do what on its init
system and reads their answers; ``init.service.Service`` runs the commands
(its ``run``, ``tool``, ``check``) and is handed to every verb as ``svc``.
Outside ``init/`` no code compares an init system's name: it asks ``get(name)``
for the class and the class answers. Measured on real systemd, real Upstart
1.13 and 0.6.5 and Debian's SysV scripts:

* Upstart's ``initctl stop`` / ``start`` exit 1 with "Job has already been
  stopped" / "Unknown instance" / "Job is already running": success here
  (0.6.5 says "Unknown instance" where 1.13 says either; that is the one
  difference between the two versions a service sees, so one class serves both).
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

Adding an init system (OpenRC, say) is one more class here: its unit path and
mode, its log file, its verbs (``rc-service NAME start``, ``rc-update add``),
its status, what a changed script needs (nothing, as SysV) and how it renders
a boot task (an ``openrc-run`` script); ``get`` and every concern then know it.
One unit stays a concern's own: the persistence daemon's long-running service
(persistenced/rules.py renders it per init system, its hardening, user and
run directory being the daemon's, not the init system's), so OpenRC would
also need that one rendering there.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import ServiceError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import boot

# What real Upstart's initctl says (exit 1) for a job already stopped or started:
# 1.13 "Job has already been stopped" / "Unknown instance", 0.6.5 "Unknown instance";
# both "Job is already running".
UPSTART_ALREADY_STOPPED = ('Unknown instance', 'Job has already been stopped')
UPSTART_ALREADY_STARTED = ('Job is already running',)
# systemctl is-enabled answers that mean "starts at boot".
SYSTEMD_ENABLED = ('enabled', 'enabled-runtime', 'alias', 'static', 'generated')
# The ActiveState values `systemctl is-active` exits 0 for.
SYSTEMD_ACTIVE = ('active', 'reloading', 'refreshing')
# UnitFileState values that say all of `systemctl is-enabled`'s answer. The others (a unit generated from a SysV
# script, "generated", whose links only `is-enabled` reads through systemd-sysv-install; none, for a unit systemd
# has not loaded) are asked of `is-enabled` itself.
SYSTEMD_FILE_STATES = ('enabled', 'enabled-runtime', 'alias', 'static', 'disabled', 'masked', 'masked-runtime',
                       'indirect', 'linked', 'linked-runtime', 'transient', 'bad')


class InitSystem(object):
    """What every init system answers; an init system we do not know (``unknown``) answers so, and refuses to start,
    stop or restart anything."""

    name = 'unknown'
    unit = None  # where a service's definition lives (``%s``: the service's name)
    unit_mode = 0o644
    log = None  # where a service's own output goes, outside a journal (``%s``: the service's name)
    # The init system starts a service at boot through its definition alone (Upstart's "start on"): nothing to enable,
    # and a changed definition is as enabled as the old one.
    starts_by_definition = False
    # The init system that runs a service of this host that has no definition of this one's (Upstart: the SysV script,
    # through its rc job), or None.
    without_definition = None
    # NVIDIA ships systemd units (nvidia-cdi-refresh): only an init system that runs them can use them.
    runs_systemd_units = False

    def unit_path(self, service):
        if self.unit is None:
            raise ServiceError('no init system we know defines %s here (init system: %s)' % (service, self.name))
        return self.unit % service

    def log_file(self, service):
        return self.log % service if self.log else None

    # ---- verbs: ``svc`` is the init.service.Service that runs them ------------
    def refuse(self, svc, verb):
        raise ServiceError('cannot %s %s: no init system manages it here (init system: %s)'
                           % (verb, svc.name, svc.init_system))

    def start(self, svc):
        self.refuse(svc, 'start')

    def stop(self, svc, settle, sleep, clock):
        self.refuse(svc, 'stop')

    def restart(self, svc):
        self.refuse(svc, 'restart')

    def reload(self, svc):
        """Ask the running daemon to re-read its configuration: SIGHUP to its process."""
        svc.hangup()

    def enable(self, svc):
        """Start ``svc`` at boot (nothing where the init system has no such switch)."""

    def disable(self, svc):
        """Do not start ``svc`` at boot."""

    def reload_init(self, svc):
        """What a changed unit needs before it is used (nothing, where the init system reads it at each start)."""

    # ---- what the init system answers -----------------------------------------
    def is_enabled(self, svc):
        return True

    def is_running(self, svc):
        return svc.pid() is not None

    def reported_pid(self, svc):
        """``(pid, evidence)``: the main process as the init system names it (pid None: not running), or
        ``(None, None)`` when it keeps no record (the pid files then decide)."""
        return None, None

    def logs(self, svc, since, lines):
        """The service's recent lines from the init system's own log, or None: it keeps none (the log files then)."""
        return None

    def command_words(self, svc):
        """The words of the command the init system starts the service with, where it says (systemd's ExecStart)."""
        return []

    def service_tools(self, tools):
        """``(manager, enable)``: the tool that starts and stops services here and the one that enables them at boot,
        from ``tools`` (init.detect's); None where there is none."""
        return None, None

    # ---- what it reads ----------------------------------------------------------
    def render_boot_task(self, task):
        """The unit, script or job that runs ``task`` (an ``init.boot.BootTask``) at boot, or None: no unit of ours
        can run it here."""
        return None


class Systemd(InitSystem):
    name = 'systemd'
    unit = '/etc/systemd/system/%s.service'
    runs_systemd_units = True

    def verb(self, svc, verb, what=None):
        svc.check([svc.tool('systemctl'), verb, svc.name], what or '%s %s' % (verb, svc.name))

    def start(self, svc):
        self.verb(svc, 'start')

    def stop(self, svc, settle, sleep, clock):
        self.verb(svc, 'stop')

    def restart(self, svc):
        # Units such as docker.service have a start limit: a failed start must not block a roll-back's restart.
        svc.run([svc.tool('systemctl'), 'reset-failed', svc.name])
        self.verb(svc, 'restart')

    def reload(self, svc):
        self.verb(svc, 'reload', 'reloading %s' % svc.name)

    def enable(self, svc):
        self.verb(svc, 'enable', 'enabling %s' % svc.name)

    def disable(self, svc):
        self.verb(svc, 'disable', 'disabling %s' % svc.name)

    def reload_init(self, svc):
        svc.check([svc.tool('systemctl'), 'daemon-reload'], 'systemd daemon-reload')

    def is_enabled(self, svc):
        state = svc.systemd_show().get('UnitFileState', '')
        if state in SYSTEMD_FILE_STATES:
            return state in SYSTEMD_ENABLED
        rc, out, err = svc.run([svc.tool('systemctl'), 'is-enabled', svc.name])
        return rc == 0 and out.strip() in SYSTEMD_ENABLED

    def is_running(self, svc):
        return svc.systemd_show().get('ActiveState') in SYSTEMD_ACTIVE

    def reported_pid(self, svc):
        if svc.tools.get('systemctl'):
            values = svc.systemd_show()
            if values.get('LoadState') == 'loaded':
                main = values.get('MainPID', '').strip()
                return (int(main) if main.isdigit() and int(main) > 0 else None), 'systemd (MainPID of %s)' % svc.name
        return None, None

    def logs(self, svc, since, lines):
        if not svc.tools.get('journalctl'):
            return None
        argv = [svc.tools['journalctl'], '-u', '%s.service' % svc.name, '--no-pager', '-o', 'cat', '-n', str(lines)]
        if since:
            argv.append('--since=@%d' % int(since))
        rc, out, err = svc.run(argv)
        return (out or '').strip() if rc == 0 else ''

    def service_tools(self, tools):
        return tools.get('systemctl'), tools.get('systemctl')

    def render_boot_task(self, task):
        """A oneshot unit that stays active once the script ran, started with multi-user.target."""
        before = tuple('%s.service' % engine for engine in task.engines) + tuple(task.before_units)
        return boot.render_systemd(task.header, task.summary, task.after, before, task.script)

    def command_words(self, svc):
        match = re.search(r'argv\[\]=([^;]*)', svc.systemd_show().get('ExecStart', ''))
        return [word for word in match.group(1).split() if not word.startswith('$')] if match else []


class Sysv(InitSystem):
    name = 'sysvinit'
    unit = '/etc/init.d/%s'
    unit_mode = 0o755
    log = '/var/log/%s.log'

    def verb(self, svc, verb):
        svc.check([svc.script, verb], '%s %s' % (verb, svc.name))

    def start(self, svc):
        self.verb(svc, 'start')

    def stop(self, svc, settle, sleep, clock):
        self.verb(svc, 'stop')

    def restart(self, svc):
        self.verb(svc, 'restart')

    # reload: SysV scripts have no reliable reload (Debian's docker force-reload restarts): the SIGHUP of InitSystem.

    def enable(self, svc):
        tools = svc.tools
        if tools.get('update-rc.d'):
            # "defaults" keeps links a package left behind (K links of a disabled service): "enable" turns them on.
            svc.check([tools['update-rc.d'], svc.name, 'defaults'], 'update-rc.d defaults')
            svc.check([tools['update-rc.d'], svc.name, 'enable'], 'update-rc.d enable')
        elif tools.get('chkconfig'):
            svc.check([tools['chkconfig'], '--add', svc.name], 'chkconfig --add')
            svc.check([tools['chkconfig'], svc.name, 'on'], 'chkconfig on')
        elif tools.get('insserv'):
            svc.check([tools['insserv'], svc.name], 'insserv')
        else:
            raise ServiceError('none of update-rc.d, chkconfig or insserv was found to enable %s at boot' % svc.name)

    def disable(self, svc):
        tools = svc.tools
        if tools.get('update-rc.d'):
            svc.check([tools['update-rc.d'], '-f', svc.name, 'remove'], 'update-rc.d remove')
        elif tools.get('chkconfig'):
            svc.check([tools['chkconfig'], '--del', svc.name], 'chkconfig --del')
        elif tools.get('insserv'):
            svc.check([tools['insserv'], '-r', svc.name], 'insserv -r')

    def is_enabled(self, svc):
        return bool(svc.start_links())

    def service_tools(self, tools):
        enable = [tools[name] for name in ('update-rc.d', 'chkconfig', 'insserv') if tools.get(name)]
        return tools.get('service') or '/etc/init.d', enable[0] if enable else None

    def render_boot_task(self, task):
        """An LSB init script whose start runs the script."""
        return boot.render_sysv(task.header, task.service, task.should_start, task.engines, task.short, task.lines,
                                task.chkconfig, task.script)


class Upstart(InitSystem):
    """Upstart 1.x and 0.6 (the same commands and answers, but for one message; see the module's notes)."""

    name = 'upstart'
    unit = '/etc/init/%s.conf'
    log = '/var/log/upstart/%s.log'
    starts_by_definition = True
    without_definition = 'sysvinit'

    def initctl(self, svc, verb, already=()):
        """``initctl VERB``; real Upstart exits 1 when the job is already where it was asked to go: success here."""
        argv = [svc.tool('initctl'), verb, svc.name]
        rc, out, err = svc.run(argv)
        if rc != 0 and not any(text in (err or '') + (out or '') for text in already):
            raise ServiceError('%s %s failed (rc=%s, `%s`): %s'
                               % (verb, svc.name, rc, ' '.join(argv), (err or out or '').strip()))

    def status(self, svc):
        rc, out, err = svc.run([svc.tool('initctl'), 'status', svc.name])
        return out if rc == 0 else ''

    def start(self, svc):
        self.initctl(svc, 'start', UPSTART_ALREADY_STARTED)

    def stop(self, svc, settle, sleep, clock):
        self.initctl(svc, 'stop', UPSTART_ALREADY_STOPPED)
        # A job whose start failed can still be in stop/post-start while its post-start runs; a start issued then
        # ends in "start/running" with no main process. Wait for stop/waiting.
        give_up = clock() + settle
        while 'stop/waiting' not in self.status(svc) and clock() < give_up:
            sleep(0.1)

    def restart(self, svc):
        # "initctl restart" keeps the old job definition: stop and start to load the new one.
        svc.stop()
        svc.start()

    def reload(self, svc):
        self.initctl(svc, 'reload')

    def reload_init(self, svc):
        svc.check([svc.tool('initctl'), 'reload-configuration'], 'Upstart reload-configuration')

    # is_enabled: True (InitSystem's): the job's "start on" stanza starts it at boot.

    def is_running(self, svc):
        # "start/running" alone, with no ", process N", is a job whose main process Upstart has lost (it ended while
        # a post-start ran): not running.
        return 'start/running, process ' in self.status(svc)

    def service_tools(self, tools):
        return tools.get('initctl'), None  # jobs start at boot through their own "start on" stanza

    def render_boot_task(self, task):
        """A task started before each engine (and at boot, unless one instance per engine)."""
        return boot.render_upstart(task.header, task.short, task.engines, task.script, runlevel=not task.per_engine,
                                   rerun_after=task.rerun_after)

    def reported_pid(self, svc):
        if svc.tools.get('initctl'):
            rc, out, err = svc.run([svc.tools['initctl'], 'status', svc.name])
            if rc == 0:
                match = re.search(r'start/running, process (\d+)', out or '')
                return (int(match.group(1)) if match else None), 'Upstart (initctl status %s)' % svc.name
        return None, None


# Every init system we manage services on, by the name init.detect gives it.
SYSTEMS = dict((one.name, one) for one in (Systemd(), Sysv(), Upstart()))
UNKNOWN = InitSystem()


def get(name):
    """The init system called ``name`` (init.detect's words), or the one that knows nothing (``unknown``)."""
    return SYSTEMS.get(name, UNKNOWN)


def unit_path(init_system, service):
    """The file that defines ``service`` under ``init_system`` (a systemd unit, a SysV script, an Upstart job)."""
    if init_system not in SYSTEMS:
        raise ServiceError('no init system we know defines %s here (init system: %s)' % (service, init_system))
    return SYSTEMS[init_system].unit_path(service)


def unit_mode(init_system):
    """That file's mode: a SysV script is executable."""
    return get(init_system).unit_mode


def log_files(service):
    """Where ``service`` writes its output when a SysV script or an Upstart job runs it (both are looked at: an
    Upstart host can run a SysV script through its rc job)."""
    return tuple(SYSTEMS[name].log_file(service) for name in ('sysvinit', 'upstart'))
