# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the installed and the running containerd are: version, dump, plugins, its process and log.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. ``Tools`` asks the installed binary (``containerd --version``,
``config dump``, ``ctr plugins ls``); ``KeptAnswers`` answers the first two
from node_state's memo where the binary, the file's bytes and the boot are
unchanged; ``find_pid`` names the running containerd that reads this file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import hashlib
import os
import re

from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import config as cd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import procs
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import memo as host_memo
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import DocumentError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.run import RunState
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import systems


def _file_bytes(path):
    """The file's bytes (None when there is no path or it cannot be read: then nothing is remembered)."""
    if path is None:
        return None
    try:
        with open(path, 'rb') as handle:
            return handle.read(cd.MAX_CONFIG_BYTES + 1)
    except (IOError, OSError):
        return None


def _imports_nothing(data):
    """Whether the config file ``data`` (bytes) is valid TOML without an ``imports`` key: then its dump depends on
    containerd and these bytes alone (containerd reads no other file unless one is imported)."""
    try:
        values = cd.loads(data.decode('utf-8'), 'config')
    except (DocumentError, UnicodeDecodeError):
        return False
    return not values.get('imports')


# A kept ``containerd --version`` answer is one short line; a longer text is not one.
MAX_KEPT_VERSION = 4096


def _kept_version(answer):
    """A kept ``--version`` answer (``host.memo``) that names a version, else None."""
    if not isinstance(answer, str) or len(answer) > MAX_KEPT_VERSION:
        return None
    try:
        return answer if cd.binary_version(answer) is not None else None
    except ValueError:  # more digits than int() takes
        return None


def _kept_dump(entry):
    """Whether a kept dump (``host.memo``) has the shape ``keep_dump`` writes: its text and inputs, strings or None."""
    return isinstance(entry, dict) and isinstance(entry.get('out'), str) \
        and all(isinstance(value, str) or value is None for value in entry.values())


class KeptAnswers(object):
    """containerd's answers kept from earlier node_state runs (``host.memo``): its ``--version``, and per config file its
    ``config dump`` with the file's SHA-256 and the boot it was asked in.

    An answer is used only for the same executable (path, device, inode, size, modification and change times: a
    new package's binary is a new inode, and no user can set a change time back), and a dump only for the same
    file bytes, in the same boot, of a file that imports nothing (a file with ``imports`` is dumped every time).
    An answer is kept only when the executable and the file were the same before and after it was asked."""

    def __init__(self, binary, store=False):
        self.binary = binary
        self.store = store  # keep new answers (node_state, out of a check-mode play)
        self.name = 'containerd-%s.json' % hashlib.sha256(binary.encode('utf-8', 'surrogateescape')).hexdigest()[:24]
        self.identity = host_memo.identity(binary)
        kept = host_memo.load(self.name) if self.identity is not None else None
        if not kept or kept.get('binary') != binary or kept.get('identity') != self.identity \
                or not isinstance(kept.get('dumps'), dict):
            kept = {'dumps': {}}
        # Only what has the shape this class writes is used (and written back): any other value is dropped.
        self.kept = {'binary': binary, 'identity': self.identity, 'version': _kept_version(kept.get('version')),
                     'dumps': dict((path, entry) for path, entry in kept['dumps'].items() if _kept_dump(entry))}

    def version(self):
        return self.kept['version']

    def keep_version(self, answer):
        self.kept['version'] = answer
        self._store()

    @staticmethod
    def dump_inputs(path, data):
        """What a dump of ``path`` (None: ``config default``) holding ``data`` depends on, or None where it cannot
        be kept."""
        if path is not None and (data is None or len(data) > cd.MAX_CONFIG_BYTES or not _imports_nothing(data)):
            return None
        boot = host_memo.boot_id()
        if boot is None:
            return None
        return {'sha256': hashlib.sha256(data).hexdigest() if path is not None else None, 'boot_id': boot}

    def dump(self, path, inputs):
        entry = self.kept['dumps'].get(path or '')
        if not isinstance(entry, dict) or not isinstance(entry.get('out'), str):
            return None
        return entry['out'] if all(entry.get(key) == value for key, value in inputs.items()) else None

    def keep_dump(self, path, inputs, answer):
        entry = dict(inputs, out=answer)
        self.kept['dumps'][path or ''] = entry
        self._store()

    def _store(self):
        if self.store and self.identity is not None and host_memo.identity(self.binary) == self.identity:
            host_memo.store(self.name, self.kept)


class Tools(object):
    """The installed containerd and ctr, through ``run(argv) -> (rc, out, err)``. ``state``: the run's
    ``common.run.RunState``; with its ``dumps`` (node_state, which writes nothing, so no file, an imported one
    included, changes under it) each file's dump is asked once per run, and containerd's answers of earlier runs whose
    inputs are unchanged are used (``KeptAnswers``), new ones kept where ``state.store``."""

    def __init__(self, run, containerd='containerd', ctr='ctr', state=None):
        self.run = run
        self.state = state if state is not None else RunState()
        self.containerd = containerd
        self.ctr = ctr
        self._kept = None

    def kept(self):
        """The answers kept from earlier runs (``KeptAnswers``), in node_state for an absolute containerd; else
        None."""
        if self.state.dumps is None or not os.path.isabs(self.containerd):
            return None
        if self._kept is None:
            self._kept = KeptAnswers(self.containerd, store=self.state.store)
        return self._kept

    def version(self):
        """containerd's version, asked once per run (in node_state, kept across runs: ``KeptAnswers``)."""
        if not hasattr(self, '_version'):
            kept = self.kept()
            out = kept.version() if kept else None
            if out is None or cd.binary_version(out) is None:
                rc, out, err = self.run([self.containerd, '--version'])
                if rc != 0:
                    out = None
                elif kept:
                    kept.keep_version(out)
            self._version = cd.binary_version(out) if out is not None else None
        return self._version

    def dump(self, path):
        """``(values, None)`` of ``containerd --config PATH config dump``, or ``(None, containerd's error)``.

        In node_state (``state.dumps``), asked once per containerd, path and file text: the engines' CRI check
        for ``auto`` and the containerd concern read the same dump, a containerd start (about 50 ms) each; and
        kept across runs where its inputs are unchanged (``KeptAnswers``).
        """
        argv = [self.containerd, 'config', 'default'] if path is None else \
            [self.containerd, '--config', path, 'config', 'dump']
        dumps = self.state.dumps
        data = _file_bytes(path) if dumps is not None else None
        key = (self.containerd, path, data)
        if key[2] is not None and key in dumps:
            return copy.deepcopy(dumps[key])
        kept = self.kept()
        inputs = kept.dump_inputs(path, data) if kept else None
        answer = None
        out = kept.dump(path, inputs) if inputs else None
        if out is not None:
            try:
                answer = cd.loads_dump(out, '`%s`' % ' '.join(argv)), None
            except DocumentError:  # not what containerd wrote: asked again
                answer = None
        if answer is None:
            rc, out, err = self.run(argv)
            if rc != 0:
                return None, (err or out or 'exit status %s' % rc).strip()
            answer = cd.loads_dump(out, '`%s`' % ' '.join(argv)), None
            if inputs and _file_bytes(path) == data:
                kept.keep_dump(path, inputs, out)
        if key[2] is not None:
            dumps[key] = copy.deepcopy(answer)
        return answer

    def dump_text(self, text):
        """``(values, None)`` of ``containerd --config /dev/stdin config dump`` with ``text`` on its standard input,
        or ``(None, containerd's error)``: the effective configuration of a text that is written nowhere."""
        argv = [self.containerd, '--config', '/dev/stdin', 'config', 'dump']
        rc, out, err = self.run(argv, data=text)
        if rc != 0:
            return None, (err or out or 'exit status %s' % rc).strip()
        return cd.loads_dump(out, '`%s`' % ' '.join(argv)), None

    def plugins(self, address):
        """``{plugin id: status}`` from ``ctr plugins ls``, or None when containerd does not answer."""
        rc, out, err = self.run([self.ctr, '--address', address, '--timeout', '5s', 'plugins', 'ls'])
        if rc != 0:
            return None
        found = {}
        for line in out.splitlines()[1:]:
            fields = line.split()
            if len(fields) >= 4:
                found[fields[1]] = fields[-1]
        return found


def find_pid(config_path, pids, default_path=cd.DEFAULT_PATH):
    """Of the containerd service's processes ``pids`` (``init.service.Service.processes``), the one that reads
    ``config_path`` (``--config``/``-c``, else the default path), or None."""
    wanted = os.path.realpath(config_path)
    for pid in pids:
        argv = procs.process_argv(pid)
        config = default_path
        for index, arg in enumerate(argv[1:], 1):
            if arg in ('--config', '-c') and index + 1 < len(argv):
                config = argv[index + 1]
            elif arg.startswith('--config='):
                config = arg.split('=', 1)[1]
        if argv[1:2] and argv[1] in ('config',):
            continue
        if os.path.realpath(config) == wanted:
            return pid
    return None


def log_files(service):
    """Where a SysV script or an Upstart job of ``service`` logs (systemd: the journal)."""
    return systems.log_files(service)


def containerd_error(log):
    """containerd's own words from its log: a failed CRI plugin, or the last error/fatal line.

    1.x names the plugin in the message (``msg="failed to load plugin io.containerd.grpc.v1.cri" error=...``); 2.x
    in a field (``msg="failed to load plugin" error=... id=io.containerd.cri.v1.runtime``), where the root cause is
    the first CRI line (the runtime plugin's) and the gRPC service's repeats it behind "unable to load CRI runtime
    service plugin dependency" (measured on 2.1.9)."""
    found = None
    for line in (log or '').splitlines():
        if 'failed to load plugin io.containerd.grpc.v1.cri' in line or 'failed to load plugin io.containerd.cri' in line \
                or (found is None and 'msg="failed to load plugin"' in line
                    and re.search(r' id=io\.containerd\.(cri\.v1\.\w+|grpc\.v1\.cri)\b', line)):
            match = re.search(r'error="((?:[^"\\]|\\.)*)"', line)
            found = 'CRI plugin: ' + (match.group(1).replace('\\"', '"') if match else line)
        elif found is None and ('level=fatal' in line or 'containerd: ' in line):
            found = line.strip()
    return found


def _names(directory):
    try:
        return os.listdir(directory)
    except OSError:
        return []
