# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The containerd_runtime operation: config.toml, then the running containerd, verified, rolled back on failure.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It holds no AnsibleModule so that pytest can drive it directly.

``Converge.run`` reads the file once, asks the installed containerd for its
version and the effective configuration (``containerd config dump``), plans
the new text (``_containerd``), dumps the new text given on containerd's
standard input (no file is written for it, in check mode or not) and
refuses it unless the effective configuration differs only by what was
asked, decides, writes once, then ``Applier`` restarts containerd (it has
no reload), checks that it came back with the CRI plugin loaded, and on
failure restores the file, restarts containerd with it and fails with
containerd's own error. Every file containerd imports, and every directory
its ``imports`` patterns can match, must be out of other users' reach.

What the running containerd started with: a process that started after the
last change (ctime, which no user can set back) of every file it loads runs
what those files say now; one that started before may run something older.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import copy
import hashlib
import os
import re
import time

from ansible_collections.gpufleet.nvidia.plugins.module_utils import _cdi_dirs
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _containerd as cd
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _host
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _memo
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _verify
from ansible_collections.gpufleet.nvidia.plugins.module_utils._errors import DocumentError, GpufleetError, ServiceError
from ansible_collections.gpufleet.nvidia.plugins.module_utils._options import Options
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _init_files
from ansible_collections.gpufleet.nvidia.plugins.module_utils._service import found_by

CRI_PLUGIN = 'cri'
DEFAULT_ADDRESS = '/run/containerd/containerd.sock'


# containerd_runtime's argument spec: each option's one declaration (the module, node_state and Request read it).
SPEC = dict(
    path=dict(type='path', default=cd.DEFAULT_PATH),
    name=dict(type='str', default='nvidia'),
    runtime_path=dict(type='str', default='/usr/bin/nvidia-container-runtime'),
    default_runtime=dict(type='bool'),
    cdi=dict(type='bool'),
    cdi_spec_dirs=dict(type='list', elements='str', default=list(_cdi_dirs.DEFAULT_DIRS)),
    take_over=dict(type='bool', default=False),
    state=dict(type='str', default='present', choices=['present', 'absent']),
    backup=dict(type='bool', default=False),
    apply=dict(type='str', default='auto', choices=['auto', 'restart', 'none']),
    service_name=dict(type='str', default='containerd'),
    apply_timeout=dict(type='int', default=60),
    **_verify.SPEC
)


class Request(Options):
    """What the user asked for: these options of the module (``SPEC``), ``apply_timeout`` as ``timeout``."""

    SPEC = SPEC
    OPTIONS = ('path', 'name', 'runtime_path', 'default_runtime', 'cdi', 'cdi_spec_dirs', 'state', 'apply',
               'apply_timeout', 'take_over')
    NAMES = {'apply_timeout': 'timeout'}


# (containerd, path, the file's bytes) -> dump answer (Tools.dump), once remember_dumps() was called in this
# process: only node_state, which writes nothing, so no file (an imported one included) changes under it. There,
# containerd's answers of earlier runs whose inputs are unchanged are used too (_memo, KeptAnswers), and new ones
# kept (STORE) unless the play is in check mode.
DUMPS = None
STORE = False


def remember_dumps(store=True):
    """Ask containerd for each file's dump once in this (read-only) process, use the answers of earlier runs whose
    inputs are unchanged (``KeptAnswers``), and (``store``) keep new ones for later runs."""
    global DUMPS, STORE
    DUMPS = {}
    STORE = store


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
    """A kept ``--version`` answer (``_memo``) that names a version, else None."""
    if not isinstance(answer, str) or len(answer) > MAX_KEPT_VERSION:
        return None
    try:
        return answer if cd.binary_version(answer) is not None else None
    except ValueError:  # more digits than int() takes
        return None


def _kept_dump(entry):
    """Whether a kept dump (``_memo``) has the shape ``keep_dump`` writes: its text and inputs, strings or None."""
    return isinstance(entry, dict) and isinstance(entry.get('out'), str) \
        and all(isinstance(value, str) or value is None for value in entry.values())


class KeptAnswers(object):
    """containerd's answers kept from earlier node_state runs (``_memo``): its ``--version``, and per config file its
    ``config dump`` with the file's SHA-256 and the boot it was asked in.

    An answer is used only for the same executable (path, device, inode, size, modification and change times: a
    new package's binary is a new inode, and no user can set a change time back), and a dump only for the same
    file bytes, in the same boot, of a file that imports nothing (a file with ``imports`` is dumped every time).
    An answer is kept only when the executable and the file were the same before and after it was asked."""

    def __init__(self, binary):
        self.binary = binary
        self.name = 'containerd-%s.json' % hashlib.sha256(binary.encode('utf-8', 'surrogateescape')).hexdigest()[:24]
        self.identity = _memo.identity(binary)
        kept = _memo.load(self.name) if self.identity is not None else None
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
        boot = _memo.boot_id()
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
        if STORE and self.identity is not None and _memo.identity(self.binary) == self.identity:
            _memo.store(self.name, self.kept)


class Tools(object):
    """The installed containerd and ctr, through ``run(argv) -> (rc, out, err)``."""

    def __init__(self, run, containerd='containerd', ctr='ctr'):
        self.run = run
        self.containerd = containerd
        self.ctr = ctr
        self._kept = None

    def kept(self):
        """The answers kept from earlier runs (``KeptAnswers``), in node_state for an absolute containerd; else
        None."""
        if DUMPS is None or not os.path.isabs(self.containerd):
            return None
        if self._kept is None:
            self._kept = KeptAnswers(self.containerd)
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

        In node_state (``remember_dumps``), asked once per containerd, path and file text: the engines' CRI check
        for ``auto`` and the containerd concern read the same dump, a containerd start (about 50 ms) each; and
        kept across runs where its inputs are unchanged (``KeptAnswers``).
        """
        argv = [self.containerd, 'config', 'default'] if path is None else \
            [self.containerd, '--config', path, 'config', 'dump']
        data = _file_bytes(path) if DUMPS is not None else None
        key = (self.containerd, path, data)
        if key[2] is not None and key in DUMPS:
            return copy.deepcopy(DUMPS[key])
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
            DUMPS[key] = copy.deepcopy(answer)
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
    """Of the containerd service's processes ``pids`` (``_service.Service.processes``), the one that reads
    ``config_path`` (``--config``/``-c``, else the default path), or None."""
    wanted = os.path.realpath(config_path)
    for pid in pids:
        argv = _host.process_argv(pid)
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
    return _init_files.log_files(service)


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


class Result(dict):
    def __init__(self, path):
        dict.__init__(self, changed=False, path=path, backup_file=None, action='none', file_changed=False,
                      schema=None, containerd_version=None, containerd_pid_before=None, containerd_pid_after=None,
                      containerd_found_by=None,
                      runtimes=None, default_runtime=None, cdi=None, changes=[], msg='', before='', after='', warnings=[])


class Converge(object):
    """One containerd_runtime run."""

    def __init__(self, request, service, tools, backup=None, label=None, poll=0.2):
        self.request = request
        self.service = service
        self.tools = tools
        self.backup = backup
        self.label = label
        self.poll = poll
        self.result = Result(request.path)
        self.warnings = self.result['warnings'] = []
        self.address = DEFAULT_ADDRESS  # containerd's gRPC address, as its effective configuration says (run)

    def run(self, check_mode=False):
        request, result = self.request, self.result
        real = _host.resolve_path(request.path, reader='containerd')
        version = self.tools.version()
        result['containerd_version'] = '.'.join(str(part) for part in version) if version else None
        dschema = cd.dump_schema(version)
        if not check_mode and request.state == 'present' and _host.ensure_directory(real):
            result['changed'] = True
        with _host.directory_lock(real, check_mode=check_mode):
            current = _host.read_file(request.path, real, cd.MAX_CONFIG_BYTES, reader='containerd')
            text = current.text if current.exists else ''
            config = cd.Config(text, request.path)
            schema = cd.choose_schema(version, config.version, request.path) if current.exists else dschema
            result['schema'] = schema.version
            before, error = self.tools.dump(real if current.exists else None)
            if before is None:
                raise DocumentError('%s: containerd already refuses this file, nothing was changed: %s'
                                    % (request.path, error))
            imports = self.imported_files(real, config, before, version)
            defined_in = self.check_imports(real, config, imports, version)
            cd.check_cdi_request(request, request.path, before, dschema, result['containerd_version'] or 'unknown')
            self.check_cdi_imports(imports, before, dschema)
            self.report_runtimes(before, dschema)
            if not current.exists and request.state == 'absent':
                result['msg'] = '%s does not exist; nothing to remove' % request.path
                return result
            if not current.exists:
                config = cd.Config('version = %d\n' % schema.version, request.path)
            planned = cd.plan(config, request, schema, before, dschema)
            if defined_in:
                planned = self.imported_definition(defined_in, config, planned, before, dschema)
            self.warnings.extend(planned.warnings)
            file_changed = planned.text != text
            result.update(file_changed=file_changed, before=text, after=planned.text, changes=planned.changes,
                          changed=result['changed'] or file_changed)
            if request.state == 'present' and not _host.which(request.runtime_path):
                self.warnings.append('the runtime binary "%s" was not found on this host; containerd accepts the '
                                     'runtime but containers that use it will fail. Install the %s package.'
                                     % (request.runtime_path, cd.RUNTIME_PACKAGE))
            self.planned_from = (config, schema)  # what check_effective names when absent would leave a dead default
            effective = self.check_effective(real, planned, before, dschema) if file_changed else before
            self.report_runtimes(effective, dschema)
            pid = self.service.pid()
            result['containerd_pid_before'] = pid
            result['containerd_found_by'] = found_by(self.service, pid, self.warnings)
            stale = []
            if pid and not file_changed:
                started = _host.start_time(pid)
                stale = _host.changed_since([real] + list(imports), started) if started else [real]
            action = result['action'] = decide(request, pid, file_changed, stale)
            if action == 'restart':
                result['changed'] = True
            self.address = cd.get(before, ('grpc', 'address')) or DEFAULT_ADDRESS
            if not check_mode:
                self.write(real, current, planned.text)
                if action == 'restart':
                    Applier(request, self.service, self.tools, real, current, self.label, self.poll,
                            self.address).restart(pid)
            result['containerd_pid_after'] = pid if check_mode else self.service.pid()
            result['msg'] = message(result, stale, check_mode)
            return result

    def imported_files(self, real, config, before, version):
        """``{path: values}`` of the files containerd loads besides ``real``, in its order, each read once. 1.x's dump
        lists them (and ``real``); 2.x's lists the patterns as the file writes them (measured on 2.1.9: `imports =
        ['/etc/containerd/conf.d/*.toml']`), so there they are found as containerd finds them: breadth-first, a
        glob's matches sorted, each file once, the imports of imported files too, every directory a glob looks in
        checked first (``check_pattern``)."""
        found = collections.OrderedDict()
        seen = set([os.path.realpath(real)])

        def read(path):
            if os.path.realpath(path) in seen:
                return None
            seen.add(os.path.realpath(path))
            imported = _host.read_file(path, _host.resolve_path(path, reader='containerd'), cd.MAX_CONFIG_BYTES,
                                       reader='containerd')
            if imported.exists:
                found[path] = cd.loads(imported.text, path)
                return found[path]
            return None

        if not cd.globs_from_file(version):
            for path in before.get('imports') or []:
                if path:
                    read(path)
            return found
        queue = [(real, config.values)]
        while queue:
            source, values = queue.pop(0)
            for pattern, glob in cd.import_patterns(values, source, os.getcwd(), True):
                paths = [pattern]
                if glob:
                    last = os.path.basename(pattern)
                    paths = sorted(os.path.join(directory, name)
                                   for directory in _host.check_pattern(pattern, reader='containerd', glob=True)
                                   for name in _names(directory) if _host.glob_match(name, last))
                for path in paths:
                    values = read(path)
                    if values is not None:
                        queue.append((path, values))
        return found

    def check_imports(self, real, config, imports, version):
        """The files containerd imports (``imported_files``), and every directory its ``imports`` patterns can
        match, out of other users' reach (a pattern that matches nothing yet included, on every containerd version);
        none of the patterns may match the temp files and backups made beside ``real``; containerd 1.x takes an
        imported CRI table whole, so an insertion in the main file would not count (refused). Returns, on 2.x, the
        imported files that define the runtime (``imported_definition``)."""
        naming = [(real, config.values)] + sorted(imports.items())
        for source, values in naming:
            for pattern, glob in cd.import_patterns(values, source, os.getcwd(), cd.globs_from_file(version)):
                for directory in _host.check_pattern(pattern, reader='containerd', glob=glob):
                    if glob and os.path.realpath(directory) == os.path.dirname(real):
                        self.check_not_ours(pattern, real)
        if version and version[0] >= 2:
            # 2.x merges an imported file over this one key by key: a runtime defined there wins over our block.
            return [path for path in sorted(imports)
                    if any(cd.get(imports[path], schema.runtime(self.request.name)) is not None
                           for schema in (cd.SCHEMAS[2], cd.SCHEMAS[3]))]
        for path in sorted(imports):
            for schema in (cd.SCHEMAS[1], cd.SCHEMAS[2]):
                if cd.get(imports[path], schema.cri) is not None:
                    raise DocumentError(
                        '%s imports %s, which sets the CRI plugin table (%s): containerd %s replaces the whole CRI '
                        'table with an imported one, so the runtime must be registered in %s, not in %s. Nothing '
                        'was changed; move the CRI settings into one file.'
                        % (self.request.path, path, cd.ts.dotted(schema.cri), '.'.join(map(str, version)), path,
                           self.request.path))
        return []

    def imported_definition(self, defined_in, config, planned, before, dschema):
        """containerd 2.x, the runtime defined in an imported file (NVIDIA's toolkit 1.18+ writes
        /etc/containerd/conf.d/99-nvidia.toml): that file wins over a block in this one (measured on 2.1.9). Present:
        nothing to write when containerd already has the runtime as this module would register it, else refused.
        Absent: the block (if any) goes, and a warning says the runtime stays."""
        request = self.request
        names = ', '.join(defined_in)
        if request.state == 'absent':
            return cd.Plan(planned.text, planned.changes, planned.warnings + [
                'the runtime "%s" stays: %s (imported by %s) defines it. Remove it there.'
                % (request.name, names, request.path)], planned.runtime)
        dumped = cd.get(before, dschema.runtime(request.name))
        same = isinstance(dumped, dict) and cd.runtime_settings(dumped) == cd.runtime_settings(planned.runtime)
        if same and config.block is None and not request.default_runtime and not planned.cdi_keys:
            note = ('the runtime "%s" is registered by %s (imported by %s), as this module would register it: '
                    'nothing written' % (request.name, names, request.path))
            return cd.Plan(config.text, [], [note], planned.runtime)
        if same:
            return planned
        raise DocumentError(
            '%s imports %s, which defines the runtime "%s" differently (%s; wanted %s): containerd %s merges an '
            'imported file over this one key by key, so a block here would not count. Nothing was changed; edit or '
            'remove the runtime in %s (NVIDIA\'s `nvidia-ctk runtime configure` writes '
            '/etc/containerd/conf.d/99-nvidia.toml), then run again.'
            % (request.path, names, request.name, cd.runtime_settings(dumped) if isinstance(dumped, dict) else None,
               cd.runtime_settings(planned.runtime), self.result['containerd_version'], names))

    def check_not_ours(self, pattern, real):
        """An imports glob in the config's own directory must not match the temp files and backups made there."""
        ours = ('%s0123456789ab.tmp' % _host.temp_prefix(real),
                '%s.1234.2024-01-01@00:00:00~' % os.path.basename(real))
        for name in ours:
            if _host.glob_match(name, os.path.basename(pattern)):
                raise DocumentError('%s: its imports pattern "%s" also matches %s, where this module makes its temp '
                                    'file and backups (%s): containerd would load them. Nothing was changed; '
                                    'narrow the pattern (for example *.toml) or keep the imported files in a '
                                    'directory of their own.' % (self.request.path, pattern, os.path.dirname(real),
                                                                 name))

    def check_effective(self, real, planned, before, dschema):
        """Dump the planned text, given on standard input (written nowhere): only the runtime (and default) may
        change. Its relative imports are made absolute first: containerd resolves them against the file's own
        directory."""
        after, error = self.tools.dump_text(cd.probe_text(planned.text, self.request.path, os.path.dirname(real),
                                                          cd.globs_from_file(self.tools.version())))
        if after is None:
            raise DocumentError('%s: containerd refuses the planned file, which was not written: %s'
                                % (self.request.path, error))
        request = self.request
        if request.state == 'absent':
            dead = cd.dead_default(self.planned_from[0], self.planned_from[1], after, dschema, request)
            if dead:
                raise DocumentError(dead)
        if request.state == 'present' and request.default_runtime:
            want_default = request.name
        elif request.state == 'present' and request.default_runtime is None:
            want_default = cd.get(before, dschema.containerd + ('default_runtime_name',))
        else:
            want_default = None  # restored to what it was before this module set it
        problems = cd.compare_effective(before, after, self.request, dschema, want_default, planned.runtime,
                                        planned.cdi_keys)
        if problems:
            raise DocumentError('%s: the planned change would also change containerd\'s effective configuration '
                                '(per `containerd config dump`): %s. Nothing was written.'
                                % (self.request.path, '; '.join(problems)))
        return after

    def report_runtimes(self, effective, dschema):
        """The runtimes, default runtime and CDI state of the effective configuration (the planned one when it
        changes)."""
        runtimes, default = cd.cri_runtimes(effective, dschema)
        self.result.update(runtimes=sorted(runtimes), default_runtime=default, cdi=cd.cdi_state(effective, dschema))

    def check_cdi_imports(self, imports, before, dschema):
        """``cdi: true`` edits this file only: a CDI key it must change that an imported file sets (2.x merges that
        file over this one; 1.x imports with a CRI table are refused in ``check_imports``) is refused, naming it."""
        request = self.request
        if request.state != 'present' or not request.cdi:
            return
        for key in cd.cdi_wanted(before, dschema, request.cdi_spec_dirs):
            setters = [path for path in sorted(imports)
                       if any(cd.get(imports[path], schema.cri + (key,)) is not None
                              for schema in (cd.SCHEMAS[2], cd.SCHEMAS[3]))]
            if setters:
                state = cd.cdi_state(before, dschema)
                raise DocumentError(
                    '%s imports %s, which sets %s (in effect: enable_cdi = %s, cdi_spec_dirs = %s; cdi=true wants CDI '
                    'on and %s read): that file wins over this one, and this module does not edit imported files. '
                    'Nothing was changed; set %s in %s (or remove it there), then run again.'
                    % (request.path, ', '.join(setters), key, cd.ts.scalar(state['enabled']),
                       cd.ts.scalar(state['spec_dirs']), ', '.join(request.cdi_spec_dirs), key, ', '.join(setters)))

    def write(self, real, current, text):
        self.result['backup_file'] = _host.replace_config(real, text, current, self.backup, self.label)


def decide(request, pid, file_changed, stale):
    """none, restart or deferred (pure): containerd has no reload, so a difference means a restart."""
    if not pid:
        return 'deferred' if file_changed else 'none'
    if not file_changed and not stale:
        return 'none'
    return 'deferred' if request.apply == 'none' else 'restart'


def runtime_loaded(result, name):
    """``(loaded, why)``: whether the running containerd runs the runtime ``name`` after this run (it runs, it has
    what the file says, and the runtime is in it), and in words why not (for the verification, ``_verify``)."""
    running = bool(result['containerd_pid_after'])
    why = 'action %s%s' % (result['action'], '' if running else ', containerd is not running')
    return running and result['action'] != 'deferred' and name in (result.get('runtimes') or []), why


def message(result, stale, predicted):
    path = result['path']
    parts = ['%s %s' % (path, ('would change' if predicted else 'changed') if result['file_changed']
                        else 'already up to date')]
    if result['changes']:
        parts.append(', '.join(result['changes']))
    action = result['action']
    verb = 'would be' if predicted else 'was'
    if action == 'restart':
        why = 'the file changed' if result['file_changed'] else \
            'it started before %s last changed' % ', '.join(stale)
        parts.append('containerd %s restarted (%s; running containers keep running)' % (verb, why))
    elif action == 'deferred':
        parts.append('containerd is not running; the file takes effect when it starts'
                     if not result['containerd_pid_before'] else 'not applied (apply=none)')
    else:
        parts.append('containerd already runs it' if result['containerd_pid_before'] else 'containerd is not running')
    return '; '.join(parts)


class Applier(object):
    """Restarts containerd on the new file; restores the file and containerd when it does not come back whole."""

    def __init__(self, request, service, tools, real, previous, label, poll, address):
        self.request = request
        self.service = service
        self.tools = tools
        self.real = real
        self.previous = previous
        self.label = label
        self.poll = poll
        self.address = address

    def restore(self):
        if not self.previous.exists:
            try:
                os.unlink(self.real)
            except OSError:
                pass
            return
        _host.write_atomic(self.real, self.previous.text.encode('utf-8'), like=self.previous.stat, label=self.label)

    def wait(self, pid_before, cri_before):
        """``(True, None)`` once a new containerd answers with the CRI plugin as before, else ``(False, why)``."""
        deadline = time.time() + self.request.timeout
        why = 'containerd did not answer on %s' % self.address
        while time.time() < deadline:
            pid = self.service.pid()
            if pid and pid != pid_before:
                plugins = self.tools.plugins(self.address)
                if plugins is not None:
                    status = plugins.get(CRI_PLUGIN)
                    if cri_before == 'ok' and status != 'ok':
                        return False, 'the CRI plugin did not load (status %s)' % status
                    return True, None
            elif pid_before and not pid:
                why = 'containerd exited'
            time.sleep(self.poll)
        return False, why

    def restart(self, pid_before):
        before = self.tools.plugins(self.address) if pid_before else None
        cri_before = (before or {}).get(CRI_PLUGIN)
        started = time.time()
        error = None
        try:
            self.service.restart()
        except GpufleetError as exc:
            error = str(exc)
        ok, why = self.wait(pid_before, cri_before) if error is None else (False, error)
        if ok:
            return
        said = cd_error(self.service, started) or error or why
        self.restore()
        failed_pid = self.service.pid()
        back_error = None
        try:
            self.service.restart()
        except GpufleetError as exc:
            back_error = str(exc)
        back, back_why = (False, back_error) if back_error else self.wait(failed_pid, None)
        if not back:
            raise ServiceError('%s: containerd did not come back with the new configuration (%s); the previous file '
                               'was restored but containerd did not come back either (%s). containerd said: %s'
                               % (self.request.path, why, back_why, said))
        raise ServiceError('%s: containerd did not come back with the new configuration (%s); the previous file was '
                           'restored and containerd restarted with it. containerd said: %s'
                           % (self.request.path, why, said))


def cd_error(service, since):
    return containerd_error(service.logs(since=since, lines=200))
