# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The per-GPU persistence state file: one format, one reader/writer.

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
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fcntl
import json
import os
import tempfile

DEFAULT_PATH = '/var/lib/gpufleet/persistence.json'
FORMAT_VERSION = 1
MODES = ('enabled', 'disabled')


class StateError(Exception):
    """The state file is unreadable, malformed, or of a newer format."""


def empty_state():
    return {'format_version': FORMAT_VERSION, 'default_mode': None, 'gpus': {}}


def parse(text, path=DEFAULT_PATH):
    """Parse and validate state file text; an empty text is an empty state."""
    if not text.strip():
        return empty_state()
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise StateError('%s is not valid JSON (%s); fix or remove it' % (path, exc))
    if not isinstance(data, dict):
        raise StateError('%s must hold a JSON object, not %s' % (path, type(data).__name__))
    version = data.get('format_version')
    if version != FORMAT_VERSION:
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
        clean[uuid] = {'mode': entry['mode'], 'pci_bus_id': entry.get('pci_bus_id')}
    return {'format_version': FORMAT_VERSION, 'default_mode': default, 'gpus': clean}


def serialize(state):
    return json.dumps(state, indent=2, sort_keys=True) + '\n'


def load(path=DEFAULT_PATH):
    """Read the state file; a missing file is an empty state."""
    try:
        with open(path, 'rb') as handle:
            raw = handle.read()
    except IOError as exc:
        if exc.errno == errno.ENOENT:
            return empty_state()
        raise StateError('cannot read %s: %s' % (path, exc.strerror))
    try:
        text = raw.decode('utf-8')
    except UnicodeDecodeError as exc:
        raise StateError('%s is not UTF-8 text (%s); fix or remove it' % (path, exc))
    return parse(text, path)


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


def _write_atomic(path, text, owner=None):
    directory = os.path.dirname(path) or '.'
    fd, tmp = tempfile.mkstemp(prefix='.persistence.', suffix='.tmp', dir=directory)
    try:
        with os.fdopen(fd, 'w') as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        if owner is not None:
            os.chown(tmp, owner[0], owner[1])
        os.rename(tmp, path)
    except Exception:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def update(path, change, owner=None):
    """Locked read-modify-write. ``change(state) -> new_state``.

    Returns ``(before, after)``; the file is only rewritten when they differ.
    ``owner`` (uid, gid) sets the ownership of a newly written file.
    """
    # Read-only is enough for flock, so root- and user-created lock files both work.
    lock_fd = os.open(path + '.lock', os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        before = load(path)
        after = change(before)
        if after != before:
            _write_atomic(path, serialize(after), owner)
        return before, after
    finally:
        os.close(lock_fd)
