# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""CRI-O's configuration rules: the effective configuration, the nvidia runtime's drop-in, the plans.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It is pure: texts in, text and findings out (docs/crio.md has
the facts these rules stand on, read in CRI-O's source, v1.24 to v1.36).

* CRI-O reads its main file (``/etc/crio/crio.conf``), then every file under
  its drop-in directory (``/etc/crio/crio.conf.d``), recursively, in lexical
  order (Go's ``filepath.Walk``), whatever the file name; each file is
  decoded into the configuration the files before it built. A key set in a
  later file wins; the tables of ``crio.runtime.runtimes`` (and
  ``crio.runtime.workloads``) are entries of a Go map, and a later file's
  entry replaces the earlier one whole (BurntSushi/toml fills a fresh value
  per map entry).
* The collection owns one drop-in (``99-nvidia.conf``): the whole file is
  ours, so ``absent`` removes it and nothing else is edited, but by
  ``take_over`` (``crio.takeover``: a definition of the runtime in a drop-in
  read after ours, commented out, and put back by ``absent``).
* The nvidia runtime copies the default runtime's table whole, as NVIDIA's
  ``nvidia-ctk runtime configure`` does, except for the keys in NOT_COPIED;
  its monitor (``monitor_path``, ``monitor_cgroup``, ``monitor_env``) is
  written explicitly, with the deprecated ``conmon``, ``conmon_cgroup`` and
  ``conmon_env`` of ``[crio.runtime]`` winning as CRI-O makes them win, and
  ``monitor_cgroup`` checked against ``cgroup_manager`` as CRI-O checks it at
  start.
* CDI (CRI-O 1.24 and later, always on): the specs are read from ``[crio.runtime] cdi_spec_dirs`` (built-in
  ``["/etc/cdi", "/var/run/cdi"]``), a list a later file replaces whole. With ``cdi: true`` the drop-in sets it to
  what the other files make it plus the directories missing there, and only when one is missing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import re

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import dirs
from ansible_collections.gpufleet.nvidia.plugins.module_utils.formats import toml_splice as ts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import DocumentError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.options import DISRUPTION, Options

DEFAULT_CONFIG = '/etc/crio/crio.conf'
DEFAULT_DIR = '/etc/crio/crio.conf.d'
DEFAULT_PATH = DEFAULT_DIR + '/99-nvidia.conf'
MAX_CONFIG_BYTES = 1024 * 1024
RUNTIME_PACKAGE = 'nvidia-container-toolkit'
CDI_SPEC_DIRS = ('crio', 'runtime', 'cdi_spec_dirs')
# CRI-O's built-in cdi_spec_dirs (pkg/config/config.go: cdi.DefaultSpecDirs of container-device-interface).
CDI_DEFAULT_DIRS = dirs.DEFAULT_DIRS
# The first CRI-O with CDI (cdi_spec_dirs, cri-o/cri-o a0d3fd8 "config,cli: add configuration for CDI.").
CDI_FROM = (1, 24, 0)
MARK = 'gpufleet.nvidia crio_runtime'
HEADER = ('# %s: this file is written by Ansible and removed by state=absent.' % MARK,
          '# Change the task, not this file: the next run writes it again.')

RUNTIME = ('crio', 'runtime')
RUNTIMES = RUNTIME + ('runtimes',)
# Go maps in CRI-O's config: a later file's entry replaces the earlier entry whole.
MAP_TABLES = (RUNTIMES, RUNTIME + ('workloads',))
# Lists CRI-O appends across files (without duplicates, the last one kept) instead of replacing.
APPENDED_LISTS = (('crio', 'storage_option'),)
OCI = 'oci'
MONITORED_TYPES = ('', OCI)  # the types whose monitor fields CRI-O fills from conmon_* (TranslateMonitorFields)
SYSTEMD_MONITOR_CGROUP = 'system.slice'
# The handler keys the nvidia runtime sets itself: its binary and type, and the monitor (written explicitly, since a
# reload skips the start-time translation from conmon_*).
OWN = ('runtime_path', 'runtime_type', 'monitor_path', 'monitor_cgroup', 'monitor_env')
# The template's keys not copied (docs/crio.md, "what is copied from it"): runtime_root (nvidia-container-runtime hands
# over to runc, whose own root applies), platform_runtime_paths (another binary per platform: it would replace
# nvidia-container-runtime for those pods), inherit_default_runtime (CRI-O would overwrite runtime_path with the
# default's).
NOT_COPIED = ('runtime_root', 'platform_runtime_paths', 'inherit_default_runtime')
# The built-in default_runtime: "runc" up to 1.30, "crun" from 1.31.
CRUN_DEFAULT_FROM = (1, 31, 0)
# crio.conf(5) documents crio.runtime.runtimes and default_runtime as reloaded on SIGHUP from 1.26.0
# (cri-o/cri-o a3fb007, "Reload runtime configs on reload").
RELOAD_DOCUMENTED_FROM = (1, 26, 0)
# ... but the reload updates only the server's copy of the configuration: the OCI runtime that creates
# sandboxes keeps the map it started with (cri-o/cri-o#10202, open; server/server.go stores `*config`).
# No released CRI-O is known to apply a reloaded runtime, so `auto` restarts. Set to the first version
# with the fix once one is released.
RELOAD_EFFECTIVE_FROM = None


def binary_version(text):
    """``(major, minor, patch)`` from ``crio --version`` ("crio version 1.29.1"), or None."""
    match = re.search(r'(?:^|\s)v?(\d+)\.(\d+)\.(\d+)', text or '')
    return tuple(int(part) for part in match.groups()) if match else None


def builtin_default_runtime(version):
    if version is None:
        return None
    return 'crun' if tuple(version) >= CRUN_DEFAULT_FROM else 'runc'


def reload_applies_runtimes(version, effective_from=RELOAD_EFFECTIVE_FROM):
    """Whether a SIGHUP makes this CRI-O run a changed runtime table (see RELOAD_EFFECTIVE_FROM)."""
    return effective_from is not None and version is not None and tuple(version) >= tuple(effective_from)


def walk_order(paths):
    """Relative paths in the order CRI-O applies them (``filepath.Walk``: names sorted per directory)."""
    return sorted(paths, key=lambda path: path.split('/'))


# The keys of CRI-O's own configuration this collection reads or writes, as CRI-O documents them. Its decoder
# (BurntSushi's toml) also matches them in any other case: a file with one so written is refused
# (``formats.toml_splice.check_key_case``; docs/security.md).
OWN_KEYS = ('crio', 'runtime', 'runtimes', 'workloads', 'default_runtime', 'cdi_spec_dirs', 'storage_option',
            'inherit_default_runtime', 'platform_runtime_paths', 'runtime_root') + OWN
# Tables whose keys are names (runtimes, workloads), whose case CRI-O keeps.
NAME_TABLES = ('runtimes', 'workloads')


def loads(text, path):
    """The values of TOML ``text``; a DocumentError (nothing changed) when it is not valid TOML or writes one of
    CRI-O's own keys in another case than ``OWN_KEYS``."""
    values = ts.parse(text, path, 'CRI-O would refuse to start with it. Nothing was changed.')
    return ts.check_key_case(text, values, path, OWN_KEYS, NAME_TABLES, 'CRI-O')


get = ts.get


class Source(object):
    """One file CRI-O reads: ``path``, ``text``, ``values``, ``ours`` (the collection's drop-in), ``main``, ``host``
    (the ``host.files.HostFile`` it was read from, for a file the run may write; None in a plan on texts)."""

    def __init__(self, path, text, ours=False, main=False, host=None):
        self.path = path
        self.text = text
        self.ours = ours
        self.main = main
        self.host = host
        self.values = loads(text, path)

    def line_of(self, key_path):
        """The line where ``key_path`` (a table or a key) is first written, or None (``toml_splice.key_line``)."""
        return ts.key_line(self.text, self.path, key_path)


def merge(base, values, origins, source, path=()):
    """Decode ``values`` over ``base`` as CRI-O does; ``origins`` records the file of each map entry and key."""
    for key, value in values.items():
        here = path + (key,)
        if path in MAP_TABLES or not (isinstance(value, dict) and isinstance(base.get(key), dict)):
            if here in APPENDED_LISTS and isinstance(value, list) and isinstance(base.get(key), list):
                joined = list(base[key]) + list(value)
                value = [item for index, item in enumerate(joined) if item not in joined[index + 1:]]
            base[key] = copy.deepcopy(value)
            origins[here] = source
            if isinstance(value, dict):
                for inner in _leaves(value, here):
                    origins[inner] = source
        else:
            origins.setdefault(here, source)
            merge(base[key], value, origins, source, here)
    return base


def _leaves(values, path):
    for key, value in values.items():
        yield path + (key,)
        if isinstance(value, dict):
            yield from _leaves(value, path + (key,))


class Effective(object):
    """The configuration CRI-O builds from ``sources`` (in its order): ``values`` and ``origins``."""

    def __init__(self, sources, version=None):
        self.sources = list(sources)
        self.version = version
        self.values = {}
        self.origins = {}
        for source in self.sources:
            merge(self.values, source.values, self.origins, source)

    def get(self, path, default=None):
        return get(self.values, path, default)

    @property
    def runtimes(self):
        runtimes = self.get(RUNTIMES, {})
        return runtimes if isinstance(runtimes, dict) else {}

    @property
    def default_runtime(self):
        return self.get(RUNTIME + ('default_runtime',)) or builtin_default_runtime(self.version)

    @property
    def cdi_spec_dirs(self):
        """The directories CRI-O reads CDI specs from: the last file's ``cdi_spec_dirs``, else its built-in list."""
        value = self.get(CDI_SPEC_DIRS, CDI_DEFAULT_DIRS)
        return list(value) if isinstance(value, (list, tuple)) else value

    @property
    def cgroup_manager(self):
        return self.get(RUNTIME + ('cgroup_manager',)) or 'systemd'

    def origin(self, path):
        return self.origins.get(tuple(path))


# crio_runtime's argument spec: each option's one declaration (the module, node_state and Request read it).
SPEC = dict(
    path=dict(type='path', default=DEFAULT_PATH),
    config_path=dict(type='path', default=DEFAULT_CONFIG),
    config_dir=dict(type='path', default=DEFAULT_DIR),
    name=dict(type='str', default='nvidia'),
    runtime_path=dict(type='str', default='/usr/bin/nvidia-container-runtime'),
    default_runtime=dict(type='bool'),
    cdi=dict(type='bool'),
    cdi_spec_dirs=dict(type='list', elements='str', default=list(CDI_DEFAULT_DIRS)),
    take_over=dict(type='bool', default=False),
    state=dict(type='str', default='present', choices=['present', 'absent']),
    backup=dict(type='bool', default=False),
    apply=dict(type='str', default='auto', choices=['auto', 'reload', 'restart', 'none']),
    disruption=dict(DISRUPTION),
    service_name=dict(type='str', default='crio'),
    apply_timeout=dict(type='int', default=60),
)


class Request(Options):
    """What the user asked for: these options of the module (``SPEC``), ``apply_timeout`` as ``timeout``."""

    SPEC = SPEC
    OPTIONS = ('path', 'config_path', 'config_dir', 'name', 'runtime_path', 'default_runtime', 'cdi', 'cdi_spec_dirs',
               'take_over', 'state', 'apply', 'apply_timeout', 'disruption')
    NAMES = {'apply_timeout': 'timeout'}


class Plan(object):
    """``text`` (the drop-in's new text, or None: no file), ``changes``, ``warnings``, ``before``/``after``
    (the effective configurations), ``runtime`` (the table written, or None), ``cdi_spec_dirs`` (the list
    written, or None), ``edits`` (the other files ``take_over`` changes: ``[(Source, new text)]``)."""

    def __init__(self, text, changes, warnings, before, after, runtime, cdi_spec_dirs=None):
        self.text = text
        self.changes = changes
        self.warnings = warnings
        self.before = before
        self.after = after
        self.runtime = runtime
        self.cdi_spec_dirs = cdi_spec_dirs
        self.edits = []


def monitor_cgroup(effective, handler, runtime_type, name):
    """The nvidia runtime's ``monitor_cgroup``: what the default runtime runs with, as CRI-O would check it."""
    conmon_cgroup = effective.get(RUNTIME + ('conmon_cgroup',)) or ''
    own = handler.get('monitor_cgroup') or ''
    if runtime_type not in MONITORED_TYPES:
        return own or None  # conmon-rs ("pod"): CRI-O leaves it as written
    value = conmon_cgroup or own
    if effective.cgroup_manager == 'cgroupfs':
        if value == SYSTEMD_MONITOR_CGROUP:
            value = ''  # CRI-O turns the systemd default into "" under cgroupfs
        if value not in ('pod', ''):
            raise DocumentError('the default runtime "%s" runs conmon in the cgroup "%s", which CRI-O refuses with '
                                'cgroup_manager = "cgroupfs" ("cgroupfs manager conmon cgroup should be \'pod\' or '
                                'empty"). Nothing was changed; fix conmon_cgroup / monitor_cgroup first.'
                                % (name, value))
        return value
    if value == '':
        return SYSTEMD_MONITOR_CGROUP
    if value != 'pod' and not value.endswith('.slice'):
        raise DocumentError('the default runtime "%s" runs conmon in the cgroup "%s", which CRI-O refuses with '
                            'cgroup_manager = "systemd" ("conmon cgroup should be \'pod\' or a systemd slice"). '
                            'Nothing was changed; fix conmon_cgroup / monitor_cgroup first.' % (name, value))
    return value


def desired_runtime(effective, request, warnings):
    """The nvidia runtime's table, as ``[(key, value)]``: the runtime path, the default runtime's monitor, and every
    other key of the default runtime's table as the merged configuration has it, but NOT_COPIED."""
    default_name = effective.default_runtime
    handler = effective.runtimes.get(default_name) if default_name else None
    if not isinstance(handler, dict):
        handler = {}
    runtime_type = handler.get('runtime_type') or OCI
    if runtime_type not in (OCI, 'pod'):
        warnings.append('the default runtime "%s" is of type "%s"; the nvidia runtime is an OCI runtime and gets '
                        'runtime_type = "oci" with conmon.' % (default_name, runtime_type))
        runtime_type, handler = OCI, {}
    table = [('runtime_path', request.runtime_path), ('runtime_type', runtime_type)]
    monitored = runtime_type in MONITORED_TYPES
    path = (monitored and effective.get(RUNTIME + ('conmon',))) or handler.get('monitor_path')
    if path:
        table.append(('monitor_path', path))
    cgroup = monitor_cgroup(effective, handler, runtime_type, default_name)
    if cgroup is not None:
        table.append(('monitor_cgroup', cgroup))
    env = (monitored and effective.get(RUNTIME + ('conmon_env',))) or handler.get('monitor_env')
    if env:
        table.append(('monitor_env', list(env)))
    table += [(key, copy.deepcopy(handler[key])) for key in sorted(handler) if key not in OWN + NOT_COPIED]
    return table


def value_text(value):
    """A value as TOML text; a table as an inline table (a template's ``default_annotations``)."""
    if isinstance(value, dict):
        return '{%s}' % ', '.join('%s = %s' % (ts.quote_key(key), value_text(item)) for key, item in value.items())
    if isinstance(value, list):
        return '[%s]' % ', '.join(value_text(item) for item in value)
    return ts.scalar(value)


def render(request, default_line, table, cdi_dirs=None):
    lines = list(HEADER)
    if default_line or cdi_dirs:
        lines += ['', '[%s]' % ts.dotted(RUNTIME)]
    if default_line:
        lines.append('default_runtime = %s' % ts.string(request.name))
    if cdi_dirs:
        lines.append('cdi_spec_dirs = %s' % value_text(list(cdi_dirs)))
    if table:
        lines += ['', '[%s]' % ts.dotted(RUNTIMES + (request.name,))]
        lines += ['%s = %s' % (ts.quote_key(key), value_text(value)) for key, value in table]
    return '\n'.join(lines) + '\n'


def is_ours(text):
    return text.startswith(HEADER[0])


def split(sources, path):
    """``(ours or None, the others)``; a file at our path that we did not write is refused."""
    ours = [source for source in sources if source.path == path]
    if ours and not is_ours(ours[0].text):
        raise DocumentError('%s exists and was not written by this module (its first line is not "%s"). Nothing '
                            'was changed; move it away or choose another path.' % (path, HEADER[0]))
    return (ours[0] if ours else None), [source for source in sources if source.path != path]


def plan_present(sources, request, version=None):
    """The drop-in for ``state=present``. ``sources``: every file CRI-O reads, in its order, our drop-in at
    ``request.path`` included when it exists."""
    ours, others = split(sources, request.path)
    before = Effective(sources, version)
    base = Effective(others, version)
    changes, warnings = [], []
    name = request.name
    origin = base.origin(RUNTIMES + (name,))
    table = None
    theirs = base.runtimes.get(name) if origin is not None else None
    if origin is not None and isinstance(theirs, dict) and theirs.get('runtime_path') == request.runtime_path:
        warnings.append('%s defines the runtime "%s" with the same runtime_path; it was left as it is.'
                        % (origin.path, name))
    elif rival(base, request) is not None:
        raise DocumentError(defined_later(base, request) + ' Nothing was changed; set take_over: true to have this '
                            'module comment that definition out (kept in the file for state=absent to put back) and '
                            'write its own, or remove that definition, or give this drop-in a name that sorts after it.')
    else:
        table = desired_runtime(base, request, warnings)
        if origin is not None:
            # CRI-O's own override: the drop-in, read later, replaces the earlier table whole; absent brings it back.
            warnings.append('%s defines the runtime "%s" at line %s with runtime_path %r; %s, read after it, replaces '
                            'that table whole (runtime_path %r). state=absent brings the earlier one back.'
                            % (origin.path, name, origin.line_of(RUNTIMES + (name,)), theirs.get('runtime_path')
                               if isinstance(theirs, dict) else theirs, request.path, request.runtime_path))
    want_default = request.default_runtime
    if want_default is None:
        want_default = ours is not None and get(ours.values, RUNTIME + ('default_runtime',)) == name
    cdi_dirs, added = desired_cdi(ours, base, request, version, warnings)
    text = render(request, want_default, table, cdi_dirs) if (table or want_default or cdi_dirs) else None
    order = placed_in_order(sources, request.path, text)
    later = read_after(order, request.path, RUNTIME + ('default_runtime',)) if want_default else []
    if later:
        raise DocumentError('%s is read after %s and sets default_runtime = %s, which CRI-O applies last. '
                            'Nothing was changed; remove it there or give this drop-in a later name.'
                            % (later[0].path, request.path,
                               ts.string(str(get(later[0].values, RUNTIME + ('default_runtime',))))))
    if cdi_dirs:
        check_cdi_read_last(order, request, cdi_dirs, warnings)
    previous = ours.text if ours is not None else None
    if text != previous:
        if previous is None:
            changes.append('drop-in %s created' % request.path)
        elif text is None:
            changes.append('drop-in %s removed (nothing is left for it to set)' % request.path)
        else:
            changes.append('drop-in %s rewritten' % request.path)
        if table and (ours is None or get(ours.values, RUNTIMES + (name,)) != dict(table)):
            changes.append('runtime "%s" (%s)' % (name, ', '.join('%s = %s' % (k, value_text(v)) for k, v in table)))
        was_default = ours is not None and get(ours.values, RUNTIME + ('default_runtime',)) == name
        if want_default and not was_default:
            changes.append('default_runtime = "%s"' % name)
        elif was_default and not want_default:
            changes.append('default_runtime no longer set here (CRI-O uses "%s")'
                           % (base.default_runtime or 'its built-in default'))
        changes.extend(cdi_changes(ours, cdi_dirs, added, base))
    after = Effective(order, version)
    check_default(after, request.path)
    return Plan(text, changes, warnings, before, after, table, cdi_dirs)


def rival(base, request):
    """The file whose table of the runtime CRI-O would use instead of the drop-in's (``base``: the configuration of
    the other files): one read after the drop-in, with another ``runtime_path``; else None."""
    origin = base.origin(RUNTIMES + (request.name,))
    theirs = base.runtimes.get(request.name)
    if origin is None or read_before(origin, request.path) or (
            isinstance(theirs, dict) and theirs.get('runtime_path') == request.runtime_path):
        return None
    return origin


def defined_later(base, request):
    """What ``rival`` found, in words (a refusal's first sentence)."""
    origin, name = rival(base, request), request.name
    theirs = base.runtimes.get(name)
    return ('%s: the runtime "%s" is already defined at line %s, with runtime_path %r (wanted %r), in a file CRI-O '
            'reads after %s: it takes the whole table from the file it reads last, so this drop-in would not count.'
            % (origin.path, name, origin.line_of(RUNTIMES + (name,)), theirs.get('runtime_path')
               if isinstance(theirs, dict) else theirs, request.runtime_path, request.path))


def checked_cdi_dirs(values, origin):
    """``values`` (a ``cdi_spec_dirs`` value) as a list of paths; refused when CRI-O could not decode it."""
    if not isinstance(values, list) or not all(isinstance(item, str) for item in values):
        raise DocumentError('%s: cdi_spec_dirs = %s is not a list of strings; CRI-O would refuse to start with it. '
                            'Nothing was changed.' % (origin, value_text(values)))
    return list(values)


def effective_cdi_dirs(effective):
    """The directories CRI-O reads CDI specs from in ``effective``, checked."""
    origin = effective.origin(CDI_SPEC_DIRS)
    return checked_cdi_dirs(effective.cdi_spec_dirs, origin.path if origin else 'cdi_spec_dirs')


def desired_cdi(ours, base, request, version, warnings):
    """``(the drop-in's cdi_spec_dirs or None, the directories it adds)``.

    ``cdi`` true: what the other files make it (``base``, or CRI-O's built-in list) plus the wanted directories it
    lacks, their entries first; None when none lacks. False: None. None: what the drop-in says now."""
    if request.cdi is None:
        kept = get(ours.values, CDI_SPEC_DIRS) if ours is not None else None
        return (checked_cdi_dirs(kept, request.path) if kept is not None else None), []
    if not request.cdi:
        return None, []
    for path in request.cdi_spec_dirs or []:
        if not isinstance(path, str) or not path.startswith('/'):
            raise DocumentError('cdi_spec_dirs: %r is not an absolute path. Nothing was changed.' % (path,))
    if version is not None and tuple(version) < CDI_FROM:
        warnings.append('CRI-O %s has no CDI support (cdi_spec_dirs is read from 1.24 on); upgrade CRI-O to use the '
                        'CDI spec.' % '.'.join(str(part) for part in version))
    theirs = effective_cdi_dirs(base)
    added = dirs.missing_directories(theirs, request.cdi_spec_dirs or [])
    return (theirs + added if added else None), added


def read_after(order, path, key):
    """The files of ``order`` CRI-O reads after the drop-in ``path`` that set ``key``."""
    paths = [source.path for source in order]
    later = order[paths.index(path) + 1:] if path in paths else []
    return [source for source in later if get(source.values, key) is not None]


def check_cdi_read_last(order, request, cdi_dirs, warnings):
    """A file read after the drop-in that sets cdi_spec_dirs wins whole: refused for ``cdi: true``, a warning when
    the drop-in only keeps what it said (``cdi`` omitted)."""
    later = read_after(order, request.path, CDI_SPEC_DIRS)
    if not later:
        return
    last = later[-1]
    what = ('%s is read after %s and sets cdi_spec_dirs = %s; CRI-O takes the list whole from the last file that sets '
            'it, so the drop-in\'s %s would not count'
            % (last.path, request.path, value_text(get(last.values, CDI_SPEC_DIRS)), value_text(list(cdi_dirs))))
    if request.cdi:
        raise DocumentError('%s. Nothing was changed; add the directories there, remove the setting there, or give '
                            'this drop-in a name that sorts after it.' % what)
    warnings.append(what + '.')


def cdi_changes(ours, cdi_dirs, added, base):
    previous = get(ours.values, CDI_SPEC_DIRS) if ours is not None else None
    if cdi_dirs == previous:
        return []
    if cdi_dirs:
        return ['cdi_spec_dirs = %s%s' % (value_text(list(cdi_dirs)), (' (adds %s)' % ', '.join(added))
                                          if added else '')]
    return ['cdi_spec_dirs no longer set here (CRI-O reads %s)' % value_text(base.cdi_spec_dirs)]


def read_before(source, path):
    """Whether CRI-O reads ``source`` before the drop-in ``path`` (the main file comes first)."""
    return source.main or walk_order([source.path, path])[0] == source.path


def placed_in_order(sources, path, text):
    """``sources`` with our drop-in's text replaced, or put where CRI-O's walk reads it (None: without it).

    The main file comes first, then the drop-ins by ``walk_order`` (all under one directory)."""
    main = [source for source in sources if source.main]
    dropins = [source for source in sources if not source.main and source.path != path]
    if text is not None:
        dropins.append(Source(path, text, ours=True))
    by_path = dict((source.path, source) for source in dropins)
    return main + [by_path[item] for item in walk_order(list(by_path))]


def check_default(effective, path):
    default = effective.default_runtime
    if default and effective.get(RUNTIME + ('default_runtime',)) and default not in effective.runtimes:
        origin = effective.origin(RUNTIME + ('default_runtime',))
        raise DocumentError('%s: default_runtime = "%s" (set in %s) would name no runtime; CRI-O would refuse to '
                            'start. Nothing was changed.' % (path, default, origin.path if origin else 'a file'))


def plan_absent(sources, request, version=None, put_back=False):
    """``state=absent``: our drop-in removed (text None), nothing else; refused when CRI-O would not start.
    ``put_back``: ``sources`` hold a definition ``take_over`` commented out, uncommented (``crio.takeover``)."""
    ours, others = split(sources, request.path)
    before = Effective(sources, version)
    after = Effective(others, version)
    changes, warnings = [], []
    if ours is not None:
        changes.append('drop-in %s removed' % request.path)
        check_default(after, request.path)
        theirs = after.runtimes.get(request.name)
        if get(ours.values, RUNTIMES + (request.name,)) is not None and isinstance(theirs, dict):
            warnings.append('the runtime "%s" is back as %s defines it (runtime_path %r).'
                            % (request.name, after.origin(RUNTIMES + (request.name,)).path,
                               theirs.get('runtime_path')))
    elif after.origin(RUNTIMES + (request.name,)) is not None and not put_back:
        warnings.append('%s defines the runtime "%s"; it was not written by this module and was left as it is.'
                        % (after.origin(RUNTIMES + (request.name,)).path, request.name))
    return Plan(None, changes, warnings, before, after, None)


def plan(sources, request, version=None):
    if request.state == 'absent':
        return plan_absent(sources, request, version)
    return plan_present(sources, request, version)
