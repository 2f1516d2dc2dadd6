# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Our writers' locks: a flock on a lock file in a directory only root can open.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. ``directory_lock`` serialises our writers with a flock on a lock
file in a directory only root can open (``LOCK_DIR``), never on anything
another user can open (a 0755 directory can be opened, and flocked, by anyone).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import stat
import time

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import HostFileError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host.paths import (
    CLOEXEC, DIRECTORY, NOFOLLOW, NONBLOCK, _trusted_uids, resolve_path)


# Our lock files: a directory only root can open (0700), in /run (root's, emptied at boot); /var/run on hosts
# older than /run (EL6).
LOCK_DIR = '/run/gpufleet-locks' if os.path.isdir('/run') else '/var/run/gpufleet-locks'


# Tests point this at a private directory; it is read from root's own environment only.
LOCK_DIR_VARIABLE = 'GPUFLEET_LOCK_DIR'


def open_lock_directory():
    """``(descriptor, path)`` of ``LOCK_DIR``, created 0700 when missing; refused unless only root (or we) can open
    it."""
    path = os.environ.get(LOCK_DIR_VARIABLE) or LOCK_DIR
    real = resolve_path(path, reader="root's lock files")
    try:
        os.mkdir(real, 0o700)
    except OSError as exc:
        if exc.errno != errno.EEXIST:
            raise HostFileError('%s: cannot create the lock directory: %s' % (path, exc.strerror))
    try:
        fd = os.open(real, os.O_RDONLY | DIRECTORY | NOFOLLOW | CLOEXEC)
    except OSError as exc:
        raise HostFileError('%s: cannot open the lock directory: %s. Remove it (it holds only lock files) and run '
                            'again.' % (path, exc.strerror))
    st = os.fstat(fd)
    if st.st_uid not in _trusted_uids() or st.st_mode & 0o077:
        os.close(fd)
        raise HostFileError('%s: refusing the lock directory: it is owned by uid %d with mode %04o, so another user '
                            'could hold root\'s locks. Remove it (rm -rf %s; it holds only lock files) and run again.'
                            % (path, st.st_uid, stat.S_IMODE(st.st_mode), path))
    return fd, path


def lock_name(directory):
    """The lock file of ``directory``: its name (readable) and a hash of its whole path (unique)."""
    digest = hashlib.sha256(directory.encode('utf-8', 'surrogateescape')).hexdigest()[:24]
    return '%s-%s.lock' % (re.sub(r'[^A-Za-z0-9_.-]', '_', os.path.basename(directory))[:64], digest)


@contextlib.contextmanager
def directory_lock(path, timeout=120.0, check_mode=False):
    """Exclusive flock that serialises our writers of the file's directory.

    The lock is a file of ``LOCK_DIR`` (0700 root) named after the directory,
    never the directory itself: anyone can open a 0755 directory and flock it,
    which would hold every root run up. The lock file stays (an unlinked lock
    file would let two writers each lock a different file).

    Check mode takes no lock: it writes nothing (not even a lock file), and what it reads, a writer only ever
    replaces whole (rename), so it sees the file before or after a write, never half of one.
    """
    if check_mode:
        yield
        return
    directory = os.path.dirname(os.path.abspath(path))
    dfd, lock_dir = open_lock_directory()
    name = os.path.join(lock_dir, lock_name(directory))
    try:
        fd = os.open(os.path.basename(name), os.O_RDWR | os.O_CREAT | NOFOLLOW | NONBLOCK | CLOEXEC, 0o600,
                     dir_fd=dfd)
    except OSError as exc:
        raise HostFileError('%s: cannot open the lock file %s for %s: %s'
                            % (path, name, directory, exc.strerror))
    finally:
        os.close(dfd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid not in _trusted_uids():
            raise HostFileError('%s: refusing the lock file %s: not a regular file of root\'s. Remove it and run '
                                'again.' % (path, name))
        deadline = time.time() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except (IOError, OSError) as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise HostFileError('%s: cannot lock %s: %s' % (path, name, exc.strerror))
                if time.time() > deadline:
                    raise HostFileError('%s: another run of this collection held the lock on %s for %ds; wait for it '
                                        'to finish and run again' % (path, directory, timeout))
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)
