# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The containerd_runtime operation: config.toml, then the running containerd, verified, rolled back on failure.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It holds no AnsibleModule so that pytest can drive it directly.

``Converge.run`` reads the file once, asks the installed containerd for its
version and the effective configuration (``containerd config dump``), plans
the new text (``containerd.plan``), dumps the new text given on containerd's
standard input (no file is written for it, in check mode or not) and
refuses it unless the effective configuration differs only by what was
asked, decides, writes once, then ``Applier`` (``containerd.apply_change``,
imported only to apply) restarts containerd (it has
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
import os

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import dirs
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import cdi as containerd_cdi
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import config as cd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import effective as containerd_effective
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import plan
from ansible_collections.gpufleet.nvidia.plugins.module_utils.formats import toml_splice as ts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files as host_files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import paths as host_paths
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import procs
from ansible_collections.gpufleet.nvidia.plugins.module_utils.engines import verify
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import (
    DocumentError, GpufleetError)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.options import DISRUPTION, Options
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init.service import found_by
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd.facts import _names


DEFAULT_ADDRESS = '/run/containerd/containerd.sock'


# containerd_runtime's argument spec: each option's one declaration (the module, node_state and Request read it).
SPEC = dict(
    path=dict(type='path', default=cd.DEFAULT_PATH),
    name=dict(type='str', default='nvidia'),
    runtime_path=dict(type='str', default='/usr/bin/nvidia-container-runtime'),
    default_runtime=dict(type='bool'),
    cdi=dict(type='bool'),
    cdi_spec_dirs=dict(type='list', elements='str', default=list(dirs.DEFAULT_DIRS)),
    take_over=dict(type='bool', default=False),
    state=dict(type='str', default='present', choices=['present', 'absent']),
    backup=dict(type='bool', default=False),
    apply=dict(type='str', default='auto', choices=['auto', 'restart', 'none']),
    disruption=dict(DISRUPTION),
    service_name=dict(type='str', default='containerd'),
    apply_timeout=dict(type='int', default=60),
    **verify.SPEC
)


class Request(Options):
    """What the user asked for: these options of the module (``SPEC``), ``apply_timeout`` as ``timeout``."""

    SPEC = SPEC
    OPTIONS = ('path', 'name', 'runtime_path', 'default_runtime', 'cdi', 'cdi_spec_dirs', 'state', 'apply',
               'apply_timeout', 'take_over', 'disruption')
    NAMES = {'apply_timeout': 'timeout'}


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
        real = host_paths.resolve_path(request.path, reader='containerd')
        version = self.tools.version()
        result['containerd_version'] = '.'.join(str(part) for part in version) if version else None
        dschema = cd.dump_schema(version)
        if not check_mode and request.state == 'present' and host_files.ensure_directory(real):
            result['changed'] = True
        with host_files.directory_lock(real, check_mode=check_mode):
            current = host_files.read_file(request.path, real, cd.MAX_CONFIG_BYTES, reader='containerd')
            text = current.text if current.exists else ''
            config = cd.Config(text, request.path)
            schema = cd.choose_schema(version, config.version, request.path) if current.exists else dschema
            result['schema'] = schema.version
            before, error = self.tools.dump(real if current.exists else None)
            if before is None:
                hints = containerd_effective.import_versions(config.version, declared_versions(real, config, version),
                                                             version)
                raise DocumentError('%s: containerd already refuses this file, nothing was changed: %s%s'
                                    % (request.path, error, ''.join('; ' + hint for hint, _refused in hints)))
            imports = self.imported_files(real, config, before, version)
            self.check_import_versions(config, imports, version)
            defined_in = self.check_imports(real, config, imports, version)
            containerd_cdi.check_cdi_request(request, request.path, before, dschema, result['containerd_version'] or 'unknown')
            self.check_cdi_imports(imports, before, dschema)
            self.report_runtimes(before, dschema)
            if not current.exists and request.state == 'absent':
                result['msg'] = '%s does not exist; nothing to remove' % request.path
                return result
            if not current.exists:
                config = cd.Config('version = %d\n' % schema.version, request.path)
            planned = plan.plan(config, request, schema, before, dschema)
            if defined_in:
                planned = self.imported_definition(defined_in, config, planned, before, dschema)
            self.warnings.extend(planned.warnings)
            file_changed = planned.text != text
            result.update(file_changed=file_changed, before=text, after=planned.text, changes=planned.changes,
                          changed=result['changed'] or file_changed)
            if request.state == 'present' and not procs.which(request.runtime_path):
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
                started = procs.start_time(pid)
                stale = procs.changed_since([real] + list(imports), started) if started else [real]
            action = result['action'] = decide(request, pid, file_changed, stale)
            if action == 'restart':  # host.workload: only where containerd is to be restarted
                from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import workload
                deferred = workload.deferral(request.disruption, 'restart', 'Restarting containerd', check_mode=check_mode)
                if deferred:
                    return workload.defer(result, deferred)
                result['changed'] = True
            self.address = cd.get(before, ('grpc', 'address')) or DEFAULT_ADDRESS
            if not check_mode:
                self.write(real, current, planned.text)
                if action == 'restart':
                    from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd.apply_change import Applier
                    Applier(request, self.service, self.tools, real, current, self.label, self.poll, self.address).restart(pid)
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
            imported = host_files.read_file(path, host_paths.resolve_path(path, reader='containerd'), cd.MAX_CONFIG_BYTES,
                                            reader='containerd')
            if imported.exists:
                found[path] = cd.loads(imported.text, path)
                return found[path]
            return None

        if not containerd_effective.globs_from_file(version):
            for path in before.get('imports') or []:
                if path:
                    read(path)
            return found
        queue = [(real, config.values)]
        while queue:
            source, values = queue.pop(0)
            for pattern, glob in containerd_effective.import_patterns(values, source, os.getcwd(), True):
                for path in matches(pattern, glob):
                    values = read(path)
                    if values is not None:
                        queue.append((path, values))
        return found

    def check_import_versions(self, config, imports, version):
        """An imported file of another config version than the main file's: refused where containerd would not read
        it as written, else a warning (``containerd_effective.import_versions``)."""
        found = containerd_effective.import_versions(
            config.version, dict((path, values.get('version')) for path, values in imports.items()), version)
        refused = [text for text, refuse in found if refuse]
        if refused:
            raise DocumentError('%s: nothing was changed: %s' % (self.request.path, '; '.join(refused)))
        self.warnings.extend(text for text, unused in found)

    def check_imports(self, real, config, imports, version):
        """The files containerd imports (``imported_files``), and every directory its ``imports`` patterns can
        match, out of other users' reach (a pattern that matches nothing yet included, on every containerd version);
        none of the patterns may match the temp files and backups made beside ``real``; containerd 1.x takes an
        imported CRI table whole, so an insertion in the main file would not count (refused). Returns, on 2.x, the
        imported files that define the runtime (``imported_definition``)."""
        naming = [(real, config.values)] + sorted(imports.items())
        for source, values in naming:
            for pattern, glob in containerd_effective.import_patterns(values, source, os.getcwd(), containerd_effective.globs_from_file(version)):
                for directory in host_paths.check_pattern(pattern, reader='containerd', glob=glob):
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
                        % (self.request.path, path, ts.dotted(schema.cri), '.'.join(map(str, version)), path,
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
        same = isinstance(dumped, dict) and plan.runtime_settings(dumped) == plan.runtime_settings(planned.runtime)
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
            % (request.path, names, request.name, plan.runtime_settings(dumped) if isinstance(dumped, dict) else None,
               plan.runtime_settings(planned.runtime), self.result['containerd_version'], names))

    def check_not_ours(self, pattern, real):
        """An imports glob in the config's own directory must not match the temp files and backups made there."""
        ours = ('%s0123456789ab.tmp' % host_files.temp_prefix(real),
                '%s.1234.2024-01-01@00:00:00~' % os.path.basename(real))
        for name in ours:
            if host_paths.glob_match(name, os.path.basename(pattern)):
                raise DocumentError('%s: its imports pattern "%s" also matches %s, where this module makes its temp '
                                    'file and backups (%s): containerd would load them. Nothing was changed; '
                                    'narrow the pattern (for example *.toml) or keep the imported files in a '
                                    'directory of their own.' % (self.request.path, pattern, os.path.dirname(real),
                                                                 name))

    def check_effective(self, real, planned, before, dschema):
        """Dump the planned text, given on standard input (written nowhere): only the runtime (and default) may
        change. Its relative imports are made absolute first: containerd resolves them against the file's own
        directory."""
        after, error = self.tools.dump_text(containerd_effective.probe_text(planned.text, self.request.path, os.path.dirname(real),
                                                                            containerd_effective.globs_from_file(self.tools.version())))
        if after is None:
            raise DocumentError('%s: containerd refuses the planned file, which was not written: %s'
                                % (self.request.path, error))
        request = self.request
        if request.state == 'absent':
            dead = plan.dead_default(self.planned_from[0], self.planned_from[1], after, dschema, request)
            if dead:
                raise DocumentError(dead)
        if request.state == 'present' and request.default_runtime:
            want_default = request.name
        elif request.state == 'present' and request.default_runtime is None:
            want_default = cd.get(before, dschema.containerd + ('default_runtime_name',))
        else:
            want_default = None  # restored to what it was before this module set it
        problems = containerd_effective.compare_effective(before, after, self.request, dschema, want_default, planned.runtime,
                                                          planned.cdi_keys)
        if problems:
            raise DocumentError('%s: the planned change would also change containerd\'s effective configuration '
                                '(per `containerd config dump`): %s. Nothing was written.'
                                % (self.request.path, '; '.join(problems)))
        return after

    def report_runtimes(self, effective, dschema):
        """The runtimes, default runtime and CDI state of the effective configuration (the planned one when it
        changes)."""
        runtimes, default = plan.cri_runtimes(effective, dschema)
        self.result.update(runtimes=sorted(runtimes), default_runtime=default, cdi=containerd_cdi.cdi_state(effective, dschema))

    def check_cdi_imports(self, imports, before, dschema):
        """``cdi: true`` edits this file only: a CDI key it must change that an imported file sets (2.x merges that
        file over this one; 1.x imports with a CRI table are refused in ``check_imports``) is refused, naming it."""
        request = self.request
        if request.state != 'present' or not request.cdi:
            return
        for key in containerd_cdi.cdi_wanted(before, dschema, request.cdi_spec_dirs):
            setters = [path for path in sorted(imports)
                       if any(cd.get(imports[path], schema.cri + (key,)) is not None
                              for schema in (cd.SCHEMAS[2], cd.SCHEMAS[3]))]
            if setters:
                state = containerd_cdi.cdi_state(before, dschema)
                raise DocumentError(
                    '%s imports %s, which sets %s (in effect: enable_cdi = %s, cdi_spec_dirs = %s; cdi=true wants CDI '
                    'on and %s read): that file wins over this one, and this module does not edit imported files. '
                    'Nothing was changed; set %s in %s (or remove it there), then run again.'
                    % (request.path, ', '.join(setters), key, ts.scalar(state['enabled']),
                       ts.scalar(state['spec_dirs']), ', '.join(request.cdi_spec_dirs), key, ', '.join(setters)))

    def write(self, real, current, text):
        self.result['backup_file'] = host_files.replace_config(real, text, current, self.backup, self.label)


def matches(pattern, glob):
    """The files an ``imports`` entry names, as containerd finds them: a glob's matches sorted, every directory it
    looks in checked first (``check_pattern``)."""
    if not glob:
        return [pattern]
    last = os.path.basename(pattern)
    return sorted(os.path.join(directory, name)
                  for directory in host_paths.check_pattern(pattern, reader='containerd', glob=True)
                  for name in _names(directory) if host_paths.glob_match(name, last))


def declared_versions(real, config, version):
    """``{path: version}`` the files the main file imports declare (its own patterns, one level), for the message of
    a file containerd refuses, when its dump (which lists them) cannot be had. A file that cannot be read is left
    out: containerd's own error stands."""
    found = {}
    for pattern, glob in containerd_effective.import_patterns(config.values, real, os.getcwd(),
                                                              containerd_effective.globs_from_file(version)):
        for path in matches(pattern, glob):
            try:
                imported = host_files.read_file(path, host_paths.resolve_path(path, reader='containerd'),
                                                cd.MAX_CONFIG_BYTES, reader='containerd')
                if imported.exists:
                    found[path] = cd.loads(imported.text, path).get('version')
            except (GpufleetError, OSError):
                continue
    return found


def decide(request, pid, file_changed, stale):
    """none, restart or deferred (pure): containerd has no reload, so a difference means a restart."""
    if not pid:
        return 'deferred' if file_changed else 'none'
    if not file_changed and not stale:
        return 'none'
    return 'deferred' if request.apply == 'none' else 'restart'


def runtime_loaded(result, name):
    """``(loaded, why)``: whether the running containerd runs the runtime ``name`` after this run (it runs, it has
    what the file says, and the runtime is in it), and in words why not (for the verification, ``verify``)."""
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
