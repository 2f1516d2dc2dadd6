#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: persistenced
short_description: Deploy the NVIDIA persistence daemon as a service on systemd, SysV and Upstart hosts
version_added: 0.1.0
description:
  - Detects the init system, creates the daemon's service user and group, installs a service definition written by
    this collection (systemd unit, LSB SysV script or Upstart job), enables it at boot the native way, and starts the
    daemon, all in one round trip.
  - The daemon is NVIDIA's C(nvidia-persistenced) from the driver, or the collection's bundled drop-in
    C(gpufleet-persistenced) when the driver's is absent (O(daemon=auto)) or asked for (O(daemon=bundled)).
  - The run directory C(/var/run/nvidia-persistenced) is made afresh, owned by the service user, by the service
    definition at every start (the systemd unit's C(ExecStartPre=), the SysV script's C(start), the Upstart job's
    C(pre-start)) and removed at stop; the daemon starts as root and opens its pid file there, so nothing the
    service user left behind may survive into the next start. The unit does not use systemd's
    C(RuntimeDirectory=), which would make the directory root's; NVIDIA's daemon does not hand over a directory it
    did not create.
  - The state file's directory is handed to the service user (so the bundled daemon can record per-GPU modes) only
    when it is dedicated and this collection created it; see O(state_file).
  - A running daemon is left alone unless its service definition, options or (bundled) program changed; then it is
    restarted once. NVIDIA's daemon resets every GPU to its global default when it starts, so the service runs
    C(gpufleet-persistenced --apply-saved-modes) right after it, which restores the per-GPU modes that
    M(gpufleet.nvidia.gpu_persistence) recorded.
  - An existing service definition not written by this collection is backed up before it is replaced.
    If the daemon does not come up after a change, the previous definition is put back and the module fails with
    the daemon's log lines.
author:
  - gpufleet.nvidia maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes
  - gpufleet.nvidia.attributes.FULL
attributes:
  action:
    support: full
    description: An action plugin hands the bundled daemon's text from the collection to the module.
options:
  state:
    description:
      - V(present) deploys and starts the daemon; V(absent) stops and disables it and removes the service definition
        and program this module installed (and the user with O(remove_user)). The state file is kept.
    type: str
    choices: [present, absent]
    default: present
  daemon:
    description:
      - V(driver) uses NVIDIA's daemon at O(driver_path) and fails if it is missing; V(bundled) uses the collection's
        drop-in; V(auto) uses NVIDIA's when present, else the bundled one.
      - The bundled program is installed at O(bundled_path) in every case, because the service for NVIDIA's daemon
        uses it to restore per-GPU modes after start.
    type: str
    choices: [auto, driver, bundled]
    default: auto
  driver_path:
    description: Where the driver installs NVIDIA's daemon.
    type: path
    default: /usr/bin/nvidia-persistenced
  bundled_path:
    description: Where to install the bundled daemon.
    type: path
    default: /usr/local/sbin/gpufleet-persistenced
  init_system:
    description: The host's init system; V(auto) detects it as M(gpufleet.nvidia.init_system_info) does.
    type: str
    choices: [auto, systemd, sysvinit, upstart]
    default: auto
  service_name:
    description: Name of the service (unit, init script, Upstart job).
    type: str
    default: nvidia-persistenced
  user:
    description:
      - Account the daemon runs as after start-up. Drivers 560 and newer no longer create it; this module does.
      - V(root) keeps the daemon as root, which coherent-NVLink systems (GH200) need for NUMA memory onlining.
      - An existing account is used as it is. One that other services share (V(nobody), V(daemon), V(www-data),
        uid 65534), that has a login shell, or whose uid is in the range of people's accounts (1000 to 59999) gets a
        warning, since whoever runs as it controls the daemon's run and state directories.
    type: str
    default: nvidia-persistenced
  group:
    description:
      - Group of the daemon. Unset, an existing O(user) keeps its own primary group (no group is created); a user
        this module creates gets a new group named like it (V(root) for root).
    type: str
  create_user:
    description: Create O(user) (a system account with no login shell and home C(/)) and O(group) when missing.
    type: bool
    default: true
  allow_other_primary_group:
    description:
      - An existing O(user) whose primary group is not O(group) is an error unless this is true; the daemon is then
        started with C(--group) O(group).
    type: bool
    default: false
  persistence_mode:
    description: Default persistence mode for GPUs without a saved per-GPU mode (C(--persistence-mode)).
    type: bool
    default: true
  uvm_persistence_mode:
    description: Pass C(--uvm-persistence-mode) (true) or C(--no-uvm-persistence-mode) (false); unset passes neither.
    type: bool
  verbose:
    description: Pass C(--verbose) (log every state change to syslog).
    type: bool
    default: false
  nvidia_cfg_path:
    description: Pass C(--nvidia-cfg-path) (directory of C(libnvidia-cfg.so.1)).
    type: path
  extra_args:
    description: More options for the daemon, one item each; letters, digits and C(_./=:,+@-) only.
    type: list
    elements: str
    default: []
  state_file:
    description:
      - Per-GPU modes kept across restarts (shared with M(gpufleet.nvidia.gpu_persistence)).
      - Its directory is handed to O(user), so it must be dedicated to the state file. It must be an absolute,
        normalised path (no V(..)); the directory may not be a system or home directory (V(/), V(/etc), V(/var),
        V(/var/lib), V(/usr/local), V(/run), V(/tmp), V(/home), V(/root), V(/srv), V(/opt), every passwd home and
        more), nor a symbolic link, nor owned by anyone but root and O(user), and every directory above it must be
        root's and writable only by root. Otherwise the module fails before changing anything.
      - A missing directory is created (mode 0755, with a root-owned C(.gpufleet-state-dir) marker) and handed to
        O(user). An existing directory is handed over only if this collection created it (the marker) or it is
        O(user)'s already; the owner of anything else is never changed.
    type: path
    default: /var/lib/gpufleet/persistence.json
  backup:
    description: Back up a service definition not written by this collection before replacing it.
    type: bool
    default: true
  start_timeout:
    description: Seconds to wait for the daemon to answer on its socket after a start.
    type: float
    default: 30
  remove_user:
    description:
      - With O(state=absent), also remove O(user) and O(group) (never C(root)).
      - The state directory, which that user owned, is first given back to root (with the files of that user in it,
        through descriptors), so it never belongs to a free uid; a later V(present) run hands it over again.
    type: bool
    default: false
  bundled_source:
    description:
      - Set by the module's action plugin, which reads the bundled daemon from the collection's C(files/) on the
        controller and sends it compressed, so the host receives it in the same round trip. Do not set it; the
        action plugin refuses it.
    type: str
notes:
  - Needs root (C(become=true)).
  - On a systemd host each change of the service definition runs C(systemctl daemon-reload), which cuts running
    GPU containers (systemd cgroup driver) off their devices unless C(/dev/char) links exist: run
    M(gpufleet.nvidia.device_links) first, as the C(gpu_node) role does.
  - The threat model, and what root does in the directories the service user owns, is in the collection's
    C(docs/security.md).
  - Local additions to the systemd unit belong in a drop-in (C(/etc/systemd/system/<service>.service.d/)), which this
    module never touches.
  - Upstart is supported through its job file and C(initctl), tested against real Upstart 1.13.2 (Ubuntu 14.04/16.04)
    and 0.6.5 (RHEL/CentOS 6) running as PID 1. The job has no C(post-stop) stanza, since Upstart 1.13 as PID 1 can
    abort when a respawning job's post-stop ends at the wrong moment; the C(pre-start) makes the run directory afresh,
    and O(state=absent) removes it. C(initctl) answers for a job already stopped or started count as success, and a
    stop waits until the job has settled in C(stop/waiting).
seealso:
  - module: gpufleet.nvidia.init_system_info
  - module: gpufleet.nvidia.gpu_persistence
'''

EXAMPLES = r'''
- name: Run NVIDIA's persistence daemon (or the bundled one) as a service
  gpufleet.nvidia.persistenced:
  become: true

- name: GH200 nodes need the daemon to stay root
  gpufleet.nvidia.persistenced:
    user: root
    uvm_persistence_mode: true
  become: true

- name: Leave new GPUs unpersisted by default, and log every change
  gpufleet.nvidia.persistenced:
    persistence_mode: false
    verbose: true
  become: true

- name: Remove the service and its user
  gpufleet.nvidia.persistenced:
    state: absent
    remove_user: true
  become: true
'''

RETURN = r'''
actions:
  description: What was done (or would be done in check mode), in order.
  returned: always
  type: list
  elements: str
  sample: [create_user, install_binary, write_unit, reload_init, enable, start]
init_system:
  description: The init system used.
  returned: always
  type: str
  sample: systemd
daemon:
  description: Which daemon runs, V(driver) (NVIDIA's) or V(bundled).
  returned: when state is present
  type: str
  sample: driver
daemon_path:
  description: Path of the daemon program.
  returned: when state is present
  type: str
  sample: /usr/bin/nvidia-persistenced
unit_path:
  description: The service definition file.
  returned: always
  type: str
  sample: /etc/systemd/system/nvidia-persistenced.service
user:
  description: Account the daemon runs as.
  returned: always
  type: str
  sample: nvidia-persistenced
group:
  description: Its group.
  returned: always
  type: str
  sample: nvidia-persistenced
pid:
  description: Process id of the running daemon, null when it is not running.
  returned: when state is present
  type: int
  sample: 1234
backup_file:
  description: Backup of a replaced service definition that this collection had not written.
  returned: when a backup was made
  type: str
  sample: /etc/init.d/nvidia-persistenced.12345.2026-11-30@10:00:00~
'''

import grp
import os
import pwd
import shutil
import stat
import sys
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils import _host
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _init_system
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _persistence_state as state
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _persistenced as pd
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _persistenced_rpc as rpc


def read_text(path):
    try:
        with open(path, 'r') as handle:
            return handle.read()
    except (IOError, OSError):
        return None


class Deployer(object):
    def __init__(self, module):
        self.module = module
        self.params = dict(module.params)
        self.host = os.uname()[1]
        self.result = {'changed': False, 'actions': []}
        self.backup_file = None

    # ---- helpers --------------------------------------------------------------
    def fail(self, msg, **extra):
        self.module.fail_json(msg='%s: %s' % (self.host, msg), actions=self.result['actions'], **extra)

    def run(self, argv):
        return self.module.run_command(argv, environ_update={'LANG': 'C', 'LC_ALL': 'C'})

    def write_file(self, path, text, mode):
        """Atomic replace of a root-owned file (unit, script, program) in a root-only directory.

        The mode is set on the temp file's descriptor, never by path; a failure leaves the old file as it
        was and no temp file (see _host.rename_into_place for why not atomic_move).
        """
        module = self.module
        directory = os.path.dirname(path)
        tmp = None
        try:
            if not os.path.isdir(directory):
                os.makedirs(directory, 0o755)
            fd, tmp = tempfile.mkstemp(prefix='.%s.' % os.path.basename(path), dir=directory)
            module.add_cleanup_file(tmp)
            with os.fdopen(fd, 'w') as handle:
                handle.write(text)
                handle.flush()
                os.fchmod(handle.fileno(), mode)
                os.fsync(handle.fileno())
            _host.rename_into_place(module, tmp, path)
        except (IOError, OSError) as exc:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
            self.fail('cannot write %s: %s; the file was left as it was' % (path, exc.strerror or exc),
                      changed=bool(self.result['actions']))

    def restore_file(self, path, text, mode):
        if text is None:
            if os.path.lexists(path):
                os.unlink(path)
        else:
            self.write_file(path, text, mode)

    # ---- facts ----------------------------------------------------------------
    def detect(self):
        p = self.params
        detected = _init_system.detect('/', run_command=self.run)
        tools = dict(detected['evidence']['tools'])
        tools['journalctl'] = self.module.get_bin_path('journalctl')
        init = detected['init_system'] if p['init_system'] == 'auto' else p['init_system']
        if init == 'unknown':
            self.fail('no init system recognised (%s); set init_system to systemd, sysvinit or upstart if this host '
                      'really runs one' % detected['reason'])
        self.init = init
        self.control = pd.ServiceControl(init, p['service_name'], self.run, tools)
        self.unit_path = pd.unit_path(init, p['service_name'])
        self.unit_mode = 0o755 if init == 'sysvinit' else 0o644
        self.result.update(init_system=init, unit_path=self.unit_path, user=p['user'], group=p['group'])

    def resolve_identity(self):
        """Look the accounts up. An existing user is used as it is: unless a group is asked for, its own
        primary group is the daemon's, and nothing is created or changed."""
        p = self.params
        try:
            self.pw = pwd.getpwnam(p['user'])
        except KeyError:
            self.pw = None
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
        try:
            self.gr = grp.getgrnam(p['group'])
        except KeyError:
            self.gr = None
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
                self.module.warn('%s: %s' % (self.host, warning))

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
        self.state_dir_facts = facts
        if not facts['exists']:
            return False
        if p['user'] == 'root':
            return True
        gid = self.gr.gr_gid if self.gr else None
        return facts['uid'] == uid and facts['gid'] == gid and facts['mode'] == 0o755

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
        current_unit = read_text(self.unit_path)
        current_binary = read_text(p['bundled_path'])
        running = self.control.is_running()
        uid = self.pw.pw_uid if self.pw else None
        gid = self.gr.gr_gid if self.gr else None
        current = {
            'unit': current_unit,
            'binary': current_binary,
            'running': running,
            # a changed definition is enabled again (systemd links point at the old file); Upstart jobs start
            # through their own "start on" stanza
            'enabled': self.control.is_enabled() if current_unit == desired_unit or self.init == 'upstart' else False,
            'user_exists': self.pw is not None,
            'group_exists': self.gr is not None,
            'state_dir_ok': self.inspect_state_dir(),
            'run_dir_ok': (not running) or p['user'] == 'root' or self.dir_ok(pd.RUN_DIR, uid, None),
        }
        desired = {'unit': desired_unit, 'binary': desired_binary, 'binary_is_daemon': kind == 'bundled',
                   'create_user': p['user'] != 'root', 'create_group': p['group'] != 'root'}
        actions = pd.plan(current, desired)
        self.result.update(daemon=kind, daemon_path=daemon_path, actions=actions, changed=bool(actions))
        if self.module._diff:
            self.result['diff'] = [dict(before_header=self.unit_path, after_header=self.unit_path,
                                        before=current_unit or '', after=desired_unit)]
            if current_binary != desired_binary:
                self.result['diff'].append(dict(before_header=p['bundled_path'], after_header=p['bundled_path'],
                                                before=current_binary or '', after=desired_binary))
        if self.module.check_mode:
            self.result['pid'] = pd.pid_alive(pd.PID_FILE)
            return
        for action in actions:
            getattr(self, 'do_' + action)(current, desired)
        if running or 'start' in actions or 'restart' in actions:
            self.verify(current, actions)

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

    def do_create_group(self, current, desired):
        rc, out, err = self.run([self.module.get_bin_path('groupadd', required=True), '-r', self.params['group']])
        if rc != 0:
            self.fail('creating group %s failed: %s' % (self.params['group'], (err or out).strip()))
        self.gr = grp.getgrnam(self.params['group'])

    def do_create_user(self, current, desired):
        p = self.params
        nologin = next((s for s in ('/usr/sbin/nologin', '/sbin/nologin') if os.path.exists(s)), '/bin/false')
        argv = [self.module.get_bin_path('useradd', required=True), '-r', '-M', '-d', '/', '-s', nologin,
                '-c', 'NVIDIA Persistence Daemon', '-g', p['group'], p['user']]
        rc, out, err = self.run(argv)
        if rc != 0:
            self.fail('creating user %s failed (%s): %s' % (p['user'], ' '.join(argv), (err or out).strip()))
        self.pw = pwd.getpwnam(p['user'])

    def do_state_dir(self, current, desired):
        """Create the state directory if missing, and hand it to the service user through a descriptor.

        Inspected again here (the users may have been created since), then every change goes through
        descriptors opened without following links: only a directory we created or already the user's
        changes owner.
        """
        p = self.params
        uid = self.pw.pw_uid if self.pw else 0
        gid = self.gr.gr_gid if self.gr else 0
        created = False
        try:
            facts = state.inspect_dir(self.state_dir, [uid])
            if not facts['exists']:
                os.close(state.create_dir(self.state_dir, facts))
                created = True
            if p['user'] != 'root':
                state.hand_over(self.state_dir, [uid], uid, gid, may_chown=created or facts.get('marked'))
        except state.StateError as exc:
            self.fail(str(exc), changed=True)

    def do_install_binary(self, current, desired):
        self.write_file(self.params['bundled_path'], desired['binary'], 0o755)

    def do_backup_unit(self, current, desired):
        if self.params['backup']:
            self.backup_file = self.module.backup_local(self.unit_path)
            self.result['backup_file'] = self.backup_file

    def do_write_unit(self, current, desired):
        self.write_file(self.unit_path, desired['unit'], self.unit_mode)

    def do_reload_init(self, current, desired):
        self.service_call(self.control.reload_init, current)

    def do_enable(self, current, desired):
        self.service_call(self.control.enable, current)

    def do_start(self, current, desired):
        self.service_call(self.control.start, current)

    def do_restart(self, current, desired):
        self.service_call(self.control.restart, current)

    def service_call(self, call, current):
        try:
            call()
        except (pd.ServiceError, pd.ConfigError) as exc:
            self.roll_back(current, str(exc))

    def roll_back(self, current, reason):
        """Put the previous unit and program back, restart the old daemon if it ran, and fail."""
        logs = self.control.logs()
        p = self.params
        notes = []
        try:
            self.restore_file(self.unit_path, current['unit'], self.unit_mode)
            self.restore_file(p['bundled_path'], current['binary'], 0o755)
            self.control.reload_init()
            if current['running']:
                self.control.restart()
            notes.append('the previous service definition was restored')
            if current['running'] and not self.control.is_running():
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
        pid = pd.pid_alive(pd.PID_FILE)
        self.result['pid'] = pid
        if pid is not None and self.pw is not None:
            uid = pd.process_uid(pid)
            if uid is not None and uid != self.pw.pw_uid:
                self.fail('the daemon (pid %d) runs as uid %d, not as %s (uid %d)'
                          % (pid, uid, p['user'], self.pw.pw_uid))

    # ---- absent -----------------------------------------------------------------
    def absent(self):
        p = self.params
        current_unit = read_text(self.unit_path)
        ours = pd.is_ours(current_unit)
        actions = []
        if self.control.is_running() and (ours or current_unit is None):
            actions.append('stop')
        if ours:
            if self.control.is_enabled():
                actions.append('disable')
            actions += ['remove_unit', 'reload_init']
        if self.init == 'upstart' and os.path.lexists(pd.RUN_DIR):
            # The Upstart job has no post-stop (see _persistenced.render_upstart), so the
            # run directory outlives the daemon there.
            actions.append('remove_run_dir')
        if os.path.exists(p['bundled_path']):
            actions.append('remove_binary')
        if p['remove_user'] and p['user'] != 'root':
            try:
                uid = pwd.getpwnam(p['user']).pw_uid
                directory = self.state_dir_of(uid)
                if directory:
                    actions.append('reclaim_state_dir')  # never leave it to a uid that is about to be free
                actions.append('remove_user')
            except KeyError:
                pass
            try:
                grp.getgrnam(p['group'])
                if p['group'] != 'root':
                    actions.append('remove_group')
            except KeyError:
                pass
        self.result.update(actions=actions, changed=bool(actions))
        if self.module._diff and ours:
            self.result['diff'] = dict(before_header=self.unit_path, after_header=self.unit_path,
                                       before=current_unit, after='')
        if self.module.check_mode:
            return
        try:
            for action in actions:
                if action == 'stop':
                    self.control.stop()
                elif action == 'disable':
                    self.control.disable()
                elif action == 'remove_unit':
                    os.unlink(self.unit_path)
                elif action == 'reload_init':
                    self.control.reload_init()
                elif action == 'remove_run_dir':
                    # rmtree works through directory descriptors and never follows a link
                    # (the directory belongs to the service user).
                    shutil.rmtree(pd.RUN_DIR)
                elif action == 'remove_binary':
                    os.unlink(p['bundled_path'])
                elif action == 'reclaim_state_dir':
                    state.take_back(directory, uid)
                elif action == 'remove_user':
                    self.remove_account('userdel', p['user'], pwd.getpwnam)
                elif action == 'remove_group':
                    # userdel already removes a user's private group on most distributions
                    self.remove_account('groupdel', p['group'], grp.getgrnam)
        except (pd.ServiceError, pd.ConfigError, state.StateError, OSError) as exc:
            self.fail('removing the persistence daemon failed at %s: %s' % (action, exc))

    def state_dir_of(self, uid):
        """The state directory when it is a real directory owned by ``uid``, else None."""
        try:
            directory = state.check_path(self.params['state_file'])
            st = os.lstat(directory)
        except (state.StateError, OSError):
            return None
        return directory if stat.S_ISDIR(st.st_mode) and st.st_uid == uid else None

    def remove_account(self, tool, name, lookup):
        try:
            lookup(name)
        except KeyError:
            return
        rc, out, err = self.run([self.module.get_bin_path(tool, required=True), name])
        if rc != 0:
            self.fail('%s %s failed: %s' % (tool, name, (err or out).strip()))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type='str', default='present', choices=['present', 'absent']),
            daemon=dict(type='str', default='auto', choices=['auto', 'driver', 'bundled']),
            driver_path=dict(type='path', default=pd.DRIVER_PATH),
            bundled_path=dict(type='path', default=pd.BUNDLED_PATH),
            init_system=dict(type='str', default='auto', choices=['auto', 'systemd', 'sysvinit', 'upstart']),
            service_name=dict(type='str', default='nvidia-persistenced'),
            user=dict(type='str', default='nvidia-persistenced'),
            group=dict(type='str'),
            create_user=dict(type='bool', default=True),
            allow_other_primary_group=dict(type='bool', default=False),
            persistence_mode=dict(type='bool', default=True),
            uvm_persistence_mode=dict(type='bool'),
            verbose=dict(type='bool', default=False),
            nvidia_cfg_path=dict(type='path'),
            extra_args=dict(type='list', elements='str', default=[]),
            state_file=dict(type='path', default=pd.STATE_FILE),
            backup=dict(type='bool', default=True),
            start_timeout=dict(type='float', default=30.0),
            remove_user=dict(type='bool', default=False),
            bundled_source=dict(type='str', no_log=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p['group'] is None and (p['user'] == 'root' or p['state'] == 'absent'):
        # present: an existing user's own primary group (resolve_identity); absent: the group this module
        # would have created for the user
        p['group'] = 'root' if p['user'] == 'root' else p['user']
    if p['state'] == 'present' and not p['bundled_source']:
        module.fail_json(msg='the bundled daemon was not passed in: call this module as gpufleet.nvidia.persistenced '
                             '(its action plugin supplies it), not through a renamed copy')
    try:
        pd.validate(p)
    except pd.ConfigError as exc:
        module.fail_json(msg=str(exc))
    deployer = Deployer(module)
    deployer.detect()
    if p['state'] == 'present':
        deployer.present()
    else:
        deployer.absent()
    module.exit_json(**deployer.result)


if __name__ == '__main__':
    main()
