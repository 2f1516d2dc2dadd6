# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host's audit trail: one JSON line per change a concern module made, in a root-only log.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time.

* ``record`` (pure) makes the line's fields from a concern run's result: when, which run (the controller's run id),
  who asked (``SUDO_USER`` under ``become``), the concern and module, its actions and the changes it names, each
  diffed file's SHA-256 before and after, whether a service was started, stopped, restarted or reloaded, and the
  disruption policy that allowed it.
* ``append`` writes lines to the log (``/var/log/gpufleet/audit.jsonl`` by default): its directory resolved out of
  other users' reach (``host.paths``), missing directories made root-only (0700), the directory opened once (O_NOFOLLOW)
  and locked with ``flock`` on that descriptor (nobody but root can open a root-only directory, so nobody else can
  hold the lock), the file opened in it with O_APPEND|O_NOFOLLOW (never through a link), checked to be a regular
  root file with one link, kept 0600 (set on the descriptor); when a line would take it past ``max_bytes`` it is
  renamed to ``.1`` (``.1`` to ``.2``, ..., ``keep`` kept) within that directory first.
* ``locked_directory`` and ``open_private`` are that directory and that file for any root-only file of ours (``Place``
  names it in messages): the rollback store (``host.rollback``) is written with the same guarantees.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import stat
import time

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import HostFileError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.options import AUDIT_LOG
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host.paths import (
    CLOEXEC, NOFOLLOW, NONBLOCK, refuse, resolve_path)

DEFAULT_PATH = AUDIT_LOG
MAX_BYTES = 8 << 20
KEEP = 4
FORMAT = 1
# The verbs of a service action among a result's actions (``restart``, ``reload_init``, ``start_service``, ...).
SERVICE_WORDS = ('start', 'stop', 'restart', 'reload')
# The policy of a module without a disruption option (nothing it does disrupts GPU work): its changes are made.
POLICY = 'force'
READER = 'the audit trail'


def sha256(text):
    """The SHA-256 of a diff side (None for a side that is absent)."""
    if text is None:
        return None
    if not isinstance(text, bytes):
        text = text.encode('utf-8', 'surrogateescape')
    return hashlib.sha256(text).hexdigest()


def _diffs(result):
    diff = result.get('diff')
    if isinstance(diff, dict):
        return [diff]
    return [entry for entry in diff if isinstance(entry, dict)] if isinstance(diff, list) else []


def _actions(result):
    actions = result.get('actions')
    if isinstance(actions, list):
        return [str(action) for action in actions]
    action = result.get('action')
    return [str(action)] if isinstance(action, str) and action not in ('none', '') else []


def record(concern, module_name, result, run_id=None, now=None, host=None, by=None, policy=None):
    """The audit line (a dict) of a concern run's ``result``; ``now``: seconds since the epoch."""
    now = time.time() if now is None else now
    actions = _actions(result)
    changes = result.get('changes')
    entry = {
        'format': FORMAT,
        'time': time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(now)) + '.%06dZ' % int((now % 1) * 1e6),
        'run_id': run_id,
        'host': host if host is not None else os.uname()[1],
        'by': by,
        'concern': concern,
        'module': 'gpufleet.nvidia.%s' % module_name,
        'actions': actions,
        'changes': [str(change) for change in changes] if isinstance(changes, list) else [],
        'files': [{'path': str(diff.get('after_header') or diff.get('before_header') or ''),
                   'sha256_before': sha256(diff.get('before')), 'sha256_after': sha256(diff.get('after'))}
                  for diff in _diffs(result) if diff.get('before') != diff.get('after')],
        'service_actions': [action for action in actions
                            if any(word in action.split('_') for word in SERVICE_WORDS)],
        'policy': policy or POLICY,
    }
    # a Slurm node's drain or resume: the node's state and reason after it, and the health verdict it went by
    slurm = result.get('state') if concern == 'slurm_node' else None
    if isinstance(slurm, dict):
        entry['slurm'] = {'state': slurm.get('state'), 'reason': slurm.get('reason')}
    if result.get('verdict') is not None:
        entry['verdict'] = result.get('verdict')
    return entry


def line(entry):
    """One JSON line (keys sorted, no spaces)."""
    return json.dumps(entry, sort_keys=True, separators=(',', ':')) + '\n'


class Place(object):
    """A root-only file of ours in a directory of ours, for the messages: ``what`` it is (``the audit log``), who
    would be controlled through it (``reader``), what a refusal leaves (``outcome``), and the mode bits its directory
    may not have (``closed``: nobody else may write it; 0o077: nobody else may even look in)."""

    def __init__(self, what, reader, outcome, closed=0o022):
        self.what = what
        self.reader = reader
        self.outcome = outcome
        self.closed = closed


LOG = Place('the audit log', READER, 'Nothing was logged.')


def _check_directory(path, directory, st, place=LOG):
    if not stat.S_ISDIR(st.st_mode):
        raise HostFileError('%s: %s is not a directory. %s' % (path, directory, place.outcome))
    if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & place.closed:
        refuse(path, 'the directory %s' % directory,
               'is owned by uid %d with mode %04o' % (st.st_uid, stat.S_IMODE(st.st_mode)),
               'Make it owned by root and %s (chmod 0700 %s).'
               % ('writable only by root' if place.closed == 0o022 else 'open to root alone', directory),
               place.reader)


@contextlib.contextmanager
def locked_directory(path, place=LOG):
    """``(descriptor of path's directory, path's name)``, with the directory locked (``flock``, exclusive).

    The directories on the way resolved out of other users' reach (a link of root's among them is followed), missing
    ones made root-only (0700), the directory opened once (O_NOFOLLOW) and checked on its descriptor (ours, mode
    without ``place.closed``); nobody but root can open a root-only directory, so nobody else can hold its lock.
    ``path``'s own name is for ``open_private``, never followed."""
    if not path.startswith('/') or path.endswith('/'):
        raise HostFileError('%s: %s must be an absolute file path. %s' % (path, place.what, place.outcome))
    directory, name = os.path.split(path)
    directory = resolve_path(directory, reader=place.reader, file_directory=False)
    files.ensure_directory(os.path.join(directory, name), mode=0o700)
    try:
        dfd = files.open_directory(directory)
    except OSError as exc:
        raise HostFileError('%s: cannot open its directory %s (%s). %s' % (path, directory, exc.strerror, place.outcome))
    try:
        try:
            _check_directory(path, directory, os.fstat(dfd), place)
            fcntl.flock(dfd, fcntl.LOCK_EX)
        except OSError as exc:
            raise HostFileError('%s: cannot lock its directory %s (%s). %s'
                                % (path, directory, exc.strerror, place.outcome))
        yield dfd, name
    finally:
        os.close(dfd)


def open_private(dfd, path, name, place=LOG, flags=os.O_WRONLY | os.O_APPEND | os.O_CREAT):
    """``(descriptor, size)`` of ``name`` in the directory ``dfd``, opened with ``flags``: never through a link, only a
    regular file of ours with one link, kept 0600 (set on the descriptor). Without O_CREAT, a missing file is
    ``(None, 0)``."""
    try:
        fd = os.open(name, flags | NOFOLLOW | CLOEXEC | NONBLOCK, 0o600, dir_fd=dfd)
    except OSError as exc:
        if exc.errno == errno.ENOENT and not flags & os.O_CREAT:
            return None, 0
        raise HostFileError('%s: cannot open %s (%s); a link or anything but a regular file in its place '
                            'is never followed. %s' % (path, place.what, exc.strerror, place.outcome))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
            raise HostFileError('%s: %s is not a regular file of root\'s with one link (uid %d, %d links); '
                                'move it away. %s' % (path, place.what, st.st_uid, st.st_nlink, place.outcome))
        if stat.S_IMODE(st.st_mode) != 0o600:
            os.fchmod(fd, 0o600)
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def _rotate(dfd, name, keep):
    """``name`` -> ``name.1`` -> ... -> ``name.<keep>`` (the oldest dropped), renames within the directory."""
    for index in range(keep - 1, 0, -1):
        try:
            os.rename('%s.%d' % (name, index), '%s.%d' % (name, index + 1), src_dir_fd=dfd, dst_dir_fd=dfd)
        except OSError:
            pass
    os.rename(name, '%s.1' % name, src_dir_fd=dfd, dst_dir_fd=dfd)


def append(entries, path=DEFAULT_PATH, max_bytes=MAX_BYTES, keep=KEEP):
    """Append one line per entry to the log at ``path``; raises HostFileError naming it when it cannot."""
    data = ''.join(line(entry) for entry in entries).encode('utf-8')
    if not data:
        return
    with locked_directory(path) as (dfd, name):
        try:
            fd, size = open_private(dfd, path, name)
            try:
                if size and size + len(data) > max_bytes:
                    os.close(fd)
                    fd = None
                    _rotate(dfd, name, keep)
                    fd, size = open_private(dfd, path, name)
                files.write_all(fd, data)
                os.fsync(fd)
            finally:
                if fd is not None:
                    os.close(fd)
        except OSError as exc:
            raise HostFileError('%s: cannot write the audit log: %s. Nothing was logged.' % (path, exc.strerror))
