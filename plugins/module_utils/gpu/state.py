# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The per-GPU persistence state file: one format, one reader/writer (its directory: ``gpu.state_dir``).

PRIVATE to the gpufleet.nvidia collection. Shared by the gpu_persistence and
persistenced modules; files/gpufleet-persistenced carries a copy of the small
parser (it must run without the collection), and a unit test holds the two to
the same answers.

Format (JSON, written sorted with a trailing newline)::

    {
      "format_version": 1,
      "default_mode": "enabled",          # or "disabled", or null
      "gpus": {
        "GPU-8c0e...": {"mode": "disabled", "pci_bus_id": "00000000:41:00.0"}
      }
    }

* Entries are keyed by GPU UUID, which stays the same when a card moves slot;
  ``pci_bus_id`` is where the card was last seen (informative, for people).
* ``default_mode`` applies to GPUs without an entry (a card added later);
  null leaves them at the daemon's start-up default (``--persistence-mode``).
* The file lives in a directory owned by the daemon's service user so the
  bundled daemon, which drops root, can rewrite it after each set. Writers
  take an exclusive ``flock`` on ``<file>.lock`` for read-modify-write and
  replace the file atomically (temp file in the same directory, fsync, rename).

Security (docs/security.md): root (the modules) reads and writes here, in a
directory the service user can write. Every access therefore goes through a
descriptor of the directory opened with O_NOFOLLOW, and every file in it is
opened with O_NOFOLLOW (and O_NONBLOCK, so a planted FIFO cannot hang us),
checked with fstat (a regular file, one link, owned by root or the directory's
owner), created with O_EXCL, and chmod/chown'ed through its descriptor. The
directory itself is accepted only when it is dedicated (``inspect_dir``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fcntl
import json
import os
import stat
import time

from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files as host_files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu.state_dir import (
    DEFAULT_PATH, StateError, _open_flags, _owner_name, open_dir)


FORMAT_VERSION = 1


# The words the state file uses for a mode: a vocabulary, not an order (NVML's and the RPC's
# numbers for them are gpu.backends.WIRE_MODES).
MODES = ('enabled', 'disabled')


# A real state file holds ~100 bytes per GPU; 1 MiB is ten thousand GPUs. Anything bigger is not ours.
MAX_BYTES = 1024 * 1024


# The lock is held for one read-modify-write (milliseconds); a holder past this is stuck or hostile.
LOCK_TIMEOUT = 10.0


def empty_state():
    return {'format_version': FORMAT_VERSION, 'default_mode': None, 'gpus': {}}


# --------------------------------------------------------------------------
# The format
# --------------------------------------------------------------------------

def parse(text, path=DEFAULT_PATH):
    """Parse and validate state file text; an empty text is an empty state."""
    if not text.strip():
        return empty_state()
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise StateError('%s is not valid JSON (%s); fix or remove it' % (path, exc))
    except RecursionError:
        raise StateError('%s is nested too deeply to be a state file; fix or remove it' % path)
    if not isinstance(data, dict):
        raise StateError('%s must hold a JSON object, not %s' % (path, type(data).__name__))
    version = data.get('format_version')
    # bool is an int in Python (True == 1): the version must be the number itself
    if isinstance(version, bool) or version != FORMAT_VERSION:
        raise StateError('%s has format_version %r; this version of gpufleet.nvidia reads only %d'
                         % (path, version, FORMAT_VERSION))
    default = data.get('default_mode')
    if default is not None and default not in MODES:
        raise StateError('%s: default_mode must be "enabled", "disabled" or null, not %r' % (path, default))
    gpus = data.get('gpus', {})
    if not isinstance(gpus, dict):
        raise StateError('%s: "gpus" must be an object keyed by GPU UUID' % path)
    clean = {}
    for uuid, entry in gpus.items():
        if not isinstance(entry, dict) or entry.get('mode') not in MODES:
            raise StateError('%s: GPU %s needs "mode": "enabled" or "disabled"' % (path, uuid))
        bus_id = entry.get('pci_bus_id')
        if bus_id is not None and not isinstance(bus_id, str):
            raise StateError('%s: GPU %s has a "pci_bus_id" that is not a string' % (path, uuid))
        clean[uuid] = {'mode': entry['mode'], 'pci_bus_id': bus_id}
    return {'format_version': FORMAT_VERSION, 'default_mode': default, 'gpus': clean}


def serialize(state):
    return json.dumps(state, indent=2, sort_keys=True) + '\n'


def mode_for(state, uuid):
    """Desired mode of one GPU: its own entry, else the default, else None."""
    entry = state['gpus'].get(uuid)
    if entry is not None:
        return entry['mode']
    return state['default_mode']


def with_modes(state, gpus, default_mode=False):
    """Return a new state with ``gpus`` ({uuid: (pci_bus_id, mode)}) recorded.

    ``default_mode`` False leaves the default as it is; None clears it.
    """
    new = {'format_version': FORMAT_VERSION, 'default_mode': state['default_mode'],
           'gpus': dict((k, dict(v)) for k, v in state['gpus'].items())}
    for uuid, (bus_id, mode) in gpus.items():
        if mode not in MODES:
            raise StateError('mode for GPU %s must be "enabled" or "disabled", not %r' % (uuid, mode))
        new['gpus'][uuid] = {'mode': mode, 'pci_bus_id': bus_id}
    if default_mode is not False:
        new['default_mode'] = default_mode
    return new


def _check_file(fd, path, dir_uid, what):
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise StateError('%s is not a regular file; remove it (the %s is recreated)' % (path, what))
    if st.st_nlink != 1:
        raise StateError('%s has %d hard links; a %s has one: remove it' % (path, st.st_nlink, what))
    if st.st_uid not in (0, dir_uid):
        raise StateError('%s is owned by %s, neither root nor its directory\'s owner: remove it'
                         % (path, _owner_name(st.st_uid)))
    return st


def _read_at(dfd, name, path, dir_uid):
    """The state file's bytes, or None when it does not exist."""
    try:
        fd = os.open(name, _open_flags(), dir_fd=dfd)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        if exc.errno == errno.ELOOP:
            raise StateError('%s is a symbolic link; the state file must be a regular file: remove the link'
                             % path)
        raise StateError('cannot read %s: %s' % (path, exc.strerror))
    try:
        st = _check_file(fd, path, dir_uid, 'state file')
        if st.st_size > MAX_BYTES:
            raise StateError('%s is %d bytes, more than a state file can be (%d): fix or remove it'
                             % (path, st.st_size, MAX_BYTES))
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_BYTES:
                raise StateError('%s grew past %d bytes while being read: fix or remove it' % (path, MAX_BYTES))
            chunks.append(chunk)
        return b''.join(chunks)
    except OSError as exc:
        raise StateError('cannot read %s: %s' % (path, exc.strerror))
    finally:
        os.close(fd)


def _decode(raw, path):
    if raw is None:
        return empty_state()
    try:
        text = raw.decode('utf-8')
    except UnicodeDecodeError as exc:
        raise StateError('%s is not UTF-8 text (%s); fix or remove it' % (path, exc))
    return parse(text, path)


def load(path=DEFAULT_PATH):
    """Read the state file; a missing file (or directory) is an empty state."""
    directory, name = os.path.split(path)
    try:
        dfd = os.open(directory or '.', os.O_RDONLY | os.O_DIRECTORY | getattr(os, 'O_CLOEXEC', 0))
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return empty_state()
        raise StateError('cannot read %s: its directory %s: %s' % (path, directory, exc.strerror))
    try:
        dir_uid = os.fstat(dfd).st_uid
        return _decode(_read_at(dfd, name, path, dir_uid), path)
    finally:
        os.close(dfd)


def _lock(dfd, name, path, owner, timeout):
    """An exclusive flock on ``<file>.lock``, opened without following links."""
    lock_path = path + '.lock'
    for _attempt in range(10):
        try:
            fd = os.open(name, _open_flags(), dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise StateError('the lock file %s is a symbolic link: remove it' % lock_path)
            if exc.errno != errno.ENOENT:
                raise StateError('cannot open the lock file %s: %s' % (lock_path, exc.strerror))
            try:
                fd = host_files.create_new_at(dfd, name, 0o600, os.O_RDONLY)
            except OSError as exc2:
                if exc2.errno == errno.EEXIST:
                    continue
                raise StateError('cannot create the lock file %s: %s' % (lock_path, exc2.strerror))
            if owner is not None:
                try:
                    os.fchown(fd, owner[0], owner[1])
                except OSError as exc2:
                    os.close(fd)
                    raise StateError('cannot chown the lock file %s: %s' % (lock_path, exc2.strerror))
        break
    else:
        raise StateError('the lock file %s keeps changing under us; run again' % lock_path)
    try:
        _check_file(fd, lock_path, owner[0] if owner else os.fstat(dfd).st_uid, 'lock file')
        # Any user who can open the lock file can hold a shared flock on it and stall
        # every writer: only its owner (and root) may open it.
        if stat.S_IMODE(os.fstat(fd).st_mode) & 0o077:
            os.fchmod(fd, 0o600)
        deadline = time.time() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except (IOError, OSError) as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise StateError('cannot lock %s: %s' % (lock_path, exc.strerror))
            if time.time() > deadline:
                raise StateError('%s stayed locked by another process for %ss; is a writer stuck?'
                                 % (lock_path, timeout))
            time.sleep(0.02)
    except Exception:
        os.close(fd)
        raise


def update(path, change, owner=None, timeout=LOCK_TIMEOUT):
    """Locked read-modify-write. ``change(state) -> new_state``.

    Returns ``(before, after)``; the file is only rewritten when they differ.
    ``owner`` (uid, gid) owns a newly written file and lock; by default the directory's owner, so the
    service user (who owns the directory) keeps owning what is in it.
    """
    directory, name = os.path.split(path)
    dfd = open_dir(directory or '.')
    try:
        if owner is None:
            st = os.fstat(dfd)
            owner = (st.st_uid, st.st_gid)
        lock_fd = _lock(dfd, name + '.lock', path, owner, timeout)
        try:
            before = _decode(_read_at(dfd, name, path, owner[0]), path)
            after = change(before)
            if after != before:
                try:
                    # a failure leaves the old file as it was and no temp file
                    host_files.write_at(dfd, name, serialize(after).encode('utf-8'), 0o644, owner=owner)
                except OSError as exc:
                    raise StateError('cannot write %s: %s; the file was left as it was' % (path, exc.strerror or exc))
            return before, after
        finally:
            os.close(lock_fd)
    finally:
        os.close(dfd)
