# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Processes and tools: /proc and pid-file readers, which process is root's, tool lookup.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. ``/proc`` readers and ``read_pid_file`` never follow links or
block on FIFOs; ``not_root_running`` tells a root process running the expected
executable from anything another user (or a container) can start under the
same name; ``which`` looks in ``TOOL_DIRS`` besides $PATH.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import stat
import time

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import HostFileError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host.paths import (
    CLOEXEC, NOFOLLOW, NONBLOCK, resolve_path)


# Where init-system tools and daemons live, besides $PATH (Debian, Ubuntu, EL).
TOOL_DIRS = ('/usr/local/sbin', '/usr/local/bin', '/usr/sbin', '/usr/bin', '/sbin', '/bin')


# --------------------------------------------------------------------------
# Processes and tools
# --------------------------------------------------------------------------

def process_argv(pid):
    """A process's command line as a list ([] when it is gone)."""
    try:
        with open('/proc/%d/cmdline' % pid, 'rb') as handle:
            raw = handle.read()
    except (IOError, OSError):
        return []
    return [part.decode('utf-8', 'replace') for part in raw.split(b'\0') if part]


def process_name(pid):
    """A process's ``comm`` name, or None when it is gone."""
    try:
        with open('/proc/%d/comm' % pid) as handle:
            return handle.read().strip()
    except (IOError, OSError):
        return None


def process_uid(pid):
    """A process's real uid, or None when it is gone."""
    try:
        with open('/proc/%d/status' % pid) as handle:
            for line in handle:
                if line.startswith('Uid:'):
                    return int(line.split()[1])
    except (IOError, OSError, ValueError, IndexError):
        return None
    return None


def _proc_text(proc, pid, name, limit=4096):
    """``/proc/PID/NAME`` as text, undecodable bytes replaced (a process names itself); '' when gone."""
    try:
        with open('%s/%d/%s' % (proc, pid, name), 'rb') as handle:
            return handle.read(limit).decode('utf-8', 'replace')
    except (IOError, OSError):
        return ''


def _printable(text):
    return ''.join(ch if ch.isprintable() else '?' for ch in text)


def open_file_holders(prefixes, proc='/proc'):
    """The processes that hold open a file whose path starts with one of ``prefixes``.

    Returns ``[{'pid', 'name', 'uid', 'paths'}]`` ordered by pid. Each ``/proc/PID/fd/N``
    entry is only read with ``readlink``: its text is the name the process opened, which
    is compared, never followed, opened or stat'ed (a process may hold a FIFO, a device,
    anything; opening it as root could block or act on it). The text, and the process's
    name, are the process's own choice within what it could open, so they are reported
    (non-printable characters as "?"), never acted on. Seeing other users' processes needs
    root; a process that ends or hides its descriptors while this runs is skipped.
    """
    prefixes = tuple(prefixes)
    try:
        entries = os.listdir(proc)
    except OSError:
        return []
    holders = []
    for pid in sorted(int(entry) for entry in entries if entry.isdigit()):
        fd_dir = '%s/%d/fd' % (proc, pid)
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        paths = set()
        for fd in fds:
            try:
                target = os.readlink('%s/%s' % (fd_dir, fd))
            except OSError:
                continue
            if target.startswith(prefixes):
                paths.add(_printable(target))
        if not paths:
            continue
        uid = None
        for line in _proc_text(proc, pid, 'status').splitlines():
            if line.startswith('Uid:') and len(line.split()) > 1 and line.split()[1].isdigit():
                uid = int(line.split()[1])
        holders.append({'pid': pid, 'name': _printable(_proc_text(proc, pid, 'comm', 64).strip()),
                        'uid': uid, 'paths': sorted(paths)})
    return holders


def start_time(pid, proc='/proc', now=time.time):
    """When process ``pid`` started, in seconds since the epoch (to a clock tick), or None.

    From the uptime (centiseconds), not the boot time in /proc/stat (whole seconds, up to 1 s early).
    """
    try:
        with open('%s/%d/stat' % (proc, pid)) as handle:
            ticks = int(handle.read().rsplit(')', 1)[1].split()[19])
        with open('%s/uptime' % proc) as handle:
            uptime = float(handle.read().split()[0])
    except (IOError, OSError, IndexError, ValueError):
        return None
    return now() - (uptime - ticks / float(os.sysconf('SC_CLK_TCK')))


def changed_since(paths, started, tick=None):
    """The files changed (ctime) after the process ``started``.

    The start time counts in clock ticks (1/100 s), rounded down: a change
    within two ticks of it was read by the process (a daemon reads its
    configuration after it starts, not before).
    """
    tick = tick if tick is not None else 1.0 / os.sysconf('SC_CLK_TCK')
    found = []
    for path in paths:
        try:
            if os.stat(path).st_ctime > started + 2 * tick:
                found.append(path)
        except OSError:
            found.append(path)
    return found


def read_pid_file(pid_file, owner=None):
    """The number in a pid file, read without following a link or blocking on a FIFO, else None.

    Pid files may live in a directory a service user owns; root reads them this way. With ``owner``
    (a uid), only a file of that owner with one link counts.
    """
    try:
        fd = os.open(pid_file, os.O_RDONLY | NOFOLLOW | NONBLOCK | CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (owner is not None and (st.st_uid != owner or st.st_nlink != 1)):
            return None
        text = os.read(fd, 64).decode('ascii', 'replace').strip()
    except OSError:
        return None
    finally:
        os.close(fd)
    return int(text) if text.isdigit() and int(text) > 0 else None


def process_uids(pid):
    """A process's real, effective, saved and file-system uids, or None when it is gone."""
    for line in _proc_text('/proc', pid, 'status').splitlines():
        if line.startswith('Uid:'):
            try:
                return tuple(int(field) for field in line.split()[1:5])
            except ValueError:
                return None
    return None


def trusted_executable(executable):
    """``(stat, None)`` of ``executable`` when it is a regular file only root can change, else ``(None, why)``."""
    try:
        real = resolve_path(executable, reader='this service')
        st = os.stat(real)
    except (HostFileError, OSError) as exc:
        return None, str(exc)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        return None, '%s is not a regular file owned by root and writable only by root' % executable
    return st, None


def not_root_running(pid, executable):
    """Why process ``pid`` is not a root process running ``executable`` in our PID namespace ("it ..."), or None.

    The executable is compared by file (``/proc/PID/exe`` and ``executable``
    must be the same inode), so a script or a copy under the same name, or a
    container's own binary, is not it; ``executable`` itself must be a file
    only root can change. The uid is read last: should the process end and
    its number go to another user's process meanwhile, that one is refused.
    """
    want, why = trusted_executable(executable)
    return why if want is None else _not_running(pid, executable, want)


def _not_running(pid, executable, want):
    try:
        running = os.stat('/proc/%d/exe' % pid)
        namespace = os.stat('/proc/%d/ns/pid' % pid)
        ours = os.stat('/proc/self/ns/pid')
    except OSError as exc:
        return 'it cannot be inspected (%s)' % exc.strerror
    if (running.st_dev, running.st_ino) != (want.st_dev, want.st_ino):
        try:
            shown = _printable(os.readlink('/proc/%d/exe' % pid))
        except OSError:
            shown = 'another file'
        return 'it runs %s, not %s' % (shown, executable)
    if (namespace.st_dev, namespace.st_ino) != (ours.st_dev, ours.st_ino):
        return 'it is in another PID namespace (a container)'
    uids = process_uids(pid)
    if uids is None or any(uids):
        return 'it does not run as root (uids %s)' % (uids,)
    return None


def pids_running(executable):
    """Every root process of our PID namespace that runs ``executable`` (see ``not_root_running``)."""
    want, unused_why = trusted_executable(executable)
    try:
        entries = os.listdir('/proc') if want is not None else []
    except OSError:
        return []
    return [pid for pid in sorted(int(entry) for entry in entries if entry.isdigit())
            if _not_running(pid, executable, want) is None]


def which(name, extra_dirs=TOOL_DIRS):
    """The path of an executable ``name`` on $PATH or in the usual tool directories, or None."""
    if os.path.isabs(name):
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    dirs = os.environ.get('PATH', '').split(os.pathsep) + list(extra_dirs)
    for directory in dirs:
        candidate = os.path.join(directory, name)
        if directory and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None
