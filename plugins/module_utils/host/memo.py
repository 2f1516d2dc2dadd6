# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_state's memo: what a program answered for inputs that have not changed since, kept for the next run.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time.

A converged host's node_state run asked ``containerd --version`` and
``containerd config dump`` every time: two starts of a 50 MB Go program, about
a fifth of the run's CPU. Their answers are a function of inputs we can check
for much less: the binary (its inode, size and change time, which no user can
set back), the bytes of the file it reads and the boot. The memo keeps each
answer with those inputs and a later run uses it only where all of them are
the same again (``containerd.facts.Tools``).

It is data in a directory only root can open (``MEMO_DIR``, 0700, in /run:
emptied at every boot), never code and never followed through a link: the
directory and each file are opened without following links and used only when
owned by us and closed to other users. Anything unexpected (not root, a
directory or file that is not ours, a file that is not JSON, a full disk)
makes the memo answer nothing, and the caller asks the program as before: the
memo can make a run cheaper, never different. That includes a file JSON cannot
read without recursing past Python's limit (``[[[[...``): ``load`` answers
None. What ``load`` returns is only known to be a JSON object: each caller
checks the type of every field it uses and ignores what it does not expect.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import json
import os
import stat

from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import paths
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import HostFileError

MEMO_DIR = '/run/gpufleet-memo' if os.path.isdir('/run') else '/var/run/gpufleet-memo'
# Tests point this at a private directory; it is read from root's own environment only.
MEMO_DIR_VARIABLE = 'GPUFLEET_MEMO_DIR'
MAX_BYTES = 4 << 20
BOOT_ID = '/proc/sys/kernel/random/boot_id'


def directory():
    return os.environ.get(MEMO_DIR_VARIABLE) or MEMO_DIR


def _open_directory(create):
    """``(descriptor, path)`` of the memo directory, or ``(None, None)`` where it is missing (and not created) or not
    root's alone."""
    if os.geteuid() != 0:
        return None, None
    path = directory().rstrip('/')
    # the way to it out of other users' reach, its parent writable by root alone (sticky or not: nobody else may
    # take the name first); the directory itself never a link (O_NOFOLLOW below)
    try:
        parent = paths.resolve_path(os.path.dirname(path), reader='node_state', file_directory=False)
        st = os.lstat(parent)
    except (HostFileError, OSError):
        return None, None
    if not stat.S_ISDIR(st.st_mode) or paths.untrusted(st):
        return None, None
    real = os.path.join(parent, os.path.basename(path))
    if create:
        try:
            os.mkdir(real, 0o700)
        except OSError as exc:
            if exc.errno != errno.EEXIST:
                return None, None
    try:
        fd = files.open_directory(real)
    except OSError:
        return None, None
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
        os.close(fd)
        return None, None
    return fd, real


def load(name):
    """The JSON object kept as ``name``, or None."""
    dfd, real = _open_directory(create=False)
    if dfd is None:
        return None
    os.close(dfd)
    path = os.path.join(real, name)  # in root's own 0700 directory, whose parent only root can write
    try:  # never through a link, a regular file of root's, within MAX_BYTES, UTF-8
        found = files.read_file(path, path, MAX_BYTES, reader='node_state')
    except HostFileError:
        return None
    if not found.exists or found.stat.st_mode & 0o077:  # closed to other users, as it was written
        return None
    try:  # a file nested too deep for the parser (RecursionError) or too big for memory is unreadable like any other
        value = json.loads(found.text)
    except (ValueError, RecursionError, MemoryError):
        return None
    return value if isinstance(value, dict) else None


def store(name, value):
    """Keep the JSON object ``value`` as ``name`` (replaced whole, 0600); nothing when that cannot be done."""
    try:
        data = json.dumps(value, sort_keys=True).encode('utf-8')
    except (TypeError, ValueError, RecursionError, MemoryError):
        return False
    if len(data) > MAX_BYTES:
        return False
    dfd = _open_directory(create=True)[0]
    if dfd is None:
        return False
    try:
        files.write_at(dfd, name, data, 0o600)
    except OSError:
        return False
    finally:
        os.close(dfd)
    return True


def identity(path):
    """What tells an executable apart from any other at ``path`` (device, inode, size, change and modification
    times), or None."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, getattr(st, 'st_mtime_ns', st.st_mtime),
            getattr(st, 'st_ctime_ns', st.st_ctime)]


def boot_id():
    try:
        with open(BOOT_ID) as handle:
            return handle.read(64).strip()
    except (IOError, OSError):
        return None
