# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The crio_runtime operation: the drop-in, then the running CRI-O, verified, rolled back on failure.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It holds no AnsibleModule so that pytest can drive it directly.

``Converge.run`` reads every file CRI-O reads once (the main file and the
drop-in directory, in CRI-O's order), plans the collection's drop-in
(``crio.config``) and the drop-ins beside it that ``take_over`` edits
(``crio.takeover``), decides, writes once (``host.files.replace_config``, or
removes the file for ``absent``; the files take_over edits first, put back
when a later write fails), then ``Applier`` (``crio.apply_change``, imported
only to apply) reloads (SIGHUP, through
``init.service.Service.reload``) where CRI-O applies reloaded runtimes and
restarts otherwise; when CRI-O does not come back (or logs a failed
reload) the previous files are restored, CRI-O is reloaded or restarted with
them, and the module fails with CRI-O's own words.

CRI-O is not installable on the test hosts: this path is tested on files
and against a fake service only (docs/crio.md).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpufleet.nvidia.plugins.module_utils.crio import config as cr
from ansible_collections.gpufleet.nvidia.plugins.module_utils.crio import takeover
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files as host_files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import paths as host_paths
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import procs
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import DocumentError, GpufleetError, \
    HostFileError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init.service import found_by

Request = cr.Request
MAX_DROPINS = 1000


class Tools(object):
    """The installed crio, through ``run(argv) -> (rc, out, err)``."""

    def __init__(self, run, crio='crio'):
        self.run = run
        self.crio = crio

    def version(self):
        rc, out, err = self.run([self.crio, '--version'])
        return cr.binary_version(out) if rc == 0 else None


def find_pid(pids):
    """The crio daemon among the service's processes ``pids`` (``init.service.Service.processes``) and the files
    it reads: ``(pid, config, config_dir)``, or ``(None, None, None)``.

    From its argv (``--config``/``-c``, ``--config-dir``/``-d``, with or without ``=``); the environment
    variables CONTAINER_CONFIG / CONTAINER_CONFIG_DIR are not read.
    """
    for pid in pids:
        argv = procs.process_argv(pid)
        if argv[1:2] and not argv[1].startswith('-'):
            continue  # "crio config", "crio version", ...: not the daemon
        config, directory = cr.DEFAULT_CONFIG, cr.DEFAULT_DIR
        for index, arg in enumerate(argv[1:], 1):
            following = argv[index + 1] if index + 1 < len(argv) else None
            if arg in ('--config', '-c') and following:
                config = following
            elif arg.startswith('--config=') or arg.startswith('-c='):
                config = arg.split('=', 1)[1]
            elif arg in ('--config-dir', '-d') and following:
                directory = following
            elif arg.startswith('--config-dir=') or arg.startswith('-d='):
                directory = arg.split('=', 1)[1]
        return pid, config, directory
    return None, None, None


def cdi_flag(argv):
    """The ``--cdi-spec-dirs`` a crio was started with (it overrides the files at start), or None."""
    found = None
    for index, arg in enumerate(argv[1:], 1):
        if arg == '--cdi-spec-dirs' and index + 1 < len(argv):
            found = (found or []) + [argv[index + 1]]
        elif arg.startswith('--cdi-spec-dirs='):
            found = (found or []) + [arg.split('=', 1)[1]]
    return found


def decide(request, pid, file_changed, stale, version, reload_from=cr.RELOAD_EFFECTIVE_FROM):
    """none, reload, restart or deferred (pure).

    ``auto`` reloads only a CRI-O that applies reloaded runtimes (``reload_from``; none released so far),
    else restarts. ``reload`` sends SIGHUP to a CRI-O that documents the runtime reload (1.26+), and defers
    on an older one. ``none`` defers.
    """
    if not pid:
        return 'deferred' if file_changed else 'none'
    if not file_changed and not stale:
        return 'none'
    if request.apply == 'none':
        return 'deferred'
    if request.apply == 'restart':
        return 'restart'
    if request.apply == 'reload':
        return 'reload' if version is not None and tuple(version) >= cr.RELOAD_DOCUMENTED_FROM else 'deferred'
    return 'reload' if cr.reload_applies_runtimes(version, reload_from) else 'restart'


def list_dropins(directory, limit=MAX_DROPINS):
    """Every file under ``directory`` as CRI-O walks it (recursively, names sorted), as absolute paths."""
    found = []
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        for name in files:
            found.append(os.path.join(root, name))
            if len(found) > limit:
                raise HostFileError('%s holds more than %d files; refused.' % (directory, limit))
    relative = [os.path.relpath(path, directory) for path in found]
    return [os.path.join(directory, path) for path in cr.walk_order(relative)]


def read_sources(request):
    """The files CRI-O reads, in its order, as ``crio.config.Source``; ``(sources, our HostFile)``."""
    sources = []
    own = host_paths.resolve_path(request.path, reader='crio')
    main_real = host_paths.resolve_path(request.config_path, reader='crio')
    main = host_files.read_file(request.config_path, main_real, cr.MAX_CONFIG_BYTES, reader='crio')
    if main.exists:
        sources.append(cr.Source(request.config_path, main.text, main=True))
    ours = None
    real_dir = host_paths.resolve_path(request.config_dir, reader='crio')
    if os.path.isdir(real_dir):
        for path in list_dropins(real_dir):
            if os.path.dirname(path) == os.path.dirname(own) and host_files.is_temp_of(os.path.basename(path), own):
                continue  # an earlier version's temp file, left by a killed run: removed before writing
            shown = os.path.join(request.config_dir, os.path.relpath(path, real_dir))
            current = host_files.read_file(shown, path, cr.MAX_CONFIG_BYTES, reader='crio')
            if not current.exists:
                continue
            if os.path.realpath(path) == os.path.realpath(request.path):
                ours = current
                sources.append(cr.Source(request.path, current.text, ours=True))
            else:
                sources.append(cr.Source(shown, current.text, host=current))
    return sources, ours


def backup_outside(directory):
    """``backup(real) -> name`` that makes the copy in ``directory``, never in the drop-in directory (CRI-O reads
    every file there, a partial copy included)."""
    return lambda real: host_files.backup_copy(real, directory=directory)


class Result(dict):
    def __init__(self, path):
        dict.__init__(self, changed=False, path=path, backup_file=None, backup_files=[], action='none',
                      file_changed=False, crio_version=None, crio_pid_before=None, crio_pid_after=None,
                      crio_found_by=None, runtimes=None, default_runtime=None, cdi=None, changes=[], msg='',
                      before='', after='', more_diffs=[], warnings=[])


class Converge(object):
    """One crio_runtime run."""

    def __init__(self, request, service, tools, backup=None, backup_dir=None, label=None, poll=0.2,
                 find=None, runtime_exists=None, settle=2.0, started=procs.start_time, argv=procs.process_argv):
        self.request = request
        self.service = service
        self.tools = tools
        self.backup = backup
        self.backup_dir = backup_dir
        self.label = label
        self.poll = poll
        # find(config_path, config_dir) -> (pid, config, config_dir) of the running crio
        self.find = find or (lambda *unused: find_pid(service.processes()))
        self.settle = settle
        self.started = started
        self.argv = argv
        self.runtime_exists = runtime_exists or (lambda path: bool(procs.which(path)))
        self.result = Result(request.path)
        self.warnings = self.result['warnings'] = []

    def check_paths(self, real, real_dir):
        request = self.request
        if not (real + '/').startswith(real_dir.rstrip('/') + '/'):
            raise DocumentError('%s is not under %s, the drop-in directory CRI-O reads: CRI-O would never see it. '
                                'Nothing was changed.' % (request.path, request.config_dir))
        pid, config, directory = self.find(request.config_path, request.config_dir)
        if pid and directory and os.path.realpath(directory) != os.path.realpath(real_dir):
            raise DocumentError('the running crio (pid %d) reads its drop-ins from %s, not %s: the drop-in would not '
                                'count. Nothing was changed; set config_dir (and path) to match.'
                                % (pid, directory, request.config_dir))
        if pid and config and os.path.realpath(config) != os.path.realpath(request.config_path):
            raise DocumentError('the running crio (pid %d) reads %s, not %s. Nothing was changed; set config_path '
                                'to match.' % (pid, config, request.config_path))
        return pid

    def run(self, check_mode=False):
        request, result = self.request, self.result
        real = host_paths.resolve_path(request.path, reader='crio')
        real_dir = host_paths.resolve_path(request.config_dir, reader='crio')
        pid = self.check_paths(real, real_dir)
        version = self.tools.version()
        result['crio_version'] = '.'.join(str(part) for part in version) if version else None
        if not check_mode and request.state == 'present' and host_files.ensure_directory(real):
            result['changed'] = True
        with host_files.directory_lock(real, check_mode=check_mode):
            if not check_mode:
                host_files.remove_stale_temps(real)  # an earlier version made its temp files in the drop-in directory
            sources, current = read_sources(request)
            if current is None:
                current = host_files.HostFile(False, real, '', None)
            planned = takeover.plan(sources, request, version)
            self.warnings.extend(planned.warnings)
            text = planned.text
            edits = edited_files(planned.edits, real)
            file_changed = (text is not None) != current.exists or (text is not None and text != current.text) \
                or bool(edits)
            result.update(file_changed=file_changed, before=current.text, after=text or '', changes=planned.changes,
                          more_diffs=[dict(before=previous.text, after=new, before_header=shown, after_header=shown)
                                      for shown, previous, new in edits],
                          changed=result['changed'] or file_changed,
                          # CRI-O's own default runtime is there even when no file defines it.
                          runtimes=sorted(set(planned.after.runtimes) | {planned.after.default_runtime}),
                          default_runtime=planned.after.default_runtime, cdi=cdi_result(planned.after))
            if request.state == 'present' and planned.runtime and not self.runtime_exists(request.runtime_path):
                if planned.after.default_runtime == request.name:
                    raise DocumentError('%s: the runtime binary "%s" is missing and the runtime would be CRI-O\'s '
                                        'default: CRI-O refuses to start without its default runtime. Nothing was '
                                        'changed; install the %s package first.'
                                        % (request.path, request.runtime_path, cr.RUNTIME_PACKAGE))
                self.warnings.append('the runtime binary "%s" was not found on this host; CRI-O ignores a runtime '
                                     'whose runtime_path is missing ("Runtime handler ... is being ignored"). Install '
                                     'the %s package.' % (request.runtime_path, cr.RUNTIME_PACKAGE))
            pid = self.service.pid() or pid
            result['crio_pid_before'] = pid
            result['crio_found_by'] = found_by(self.service, pid, self.warnings)
            if request.state == 'present':
                self.check_cdi(pid)
            stale = []
            if pid and not file_changed:
                started = self.started(pid)
                watched = [real] if current.exists else []
                stale = procs.changed_since(watched, started) if started else watched
            action = result['action'] = decide(request, pid, file_changed, stale, version)
            if action == 'deferred' and request.apply == 'reload' and pid:
                self.warnings.append('apply=reload: this CRI-O (%s) does not reload runtimes (1.26 and later do); '
                                     'the file was written, restart crio to use it.' % result['crio_version'])
            if action == 'restart':  # host.workload: only where CRI-O is to be restarted
                from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import workload
                deferred = workload.deferral(request.disruption, 'restart', 'Restarting CRI-O', check_mode=check_mode)
                if deferred:
                    return workload.defer(result, deferred)
            if action in ('reload', 'restart'):
                result['changed'] = True
            if not check_mode:
                self.write_all(real, real_dir, current, text, edits)
                if action in ('reload', 'restart'):
                    # the reload or restart, and its rollback: imported to apply only (crio.apply_change)
                    from ansible_collections.gpufleet.nvidia.plugins.module_utils.crio.apply_change import Applier
                    Applier(request, self.service, real, current, self.label, self.poll, self.settle,
                            real_dir, [previous for unused, previous, unused_new in edits]).apply(action, pid)
            result['crio_pid_after'] = pid if check_mode else self.service.pid()
            result['msg'] = message(result, stale, check_mode, request.apply)
            return result

    def check_cdi(self, pid):
        """Warnings: cdi_spec_dirs given without cdi=true; a crio whose --cdi-spec-dirs overrides the files."""
        request = self.request
        if not request.cdi and list(request.cdi_spec_dirs or []) != list(cr.CDI_DEFAULT_DIRS):
            self.warnings.append('cdi_spec_dirs is used only with cdi=true; it was ignored.')
        flag = cdi_flag(self.argv(pid)) if request.cdi and pid else None
        if flag is not None:
            self.warnings.append('the running crio (pid %d) was started with --cdi-spec-dirs %s, which overrides '
                                 'cdi_spec_dirs of the files when it starts; remove that flag (or '
                                 'CONTAINER_CDI_SPEC_DIRS) for the files to count.' % (pid, ','.join(flag)))

    def write_all(self, real, real_dir, current, text, edits):
        """The files ``take_over`` edits (``edited_files``), then the drop-in; when one fails, those written before
        it are put back as they were."""
        from ansible_collections.gpufleet.nvidia.plugins.module_utils.crio import apply_change
        written = []
        try:
            for unused_shown, previous, new in edits:
                made = self.write(previous.real, real_dir, previous, new)
                written.append(previous)
                if made:
                    self.result['backup_files'].append(made)
            self.result['backup_file'] = self.write(real, real_dir, current, text)
        except BaseException:
            for previous in reversed(written):
                try:
                    apply_change.restore_file(previous, real_dir, self.label)
                except (GpufleetError, OSError):
                    pass  # the first error is the one to report; state=absent puts back what stays commented out
            raise
        if self.result['backup_file']:
            self.result['backup_files'].insert(0, self.result['backup_file'])

    def write(self, real, real_dir, current, text):
        """The drop-in written (its temp file out of the drop-in directory, which CRI-O reads whole) or removed;
        returns the backup's name, or None."""
        if text is None:
            if current.exists:
                from ansible_collections.gpufleet.nvidia.plugins.module_utils.crio.apply_change import remove
                remove(real)
            return None
        backup = self.backup
        if backup and self.backup_dir:
            backup = backup_outside(self.backup_dir)
        if text == current.text:
            return host_files.replace_config(real, text, current, backup, self.label)
        # a failed write names the drop-in first and leaves no temp directory this run made
        with host_files.temp_directory(real_dir, real) as temp_dir:
            return host_files.replace_config(real, text, current, backup, self.label, temp_dir)


def edited_files(edits, real):
    """``[(path as shown, HostFile as read, new text)]`` of the other files a plan edits (``crio.takeover``), each
    checked to be a file read from the directory of the drop-in ``real``, the one this run locks."""
    found = []
    for source, text in edits:
        previous = source.host
        if previous is None or os.path.dirname(previous.real) != os.path.dirname(real):
            raise DocumentError('%s is not a drop-in beside %s, the only files take_over edits. Nothing was changed.'
                                % (source.path, real))
        found.append((source.path, previous, text))
    return found


def cdi_result(effective):
    """``{spec_dirs, set_in}``: the directories CRI-O reads CDI specs from and the file that sets them (None: CRI-O's
    built-in list)."""
    origin = effective.origin(cr.CDI_SPEC_DIRS)
    return dict(spec_dirs=effective.cdi_spec_dirs, set_in=origin.path if origin else None)


def message(result, stale, predicted, apply='auto'):
    path = result['path']
    parts = ['%s %s' % (path, ('would change' if predicted else 'changed') if result['file_changed']
                        else 'already up to date')]
    if result['changes']:
        parts.append(', '.join(result['changes']))
    action = result['action']
    verb = 'would be' if predicted else 'was'
    why = 'the file changed' if result['file_changed'] else 'it started before %s last changed' % ', '.join(stale)
    if action == 'restart':
        parts.append('crio %s restarted (%s)' % (verb, why))
    elif action == 'reload':
        parts.append('crio %s reloaded (SIGHUP; %s)' % (verb, why))
    elif action == 'deferred':
        parts.append('crio is not running; the file takes effect when it starts'
                     if not result['crio_pid_before'] else 'not applied (apply=%s)' % apply)
    else:
        parts.append('crio already runs it' if result['crio_pid_before'] else 'crio is not running')
    return '; '.join(parts)
