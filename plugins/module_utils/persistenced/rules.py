# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rendering and planning for the persistence daemon's service.

PRIVATE to the gpufleet.nvidia collection: the API may change at any time.
No AnsibleModule here. The service definitions are rendered in Python rather
than Jinja2 so that the managed host needs nothing but its Python, the text is
unit-tested directly, and the module stays a single round trip; local changes
belong in a systemd drop-in, which this collection never touches.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import os
import re
import zlib

try:
    from shlex import quote as sh_quote
except ImportError:  # pragma: no cover  (Python 2 never reaches the host side)
    from pipes import quote as sh_quote

from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import procs
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import systems
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError

MARKER = 'Managed by gpufleet.nvidia'
RUN_DIR = '/var/run/nvidia-persistenced'
PID_FILE = RUN_DIR + '/nvidia-persistenced.pid'
SOCKET = RUN_DIR + '/socket'
# The NVIDIA driver's device files (/dev/nvidia0, nvidiactl, nvidia-uvm, nvidia-caps/...): what must be closed
# before the driver can be unloaded or a GPU reset.
DEVICE_PREFIX = '/dev/nvidia'
BUNDLED_PATH = '/usr/local/sbin/gpufleet-persistenced'
DRIVER_PATH = '/usr/bin/nvidia-persistenced'
STATE_FILE = '/var/lib/gpufleet/persistence.json'
# Where a host without journald logs the daemon (Debian, Ubuntu; EL), and the word its lines hold.
SYSLOG_FILES = ('/var/log/syslog', '/var/log/daemon.log', '/var/log/messages')
LOG_FILTER = 'persistenced'

_NAME_RE = re.compile(r'^[a-z_][a-z0-9_-]{0,31}$')
_SERVICE_RE = re.compile(r'^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,100}$')
_SAFE_ARG_RE = re.compile(r'^[A-Za-z0-9_./=:,+@-]+$')


class ConfigError(GpufleetError):
    """Bad input, named precisely."""


def unit_path(init_system, service):
    """The persistence daemon's unit, SysV script or Upstart job (``init.systems``)."""
    return systems.unit_path(init_system, service)


def validate(params):
    """Refuse input that could break or inject into the rendered service files."""
    for key in ('user', 'group'):
        value = params.get(key)
        if value is not None and not _NAME_RE.match(value):
            raise ConfigError('%s %r is not a valid account name (lower case letters, digits, "_" and "-", '
                              'at most 32 characters, not starting with a digit or "-")' % (key, value))
    if not _SERVICE_RE.match(params['service_name']):
        raise ConfigError('service_name %r may only hold letters, digits and "_.@-"' % params['service_name'])
    for key in ('driver_path', 'bundled_path', 'state_file', 'nvidia_cfg_path'):
        value = params.get(key)
        if value is not None and (not value.startswith('/') or not _SAFE_ARG_RE.match(value)):
            raise ConfigError('%s %r must be an absolute path made of letters, digits and "_./=:,+@-"' % (key, value))
    for arg in params.get('extra_args') or []:
        if not _SAFE_ARG_RE.match(arg):
            raise ConfigError('extra_args item %r holds characters that are unsafe in a service definition '
                              '(allowed: letters, digits and "_./=:,+@-")' % (arg,))


def daemon_argv(params, daemon_path, kind):
    """The daemon's command line, from the module's options."""
    argv = [daemon_path]
    if params['user'] != 'root':
        argv += ['--user', params['user']]
        # the daemon's default group is the user's primary group (a new user's is named like it)
        if params.get('group') and params['group'] != params.get('primary_group', params['user']):
            argv += ['--group', params['group']]
    argv.append('--persistence-mode' if params['persistence_mode'] else '--no-persistence-mode')
    if params.get('uvm_persistence_mode') is not None:
        argv.append('--uvm-persistence-mode' if params['uvm_persistence_mode'] else '--no-uvm-persistence-mode')
    if params.get('verbose'):
        argv.append('--verbose')
    if params.get('nvidia_cfg_path'):
        argv += ['--nvidia-cfg-path', params['nvidia_cfg_path']]
    if kind == 'bundled':
        argv += ['--state-file', params['state_file']]
    argv += list(params.get('extra_args') or [])
    return argv


def apply_argv(params):
    """Re-applies saved per-GPU modes after NVIDIA's daemon starts (it resets them all)."""
    return [params['bundled_path'], '--apply-saved-modes', '--state-file', params['state_file']]


def _header(comment, service):
    return ('%s %s (gpufleet.nvidia.persistenced) for %s.\n'
            '%s Local changes are overwritten on the next run; put them in a drop-in or in the role\'s variables.\n'
            % (comment, MARKER, service, comment))


def render_systemd(params, daemon_path, kind):
    argv = daemon_argv(params, daemon_path, kind)
    lines = [
        _header('#', params['service_name']).rstrip('\n'),
        '[Unit]',
        'Description=NVIDIA Persistence Daemon (%s)' % ('bundled gpufleet-persistenced' if kind == 'bundled'
                                                        else 'nvidia-persistenced'),
        'Documentation=https://docs.nvidia.com/deploy/driver-persistence/',
        'Wants=syslog.target',
        'After=syslog.target local-fs.target',
        '',
        '[Service]',
        'Type=forking',
        # A fresh run directory at every start, owned by the service user, and none after stop (the daemon
        # has dropped root by then and cannot remove it). RuntimeDirectory= would make it root's, and NVIDIA's
        # daemon does not hand over a directory it did not create.
        # Fresh, because the daemon starts as root and opens its pid file in there (NVIDIA's without
        # O_NOFOLLOW): anything the service user left behind (a link at the pid file) must be gone first.
        # Root steps here, against docs/security.md: rm -r removes entries and never follows a link (GNU rm
        # walks with openat/O_NOFOLLOW and checks each directory it enters); install -d makes the directory in
        # /run, which only root can write, then chowns/chmods that directory (not anything inside it) by path,
        # before anyone else owns it.
        'ExecStartPre=/bin/rm -rf /run/nvidia-persistenced',
        'ExecStartPre=/usr/bin/install -d -m 0755 -o %s -g %s /run/nvidia-persistenced' % (params['user'],
                                                                                           params['group']),
        'PIDFile=/run/nvidia-persistenced/nvidia-persistenced.pid',
        'ExecStart=%s' % ' '.join(argv),
    ]
    if kind == 'driver':
        # NVIDIA's daemon starts every GPU at its global default: bring back each GPU's own saved mode.
        lines.append('ExecStartPost=%s' % ' '.join(apply_argv(params)))
    if kind == 'bundled':
        lines.append('ExecReload=/bin/kill -HUP $MAINPID')
    lines.append('ExecStopPost=/bin/rm -rf /run/nvidia-persistenced')
    lines += [
        'Restart=on-failure',
        'RestartSec=2s',
        'TimeoutStartSec=60s',
        'TimeoutStopSec=30s',
        '',
        '[Install]',
        'WantedBy=multi-user.target',
        '',
    ]
    return '\n'.join(lines)


SYSV_TEMPLATE = r'''#!/bin/sh
%(header)s### BEGIN INIT INFO
# Provides:          %(service)s
# Required-Start:    $remote_fs $syslog
# Required-Stop:     $remote_fs $syslog
# Default-Start:     2 3 4 5
# Default-Stop:      0 1 6
# Short-Description: NVIDIA Persistence Daemon
# Description:       Keeps NVIDIA GPUs initialised while no client uses them and
#                    serves per-GPU persistence mode over RPC.
### END INIT INFO
# chkconfig: 2345 20 80
# description: NVIDIA Persistence Daemon

NAME=%(service)s
DAEMON=%(daemon)s
RUN_DIR=%(run_dir)s
PIDFILE="$RUN_DIR/nvidia-persistenced.pid"
RUN_USER=%(user)s
RUN_OWNER=%(owner)s
# SysV init does not restart a crashed daemon: a supervisor does (the bundled program's --supervise, the
# daemon's parent, blocked in waitpid). It runs this script's "launch" for the first start and after each
# crash, at most 5 times in 60 s, 2 s apart. Its pid file lies in /var/run, which only root can write.
SUPERVISOR=%(supervisor)s
SUPERVISOR_PIDFILE=/var/run/$NAME.supervisor.pid
case "$0" in
    /*) SELF=$0 ;;
    *) SELF=$(pwd)/$0 ;;
esac
PATH=/usr/sbin:/usr/bin:/sbin:/bin

# This script runs as root; the run directory belongs to the service user. Inside it, root only reads
# the pid file without following a link and without blocking (dd iflag=nofollow,nonblock: a planted link
# or FIFO reads as nothing), and trusts the pid only if that process runs as the service user and is a
# persistence daemon, so a forged pid file cannot make root signal anyone else's process.
# checked_pid FILE UID: sets pid from FILE when that process runs as UID and its program is a persistence
# daemon's (not a recycled pid: its program name says so)
checked_pid() {
    pid=$(dd if="$1" bs=32 count=1 iflag=nofollow,nonblock 2>/dev/null | tr -d ' \n')
    case "$pid" in
        ''|*[!0-9]*) return 1 ;;
    esac
    kill -s 0 "$pid" 2>/dev/null || return 1
    uid=$(sed -n 's/^Uid:[[:space:]]*\([0-9]*\).*/\1/p' "/proc/$pid/status" 2>/dev/null)
    [ -n "$uid" ] && [ "$uid" = "$2" ] || return 1
    tr '\000' '\n' < "/proc/$pid/cmdline" 2>/dev/null | head -n 2 | grep -q persistenced
}

running() {
    checked_pid "$PIDFILE" "$(id -u "$RUN_USER" 2>/dev/null)"
}

# sets spid to the supervisor's pid: a root process of the bundled program in --supervise mode
supervised() {
    checked_pid "$SUPERVISOR_PIDFILE" 0 || return 1
    tr '\000' '\n' < "/proc/$pid/cmdline" 2>/dev/null | grep -qx -- --supervise || return 1
    spid=$pid
}

# stop_pid PID: SIGTERM, then wait up to 10 s for it to be gone
stop_pid() {
    kill -s TERM "$1" 2>/dev/null
    tries=0
    while kill -s 0 "$1" 2>/dev/null; do
        tries=$((tries + 1))
        if [ "$tries" -gt 100 ]; then
            echo "$NAME: pid $1 did not stop after SIGTERM" >&2
            return 1
        fi
        sleep 0.1 2>/dev/null || sleep 1
    done
}

# The start itself, run by the supervisor (or by do_start where there is none).
launch() {
    # /var/run is a tmpfs: make the run directory at every start, fresh, since the daemon starts as root
    # and opens its pid file in there: whatever the service user left (a link at the pid file) goes first.
    # rm -r never follows a link; mkdir, chmod and chown act on the run directory itself, whose parent
    # only root can write, before the service user owns it.
    rm -rf "$RUN_DIR" && mkdir -m 0755 "$RUN_DIR" && chown "$RUN_OWNER" "$RUN_DIR" || return 1
    %(start)s || return 1
%(post_start)s    return 0
}

do_start() {
    if running; then
        echo "$NAME is already running (pid $pid)"
        return 0
    fi
    if supervised; then
        echo "$NAME is being restarted by its supervisor (pid $spid)"
        return 0
    fi
    if [ ! -x "$DAEMON" ]; then
        echo "$NAME: $DAEMON is not installed" >&2
        return 5
    fi
    if [ -x "$SUPERVISOR" ]; then
        "$SUPERVISOR" --supervise "$SUPERVISOR_PIDFILE" -- "$SELF" launch
    else
        echo "$NAME: $SUPERVISOR is not installed: the daemon is not restarted after a crash" >&2
        launch
    fi
}

do_stop() {
    # the supervisor first (it stops the daemon with SIGTERM, then exits), then a daemon without one
    if supervised; then
        stop_pid "$spid" || return 1
    fi
    if running; then
        stop_pid "$pid" || return 1
    fi
    rm -rf "$RUN_DIR"
    return 0
}

case "$1" in
    start)
        do_start
        ;;
    stop)
        do_stop
        ;;
    restart|force-reload)
        do_stop && do_start
        ;;
    launch)
        launch
        ;;
    reload)
%(reload)s        ;;
    status)
        if running; then
            echo "$NAME is running (pid $pid)"
            exit 0
        elif supervised; then
            echo "$NAME is not running; its supervisor (pid $spid) is restarting it"
            exit 1
        elif [ -e "$PIDFILE" ] || [ -L "$PIDFILE" ]; then
            echo "$NAME is not running but $PIDFILE exists"
            exit 1
        fi
        echo "$NAME is not running"
        exit 3
        ;;
    *)
        echo "Usage: $0 {start|stop|restart|force-reload|reload|status}" >&2
        exit 2
        ;;
esac
'''


def render_sysvinit(params, daemon_path, kind):
    argv = daemon_argv(params, daemon_path, kind)
    post_start = ''
    if kind == 'driver':
        post_start = '    %s || true\n' % ' '.join(sh_quote(a) for a in apply_argv(params))
    if kind == 'bundled':
        reload_body = ('        if running; then kill -s HUP "$pid"; else echo "$NAME is not running" >&2; exit 7; fi\n')
    else:
        reload_body = ('        echo "$NAME: NVIDIA\'s daemon cannot reload; use restart" >&2\n'
                       '        exit 3\n')
    owner = params['user'] if params['user'] == 'root' else '%s:%s' % (params['user'], params['group'])
    return SYSV_TEMPLATE % {
        'header': _header('#', params['service_name']),
        'service': params['service_name'],
        'daemon': sh_quote(daemon_path),
        'run_dir': RUN_DIR,
        'owner': sh_quote(owner),
        'user': sh_quote(params['user']),
        'supervisor': sh_quote(params['bundled_path']),
        'start': ' '.join(['"$DAEMON"'] + [sh_quote(a) for a in argv[1:]]),
        'post_start': post_start,
        'reload': reload_body,
    }


def render_upstart(params, daemon_path, kind):
    argv = daemon_argv(params, daemon_path, kind)
    owner = params['user'] if params['user'] == 'root' else '%s:%s' % (params['user'], params['group'])
    lines = [
        _header('#', params['service_name']).rstrip('\n'),
        'description "NVIDIA Persistence Daemon"',
        '',
        'start on runlevel [2345]',
        'stop on runlevel [016]',
        '',
        'expect fork',
        'respawn',
        'respawn limit 5 60',
        '',
        # a fresh run directory at every start (see the SysV script): rm -r never follows a link, and
        # mkdir/chown act on the directory itself, in /var/run, which only root can write
        'pre-start script',
        '    rm -rf %s' % RUN_DIR,
        '    mkdir -m 0755 %s' % RUN_DIR,
        '    chown %s %s' % (sh_quote(owner), RUN_DIR),
        'end script',
        '',
        'exec %s' % ' '.join(sh_quote(a) for a in argv),
    ]
    if kind == 'driver':
        lines += ['', 'post-start exec %s' % ' '.join(sh_quote(a) for a in apply_argv(params))]
    # No post-stop stanza: pre-start already makes the run directory afresh, and real
    # Upstart 1.13 as PID 1 can abort (an assertion in job_process_terminated) when a
    # post-stop process ends while a respawning job's state has moved on.
    lines.append('')
    return '\n'.join(lines)


RENDERERS = {'systemd': render_systemd, 'sysvinit': render_sysvinit, 'upstart': render_upstart}
# Whether the definition rendered for an init system removes the run directory when the daemon stops: the Upstart
# job has no post-stop (see render_upstart), so the run directory outlives the daemon there.
CLEANS_RUN_DIR = {'systemd': True, 'sysvinit': True, 'upstart': False}


def render(init_system, params, daemon_path, kind):
    return RENDERERS[init_system](params, daemon_path, kind)


def is_ours(text):
    """True when a unit/script/job file was written by this collection."""
    return bool(text) and MARKER in text[:400]


def bundled_script(source, python):
    """The bundled daemon with its shebang pointing at the host's Python.

    ``source`` is its text, or ``zlib+base64:...`` as the action plugin sends it.
    """
    if source.startswith('zlib+base64:'):
        try:
            source = zlib.decompress(base64.b64decode(source[len('zlib+base64:'):])).decode('utf-8')
        except (ValueError, TypeError, zlib.error) as exc:
            raise ConfigError('the bundled daemon sent by the action plugin is damaged: %s' % exc)
    first, sep, rest = source.partition('\n')
    if not first.startswith('#!'):
        raise ConfigError('the bundled daemon source has no shebang line')
    return '#!%s\n%s' % (python, rest)


def plan_present(current, desired):
    """What state=present does, in order, from facts about the host.

    ``current``: dict with ``unit`` (text or None), ``binary`` (text or None),
    ``running`` (bool), ``enabled`` (bool), ``user_exists`` (bool),
    ``group_exists`` (bool), ``run_dir_ok`` (bool), ``state_dir_ok`` (bool).
    ``desired``: dict with ``unit`` and ``binary`` texts, ``binary_is_daemon``,
    ``create_user``, ``create_group`` (bools).
    Returns an ordered list of action names.
    """
    actions = []
    if desired['create_group'] and not current['group_exists']:
        actions.append('create_group')
    if desired['create_user'] and not current['user_exists']:
        actions.append('create_user')
    if not current['state_dir_ok']:
        actions.append('state_dir')
    binary_changed = current['binary'] != desired['binary']
    if binary_changed:
        actions.append('install_binary')
    unit_changed = current['unit'] != desired['unit']
    if unit_changed:
        if current['unit'] is not None and not is_ours(current['unit']):
            actions.append('backup_unit')
        actions.append('write_unit')
        actions.append('reload_init')
    if not current['enabled']:
        actions.append('enable')
    if not current['running']:
        actions.append('start')
    elif unit_changed or (binary_changed and desired.get('binary_is_daemon')):
        actions.append('restart')
    elif not current['run_dir_ok']:
        actions.append('restart')
    return actions


def plan_absent(current, desired):
    """What state=absent does, in order, from facts about the host.

    ``current``: dict with ``init_system``, ``unit`` (text or None), ``running``,
    ``enabled``, ``run_dir_exists``, ``binary_exists``, ``user_exists``,
    ``group_exists`` and ``state_dir_owned`` (the state directory belongs to
    the user) (bools).
    ``desired``: dict with ``remove_user`` (bool), ``user`` and ``group`` (names).
    Returns an ordered list of action names.
    """
    actions = []
    ours = is_ours(current['unit'])
    # a daemon that another service definition runs is not ours to stop
    if current['running'] and (ours or current['unit'] is None):
        actions.append('stop')
    if ours:
        if current['enabled']:
            actions.append('disable')
        actions += ['remove_unit', 'reload_init']
    if current['run_dir_exists'] and not CLEANS_RUN_DIR.get(current['init_system'], True):
        actions.append('remove_run_dir')
    if current['binary_exists']:
        actions.append('remove_binary')
    if desired['remove_user'] and desired['user'] != 'root':
        if current['user_exists']:
            if current['state_dir_owned']:
                actions.append('reclaim_state_dir')  # never leave it to a uid that is about to be free
            actions.append('remove_user')
        if current['group_exists'] and desired['group'] != 'root':
            actions.append('remove_group')
    return actions


def plan_stopped(current, desired):
    """What state=stopped does, from facts about the host: stop a running daemon, nothing else.

    ``current``: dict with ``unit`` (text or None) and ``running`` (bool).
    ``desired``: dict with ``service`` (its name) and ``unit_path``.
    The service definition, its start at boot, the program and the state file are
    left as they are, so that state=present brings the same daemon back. A service
    that is not installed is an error (ConfigError): there is nothing to keep defined,
    as with ansible.builtin.service. A definition that this collection did not write
    is stopped all the same: stopping changes no file.
    Returns an ordered list of action names.
    """
    if current['unit'] is None:
        raise ConfigError('state=stopped keeps the service %s defined, but it is not installed (no %s): deploy it '
                          'with state=present first; nothing was changed' % (desired['service'], desired['unit_path']))
    return ['stop'] if current['running'] else []


def pid_alive(pid_file):
    """The pid in ``pid_file`` when that process runs a persistence daemon, else None."""
    pid = procs.read_pid_file(pid_file)
    if pid is None:
        return None
    # The program (or, for the bundled daemon, the script run by python) names a persistence daemon.
    return pid if any('persistenced' in os.path.basename(arg) for arg in procs.process_argv(pid)[:2]) else None


# Accounts many services share: a daemon running as one of them shares its run and state directories
# (and the power to plant links there) with every other program running as it.
SHARED_ACCOUNTS = frozenset(['nobody', 'nfsnobody', 'nogroup', 'daemon', 'bin', 'sys', 'adm', 'games', 'man',
                             'lp', 'mail', 'news', 'uucp', 'proxy', 'www-data', 'backup', 'list', 'irc', 'gnats',
                             'operator', 'ftp', 'sync'])
NOLOGIN_SHELLS = frozenset(['/usr/sbin/nologin', '/sbin/nologin', '/bin/false', '/usr/bin/false', '/bin/true',
                            '/usr/bin/true', '/sbin/shutdown', '/sbin/halt', '/bin/sync', ''])
REGULAR_UIDS = (1000, 60000)  # login.defs UID_MIN..UID_MAX on Debian, Ubuntu and EL


def account_warnings(name, uid, shell):
    """Why an existing account is a poor service user (empty when it is fine).

    Kept simple on purpose: a name or uid that is shared by convention (nobody, daemon, www-data, uid
    65534), a login shell, or a uid in the range of people's accounts. The account this module creates
    (a system uid, no login shell, its own name) gets no warning.
    """
    if uid == 0:
        return []
    found = []
    if name in SHARED_ACCOUNTS or uid in (65534, 4294967294):
        found.append('%s is an account shared with other services, which can then tamper with the daemon\'s run '
                     'and state directories; a dedicated account (the default nvidia-persistenced) is safer' % name)
    if shell not in NOLOGIN_SHELLS and not shell.endswith('/nologin'):
        found.append('%s has a login shell (%s): whoever can log in as it controls the daemon\'s run and state '
                     'directories; give it /usr/sbin/nologin or use a dedicated account' % (name, shell))
    if REGULAR_UIDS[0] <= uid < REGULAR_UIDS[1]:
        found.append('%s (uid %d) looks like a person\'s account, not a system account: use a dedicated system '
                     'account for the daemon' % (name, uid))
    return found
