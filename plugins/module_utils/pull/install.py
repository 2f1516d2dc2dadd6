# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.nvidia.pull: pull mode installed on a node (or removed), as root.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change at any time.

What a node gets: the program ``gpufleet-pull`` (``pull.runner``, built by ``slurm.program`` from the sources this
module carries), its configuration (``/etc/gpufleet/pull.json``: the node's name and groups, from which each run
writes its inventory), its state directory (root's, 0700: the run lock, the checkout, the keyring of the site's
keys for ``--verify-commit``) and what starts it: a systemd timer where systemd
is the init system, a cron job (``/etc/cron.d``) on SysV and Upstart hosts. ``converge`` plans and makes the changes;
``render_*`` are pure.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fcntl
import hashlib
import json
import os
import shutil
import stat
import tempfile

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError, HostFileError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.device_links import links
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health import metrics
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files, paths
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import service, systems
from ansible_collections.gpufleet.nvidia.plugins.module_utils.pull import runner
from ansible_collections.gpufleet.nvidia.plugins.module_utils.slurm import program

ENTRY = 'ansible_collections.gpufleet.nvidia.plugins.module_utils.pull.runner'
PROGRAM = '/usr/sbin/gpufleet-pull'
CONFIG = runner.DEFAULT_CONFIG
SERVICE = '/etc/systemd/system/gpufleet-pull.service'
TIMER = '/etc/systemd/system/gpufleet-pull.timer'
CRON = '/etc/cron.d/gpufleet-pull'
KEYS_STAMP = 'gpufleet-keys.sha256'
# What was installed into the virtual environment (the requirement and where from), in it.
VENV_STAMP = 'gpufleet-pull.json'
HEADER = '# Managed by gpufleet.nvidia.pull: a change here is replaced at its next run.\n'
READER = 'gpufleet-pull, which its timer or cron job runs as root'

SPEC = dict(
    state=dict(type='str', default='present', choices=['present', 'absent']),
    url=dict(type='str'),
    checkout=dict(type='str'),
    playbook=dict(type='str', default='local.yml'),
    inventories=dict(type='list', elements='str', default=[]),
    name=dict(type='str'),
    groups=dict(type='list', elements='str', default=['gpu_nodes']),
    python=dict(type='path', default='/usr/bin/python3'),
    venv=dict(type='path', default='/opt/gpufleet-pull/venv'),
    ansible_core=dict(type='str', default='ansible-core>=2.18'),
    pip_index_url=dict(type='str'),
    pip_find_links=dict(type='str'),
    pip_trusted_hosts=dict(type='list', elements='str', default=[]),
    state_directory=dict(type='path', default='/var/lib/gpufleet-pull'),
    interval=dict(type='int', default=30),
    splay=dict(type='int', default=600),
    boot_delay=dict(type='int', default=120),
    timeout=dict(type='int', default=3600),
    only_if_changed=dict(type='bool', default=False),
    verify_commit=dict(type='bool', default=False),
    gpg_keys=dict(type='list', elements='str', default=[], no_log=False),
    log=dict(type='path', default='/var/log/gpufleet/pull.log'),
    log_max_bytes=dict(type='int', default=4 << 20),
    log_keep=dict(type='int', default=3),
    textfile_directory=dict(type='str', default='/var/lib/prometheus/node-exporter'),
    extra_vars=dict(type='dict', default={}),
    scheduler=dict(type='str', default='auto', choices=['auto', 'timer', 'cron']),
)


class PullError(GpufleetError):
    """Pull mode cannot be installed as asked: the message says what and what to do."""


# --------------------------------------------------------------------------
# What is written (pure)
# --------------------------------------------------------------------------

def check_params(p):
    """Refuse options that cannot work, naming the option."""
    if p['state'] == 'absent':
        return
    if not p.get('url'):
        raise PullError('url is required with state=present: the site repository ansible-pull checks out')
    for key in ('url', 'checkout', 'playbook', 'name'):
        value = p.get(key)
        if value is not None and (not value.strip() or any(c in value for c in '\n\r\0')):
            raise PullError('%s must be one line of text, not %r' % (key, value))
    if p['playbook'].startswith('/') or '..' in p['playbook'].split('/'):
        raise PullError('playbook is a path in the site repository (such as local.yml), not %r' % p['playbook'])
    for key, low in (('interval', 1), ('splay', 0), ('boot_delay', 0), ('timeout', 60), ('log_max_bytes', 4096),
                     ('log_keep', 1)):
        if p[key] < low:
            raise PullError('%s must be at least %d, not %d' % (key, low, p[key]))
    if p['verify_commit'] and not p['gpg_keys']:
        raise PullError('verify_commit needs gpg_keys: the public keys (ASCII-armoured) whose signatures a commit must '
                        'carry; a node trusts these keys and no other')
    if p['textfile_directory'] and not p['textfile_directory'].startswith('/'):
        raise PullError('textfile_directory must be an absolute path (or empty: no metrics), not %r'
                        % p['textfile_directory'])


def cron_schedule(interval):
    """The cron time fields of a run every ``interval`` minutes; PullError where cron cannot say it."""
    if interval < 60 and 60 % interval == 0:
        return '*/%d * * * *' % interval if interval > 1 else '* * * * *'
    if interval % 60 == 0 and 1440 % interval == 0:
        hours = interval // 60
        return '0 */%d * * *' % hours if hours > 1 else '0 * * * *'
    raise PullError('interval %d: cron (the scheduler of SysV and Upstart hosts) runs a job at fixed minutes of '
                    'the hour or day: give a divisor of 60 minutes (1, 2, ..., 30) or whole hours dividing a day '
                    '(60, 120, 180, 240, 360, 480, 720, 1440)' % interval)


def config(p, name):
    """The runner's configuration (``pull.runner.CONFIG_KEYS``)."""
    state = p['state_directory']
    return {
        'ansible_pull': os.path.join(p['venv'], 'bin', 'ansible-pull'), 'url': p['url'],
        'checkout': p.get('checkout') or None, 'directory': os.path.join(state, 'checkout'),
        'playbook': p['playbook'], 'inventories': list(p['inventories']), 'name': name,
        'groups': list(p['groups']), 'python': p['python'],
        'only_if_changed': p['only_if_changed'], 'verify_commit': p['verify_commit'],
        'gnupg_home': os.path.join(state, 'gnupg'), 'splay': p['splay'], 'timeout': p['timeout'], 'log': p['log'],
        'log_max_bytes': p['log_max_bytes'], 'log_keep': p['log_keep'],
        'textfile_directory': p['textfile_directory'] or None, 'state_directory': state,
        'extra_vars': p['extra_vars'], 'git': '/usr/bin/git',
    }


def render_service(p):
    """The systemd service: one run, bounded by the splay and the run's timeout."""
    return (HEADER + '[Unit]\nDescription=gpufleet pull-mode run (ansible-pull of the site repository)\n'
            'After=network-online.target\nWants=network-online.target\n\n'
            '[Service]\nType=oneshot\nExecStart=%s\nTimeoutStartSec=%d\n' % (PROGRAM, p['splay'] + p['timeout'] + 120))


def render_timer(p):
    """The systemd timer: after boot, a minute after the timer starts, then ``interval`` minutes after each run."""
    return (HEADER + '[Unit]\nDescription=gpufleet pull-mode runs, every %d minutes\n\n'
            '[Timer]\nOnBootSec=%d\nOnActiveSec=60\nOnUnitInactiveSec=%dmin\nAccuracySec=1s\n\n'
            '[Install]\nWantedBy=timers.target\n' % (p['interval'], max(p['boot_delay'], 1), p['interval']))


def render_cron(p):
    """The cron job (``/etc/cron.d``): every ``interval`` minutes, and once after boot. Its output goes to the run's
    log, so cron mails nothing."""
    return (HEADER + 'SHELL=/bin/sh\nPATH=/usr/sbin:/usr/bin:/sbin:/bin\n'
            '%s root %s >/dev/null 2>&1\n'
            '@reboot root sleep %d && %s --now >/dev/null 2>&1\n'
            % (cron_schedule(p['interval']), PROGRAM, p['boot_delay'], PROGRAM))


def pip_argv(p):
    """pip's command line that installs ``ansible_core`` from the site's index or wheelhouse (never a default
    index: air-gapped sites name theirs, and a wheelhouse alone means ``--no-index``)."""
    argv = [os.path.join(p['venv'], 'bin', 'python'), '-m', 'pip', 'install', '--disable-pip-version-check',
            '--no-input', '--quiet']
    if p.get('pip_find_links'):
        argv += ['--find-links', p['pip_find_links']]
        if not p.get('pip_index_url'):
            argv.append('--no-index')
    if p.get('pip_index_url'):
        argv += ['--index-url', p['pip_index_url']]
    for host in p.get('pip_trusted_hosts') or []:
        argv += ['--trusted-host', host]
    return argv + [p['ansible_core']]


def venv_stamp(p):
    return json.dumps({'requirement': p['ansible_core'], 'index_url': p.get('pip_index_url'),
                       'find_links': p.get('pip_find_links'), 'python': p['python'],
                       'trusted_hosts': p.get('pip_trusted_hosts') or []}, sort_keys=True) + '\n'


def keys_digest(keys):
    return hashlib.sha256(json.dumps(sorted(keys)).encode('utf-8')).hexdigest()


# --------------------------------------------------------------------------
# The host
# --------------------------------------------------------------------------

def install_text(path, text, mode, check_mode):
    """Write ``text`` at ``path`` (root's, ``mode``) unless it is there already: ``(changed, before text)``."""
    real = program.resolve(path, READER)
    before = files.read_root_text(path, reader=READER)
    if before is not None:
        st = os.lstat(real)
        if before == text and stat.S_IMODE(st.st_mode) == mode and st.st_uid == os.geteuid():
            return False, before
    if not check_mode:
        files.ensure_directory(real)
        files.write_atomic(real, text.encode('utf-8'), mode=mode)
    return True, before


def private_directory(path, check_mode):
    """Make ``path`` a directory of root's open to root alone (0700), never through a link; whether it changed."""
    real = paths.resolve_path(path, reader=READER, file_directory=False)
    try:
        st = os.lstat(real)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise HostFileError('%s: cannot inspect it: %s' % (path, exc.strerror))
        if not check_mode:
            files.ensure_directory(os.path.join(real, 'x'), mode=0o700)
        return True
    if not stat.S_ISDIR(st.st_mode):
        raise HostFileError('%s is not a directory: move it away and run again' % path)
    if st.st_uid == os.geteuid() and not stat.S_IMODE(st.st_mode) & 0o077:
        return False
    if st.st_uid != os.geteuid():
        raise HostFileError('%s is owned by uid %d: the state of a program root runs must be root\'s alone; move it '
                            'away and run again' % (path, st.st_uid))
    if not check_mode:
        fd = files.open_directory(real)
        try:
            os.fchmod(fd, 0o700)
        finally:
            os.close(fd)
    return True


def import_keys(home, keys, run):
    """Replace the keyring in ``home`` (root's, 0700) by one of ``keys`` alone: a fresh keyring imported in a
    temporary directory beside it, then swapped in."""
    parent = os.path.dirname(home)
    temp = tempfile.mkdtemp(prefix='.gnupg-', dir=parent)
    try:
        os.chmod(temp, 0o700)
        rc, out, err = run(['gpg', '--batch', '--no-tty', '--homedir', temp, '--import'], data='\n'.join(keys))
        if rc != 0:
            raise PullError('gpg could not import gpg_keys into %s: %s' % (home, (err or out).strip()[-500:]))
        with open(os.path.join(temp, KEYS_STAMP), 'w') as handle:
            handle.write(keys_digest(keys) + '\n')
        if os.path.lexists(home):
            shutil.rmtree(home)
        os.rename(temp, home)
        temp = None
    finally:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)


def keys_current(home, keys):
    try:
        with open(os.path.join(home, KEYS_STAMP)) as handle:
            return handle.read().strip() == keys_digest(keys)
    except (IOError, OSError):
        return False


def missing_device_links(dev_root='/dev'):
    """The NVIDIA device nodes without their ``/dev/char`` link: a ``daemon-reload`` now would cut running GPU
    containers off them (gpufleet.nvidia.device_links makes the links)."""
    try:
        nodes = links.find_nodes(dev_root)
        entries = links.read_char_dir(os.path.join(dev_root, 'char'))
    except HostFileError:
        return []
    char_dir = os.path.join(dev_root, 'char')
    return [os.path.normpath(os.path.join(char_dir, target))
            for _link, target in links.plan_present(nodes, entries, dev_root=dev_root).create]


def checked(run, argv, what):
    rc, out, err = run(argv)
    if rc != 0:
        raise PullError('%s failed (exit %d): %s' % (what, rc, (err or out).strip()[-500:]))


class Converge(object):
    """One run of the module: ``result`` says what changed; ``diff`` the files before and after."""

    def __init__(self, params, run, init_system, tools, check_mode, node_name):
        self.p, self.run, self.init, self.check = params, run, init_system, check_mode
        self.timers = systems.get(init_system).runs_systemd_units
        self.timer = service.Service(init_system, 'gpufleet-pull.timer', run, tools)
        self.name = params.get('name') or node_name
        self.actions, self.changes, self.diffs, self.warnings = [], [], [], []
        self.scheduler = None

    def changed(self, action, what, path=None, before=None, after=None):
        self.actions.append(action)
        self.changes.append(what)
        if path is not None:
            self.diffs.append({'before_header': path, 'after_header': path, 'before': before or '',
                               'after': after or ''})

    def file(self, path, text, mode, action):
        changed, before = install_text(path, text, mode, self.check)
        if changed:
            self.changed(action, '%s %s' % ('wrote' if before is not None else 'created', path), path, before, text)
        return changed

    def remove(self, path, action):
        before = files.read_root_text(path, reader=READER) if path != PROGRAM else None  # text for the diff
        if not program.remove(path, check_mode=self.check, reader=READER):
            return False
        self.changed(action, 'removed %s' % path, path if before is not None else None, before, '')
        return True

    def choose_scheduler(self):
        chosen = self.p['scheduler']
        if chosen == 'auto':
            chosen = 'timer' if self.timers else 'cron'
        if chosen == 'timer' and not self.timers:
            raise PullError('scheduler=timer: this host\'s init system is %s, which runs no systemd timer; use '
                            'cron (or auto)' % self.init)
        return chosen

    def reload_systemd(self):
        missing = missing_device_links()
        if missing and self.check:
            # the role makes the links before the real run (pull_device_links): say what that run needs
            self.warnings.append('systemd must reload to see the timer\'s units, which the real run does only once '
                                 '%s have their /dev/char links (gpufleet.nvidia.device_links makes them)'
                                 % ', '.join(sorted(missing)))
        elif missing:
            raise PullError('the timer\'s units changed, and systemd must reload to see them, but %s have no '
                            '/dev/char link: a daemon-reload now would cut running GPU containers off them. Run '
                            'gpufleet.nvidia.device_links (the gpu_node role does) first, then this again'
                            % ', '.join(sorted(missing)))
        if not self.check:
            self.timer.reload_init()
        self.actions.append('reload_init')

    def venv(self):
        """ansible-core in the collection's virtual environment, installed again when the requirement or where it
        comes from changed (a stamp in the environment says what was installed)."""
        p = self.p
        venv = p['venv']
        stamp = os.path.join(venv, VENV_STAMP)
        try:
            with open(stamp) as handle:
                current = handle.read()
        except (IOError, OSError):
            current = None
        if current == venv_stamp(p) and os.path.isfile(os.path.join(venv, 'bin', 'ansible-pull')):
            return
        if not (p.get('pip_index_url') or p.get('pip_find_links')):
            raise PullError('ansible-core is not installed in %s: give pip_index_url (the site\'s package index) or '
                            'pip_find_links (a wheelhouse the site serves) to install %s from'
                            % (venv, p['ansible_core']))
        if not self.check:
            real = paths.resolve_path(venv, reader=READER, file_directory=False)
            if not os.path.isfile(os.path.join(real, 'bin', 'python')):
                checked(self.run, [p['python'], '-m', 'venv', real], 'making the virtual environment %s' % venv)
            checked(self.run, pip_argv(p), 'installing %s into %s' % (p['ansible_core'], venv))
            if not os.path.isfile(os.path.join(real, 'bin', 'ansible-pull')):
                raise PullError('%s has no bin/ansible-pull after installing %s: give a requirement of ansible-core'
                                % (venv, p['ansible_core']))
            files.write_atomic(os.path.join(real, VENV_STAMP), venv_stamp(p).encode('utf-8'), mode=0o644)
        self.changed('venv', 'installed %s into %s' % (p['ansible_core'], venv))

    def present(self):
        p = self.p
        check_params(p)
        self.scheduler = self.choose_scheduler()
        if self.scheduler == 'cron':
            cron_schedule(p['interval'])
        self.venv()
        state = p['state_directory']
        if private_directory(state, self.check):
            self.changed('state_directory', 'made %s root\'s alone (0700)' % state)
        changed, before, after = program.install(PROGRAM, program.build(ENTRY), check_mode=self.check,
                                                 reader=READER)
        if changed:
            self.changed('program', '%s %s (sha256 %s)' % ('replaced' if before else 'installed', PROGRAM, after[:12]))
        text = program.config_bytes(config(p, self.name)).decode('utf-8')
        self.file(CONFIG, text, program.CONFIG_MODE, 'config')
        home = os.path.join(state, 'gnupg')
        if p['gpg_keys'] and not keys_current(home, p['gpg_keys']):
            if not self.check:
                import_keys(home, p['gpg_keys'], self.run)
            self.changed('keys', 'the keyring %s holds the %d key(s) of gpg_keys alone' % (home, len(p['gpg_keys'])))
        elif not p['gpg_keys'] and os.path.isdir(home):
            if not self.check:
                shutil.rmtree(home)
            self.changed('keys', 'removed the keyring %s (no gpg_keys)' % home)
        if self.scheduler == 'timer':
            self.remove(CRON, 'cron')
            service = self.file(SERVICE, render_service(p), 0o644, 'unit')
            timer = self.file(TIMER, render_timer(p), 0o644, 'unit')
            if service or timer:
                self.reload_systemd()
            if not self.timer.is_enabled():
                if not self.check:
                    self.timer.enable()
                self.changed('enable', 'enabled gpufleet-pull.timer')
            running = self.timer.is_running()
            if not running or timer:
                if not self.check:
                    self.timer.restart()
                self.changed('start', '%s gpufleet-pull.timer' % ('restarted (its schedule changed)' if running
                                                                  else 'started'))
        else:
            self.remove_timer()
            self.file(CRON, render_cron(p), 0o644, 'cron')

    def remove_timer(self):
        if not any(os.path.lexists(path) for path in (SERVICE, TIMER)):
            return
        if self.timers:
            if not self.check:
                self.timer.disable()
                self.timer.stop()
            self.actions.append('stop')
        removed = [self.remove(SERVICE, 'unit'), self.remove(TIMER, 'unit')]
        if any(removed) and self.timers:
            self.reload_systemd()

    def absent(self):
        p = self.p
        self.scheduler = None
        self.remove_timer()
        self.remove(CRON, 'cron')
        state = p['state_directory']
        real = paths.resolve_path(state, reader=READER, file_directory=False)
        if os.path.lexists(real):
            if not self.check:
                dfd = runner.open_state_directory(state)
                try:
                    fcntl.flock(dfd, fcntl.LOCK_EX)  # a run in progress ends first (its timeout bounds it)
                    shutil.rmtree(real)
                finally:
                    os.close(dfd)
            self.changed('state_directory', 'removed %s (the checkout, the keyring, the run\'s state)' % state)
        self.remove(CONFIG, 'config')
        self.remove(PROGRAM, 'program')
        if os.path.lexists(p['venv']):
            if not self.check:
                shutil.rmtree(paths.resolve_path(p['venv'], reader=READER, file_directory=False))
            self.changed('venv', 'removed the virtual environment %s' % p['venv'])
        if p['textfile_directory']:
            self.remove_metrics(p['textfile_directory'])

    def remove_metrics(self, directory):
        """The runs' textfile, unlinked in its directory opened without following a link (node_exporter's
        directory may be its service user's: a name there is removed, nothing is followed)."""
        try:
            dfd = metrics.open_directory(directory, False)
        except (metrics.MetricsError, OSError) as exc:
            self.warnings.append('%s: the metrics file was not removed: %s' % (directory, exc))
            return
        if dfd is None:
            return
        try:
            try:
                os.lstat(runner.METRICS_FILE, dir_fd=dfd)
            except OSError:
                return
            if not self.check:
                os.unlink(runner.METRICS_FILE, dir_fd=dfd)
            self.changed('metrics', 'removed %s' % os.path.join(directory, runner.METRICS_FILE))
        finally:
            os.close(dfd)

    def converge(self):
        if self.p['state'] == 'present':
            self.present()
        else:
            self.absent()
        return dict(changed=bool(self.changes), actions=self.actions, changes=self.changes,
                    scheduler=self.scheduler, name=self.name, program=PROGRAM, config=CONFIG)
