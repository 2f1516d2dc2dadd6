# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rollback store: what a run changed, kept so that a host can be put back as it was before that run.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time.

* ``save`` (``Concern.execute``, for a run that changed the host): one JSON line per concern run that changed files,
  in the run's file of a root-only store (``DEFAULT_STORE``; not under ``/var/lib/gpufleet``, the persistence state
  directory, which the daemon's service user owns): each file's path, its text before the run (null: the run created
  it; the concerns' diffs show a missing file as ''), the SHA-256 of its text after (null: the run removed it), what
  the run did to services (the audit line's ``service_actions``), the service's name and its init system where the run
  says. Each file is checked on disk first: a diff that is no file (a directory's links, GPU modes) or a file in a
  place another user can change is never recorded (``skipped``, with why). Written with the audit trail's guarantees
  (``host.audit.locked_directory`` and ``open_private``): its directory resolved out of other users' reach, opened
  once and flocked, root's alone (0700), the run's file opened O_NOFOLLOW, a regular root file with one link, 0600.
  The run's file is named by a hash of the run id, never by its text; the newest ``KEEP`` runs are kept; a record
  past ``MAX_RECORD`` bytes, or a run past ``MAX_RUN``, is refused naming the concern.
* ``restore`` (gpufleet.nvidia.rollback): newest record first, each file that holds what the run left is given its
  text before back (written atomically as the concerns write, its mode and owner kept, under our writers' lock of
  its directory) or removed when the run created it; a file as it was before is left; any other is a conflict, left
  as it is and reported. Then the services: the init system reloaded where one of its definitions (a systemd unit
  or drop-in, an Upstart job) was put back, and each service the run restarted or started restarted (started, when
  the run stopped it; stopped, before its files, when the run created its definition), reloaded when the run only
  reloaded it. A service that does not come back is an error of the result, once everything else is done.

``service(name, init_system)`` gives the ``init.service.Service`` of ``name`` (None: any, for the init system
alone) under ``init_system`` (None: the host's): the module makes it, so that this layer imports no init system.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import hashlib
import json
import os
import re
import stat

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError, HostFileError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.options import ROLLBACK_STORE
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import audit
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import locks
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host.paths import resolve_path

DEFAULT_STORE = ROLLBACK_STORE
KEEP = 8
MAX_RECORD = 4 << 20
MAX_FILE = MAX_RECORD  # the largest file a record can hold (its text is in the record)
MAX_RUN = 16 << 20
FORMAT = 1
READER = 'the rollback of this host'
STORE = audit.Place('the rollback store', READER, 'Nothing was saved to roll this change back.', closed=0o077)
RUN_FILE = re.compile(r'\Arun-[0-9a-f]{64}\.jsonl\Z')
# The verb that brings a service back, by what the run did to it; the first one wins where records differ.
VERBS = ('stop', 'restart', 'start', 'reload')


def run_file(run_id):
    """The name of a run's file in the store: a hash of the run id (its text is never a path)."""
    return 'run-%s.jsonl' % hashlib.sha256(run_id.encode('utf-8', 'surrogateescape')).hexdigest()


def _data(text):
    """A text's bytes, as the file holds them (None: no file)."""
    return None if text is None else text.encode('utf-8', 'surrogateescape')


def _text(data):
    return '' if data is None else data.decode('utf-8', 'replace')


def read_host_file(path):
    """``(real path, bytes or None when missing, stat or None)``: through ``resolve_path`` and ``files.read_file`` (no
    link or directory another user can change, a regular file of root's). Raises HostFileError."""
    real = resolve_path(path, reader=READER)
    found = files.read_file(path, real, MAX_FILE, reader=READER)
    return real, (found.text.encode('utf-8') if found.exists else None), found.stat


# --------------------------------------------------------------------------
# Saving
# --------------------------------------------------------------------------

def file_diffs(result):
    """``(path, before or None, after)`` of each diff of ``result`` that can be a file the run changed: an absolute
    path, texts that differ. A before of '' (or None) is a file the run created."""
    diff = result.get('diff')
    diffs = [diff] if isinstance(diff, dict) else [one for one in diff if isinstance(one, dict)] \
        if isinstance(diff, list) else []
    for one in diffs:
        path = one.get('after_header') or one.get('before_header')
        before, after = one.get('before'), one.get('after')
        if isinstance(path, str) and path.startswith('/') and isinstance(after, str) and before != after \
                and isinstance(before, (str, type(None))):
            yield path, before or None, after


def record(run_id, concern, module_name, result, params, now=None, read=read_host_file):
    """The rollback record (a dict) of a concern run that changed the host, or None when it changed no file.

    Each file must hold the diff's after text (or be missing where that text is empty: the run removed it); any
    other diff is ``skipped`` with why, never written back."""
    kept, skipped = [], []
    for path, before, after in file_diffs(result):
        try:
            unused_real, data, unused_st = read(path)
        except GpufleetError as exc:
            skipped.append({'path': path, 'why': str(exc)})
            continue
        if data is None and after == '':
            kept.append({'path': path, 'before': before, 'sha256_after': None})
        elif data is not None and audit.sha256(data) == audit.sha256(after):
            kept.append({'path': path, 'before': before, 'sha256_after': audit.sha256(after)})
        else:
            skipped.append({'path': path, 'why': 'it does not hold the text the run wrote'})
    if not kept:
        return None
    line = audit.record(concern, module_name, result, run_id, now=now)
    service, init_system = params.get('service_name'), result.get('init_system')
    return {'format': FORMAT, 'time': line['time'], 'run_id': run_id, 'host': line['host'], 'concern': concern,
            'module': line['module'], 'service': service if isinstance(service, str) and service else None,
            'init_system': init_system if isinstance(init_system, str) and init_system else None,
            'service_actions': line['service_actions'], 'files': kept, 'skipped': skipped}


def save(run_id, concern, module_name, result, params, store=DEFAULT_STORE, now=None, keep=KEEP):
    """Append the record of a concern run to its run's file in ``store``; returns it (None: no run id, or no file
    changed). Raises HostFileError naming the store when it cannot: nothing is then saved."""
    if not run_id:
        return None
    entry = record(run_id, concern, module_name, result, params, now=now)
    if entry is None:
        return None
    data = audit.line(entry).encode('utf-8')
    path = os.path.join(store, run_file(run_id))
    if len(data) > MAX_RECORD:
        raise HostFileError('%s: the rollback record of %s is %d bytes, more than the %d one may hold (its files are '
                            'too large). %s' % (path, concern, len(data), MAX_RECORD, STORE.outcome))
    with audit.locked_directory(path, STORE) as (dfd, name):
        try:
            fd, size = audit.open_private(dfd, path, name, STORE)
            try:
                if size + len(data) > MAX_RUN:
                    raise HostFileError('%s: the run\'s rollback records would pass %d bytes with the %d of %s. %s'
                                        % (path, MAX_RUN, len(data), concern, STORE.outcome))
                files.write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            if not size:
                prune(dfd, name, keep)
        except OSError as exc:
            raise HostFileError('%s: cannot write the rollback store: %s. %s' % (path, exc.strerror, STORE.outcome))
    return entry


def prune(dfd, current, keep=KEEP):
    """Remove the oldest run files of the store ``dfd`` (locked) past ``keep``, ``current`` (this run's) kept."""
    found = []
    for name in os.listdir(dfd):
        if name == current or not RUN_FILE.match(name):
            continue
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            found.append((st.st_mtime, name))
    for unused_mtime, name in sorted(found, reverse=True)[max(keep - 1, 0):]:
        try:
            os.unlink(name, dir_fd=dfd)
        except OSError:
            pass


# --------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------

def _valid(entry):
    if not isinstance(entry, dict) or entry.get('format') != FORMAT or not isinstance(entry.get('files'), list):
        return False
    optional = (str, type(None))
    return isinstance(entry.get('service'), optional) and isinstance(entry.get('init_system'), optional) \
        and isinstance(entry.get('service_actions'), list) \
        and all(isinstance(action, str) for action in entry['service_actions']) \
        and all(isinstance(one, dict) and isinstance(one.get('path'), str) and one['path'].startswith('/')
                and isinstance(one.get('before'), optional) and isinstance(one.get('sha256_after'), optional)
                for one in entry['files'])


def load(run_id, store=DEFAULT_STORE):
    """The records of the run ``run_id``, oldest first; [] when the store has none."""
    path = os.path.join(store, run_file(run_id))
    if not store.startswith('/'):
        raise HostFileError('%s: the rollback store must be an absolute path. Nothing was restored.' % store)
    if not os.path.lexists(resolve_path(os.path.dirname(path), reader=READER, file_directory=False)):
        return []
    with audit.locked_directory(path, STORE) as (dfd, name):
        fd, size = audit.open_private(dfd, path, name, STORE, flags=os.O_RDONLY)
        if fd is None:
            return []
        try:
            chunks = []
            while True:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if size > 2 * MAX_RUN:
                    raise HostFileError('%s: larger than a run\'s records can be; nothing was restored.' % path)
        finally:
            os.close(fd)
    records = []
    for number, text in enumerate(b''.join(chunks).split(b'\n'), 1):
        if not text.strip():
            continue
        try:
            entry = json.loads(text.decode('utf-8'))
        except ValueError as exc:
            raise HostFileError('%s: line %d is not a rollback record (%s); nothing was restored.' % (path, number, exc))
        if not _valid(entry):
            raise HostFileError('%s: line %d is not a rollback record of format %d; nothing was restored.'
                                % (path, number, FORMAT))
        records.append(entry)
    return records


# --------------------------------------------------------------------------
# Restoring
# --------------------------------------------------------------------------

class RestoredFile(object):
    """A file a rollback changes: ``real`` (where), ``stat`` (None: missing), ``original`` (its bytes now, None:
    missing), ``restored`` (its bytes once put back), ``mode`` (for a file made again)."""

    def __init__(self, real, data, st):
        self.real = real
        self.stat = st
        self.original = data
        self.restored = data
        self.mode = 0o644


def _changed_since(data, entry):
    if data is None:
        return 'it is missing, and the run left it (SHA-256 %s): left as it is' % entry['sha256_after']
    if entry['sha256_after'] is None:
        return 'it exists again (SHA-256 %s), and the run had removed it: left as it is' % audit.sha256(data)
    return 'it changed since the run (SHA-256 %s; the run left %s): left as it is' % (
        audit.sha256(data), entry['sha256_after'])


def _verb(service_actions):
    """What brings back a service the run did ``service_actions`` to, or None."""
    words = set()
    for action in service_actions:
        if action != 'reload_init':
            words.update(action.split('_'))
    if words & {'restart', 'start'}:
        return 'restart'
    return 'start' if 'stop' in words else 'reload' if 'reload' in words else None


def _unit_path(svc, name=None):
    try:
        return svc.init.unit_path(name or svc.name)
    except GpufleetError:
        return None


def _definition(svc, path):
    """Whether ``path`` defines services of ``svc``'s init system: its unit directory's file (a unit, a job, a
    script) or a drop-in of one (``UNIT.d/NAME``)."""
    unit = _unit_path(svc, 'x')
    if unit is None:
        return False
    directory, parent = os.path.dirname(unit), os.path.dirname(path)
    return parent == directory or (parent.endswith('.d') and os.path.dirname(parent) == directory)


class Rollback(object):
    """Putting back the records of one run (``records``, oldest first): ``plan()``, then ``apply()``, with
    ``service(name, init_system)`` (see the module's notes) and ``read(path)`` (``read_host_file``)."""

    def __init__(self, records, service, read=read_host_file, label=None):
        self.records = records
        self.service = service
        self.read = read
        self.label = label
        self.files = {}  # path -> RestoredFile
        self.touched = {}  # index of a record -> the paths it puts back
        self.conflicts = []
        self.errors = []
        self.done = []  # what was (in check mode: would be) done to services, in words
        self.verbs = {}  # (init system, service) -> [verb, Service, indexes of its records]
        self.inits = {}  # init system -> a Service of it, whose definitions are put back

    def plan(self):
        """Each file's restored bytes, newest record first; conflicts and unreadable files are left as they are."""
        blocked = set()
        for index in reversed(range(len(self.records))):
            concern = self.records[index].get('concern')
            for entry in self.records[index]['files']:
                path = entry['path']
                if path in blocked:
                    continue
                if path not in self.files:
                    try:
                        self.files[path] = RestoredFile(*self.read(path))
                    except GpufleetError as exc:
                        blocked.add(path)
                        self.conflicts.append({'path': path, 'concern': concern, 'problem': '%s; left as it is' % exc})
                        continue
                found = self.files[path]
                before = _data(entry['before'])
                if found.restored == before:
                    continue
                now = found.restored
                if (now is None and entry['sha256_after'] is None) or \
                        (now is not None and audit.sha256(now) == entry['sha256_after']):
                    found.restored = before
                    self.touched.setdefault(index, []).append(path)
                else:
                    blocked.add(path)
                    self.conflicts.append({'path': path, 'concern': concern, 'problem': _changed_since(now, entry)})
        self.plan_services()

    def changed(self):
        return sorted(path for path, found in self.files.items() if found.restored != found.original)

    def plan_services(self):
        """The init systems to reload and the verb of each service, from the records whose files are put back
        (none without ``service``: files alone)."""
        for index in sorted(self.touched) if self.service is not None else ():
            entry = self.records[index]
            paths = [path for path in self.touched[index] if self.files[path].restored != self.files[path].original]
            if not paths:
                continue
            try:
                svc = self.service(entry['service'], entry['init_system'])
            except GpufleetError as exc:
                self.errors.append('%s: the services of %s cannot be brought back: %s' % (paths[0], entry['concern'], exc))
                continue
            for path in paths:
                if _definition(svc, path):
                    self.inits.setdefault(svc.init_system, svc)
                    self.files[path].mode = svc.init.unit_mode
            verb = _verb(entry['service_actions']) if entry['service'] else None
            if verb is None:
                continue
            own = _unit_path(svc)
            if verb == 'restart' and own in paths and self.files[own].restored is None:
                verb = 'stop'  # the run made the service: it goes with its definition, stopped before
            key = (svc.init_system, svc.name)
            known = self.verbs.setdefault(key, [verb, svc, []])
            known[2].append(index)
            if VERBS.index(verb) < VERBS.index(known[0]):
                known[0] = verb

    def apply(self, check_mode=False):
        """Stop the services whose definition goes, put the files back, reload the init systems, then bring the
        services back; a failure is an error and the rest goes on."""
        planned = sorted(self.verbs.values(), key=lambda known: known[2][0])
        for verb, svc, unused_indexes in planned:
            if verb == 'stop':
                self.run(self.managing(svc), 'stop', check_mode)
        written = set(self.changed()) if check_mode else set(path for path in self.changed() if self.put_back(path))
        for name in sorted(self.inits):
            if any(_definition(self.inits[name], path) for path in written):
                self.run(self.inits[name], 'reload_init', check_mode, name)
        for verb, svc, indexes in planned:
            if verb != 'stop' and any(written & set(self.touched[index]) for index in indexes):
                self.run(self.managing(svc), verb, check_mode)
        return written

    def managing(self, svc):
        """The Service that runs ``svc`` here: an init system that runs another's services where it has no definition
        of its own (Upstart, a SysV script) gives the other's."""
        fallback = svc.init.without_definition
        unit = _unit_path(svc)
        if fallback and unit and not os.path.exists(unit):
            return self.service(svc.name, fallback)
        return svc

    def run(self, svc, verb, check_mode, name=None):
        words = '%s %s' % (verb, name or svc.name)
        try:
            if not check_mode:
                getattr(svc, verb)()
            self.done.append(words)
        except GpufleetError as exc:
            self.errors.append('%s failed: %s' % (words, exc))

    def put_back(self, path):
        """Write ``path``'s bytes before the run (or remove it), under our writers' lock of its directory, if it still
        holds what the plan read; True when done."""
        found = self.files[path]
        try:
            with locks.directory_lock(found.real):
                real, data, st = self.read(path)
                if real != found.real or data != found.original:
                    raise HostFileError('%s changed while the rollback ran: left as it is' % path)
                if found.restored is None:
                    try:
                        os.unlink(real)
                    except OSError as exc:
                        if exc.errno != errno.ENOENT:
                            raise files.write_failed(path, exc, 'remove it')
                    return True
                files.ensure_directory(real)
                with files.temp_directory(os.path.dirname(real), real) as temp:
                    files.write_atomic(real, found.restored, like=st, new_mode=found.mode, label=self.label,
                                       temp_dir=temp)
            return True
        except (GpufleetError, OSError) as exc:
            self.errors.append(str(exc) if isinstance(exc, GpufleetError) else str(files.write_failed(path, exc)))
            return False

    def diff(self):
        return [{'before_header': path, 'after_header': path, 'before': _text(self.files[path].original),
                 'after': _text(self.files[path].restored)} for path in self.changed()]


def restore(run_id, store=DEFAULT_STORE, service=None, check_mode=False, label=None, read=read_host_file):
    """Put back what the run ``run_id`` changed (see the module's notes); the module's result (``errors``: what
    failed, the module fails on them). ``label(temp, path)``: the SELinux hook (``files.selinux_labeller``)."""
    records = load(run_id, store)
    result = {'changed': False, 'run_id': run_id, 'store': store, 'records': len(records), 'restored': [],
              'removed': [], 'conflicts': [], 'services': [], 'errors': [], 'diff': []}
    if not records:
        result['msg'] = 'no rollback record of run %s in %s: nothing to put back' % (run_id, store)
        return result
    rollback = Rollback(records, service, read, label)
    rollback.plan()
    written = rollback.apply(check_mode)
    result['diff'] = [one for one in rollback.diff() if one['before_header'] in written]
    result.update(changed=bool(written), conflicts=rollback.conflicts, services=rollback.done,
                  errors=rollback.errors,
                  restored=sorted(path for path in written if rollback.files[path].restored is not None),
                  removed=sorted(path for path in written if rollback.files[path].restored is None))
    result['msg'] = '%s run %s: %d file(s) restored, %d removed, %d conflict(s)%s%s' % (
        'would roll back' if check_mode else 'rolled back', run_id, len(result['restored']), len(result['removed']),
        len(result['conflicts']), '; services: %s' % ', '.join(rollback.done) if rollback.done else '',
        '; failed: %s' % '; '.join(rollback.errors) if rollback.errors else '')
    return result


def audit_entry(result, audit_run_id=None, by=None):
    """The audit line of a rollback that changed the host (``host.audit.record``, concern ``rollback``), naming the
    run it put back (``rollback_of``)."""
    words = [verb.split(' ', 1)[0] for verb in result.get('services', [])]
    actions = (['restore_files'] if result.get('restored') else []) + \
        (['remove_files'] if result.get('removed') else []) + words
    changes = ['restored %s' % path for path in result.get('restored', [])] + \
        ['removed %s' % path for path in result.get('removed', [])] + list(result.get('services', []))
    entry = audit.record('rollback', 'rollback', {'actions': actions, 'changes': changes, 'diff': result.get('diff')},
                         audit_run_id, by=by)
    entry['rollback_of'] = result.get('run_id')
    return entry
