# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The persistenced module's work on the host: gather facts, plan, act, verify, roll back.

PRIVATE to the gpufleet.nvidia collection: the API may change at any time.
``Deployer`` gathers the facts that ``_persistenced.plan_present``,
``plan_absent`` and ``plan_stopped`` (pure) decide on, then runs each planned
action through one table (``Deployer.ACTIONS``) for every state. A failed service command during
``present`` puts the previous service definition and program back; any other
failure fails the module naming what was being done.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import grp
import os
import pwd
import shutil
import stat
import sys
import time

from ansible_collections.gpufleet.nvidia.plugins.module_utils import _host
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _persistence_state as state
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _persistenced as pd
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _persistenced_rpc as rpc
from ansible_collections.gpufleet.nvidia.plugins.module_utils._errors import GpufleetError, HostFileError, RunFailed, ServiceError
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _init_files
from ansible_collections.gpufleet.nvidia.plugins.module_utils._service import Service

BINARY_MODE = 0o755


def persistence_service(init_system, name, run, tools):
    """The daemon's service: its main process is the persistence daemon its pid file names."""
    return Service(init_system, name, run, tools, find_pid=lambda: pd.pid_alive(pd.PID_FILE),
                   log_files=pd.SYSLOG_FILES, log_filter=pd.LOG_FILTER)


def _lookup(getter, name):
    try:
        return getter(name)
    except KeyError:
        return None


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

    def write_file(self, path, text, mode):
        """Replace a root-owned file (unit, script, program) in a root-only directory, atomically.

        Owner, mode and SELinux label are set on the temp file before the rename (write_atomic); a
        failure leaves the old file as it was and no temp file.
        """
        directory = os.path.dirname(path)
        try:
            if not os.path.isdir(directory):
                os.makedirs(directory, 0o755)
        except OSError as exc:
            raise HostFileError('cannot write %s: %s; the file was left as it was' % (path, exc.strerror or exc))
        _host.write_atomic(path, text.encode('utf-8'), mode=mode, label=self.calls.label)

    def restore_file(self, path, text, mode):
        if text is None:
            if os.path.lexists(path):
                os.unlink(path)
        else:
            self.write_file(path, text, mode)

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
        if init == 'unknown':
            self.fail('no init system recognised (%s); set init_system to systemd, sysvinit or upstart if this host '
                      'really runs one' % detected['reason'])
        self.init = init
        self.service = persistence_service(init, p['service_name'], self.run, tools)
        self.unit_path = pd.unit_path(init, p['service_name'])
        self.unit_mode = _init_files.unit_mode(init)
        self.result.update(init_system=init, unit_path=self.unit_path, user=p['user'], group=p['group'])

    def resolve_identity(self):
        """Look the accounts up. An existing user is used as it is: unless a group is asked for, its own
        primary group is the daemon's, and nothing is created or changed."""
        p = self.params
        self.pw = _lookup(pwd.getpwnam, p['user'])
        p['primary_group'] = p['user']
        if self.pw is not None:
            try:
                p['primary_group'] = grp.getgrgid(self.pw.pw_gid).gr_name
            except KeyError:
                p['primary_group'] = str(self.pw.pw_gid)
        if p['group'] is None:
            p['group'] = p['primary_group'] if self.pw is not None else p['user']
            try:
                pd.validate({'group': p['group'], 'service_name': p['service_name']})
            except pd.ConfigError:
                self.fail('user %s\'s primary group is %r, which cannot be written into a service definition: '
                          'set group to a group name of lower case letters, digits, "_" and "-"'
                          % (p['user'], p['group']))
        self.result['group'] = p['group']
        self.gr = _lookup(grp.getgrnam, p['group'])
        if self.pw is not None and self.gr is not None and self.pw.pw_gid != self.gr.gr_gid \
                and not p['allow_other_primary_group']:
            self.fail('user %s exists with primary group %s, not %s: set group: %s, or allow_other_primary_group: '
                      'true to run the daemon with --group %s'
                      % (p['user'], p['primary_group'], p['group'], p['primary_group'], p['group']))
        if self.pw is None and not p['create_user']:
            self.fail('user %s does not exist and create_user is false: create it or let this module create it'
                      % p['user'])
        if self.gr is None and not p['create_user']:
            self.fail('group %s does not exist and create_user is false' % p['group'])
        if self.pw is not None:
            for warning in pd.account_warnings(self.pw.pw_name, self.pw.pw_uid, self.pw.pw_shell or ''):
                self.warnings.append('%s: %s' % (self.host, warning))

    def inspect_state_dir(self):
        """Refuse a state directory that is not dedicated, before anything changes; True when it is as wanted."""
        p = self.params
        uid = self.pw.pw_uid if self.pw else None
        try:
            directory = state.check_path(p['state_file'])
            facts = state.inspect_dir(directory, [uid] if uid is not None else [])
        except state.StateError as exc:
            self.fail('%s; nothing was changed' % exc)
        if p['user'] != 'root' and facts['exists'] and facts['uid'] == 0 and not facts['marked']:
            self.fail('the state directory %s exists, owned by root, and was not created by gpufleet.nvidia, so it '
                      'is not handed to the service user %s: choose a state_file in a directory that does not exist '
                      'yet (this module creates it), or, if %s is dedicated to the state file, chown it to %s:%s '
                      'yourself; nothing was changed' % (directory, p['user'], directory, p['user'], p['group']))
        self.state_dir = directory
        if not facts['exists']:
            return False
        if p['user'] == 'root':
            return True
        gid = self.gr.gr_gid if self.gr else None
        return facts['uid'] == uid and facts['gid'] == gid and facts['mode'] == 0o755

    def state_dir_of(self, uid):
        """The state directory when it is a real directory owned by ``uid``, else None."""
        try:
            directory = state.check_path(self.params['state_file'])
            st = os.lstat(directory)
        except (state.StateError, OSError):
            return None
        return directory if stat.S_ISDIR(st.st_mode) and st.st_uid == uid else None

    @staticmethod
    def dir_ok(path, uid, gid):
        try:
            st = os.lstat(path)  # a link in place of the run directory is not ok: restart makes it afresh
        except OSError:
            return False
        if not stat.S_ISDIR(st.st_mode):
            return False
        return (uid is not None and st.st_uid == uid and (gid is None or st.st_gid == gid)
                and stat.S_IMODE(st.st_mode) == 0o755)

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
        current_unit = _host.read_root_text(self.unit_path)
        current_binary = _host.read_root_text(p['bundled_path'])
        running = self.service.is_running()
        uid = self.pw.pw_uid if self.pw else None
        current = {
            'unit': current_unit,
            'binary': current_binary,
            'running': running,
            # a changed definition is enabled again (systemd links point at the old file); Upstart jobs start
            # through their own "start on" stanza
            'enabled': self.service.is_enabled() if current_unit == desired_unit or self.init == 'upstart' else False,
            'user_exists': self.pw is not None,
            'group_exists': self.gr is not None,
            'state_dir_ok': self.inspect_state_dir(),
            'run_dir_ok': (not running) or p['user'] == 'root' or self.dir_ok(pd.RUN_DIR, uid, None),
        }
        desired = {'unit': desired_unit, 'binary': desired_binary, 'binary_is_daemon': kind == 'bundled',
                   'create_user': p['user'] != 'root', 'create_group': p['group'] != 'root'}
        actions = pd.plan_present(current, desired)
        self.result.update(daemon=kind, daemon_path=daemon_path, actions=actions, changed=bool(actions))
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

    def create_group(self, current, desired):
        rc, out, err = self.run([self.calls.bin_path('groupadd'), '-r', self.params['group']])
        if rc != 0:
            self.fail('creating group %s failed: %s' % (self.params['group'], (err or out).strip()))
        self.gr = grp.getgrnam(self.params['group'])

    def create_user(self, current, desired):
        p = self.params
        nologin = next((s for s in ('/usr/sbin/nologin', '/sbin/nologin') if os.path.exists(s)), '/bin/false')
        argv = [self.calls.bin_path('useradd'), '-r', '-M', '-d', '/', '-s', nologin,
                '-c', 'NVIDIA Persistence Daemon', '-g', p['group'], p['user']]
        rc, out, err = self.run(argv)
        if rc != 0:
            self.fail('creating user %s failed (%s): %s' % (p['user'], ' '.join(argv), (err or out).strip()))
        self.pw = pwd.getpwnam(p['user'])

    def make_state_dir(self, current, desired):
        """Create the state directory if missing, and hand it to the service user through a descriptor.

        Inspected again here (the users may have been created since), then every change goes through
        descriptors opened without following links: only a directory we created or already the user's
        changes owner.
        """
        uid = self.pw.pw_uid if self.pw else 0
        gid = self.gr.gr_gid if self.gr else 0
        created = False
        facts = state.inspect_dir(self.state_dir, [uid])
        if not facts['exists']:
            os.close(state.create_dir(self.state_dir, facts))
            created = True
        if self.params['user'] != 'root':
            state.hand_over(self.state_dir, [uid], uid, gid, may_chown=created or facts.get('marked'))

    def install_binary(self, current, desired):
        self.write_file(self.params['bundled_path'], desired['binary'], BINARY_MODE)

    def backup_unit(self, current, desired):
        if self.params['backup']:
            self.result['backup_file'] = self.calls.backup(self.unit_path)

    def write_unit(self, current, desired):
        self.write_file(self.unit_path, desired['unit'], self.unit_mode)

    def roll_back(self, current, reason):
        """Put the previous unit and program back, restart the old daemon if it ran, and fail."""
        logs = self.service.logs()
        p = self.params
        notes = []
        try:
            self.restore_file(self.unit_path, current['unit'], self.unit_mode)
            self.restore_file(p['bundled_path'], current['binary'], BINARY_MODE)
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
        deadline = time.time() + p['start_timeout']
        last = None
        while True:
            try:
                with rpc.PersistencedClient(pd.SOCKET, timeout=2.0) as client:
                    client.null()
                break
            except rpc.PersistencedError as exc:
                last = exc
            if time.time() > deadline:
                reason = 'the daemon did not answer on %s within %ss after %s (%s)' % (
                    pd.SOCKET, p['start_timeout'], '/'.join(a for a in actions if a in ('start', 'restart')) or 'start',
                    last)
                if 'start' in actions or 'restart' in actions:
                    self.roll_back(current, reason)
                self.fail(reason)
            time.sleep(0.1)
        pid = self.service.pid()
        self.result['pid'] = pid
        if pid is not None and self.pw is not None:
            uid = _host.process_uid(pid)
            if uid is not None and uid != self.pw.pw_uid:
                self.fail('the daemon (pid %d) runs as uid %d, not as %s (uid %d)'
                          % (pid, uid, p['user'], self.pw.pw_uid))

    # ---- absent -----------------------------------------------------------------
    def absent(self):
        p = self.params
        unit = _host.read_root_text(self.unit_path)
        self.pw = _lookup(pwd.getpwnam, p['user'])
        self.state_dir = self.state_dir_of(self.pw.pw_uid) if self.pw else None
        current = {
            'init_system': self.init,
            'unit': unit,
            'running': self.service.is_running(),
            'enabled': pd.is_ours(unit) and self.service.is_enabled(),
            'run_dir_exists': os.path.lexists(pd.RUN_DIR),
            'binary_exists': os.path.exists(p['bundled_path']),
            'user_exists': self.pw is not None,
            'group_exists': _lookup(grp.getgrnam, p['group']) is not None,
            'state_dir_owned': self.state_dir is not None,
        }
        desired = {'remove_user': p['remove_user'], 'user': p['user'], 'group': p['group']}
        actions = pd.plan_absent(current, desired)
        self.result.update(actions=actions, changed=bool(actions))
        if self.calls.diff and pd.is_ours(unit):
            self.result['diff'] = dict(before_header=self.unit_path, after_header=self.unit_path,
                                       before=unit, after='')
        if self.calls.check_mode:
            return
        self.apply(actions, current, desired, self.absent_failed)

    def absent_failed(self, action, current, exc):
        self.fail('removing the persistence daemon failed at %s: %s' % (action, exc))

    def remove_unit(self, current, desired):
        os.unlink(self.unit_path)

    def remove_run_dir(self, current, desired):
        # rmtree works through directory descriptors and never follows a link (the directory belongs to
        # the service user).
        shutil.rmtree(pd.RUN_DIR)

    def remove_binary(self, current, desired):
        os.unlink(self.params['bundled_path'])

    def reclaim_state_dir(self, current, desired):
        state.take_back(self.state_dir, self.pw.pw_uid)

    def remove_user(self, current, desired):
        self.remove_account('userdel', self.params['user'], pwd.getpwnam)

    def remove_group(self, current, desired):
        # userdel already removes a user's private group on most distributions
        self.remove_account('groupdel', self.params['group'], grp.getgrnam)

    def remove_account(self, tool, name, lookup):
        if _lookup(lookup, name) is None:
            return
        rc, out, err = self.run([self.calls.bin_path(tool), name])
        if rc != 0:
            self.fail('%s %s failed: %s' % (tool, name, (err or out).strip()))

    # ---- stopped ----------------------------------------------------------------
    def stopped(self):
        """Stop the daemon for maintenance; the definition, its start at boot and the state file stay."""
        p = self.params
        unit = _host.read_root_text(self.unit_path)
        running = self.service.is_running()
        pid = self.service.pid()
        current = {'unit': unit, 'running': running}
        try:
            actions = pd.plan_stopped(current, {'service': p['service_name'], 'unit_path': self.unit_path})
        except pd.ConfigError as exc:
            self.fail(str(exc) if pid is None else '%s (a daemon runs without it, pid %d: stop it by hand)'
                      % (exc, pid))
        self.result.update(actions=actions, changed=bool(actions))
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
        """Which processes still hold NVIDIA device files: information, and a warning, since they keep the
        driver from being unloaded or a GPU from being reset."""
        holders = [h for h in _host.open_file_holders((pd.DEVICE_PREFIX,)) if h['pid'] not in exclude]
        self.result['device_holders'] = holders
        if holders:
            listed = '; '.join('pid %d (%s, uid %s): %s' % (h['pid'], h['name'], h['uid'], ', '.join(h['paths']))
                               for h in holders)
            self.warnings.append('%s: %d process(es) still hold NVIDIA device files, which keeps the driver from being '
                                 'unloaded or a GPU reset: %s' % (self.host, len(holders), listed))

    # What each action of any plan does: one table for every state. Errors go to the state's handler (apply).
    ACTIONS = {
        'create_group': create_group,
        'create_user': create_user,
        'state_dir': make_state_dir,
        'install_binary': install_binary,
        'backup_unit': backup_unit,
        'write_unit': write_unit,
        'reload_init': lambda deployer, current, desired: deployer.service.reload_init(),
        'enable': lambda deployer, current, desired: deployer.service.enable(),
        'start': lambda deployer, current, desired: deployer.service.start(),
        'restart': lambda deployer, current, desired: deployer.service.restart(),
        'stop': lambda deployer, current, desired: deployer.service.stop(),
        'disable': lambda deployer, current, desired: deployer.service.disable(),
        'remove_unit': remove_unit,
        'remove_run_dir': remove_run_dir,
        'remove_binary': remove_binary,
        'reclaim_state_dir': reclaim_state_dir,
        'remove_user': remove_user,
        'remove_group': remove_group,
    }
