# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The persistence state file's directory: dedicated, or refused; created, handed over and taken back.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. Root works here in a directory the service user can write, so
the directory is accepted only when it is dedicated (``inspect_dir``), and
every access goes through its descriptor (``open_dir``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import pwd
import stat

from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files as host_files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError


DEFAULT_PATH = '/var/lib/gpufleet/persistence.json'


# Written (root-owned, O_EXCL) into a state directory this collection created, so that a later run may
# hand it to the service user: ownership is only ever changed on directories we made.
MARKER = '.gpufleet-state-dir'
MARKER_TEXT = ('This directory was created by gpufleet.nvidia for the persistence state file; '
               'gpufleet.nvidia may hand it to the persistence daemon\'s service user.\n')


# Directories that belong to the system or to everyone: never a state directory (home directories from
# the passwd database are added at run time). Everything under the pseudo file systems is refused too.
SYSTEM_DIRS = frozenset([
    '/', '/bin', '/boot', '/dev', '/etc', '/home', '/lib', '/lib32', '/lib64', '/libx32', '/lost+found',
    '/media', '/mnt', '/opt', '/proc', '/root', '/run', '/sbin', '/snap', '/srv', '/sys', '/tmp', '/usr',
    '/var',
    '/usr/bin', '/usr/games', '/usr/include', '/usr/lib', '/usr/lib32', '/usr/lib64', '/usr/libexec',
    '/usr/libx32', '/usr/sbin', '/usr/share', '/usr/src', '/usr/local', '/usr/local/bin', '/usr/local/etc',
    '/usr/local/games', '/usr/local/include', '/usr/local/lib', '/usr/local/libexec', '/usr/local/man',
    '/usr/local/sbin', '/usr/local/share', '/usr/local/src',
    '/var/backups', '/var/cache', '/var/crash', '/var/db', '/var/empty', '/var/lib', '/var/local', '/var/lock',
    '/var/log', '/var/mail', '/var/opt', '/var/run', '/var/spool', '/var/spool/cron', '/var/tmp', '/var/www',
    '/var/lib/apt', '/var/lib/containerd', '/var/lib/dbus', '/var/lib/docker', '/var/lib/dpkg', '/var/lib/misc',
    '/var/lib/rpm', '/var/lib/systemd', '/var/lib/yum', '/var/lib/dnf',
    '/run/lock', '/run/user', '/run/systemd', '/run/shm',
    '/etc/alternatives', '/etc/apt', '/etc/cron.d', '/etc/cron.daily', '/etc/cron.hourly', '/etc/cron.monthly',
    '/etc/cron.weekly', '/etc/default', '/etc/docker', '/etc/init', '/etc/init.d', '/etc/ld.so.conf.d',
    '/etc/logrotate.d', '/etc/modprobe.d', '/etc/modules-load.d', '/etc/pam.d', '/etc/profile.d',
    '/etc/security', '/etc/ssh', '/etc/ssl', '/etc/sudoers.d', '/etc/sysconfig', '/etc/sysctl.d',
    '/etc/systemd', '/etc/systemd/system', '/etc/tmpfiles.d', '/etc/udev', '/etc/udev/rules.d',
    '/etc/yum.repos.d', '/etc/rc.d', '/etc/rc0.d', '/etc/rc1.d', '/etc/rc2.d', '/etc/rc3.d', '/etc/rc4.d',
    '/etc/rc5.d', '/etc/rc6.d', '/etc/rcS.d', '/etc/nvidia-container-runtime', '/etc/containerd', '/etc/crio',
])
PSEUDO_ROOTS = ('/proc/', '/sys/', '/dev/', '/boot/')


class StateError(GpufleetError):
    """The state file or its directory is unusable; the message names it and says what to do."""


# --------------------------------------------------------------------------
# The directory: dedicated, or refused
# --------------------------------------------------------------------------

def check_path(path):
    """The state file's path is absolute and normalised, and its directory not a system one.

    Returns the directory. Pure: no file system access besides the passwd database.
    """
    if not path or not path.startswith('/'):
        raise StateError('state file %r must be an absolute path' % (path,))
    parts = path.split('/')
    if '..' in parts or '.' in parts or os.path.normpath(path) != path or path.startswith('//'):
        raise StateError('state file %s must be a normalised path (no "..", ".", "//" or trailing "/"): '
                         'write it as %s if that is what you mean' % (path, os.path.normpath(path)))
    name = os.path.basename(path)
    if name in ('', MARKER) or name.endswith('.lock'):
        raise StateError('state file %s: %r cannot be a state file name' % (path, name))
    directory = os.path.dirname(path)
    if is_system_dir(directory):
        raise StateError('state file %s would live directly in %s, a directory shared with the system or other '
                         'users, which the state file\'s directory cannot be (it is handed to the service user): '
                         'use a directory of its own such as %s' % (path, directory, os.path.dirname(DEFAULT_PATH)))
    return directory


def home_dirs():
    homes = set()
    try:
        for entry in pwd.getpwall():
            if entry.pw_dir and entry.pw_dir.startswith('/'):
                homes.add(os.path.normpath(entry.pw_dir))
    except (OSError, KeyError):
        pass
    return homes


def is_system_dir(directory, homes=None):
    directory = os.path.normpath(directory)
    if directory in SYSTEM_DIRS or any((directory + '/').startswith(root) for root in PSEUDO_ROOTS):
        return True
    return directory in (home_dirs() if homes is None else homes)


def _owner_name(uid):
    try:
        return '%s (uid %d)' % (pwd.getpwuid(uid).pw_name, uid)
    except KeyError:
        return 'uid %d' % uid


def inspect_dir(directory, owners, lstat=os.lstat, realpath=os.path.realpath, homes=None):
    """Facts about a would-be state directory, or StateError when it is not dedicated.

    ``owners``: the uids allowed to own it (root and the service user). Checks that every existing
    ancestor (symlinks resolved) is a root-owned directory nobody else can write (or sticky), that the
    directory is not a system or home directory, not a symlink and owned by one of ``owners``.
    Returns a dict: ``exists``; when it exists ``uid``, ``gid``, ``mode``, ``marked`` (it holds our
    root-owned marker, i.e. we created it); ``create`` (the missing directories, outermost first).
    """
    owners = set(owners) | {0}
    parent = os.path.dirname(directory)
    real_parent = realpath(parent)
    for candidate in (directory, os.path.join(real_parent, os.path.basename(directory))):
        if is_system_dir(candidate, homes):
            raise StateError('%s is a system or home directory (%s); the state file needs a directory of its own, '
                             'such as %s' % (directory, candidate, os.path.dirname(DEFAULT_PATH)))
    # Ancestors: an existing one that another user can write would let that user swap what we work on.
    create = []
    path = real_parent
    chain = []
    while True:
        chain.append(path)
        if path == '/':
            break
        path = os.path.dirname(path)
    for ancestor in reversed(chain):
        try:
            st = lstat(ancestor)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                create.append(ancestor)
                continue
            raise StateError('cannot inspect %s (a parent of the state directory %s): %s'
                             % (ancestor, directory, exc.strerror))
        if create:
            # realpath said it did not exist a moment ago
            raise StateError('%s changed while it was being inspected; run again' % ancestor)
        if not stat.S_ISDIR(st.st_mode):
            raise StateError('%s (a parent of the state directory %s) is not a directory' % (ancestor, directory))
        if st.st_uid != 0:
            raise StateError('%s (a parent of the state directory %s) is owned by %s, not root, who could swap the '
                             'state directory for a link: put the state file under a root-owned directory'
                             % (ancestor, directory, _owner_name(st.st_uid)))
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            raise StateError('%s (a parent of the state directory %s) is writable by group or others (mode %04o), '
                             'who could swap the state directory for a link: put the state file under a directory '
                             'only root can write' % (ancestor, directory, stat.S_IMODE(st.st_mode)))
    target = os.path.join(real_parent, os.path.basename(directory))
    if create:
        return {'exists': False, 'create': create + [target]}
    try:
        st = lstat(target)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return {'exists': False, 'create': [target]}
        raise StateError('cannot inspect the state directory %s: %s' % (directory, exc.strerror))
    if stat.S_ISLNK(st.st_mode):
        raise StateError('the state directory %s is a symbolic link; the state file needs a real directory of its '
                         'own: remove the link (the module creates the directory) or name the target directly'
                         % directory)
    if not stat.S_ISDIR(st.st_mode):
        raise StateError('the state directory %s exists and is not a directory' % directory)
    if st.st_uid not in owners:
        raise StateError('the state directory %s is owned by %s, who is neither root nor the persistence daemon\'s '
                         'service user: it is not dedicated to the state file. Choose a state_file in a directory '
                         'that does not exist yet (the module creates it), or chown the directory yourself if it '
                         'really is dedicated' % (directory, _owner_name(st.st_uid)))
    marked = False
    if st.st_uid == 0:
        try:
            mst = lstat(os.path.join(target, MARKER))
            marked = stat.S_ISREG(mst.st_mode) and mst.st_uid == 0 and mst.st_nlink == 1
        except OSError:
            marked = False
    return {'exists': True, 'create': [], 'uid': st.st_uid, 'gid': st.st_gid, 'mode': stat.S_IMODE(st.st_mode),
            'marked': marked, 'path': target}


def open_dir(directory):
    """A descriptor of ``directory``; its last component may not be a symlink."""
    try:
        return host_files.open_directory(directory)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise StateError('the state directory %s is not a directory (a symbolic link?); it must be a real '
                             'directory of its own' % directory)
        raise StateError('cannot open the state directory %s: %s' % (directory, exc.strerror))


def create_dir(directory, facts):
    """Create the missing directories of ``facts['create']`` (root, 0755); the last gets our marker.

    The parents were checked root-owned and writable only by root, so nobody can race us here.
    Returns a descriptor of the new directory.
    """
    for path in facts['create']:
        try:
            os.mkdir(path, 0o755)
        except OSError as exc:
            if exc.errno == errno.EEXIST and path != facts['create'][-1]:
                continue
            raise StateError('cannot create the state directory %s: %s' % (path, exc.strerror))
    dfd = open_dir(facts['create'][-1])
    try:
        st = os.fstat(dfd)
        if st.st_uid != 0:
            raise StateError('the state directory %s changed owner while it was being created; run again' % directory)
        os.fchmod(dfd, 0o755)  # mkdir's mode went through the umask
        _write_marker(dfd)
    except OSError as exc:
        os.close(dfd)
        raise StateError('cannot mark the new state directory %s as ours: %s' % (directory, exc.strerror))
    except StateError:
        os.close(dfd)
        raise
    return dfd


def hand_over(directory, owners, uid, gid, may_chown):
    """Give the state directory to the service user, through a descriptor (never by path).

    ``may_chown``: the directory is ours (just created, or marked, or already the service user's).
    Re-checks what ``inspect_dir`` saw on the descriptor itself, so a swap in between is refused.
    """
    dfd = open_dir(directory)
    try:
        st = os.fstat(dfd)
        if st.st_uid not in set(owners) | {0}:
            raise StateError('the state directory %s changed owner (now %s) while it was being handed over; run '
                             'again' % (directory, _owner_name(st.st_uid)))
        if st.st_uid == 0 and st.st_uid != uid and not (may_chown or _marked(dfd)):
            raise StateError('the state directory %s exists, owned by root, and was not created by gpufleet.nvidia, '
                             'so it is not handed to the service user: choose a state_file in a directory that does '
                             'not exist yet (the module creates it), or chown it yourself if it is dedicated'
                             % directory)
        if (st.st_uid, st.st_gid) != (uid, gid):
            os.fchown(dfd, uid, gid)
        if stat.S_IMODE(st.st_mode) != 0o755:
            os.fchmod(dfd, 0o755)
    except OSError as exc:
        raise StateError('cannot hand the state directory %s to uid %d: %s' % (directory, uid, exc.strerror))
    finally:
        os.close(dfd)


def take_back(directory, uid):
    """Give the state directory and its files back to root before the service user ``uid`` goes.

    A directory left to a deleted account's uid would belong to whichever account gets that uid
    next. Works through descriptors: the directory is opened without following a link and is
    root's (so nobody else can change its entries) before any entry is touched; an entry is
    changed only when it is a regular file of ``uid`` with one link. The marker is renewed so a
    later run may hand the directory over again. Returns False when the directory is not
    ``uid``'s (nothing to take back).
    """
    try:
        dfd = open_dir(directory)
    except StateError:
        return False
    try:
        st = os.fstat(dfd)
        if st.st_uid != uid:
            return False
        os.fchown(dfd, 0, 0)
        os.fchmod(dfd, 0o755)
        for name in os.listdir(dfd):
            try:
                fd = os.open(name, _open_flags(), dir_fd=dfd)
            except OSError:
                continue  # a link (never followed) or an entry that went away
            try:
                fst = os.fstat(fd)
                if stat.S_ISREG(fst.st_mode) and fst.st_uid == uid and fst.st_nlink == 1:
                    os.fchown(fd, 0, 0)
            finally:
                os.close(fd)
        if not _marked(dfd):
            try:
                os.unlink(MARKER, dir_fd=dfd)
            except OSError:
                pass
            _write_marker(dfd)
        return True
    except OSError as exc:
        raise StateError('cannot give the state directory %s back to root: %s' % (directory, exc.strerror))
    finally:
        os.close(dfd)


def _write_marker(dfd):
    """Our root-owned marker in the directory ``dfd``: a later run may hand that directory over."""
    fd = host_files.create_new_at(dfd, MARKER, 0o644)
    try:
        os.write(fd, MARKER_TEXT.encode('ascii'))
    finally:
        os.close(fd)


def _marked(dfd):
    try:
        st = os.stat(MARKER, dir_fd=dfd, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == 0 and st.st_nlink == 1


# --------------------------------------------------------------------------
# Reading and writing, through the directory's descriptor
# --------------------------------------------------------------------------

def _open_flags():
    return os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, 'O_CLOEXEC', 0)


# --------------------------------------------------------------------------
# Who may own the state directory
# --------------------------------------------------------------------------

RUN_DIR = '/var/run/nvidia-persistenced'
DEFAULT_SERVICE_USER = 'nvidia-persistenced'


def service_owners(service_user=None, run_dir=RUN_DIR, getpwnam=pwd.getpwnam, lstat=os.lstat):
    """The uids, besides root, that may own the state directory.

    ``service_user`` when given (StateError when it does not exist). Otherwise whoever owns the
    daemon's run directory (root made it and handed it to the service user; its parent is root's)
    and the account ``nvidia-persistenced`` if it exists.
    """
    if service_user:
        try:
            return {getpwnam(service_user).pw_uid}
        except KeyError:
            raise StateError('service_user %s does not exist: name the account the persistence daemon runs as'
                             % service_user)
    uids = set()
    try:
        st = lstat(run_dir)
        if stat.S_ISDIR(st.st_mode):
            uids.add(st.st_uid)
    except OSError:
        pass
    try:
        uids.add(getpwnam(DEFAULT_SERVICE_USER).pw_uid)
    except KeyError:
        pass
    uids.discard(0)
    return uids
