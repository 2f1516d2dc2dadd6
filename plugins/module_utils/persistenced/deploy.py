# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The persistenced module's work on the host: gather facts, plan, act, verify, roll back.

PRIVATE to the gpufleet.nvidia collection: the API may change at any time.
``Deployer`` gathers the facts (``facts``) that ``_persistenced.plan_present``,
``plan_absent`` and ``plan_stopped`` (pure) decide on, then runs each planned
action through one table (``actions.ACTIONS``, ``Deployer.ACTIONS``) for every state. A failed service command
during ``present`` puts the previous service definition and program back; any other
failure fails the module naming what was being done.

What only a change needs is imported when it is made, not with this file: the actions (``persistenced.actions``)
and the GPU work a restart or stop may defer to (``host.workload``). node_state's check path runs ``Deployer`` in
check mode, and a host compiles every module it imports on every run (zipimport keeps no bytecode); Ansible's
dependency finder still packs both into the zips.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import grp
import os
import pwd
import sys
import time

from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files as host_files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import procs
from ansible_collections.gpufleet.nvidia.plugins.module_utils.persistenced import facts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.persistenced import rules as pd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import (
    GpufleetError, RunFailed, ServiceError)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import systems
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init.service import Service


def persistence_service(init_system, name, run, tools, together=None):
    """The daemon's service: its main process is the persistence daemon its pid file names."""
    return Service(init_system, name, run, tools, find_pid=lambda: pd.pid_alive(pd.PID_FILE),
                   log_files=pd.SYSLOG_FILES, log_filter=pd.LOG_FILTER, together=together)


def deferred(result, params, service, actions, check_mode):
    """Whether ``actions`` restart or stop the daemon while the host has GPU work (other than the daemon's own) and
    the policy defers that (``host.workload``): then nothing runs and ``result`` says why."""
    disruptive = [action for action in actions if action in ('restart', 'stop')]
    if not disruptive or check_mode:
        return False  # nothing to ask the init system for (the daemon's pid) when nothing can be deferred
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import workload
    policy = params.get('disruption', workload.DEFAULT_POLICY)
    if policy != 'defer':
        return False
    found = workload.deferral(policy, disruptive[0], '%s the persistence '
                              'daemon (%s)' % ('Restarting' if disruptive[0] == 'restart' else 'Stopping',
                                               params['service_name']),
                              exclude=tuple(pid for pid in (service.pid(),) if pid), check_mode=check_mode)
    if found:
        workload.defer(result, found, actions_key='actions')
    return bool(found)


def report_holders(result, warnings, host, exclude=()):
    """Which processes still hold NVIDIA device files (``facts.device_holders``): information, and a warning, since
    they keep the driver from being unloaded or a GPU from being reset."""
    result['device_holders'], warning = facts.device_holders(exclude)
    if warning:
        warnings.append('%s: %s' % (host, warning))


def restore_previous(deployer, current):
    """Put the previous unit and program back (``persistenced.actions``, imported to act only)."""
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.persistenced import actions as pd_actions
    pd_actions.restore_file(deployer.unit_path, current['unit'], deployer.unit_mode, deployer.calls.label)
    pd_actions.restore_file(deployer.params['bundled_path'], current['binary'], pd_actions.BINARY_MODE,
                            deployer.calls.label)


class _Actions(object):
    """``Deployer.ACTIONS``: ``persistenced.actions.ACTIONS``, imported when first read (to act)."""

    def __get__(self, instance, owner):
        from ansible_collections.gpufleet.nvidia.plugins.module_utils.persistenced import actions as pd_actions
        return pd_actions.ACTIONS


class Deployer(object):
    """One run of the persistenced module. ``converge()`` returns the result for ``exit_json``, its warnings in
    ``warnings``, or raises RunFailed (the message and the result keys to fail with).

    It holds no AnsibleModule: ``params`` are the module's options and ``calls`` what it asks of the module
    (``_module.HostCalls``: commands, the init system, tools, backups, the SELinux labeller, check and diff
    mode)."""

    # Seconds a stopped daemon may take to be gone after its service's stop returned (the process exits).
    STOP_SETTLE = 10.0

    def __init__(self, params, calls):
        self.calls = calls
        self._run = calls.run
        self.params = dict(params)
        self.warnings = []
        self.host = os.uname()[1]
        self.result = {'changed': False, 'actions': []}
        self.pw = self.gr = None
        self.state_dir = None

    # ---- helpers --------------------------------------------------------------
    def fail(self, msg, **extra):
        raise RunFailed('%s: %s' % (self.host, msg), actions=self.result['actions'], **extra)

    def run(self, argv):
        return self._run(argv)

    def converge(self):
        self.detect()
        try:
            {'present': self.present, 'absent': self.absent, 'stopped': self.stopped}[self.params['state']]()
        except GpufleetError as exc:  # a host query failed (a tool the init system needs is missing)
            self.fail(str(exc))
        return self.result

    def apply(self, actions, current, desired, failed):
        """Run ``actions`` in order through ``ACTIONS``; ``failed(action, current, exc)`` handles an error."""
        for action in actions:
            try:
                self.ACTIONS[action](self, current, desired)
            except (GpufleetError, OSError) as exc:
                failed(action, current, exc)

    # ---- facts ----------------------------------------------------------------
    def detect(self):
        p = self.params
        init, tools, detected = self.calls.init_system(p['init_system'])
        if init not in systems.SYSTEMS:
            self.fail('no init system recognised (%s); set init_system to systemd, sysvinit or upstart if this host '
                      'really runs one' % detected['reason'])
        self.init = init
        self.service = persistence_service(init, p['service_name'], self.run, tools, self.calls.together)
        self.unit_path = pd.unit_path(init, p['service_name'])
        self.unit_mode = systems.unit_mode(init)
        self.result.update(init_system=init, unit_path=self.unit_path, user=p['user'], group=p['group'])

    def resolve_identity(self):
        """Look the accounts up (``facts.resolve_identity``). An existing user is used as it is: unless a group is
        asked for, its own primary group is the daemon's, and nothing is created or changed."""
        self.pw, self.gr, warnings = facts.resolve_identity(self.params, self.fail)
        self.result['group'] = self.params['group']
        self.warnings.extend('%s: %s' % (self.host, warning) for warning in warnings)

    def inspect_state_dir(self):
        """Refuse a state directory that is not dedicated, before anything changes; True when it is as wanted."""
        self.state_dir, state_dir_ok = facts.inspect_state_dir(self.params, self.pw, self.gr, self.fail)
        return state_dir_ok

    # ---- present ----------------------------------------------------------------
    def present(self):
        p = self.params
        self.resolve_identity()
        driver_ok = os.path.isfile(p['driver_path']) and os.access(p['driver_path'], os.X_OK)
        if p['daemon'] == 'driver' and not driver_ok:
            self.fail('NVIDIA\'s daemon %s is missing: install the driver\'s nvidia-persistenced package, or use '
                      'daemon: bundled (or auto)' % p['driver_path'])
        kind = 'driver' if p['daemon'] == 'driver' or (p['daemon'] == 'auto' and driver_ok) else 'bundled'
        daemon_path = p['driver_path'] if kind == 'driver' else p['bundled_path']
        python = '/usr/bin/python3' if os.path.exists('/usr/bin/python3') else sys.executable
        try:
            desired_binary = pd.bundled_script(p['bundled_source'], python)
            desired_unit = pd.render(self.init, p, daemon_path, kind)
        except pd.ConfigError as exc:
            self.fail(str(exc))
        current_unit = host_files.read_root_text(self.unit_path)
        current_binary = host_files.read_root_text(p['bundled_path'])
        running = self.service.is_running()
        uid = self.pw.pw_uid if self.pw else None
        current = {
            'unit': current_unit,
            'binary': current_binary,
            'running': running,
            # a changed definition is enabled again (systemd links point at the old file); Upstart jobs start
            # through their own "start on" stanza
            'enabled': self.service.is_enabled() if current_unit == desired_unit or self.service.init.starts_by_definition else False,
            'user_exists': self.pw is not None,
            'group_exists': self.gr is not None,
            'state_dir_ok': self.inspect_state_dir(),
            'run_dir_ok': (not running) or p['user'] == 'root' or facts.dir_ok(pd.RUN_DIR, uid, None),
        }
        desired = {'unit': desired_unit, 'binary': desired_binary, 'binary_is_daemon': kind == 'bundled',
                   'create_user': p['user'] != 'root', 'create_group': p['group'] != 'root'}
        actions = pd.plan_present(current, desired)
        self.result.update(daemon=kind, daemon_path=daemon_path, actions=actions, changed=bool(actions))
        if deferred(self.result, self.params, self.service, actions, self.calls.check_mode):
            return
        if self.calls.diff:
            self.result['diff'] = [dict(before_header=self.unit_path, after_header=self.unit_path,
                                        before=current_unit or '', after=desired_unit)]
            if current_binary != desired_binary:
                self.result['diff'].append(dict(before_header=p['bundled_path'], after_header=p['bundled_path'],
                                                before=current_binary or '', after=desired_binary))
        if self.calls.check_mode:
            self.result['pid'] = self.service.pid()
            return
        self.apply(actions, current, desired, self.present_failed)
        if running or 'start' in actions or 'restart' in actions:
            self.verify(current, actions)

    def present_failed(self, action, current, exc):
        """A service command failed: put the previous definition back. Anything else: fail as it is."""
        if isinstance(exc, ServiceError):
            self.roll_back(current, str(exc))
        self.fail(str(exc), changed=True)

    def roll_back(self, current, reason):
        """Put the previous unit and program back, restart the old daemon if it ran, and fail."""
        logs = self.service.logs()
        p = self.params
        notes = []
        try:
            restore_previous(self, current)
            self.service.reload_init()
            if current['running']:
                self.service.restart()
            notes.append('the previous service definition was restored')
            if current['running'] and not self.service.is_running():
                notes.append('but the previous daemon is not running again: start %s by hand and check its log'
                             % p['service_name'])
        except Exception as exc:  # report both failures; the first is the one to fix
            notes.append('restoring the previous service definition also failed: %s' % exc)
        self.fail('%s; %s. Daemon log:\n%s' % (reason, '; '.join(notes), logs or '(no log lines found)'),
                  changed=True)

    def verify(self, current, actions):
        """The daemon answers on its socket and runs as the service user."""
        p = self.params
        last = facts.daemon_answer_error(p['start_timeout'])
        if last is not None:
            reason = 'the daemon did not answer on %s within %ss after %s (%s)' % (
                pd.SOCKET, p['start_timeout'], '/'.join(a for a in actions if a in ('start', 'restart')) or 'start',
                last)
            if 'start' in actions or 'restart' in actions:
                self.roll_back(current, reason)
            self.fail(reason)
        pid = self.service.pid()
        self.result['pid'] = pid
        if pid is not None and self.pw is not None:
            uid = procs.process_uid(pid)
            if uid is not None and uid != self.pw.pw_uid:
                self.fail('the daemon (pid %d) runs as uid %d, not as %s (uid %d)'
                          % (pid, uid, p['user'], self.pw.pw_uid))

    # ---- absent -----------------------------------------------------------------
    def absent(self):
        p = self.params
        unit = host_files.read_root_text(self.unit_path)
        self.pw = facts.lookup(pwd.getpwnam, p['user'])
        self.state_dir = facts.state_dir_of(p['state_file'], self.pw.pw_uid) if self.pw else None
        current = {
            'init_system': self.init,
            'unit': unit,
            'running': self.service.is_running(),
            'enabled': pd.is_ours(unit) and self.service.is_enabled(),
            'run_dir_exists': os.path.lexists(pd.RUN_DIR),
            'binary_exists': os.path.exists(p['bundled_path']),
            'user_exists': self.pw is not None,
            'group_exists': facts.lookup(grp.getgrnam, p['group']) is not None,
            'state_dir_owned': self.state_dir is not None,
        }
        desired = {'remove_user': p['remove_user'], 'user': p['user'], 'group': p['group']}
        actions = pd.plan_absent(current, desired)
        self.result.update(actions=actions, changed=bool(actions))
        if deferred(self.result, self.params, self.service, actions, self.calls.check_mode):
            return
        if self.calls.diff and pd.is_ours(unit):
            self.result['diff'] = dict(before_header=self.unit_path, after_header=self.unit_path,
                                       before=unit, after='')
        if self.calls.check_mode:
            return
        self.apply(actions, current, desired, self.absent_failed)

    def absent_failed(self, action, current, exc):
        self.fail('removing the persistence daemon failed at %s: %s' % (action, exc))

    # ---- stopped ----------------------------------------------------------------
    def stopped(self):
        """Stop the daemon for maintenance; the definition, its start at boot and the state file stay."""
        p = self.params
        unit = host_files.read_root_text(self.unit_path)
        running = self.service.is_running()
        pid = self.service.pid()
        current = {'unit': unit, 'running': running}
        try:
            actions = pd.plan_stopped(current, {'service': p['service_name'], 'unit_path': self.unit_path})
        except pd.ConfigError as exc:
            self.fail(str(exc) if pid is None else '%s (a daemon runs without it, pid %d: stop it by hand)'
                      % (exc, pid))
        self.result.update(actions=actions, changed=bool(actions))
        if deferred(self.result, self.params, self.service, actions, self.calls.check_mode):
            return
        if self.calls.diff:
            header = '%s (service state)' % p['service_name']
            self.result['diff'] = dict(before_header=header, after_header=header, after='stopped\n',
                                       before='running\n' if running else 'stopped\n')
        if self.calls.check_mode:
            self.result['pid'] = pid
            # the daemon would be stopped: what else would still hold the GPUs
            self.report_holders(exclude=(pid,))
            return
        self.apply(actions, current, {}, self.stopped_failed)
        self.verify_stopped()
        self.report_holders()

    def stopped_failed(self, action, current, exc):
        self.fail('stopping the persistence daemon failed at %s: %s. Daemon log:\n%s'
                  % (action, exc, self.service.logs() or '(no log lines found)'))

    def verify_stopped(self):
        """No daemon is left: the service says stopped and the pid file names no live daemon."""
        give_up = time.time() + self.STOP_SETTLE
        while True:
            running, pid = self.service.is_running(), self.service.pid()
            if not running and pid is None:
                break
            if time.time() > give_up:
                still = 'pid %d' % pid if pid is not None else 'the init system says so'
                self.fail('the persistence daemon is still running after stop (%s): stop it by hand (a daemon the '
                          'service %s did not start is not stopped through it), then run again'
                          % (still, self.params['service_name']), changed=bool(self.result['actions']))
            time.sleep(0.1)
        self.result['pid'] = None

    def report_holders(self, exclude=()):
        report_holders(self.result, self.warnings, self.host, exclude)

    # What each action of any plan does (``actions``): one table for every state. Errors go to the state's handler.
    ACTIONS = _Actions()
