# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Files as root, safely: bounded reads, atomic writes, private and temp directories, backups.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. The modules run as root; every path is resolved first by
``host.paths`` (out of other users' reach).

* ``read_file`` opens with O_NOFOLLOW and reads within a size limit.
* ``write_at`` / ``write_atomic``: a new temp file in the same directory, or
  in ``private_directory`` (a root-only sibling on the same file system) for a
  directory an engine reads whole (O_EXCL|O_NOFOLLOW), mode and owner set on
  its descriptor, fsync, rename, directory fsync; a failure leaves the old
  file and no temp file.
  ``write_at`` works through a directory descriptor, for directories another
  user owns (the persistence state directory).
* ``backup_copy`` keeps the previous bytes for a rollback; ``selinux_labeller``
  is the module's SELinux hook.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import errno
import os
import stat
import time

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import HostFileError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host.paths import (
    CLOEXEC, DIRECTORY, NOFOLLOW, NONBLOCK, refuse, resolve_path, untrusted)


_TEMP_SUFFIX = '.tmp'
PRIVATE_SUFFIX = '.gpufleet'


# --------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------

class HostFile(object):
    """A file as read: ``exists``, ``real`` (the path written), ``text``, ``stat`` (of the opened file)."""

    def __init__(self, exists, real, text, st):
        self.exists = exists
        self.real = real
        self.text = text
        self.stat = st


def read_file(path, real, limit, reader='the program that reads it'):
    """Read ``path`` (already resolved to ``real``) without following a link, within ``limit`` bytes, as UTF-8.

    A missing file is ``HostFile(False, real, '', None)``. The file must be a
    regular file owned by root or us and writable by nobody else.
    """
    try:
        fd = os.open(real, os.O_RDONLY | NOFOLLOW | NONBLOCK | CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return HostFile(False, real, '', None)
        if exc.errno == errno.ELOOP:
            raise HostFileError('%s: %s became a symbolic link while being read; nothing was changed. Run again.'
                                % (path, real))
        raise HostFileError('%s: cannot read: %s' % (path, exc.strerror))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise HostFileError('%s is not a regular file.' % path)
        problem = untrusted(st)
        if problem:
            refuse(path, 'the file %s' % real, problem,
                   'It is read by a program running as root: make it owned by root and writable only by root '
                   '(chown root: %s; chmod 0644 %s).' % (real, real), reader)
        if st.st_size > limit:
            raise HostFileError('%s: the file is %d bytes; a configuration larger than %d bytes is refused. '
                                'The file was left untouched.' % (path, st.st_size, limit))
        chunks = []
        size = 0
        while size <= limit:
            try:
                chunk = os.read(fd, 65536)
            except OSError as exc:
                raise HostFileError('%s: cannot read: %s' % (path, exc.strerror))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise HostFileError('%s: the file grew past %d bytes while being read; it was left untouched.'
                                % (path, limit))
    finally:
        os.close(fd)
    try:
        text = b''.join(chunks).decode('utf-8')
    except UnicodeDecodeError as exc:
        raise HostFileError('%s: not valid UTF-8 (%s). The file was left untouched.' % (path, exc))
    return HostFile(True, real, text, st)


def read_root_text(path, limit=1 << 20, reader='root, at boot'):
    """The text of a file root runs or reads (a boot script, a unit, a drop-in), or None when it is missing: through
    ``resolve_path`` and ``read_file`` (no link another user can change, no FIFO, a regular file owned by root and
    writable by nobody else). Raises HostFileError naming ``path`` otherwise: its text is not taken, nor shown in a
    diff, from a file another user could have put there. A path under a file (ENOTDIR) cannot exist: None."""
    try:
        os.lstat(path)
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            return None
    found = read_file(path, resolve_path(path, reader=reader), limit, reader=reader)
    return found.text if found.exists else None


def remove_root_file(path, reader='root, at boot'):
    """Remove the file ``path`` (a boot piece of ours) at its real location, found by ``resolve_path``: never
    through a link or a directory another user can change. A missing file is not an error."""
    try:
        os.unlink(resolve_path(path, reader=reader))
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise write_failed(path, exc, 'remove it')


def tail_file(path, limit=16384):
    """The last ``limit`` bytes of a log file, as text ('' when unreadable)."""
    try:
        with open(path, 'rb') as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            return handle.read().decode('utf-8', 'replace')
    except (IOError, OSError):
        return ''


# --------------------------------------------------------------------------
# Directories and locks
# --------------------------------------------------------------------------

def ensure_directory(path, mode=0o755):
    """Create the missing directories above ``path`` (a resolved path); True when one was created.

    Each is made with mkdir (which never follows a link) in a directory
    ``resolve_path`` found trusted; an existing entry (another run made it
    first) must be a real directory we trust. The mode is set on the
    descriptor, whatever the umask.
    """
    directory = os.path.dirname(path)
    missing = []
    while directory != '/' and not os.path.lexists(directory):
        missing.append(directory)
        directory = os.path.dirname(directory)
    created = False
    for directory in reversed(missing):
        try:
            os.mkdir(directory, mode)
            made = True
        except OSError as exc:
            if exc.errno != errno.EEXIST:
                raise HostFileError('%s: cannot create the directory %s: %s. Nothing was written.'
                                    % (path, directory, exc.strerror))
            made = False
        try:
            fd = os.open(directory, os.O_RDONLY | DIRECTORY | NOFOLLOW | CLOEXEC)
        except OSError as exc:
            raise HostFileError('%s: %s is not a directory we can use (%s). Nothing was written.'
                                % (path, directory, exc.strerror))
        try:
            st = os.fstat(fd)
            if made:
                os.fchmod(fd, mode)
                created = True
            else:
                problem = untrusted(st)
                if problem:
                    refuse(path, 'the directory %s' % directory, problem,
                           'Make it owned by root and writable only by root.')
        except OSError as exc:
            raise HostFileError('%s: cannot set the mode of %s: %s' % (path, directory, exc.strerror))
        finally:
            os.close(fd)
    return created


def open_directory(directory):
    """A descriptor of ``directory`` itself, never of a link in its place."""
    return os.open(directory, os.O_RDONLY | DIRECTORY | NOFOLLOW | CLOEXEC)


def fsync_directory(directory):
    try:
        fd = os.open(directory, os.O_RDONLY | DIRECTORY | CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def private_directory(directory, path=None):
    """A root-only (0700) sibling of ``directory`` for its temp files: ``<parent>/.<name>.gpufleet``.

    For a directory an engine reads whole (CRI-O's ``crio.conf.d``): no temp
    file ever sits in it, and a killed run's leftover is in a place no engine
    reads (the next run removes it). Created when missing; it must be ours,
    writable by nobody else, and on the same file system as ``directory`` (a
    rename is atomic only within one). Returns its path. ``path``: the file the
    temp files are for, named first in an error. A writer uses
    ``temp_directory``, which also removes again what a failed write created.
    """
    return _private_directory(directory, path)[0]


@contextlib.contextmanager
def temp_directory(directory, path):
    """``private_directory(directory, path)`` for a block that writes ``path`` through it. When the block fails, the
    directory is removed again if this run created it and it is still empty (rmdir, of the very directory made: it
    never removes a file, another directory, or one another run has put a temp file in), so a failed write leaves
    nothing behind; after a good write it stays, for the next one."""
    temp, made = _private_directory(directory, path)
    try:
        yield temp
    except BaseException:
        if made is not None:
            _remove_made_directory(temp, made)
        raise


def _private_directory(directory, path):
    """``(its path, (st_dev, st_ino) when this call created it, else None)``; see ``private_directory``."""
    directory = directory.rstrip('/') or '/'
    temp = os.path.join(os.path.dirname(directory), '.%s%s' % (os.path.basename(directory), PRIVATE_SUFFIX))
    # the file the user asked about first, then the directory of its temp files
    named = '%s: the directory for its temp files %s' % (path, temp) if path else temp
    made = False
    try:
        os.mkdir(temp, 0o700)
        made = True
    except OSError as exc:
        if exc.errno != errno.EEXIST:
            if path:
                raise write_failed(path, exc, 'create the directory for its temp files %s' % temp)
            raise write_failed(temp, exc, 'create the directory for temp files')
    try:
        fd = open_directory(temp)
    except OSError as exc:
        raise HostFileError('%s: cannot use it for temp files (%s); remove it and run again. Nothing was changed.'
                            % (named, exc.strerror))
    identity = None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
            refuse(path or temp, 'the directory %s' % temp, untrusted(st) or 'is open to other users (mode %04o)'
                   % stat.S_IMODE(st.st_mode), 'Remove it; the next run creates it again, owned by root, mode 0700.')
        identity = (st.st_dev, st.st_ino)
        if st.st_dev != os.stat(directory).st_dev:
            raise HostFileError('%s is on another file system than %s, so a file cannot be moved from one to the '
                                'other atomically. Nothing was changed; keep %s on the file system of its parent.'
                                % (named, directory, directory))
    except BaseException:
        if made and identity is not None:
            _remove_made_directory(temp, identity)
        raise
    finally:
        os.close(fd)
    return temp, identity if made else None


def _remove_made_directory(temp, identity):
    """Remove the directory ``temp`` this run created (``identity``: its device and inode), if it is still that
    directory and empty; nothing otherwise (rmdir never follows a link, nor removes anything inside)."""
    try:
        st = os.lstat(temp)
        if stat.S_ISDIR(st.st_mode) and (st.st_dev, st.st_ino) == identity:
            os.rmdir(temp)
    except OSError:
        pass


# --------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------

def create_new_at(dfd, name, mode, access=os.O_WRONLY):
    """Create ``name`` in the directory ``dfd``; fails when anything is there already,
    a link planted in between included (O_EXCL|O_NOFOLLOW)."""
    return os.open(name, access | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC, mode, dir_fd=dfd)


def temp_prefix(name):
    """Temp files for ``name`` are ``.<basename>.<random>.tmp`` beside it."""
    return '.%s.' % os.path.basename(name)


def write_all(fd, data):
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def is_temp_of(name, path):
    """Whether the directory entry ``name`` is one of our temp files for ``path``."""
    return name.startswith(temp_prefix(path)) and name.endswith(_TEMP_SUFFIX)


def write_at(dfd, name, data, mode, owner=None, owner_required=True, label=None, temp_dfd=None):
    """Replace ``name`` in the directory ``dfd`` with ``data`` (bytes), atomically.

    A fresh temp file (O_EXCL|O_NOFOLLOW, mode 0600; in ``temp_dfd`` when
    given, a directory on the same file system) gets ``data``, then
    ``owner`` (uid, gid; an EPERM is ignored unless ``owner_required``) and
    ``mode`` through its descriptor, fsync, ``label(temp_name)`` (e.g. copy an
    SELinux label), a rename into ``dfd`` and an fsync of ``dfd``. Raises
    OSError; the old file is then as it was and no temp file is left.
    """
    tmp = None
    fd = None
    temp_dfd = dfd if temp_dfd is None else temp_dfd
    try:
        for _attempt in range(100):
            candidate = '%s%s%s' % (temp_prefix(name), os.urandom(6).hex(), _TEMP_SUFFIX)
            try:
                fd = create_new_at(temp_dfd, candidate, 0o600)
            except OSError as exc:
                if exc.errno == errno.EEXIST:
                    continue
                raise
            tmp = candidate
            break
        else:
            raise OSError(errno.EEXIST, 'no free temporary file name')
        write_all(fd, data)
        if owner is not None and tuple(owner) != (os.geteuid(), os.getegid()):
            try:
                os.fchown(fd, owner[0], owner[1])
            except OSError as exc:
                if owner_required or exc.errno != errno.EPERM:
                    raise
        os.fchmod(fd, mode)
        os.fsync(fd)
        os.close(fd)
        fd = None
        if label is not None:
            label(tmp)
        os.rename(tmp, name, src_dir_fd=temp_dfd, dst_dir_fd=dfd)
        tmp = None
        os.fsync(dfd)
    finally:
        if fd is not None:
            os.close(fd)
        if tmp is not None:
            try:
                os.unlink(tmp, dir_fd=temp_dfd)
            except OSError:
                pass


WRITE_HINTS = {errno.EROFS: 'the file system is read-only', errno.ENOSPC: 'the file system is full',
               errno.EDQUOT: 'a disk quota is exceeded',
               errno.EPERM: 'the file or directory may be immutable (lsattr; chattr -i)',
               errno.EACCES: 'permission denied'}


def write_failed(path, exc, what='write'):
    """The error for a failed write of ``path``: the reason and, where it helps, what it usually means."""
    reason = exc.strerror if getattr(exc, 'strerror', None) else str(exc)
    hint = WRITE_HINTS.get(getattr(exc, 'errno', None))
    return HostFileError('%s: cannot %s: %s%s. The file was left as it was; no temporary file or backup was left.'
                         % (path, what, reason, ' (%s)' % hint if hint and hint != reason.lower() else ''))


def write_atomic(path, data, like=None, mode=None, new_mode=0o644, label=None, temp_dir=None, shared=False):
    """Write ``data`` (bytes) to ``path`` (a resolved path in a directory only root or we can write).

    The temp file is made beside ``path``, or in ``temp_dir`` (``private_directory``) when the directory is one
    an engine reads whole.

    Mode and owner: ``mode`` when given (owned by us), else those of ``like``
    (the existing file's stat; by default an ``lstat`` of ``path``), else
    ``new_mode`` for a new file. ``label(temp_path, path)`` runs before the
    rename (the modules copy the SELinux label). Raises HostFileError naming
    ``path``; the file is then as it was.

    The directory opened must be out of other users' reach (whoever made it
    after the path was resolved), unless ``shared``: a file of no privilege
    (the controller's drift report) in a directory the operator shares, where
    the temp file's O_EXCL|O_NOFOLLOW creation and the rename keep root's
    write from going anywhere else.
    """
    directory = os.path.dirname(os.path.abspath(path))
    owner = None
    if mode is None:
        if like is None:
            try:
                like = os.lstat(path)
            except OSError:
                like = None
            if like is not None and not stat.S_ISREG(like.st_mode):
                like = None
        if like is None:
            mode = new_mode
        else:
            mode, owner = stat.S_IMODE(like.st_mode), (like.st_uid, like.st_gid)
    temp_dir = directory if temp_dir is None else temp_dir
    try:
        dfd = open_directory(directory)
    except OSError as exc:
        raise write_failed(path, exc, 'open the directory %s' % directory)
    problem = None if shared else untrusted(os.fstat(dfd))
    if problem:  # the directory opened, whoever made it since the path was resolved (a missing one made by another)
        os.close(dfd)
        refuse(path, 'the directory %s' % directory, problem, 'Make it owned by root and writable only by root.')
    try:
        temp_dfd = open_directory(temp_dir) if temp_dir != directory else dfd
    except OSError as exc:
        os.close(dfd)
        raise write_failed(path, exc, 'open the directory %s' % temp_dir)
    try:
        write_at(dfd, os.path.basename(path), data, mode, owner=owner, owner_required=False, temp_dfd=temp_dfd,
                 label=None if label is None else (lambda tmp: label(os.path.join(temp_dir, tmp), path)))
    except HostFileError:
        raise
    except Exception as exc:
        raise write_failed(path, exc)
    finally:
        if temp_dfd != dfd:
            os.close(temp_dfd)
        os.close(dfd)


def write_boot_file(path, text, mode, label=None):
    """Write a file root runs at boot (a script, a unit, a drop-in) at ``path``: resolved out of other users' reach,
    its missing directories made, written atomically with ``mode``."""
    real = resolve_path(path, reader='the host at boot, as root')
    ensure_directory(real)
    write_atomic(real, text.encode('utf-8'), mode=mode, label=label)


def replace_config(real, text, current, backup=None, label=None, temp_dir=None):
    """Write ``text`` over the configuration file ``current`` (a HostFile read from ``real``), unless it is the same.

    Temp files a killed writer left are removed first (call with the
    directory lock held); ``temp_dir``: where the temp file is made (see
    ``write_atomic``). ``backup``: True (``backup_copy``) or ``backup(real)
    -> name``, made only of a file that exists and removed again when the write
    fails. Returns the backup's name or None. Raises HostFileError; the file is
    then as it was.
    """
    remove_stale_temps(real)
    if temp_dir is not None:
        remove_stale_temps(real, temp_dir)
    if text == current.text:
        return None
    if backup is True or (backup is not None and not callable(backup)):
        backup = backup_copy
    made = backup(real) if backup is not None and current.exists else None
    try:
        write_atomic(real, text.encode('utf-8'), like=current.stat, label=label, temp_dir=temp_dir)
    except HostFileError:
        if made:  # a copy of a file that did not change: not worth keeping
            try:
                os.unlink(made)
            except OSError:
                pass
        raise
    return made


def remove_stale_temps(path, directory=None):
    """Remove temp files a killed writer left for ``path`` (beside it, or in ``directory``); call with the lock held."""
    directory = os.path.dirname(os.path.abspath(path)) if directory is None else directory
    removed = []
    try:
        entries = os.listdir(directory)
    except OSError:
        return removed
    for entry in entries:
        if is_temp_of(entry, path):
            try:
                os.unlink(os.path.join(directory, entry))  # unlink never follows a link
                removed.append(entry)
            except OSError:
                pass
    return removed


def backup_copy(path, like=None, directory=None):
    """Copy ``path`` (a resolved path) to ``path.PID.YYYY-MM-DD@HH:MM:SS~``; returns the copy's name.

    ``directory``: where the copy is made instead of beside ``path`` (out of a
    directory an engine reads whole). The name is Ansible's ``backup_local``
    one; the copy is a new file
    (O_EXCL|O_NOFOLLOW) with the original's mode and owner set on its
    descriptor. A failure removes the partial copy and names the file.
    """
    name = '%s.%s.%s' % (path if directory is None else os.path.join(directory, os.path.basename(path)),
                         os.getpid(), time.strftime('%Y-%m-%d@%H:%M:%S~', time.localtime()))
    try:
        source = os.open(path, os.O_RDONLY | NOFOLLOW | CLOEXEC)
    except OSError as exc:
        raise HostFileError('%s: cannot read it for the backup: %s. Nothing was changed.' % (path, exc.strerror))
    try:
        if like is None:
            like = os.fstat(source)
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC, 0o600)
        except OSError as exc:
            raise write_failed(path, exc, 'create the backup %s' % name)
        try:
            while True:
                chunk = os.read(source, 65536)
                if not chunk:
                    break
                write_all(fd, chunk)
            os.fchmod(fd, stat.S_IMODE(like.st_mode))
            if (like.st_uid, like.st_gid) != (os.geteuid(), os.getegid()):
                try:
                    os.fchown(fd, like.st_uid, like.st_gid)
                except OSError as exc:
                    if exc.errno != errno.EPERM:
                        raise
            os.fsync(fd)
        except OSError as exc:
            os.close(fd)
            fd = None
            try:
                os.unlink(name)
            except OSError:
                pass
            raise write_failed(path, exc, 'write the backup %s' % name)
        finally:
            if fd is not None:
                os.close(fd)
    finally:
        os.close(source)
    return name


def selinux_labeller(module):
    """``label(temp, dest)`` for ``write_atomic``: give the temp file ``dest``'s SELinux label.

    Not ``module.atomic_move``: that changes owner and mode by path, and gives a
    new file the default mode (0644), which would drop a program's execute bit.
    The temp file already has its owner and mode; only the label is copied.
    None when SELinux is off.
    """
    if not module.selinux_enabled():
        return None

    def label(tmp, dest):
        context = (module.selinux_context(dest) if os.path.exists(dest)
                   else module.selinux_default_context(dest))
        module.set_context_if_different(tmp, context, False)
    return label


# --------------------------------------------------------------------------
# Locking our writers of a directory
# --------------------------------------------------------------------------

class _NoLock(object):
    """What check mode holds: nothing."""

    def __enter__(self):
        return None

    def __exit__(self, *exc_info):
        return False


def directory_lock(path, check_mode=False):
    """``host.locks.directory_lock(path)`` (the flock that serialises our writers of ``path``'s directory), or, in
    check mode, which takes no lock, a context that holds nothing.

    ``host.locks`` is imported only to write: node_state's check path, which only reads, does not compile it (a host
    compiles every module it imports on every run; Ansible's dependency finder still packs it into the zip)."""
    if check_mode:
        return _NoLock()
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import locks
    return locks.directory_lock(path)
