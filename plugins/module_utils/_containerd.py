# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""containerd's config.toml rules: schema, the nvidia runtime's tables, the plans, the dump comparison.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It is pure: text in, text and findings out (docs/containerd.md
has the measurements these rules stand on).

* The schema comes from the installed containerd and the file together:
  containerd 1.x reads ``version = 1`` (plugin ids, ``plugins.cri``) and 2
  (``plugins."io.containerd.grpc.v1.cri"``) and silently ignores a
  ``version = 3`` file's ``io.containerd.cri.v1.*`` tables, so 3 on 1.x is
  refused; containerd 2.x reads 2 (migrated) and 3
  (``plugins."io.containerd.cri.v1.runtime"``).
* The runtime is inserted into the file that holds the CRI table, as one
  marked block appended at its end: no existing line changes. containerd
  1.x replaces the whole CRI table with an imported file's, so a drop-in
  would lose the main file's CRI settings.
* Defining any runtime replaces containerd's default ``runtimes`` map: when
  the file defines none, the block also carries the default runtimes
  (``runc``) as ``containerd config dump`` shows them, or the CRI plugin
  fails ("no corresponding runtime configured ... runc").
* The new runtime copies the template runtime whole, as NVIDIA's tool does:
  the default runtime the CRI plugin really uses (before this module made
  its own the default), else ``runc``, else ``crun``; only ``BinaryName`` is
  its own, and only a runc v2 runtime is a template.
* ``default_runtime_name`` only on request, its previous value kept in a
  marker comment so that ``absent`` puts it back.
* A runtime of that name already defined differently is refused, unless
  ``take_over``: its lines are then commented out with a marker (kept for
  ``absent``, which uncomments them) and the runtime is written in the block.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import posixpath
import re

from ansible_collections.gpufleet.nvidia.plugins.module_utils import _cdi_dirs
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _toml_splice as ts
from ansible_collections.gpufleet.nvidia.plugins.module_utils._errors import DocumentError

DEFAULT_PATH = '/etc/containerd/config.toml'
MAX_CONFIG_BYTES = 1024 * 1024
RUNC_V2 = 'io.containerd.runc.v2'
RUNTIME_PACKAGE = 'nvidia-container-toolkit'
MARK = 'gpufleet.nvidia containerd_runtime'
BEGIN = '# BEGIN %s: added by Ansible, removed by state=absent' % MARK
END = '# END %s' % MARK
# Added to the BEGIN line when the file ended without a line ending: state=absent gives those exact bytes back.
NO_FINAL_NEWLINE = ' (the file had no final newline)'


def key_mark(key):
    """The marker comment above a key whose value this module changed in place; its previous value follows."""
    return '# %s: %s was ' % (MARK, key)


def key_added(key):
    """The marker comment above a key this module added to a table of the user's."""
    return '# %s: %s added' % (MARK, key)


# Files in the field carry these two exact texts.
DEFAULT_MARK = key_mark('default_runtime_name')
DEFAULT_ADDED = key_added('default_runtime_name')
# The CRI plugin's CDI settings (containerd 1.7 and later): in the file's CRI table (Schema.cri), in the dump's.
CDI_KEYS = ('enable_cdi', 'cdi_spec_dirs')
# containerd's own default_runtime_name (1.x and 2.x), and the name the 1.x CRI plugin gives the deprecated
# `default_runtime` table when it has a runtime_type (it then is the default, whatever default_runtime_name says).
CONTAINERD_DEFAULT = 'runc'
LEGACY_DEFAULT = 'default'
# Where the template comes from after the default runtime, in NVIDIA's order.
TEMPLATES = ('runc', 'crun')
ZERO = ('', 0, False, [], {}, None)


class Schema(object):
    """Where the CRI runtimes live for one config version."""

    def __init__(self, version, cri):
        self.version = version
        self.cri = cri
        self.containerd = cri + ('containerd',)
        self.runtimes = self.containerd + ('runtimes',)

    def runtime(self, name):
        return self.runtimes + (name,)


SCHEMAS = {
    1: Schema(1, ('plugins', 'cri')),
    2: Schema(2, ('plugins', 'io.containerd.grpc.v1.cri')),
    3: Schema(3, ('plugins', 'io.containerd.cri.v1.runtime')),
}


def binary_version(text):
    """``(major, minor, patch)`` from ``containerd --version``, or None."""
    match = re.search(r'\sv?(\d+)\.(\d+)\.(\d+)', text or '')
    return tuple(int(part) for part in match.groups()) if match else None


def dump_schema(version):
    """The schema ``containerd config dump`` writes: 2 on 1.x, 3 on 2.x."""
    return SCHEMAS[3] if version and version[0] >= 2 else SCHEMAS[2]


def choose_schema(version, file_version, path):
    """The schema to write in ``path`` for the installed containerd ``version`` and the file's ``version`` key."""
    shown = '.'.join(str(part) for part in version) if version else 'unknown'
    if file_version is not None and (not isinstance(file_version, int) or isinstance(file_version, bool)):
        raise DocumentError('%s: "version" is %r, not a number; the file was left untouched.' % (path, file_version))
    if not version:
        raise DocumentError('%s: cannot tell the installed containerd\'s version; nothing was changed. '
                            'Is containerd installed?' % path)
    if version[0] < 2:
        if file_version in (None, 0, 1):
            return SCHEMAS[1]
        if file_version == 2:
            return SCHEMAS[2]
        raise DocumentError('%s says version = %s, but the installed containerd %s reads config versions 1 and 2 '
                            'only: it starts without a word and ignores the io.containerd.cri.v1.* tables of a '
                            'version 3 file. Nothing was changed; write the file as version 2 for this containerd.'
                            % (path, file_version, shown))
    if file_version in (2, 3):
        return SCHEMAS[file_version]
    # Measured on 2.1.9: a version 1 file (no `version` line, or 1) is migrated on every start, and its CRI runtime
    # tables (plugins.cri.containerd.runtimes.*) are dropped on the way ("Ignoring unknown key in TOML for plugin");
    # `containerd config migrate` drops them too. So neither is a way forward for a file that has runtimes.
    lost = ('containerd %s migrates such a file on every start and drops its CRI runtime tables '
            '(plugins.cri.containerd.runtimes.*) in that migration, as `containerd config migrate` does'
            % shown)
    if file_version is None:
        raise DocumentError('%s has no "version" line (an empty file has none): containerd %s reads such a file as '
                            'the deprecated version 1; %s. This module writes versions 2 and 3 only. Nothing was '
                            'changed; put `version = 3` at the top of the file (an empty file: `version = 3` alone, '
                            'or `containerd config default` output) and write its CRI tables under the version 3 ids '
                            '(plugins."io.containerd.cri.v1.runtime"), then run again.' % (path, shown, lost))
    if file_version in (0, 1):
        raise DocumentError('%s says version = %s: %s. This module writes versions 2 and 3 only. Nothing was '
                            'changed; write the file as version 3 (its CRI tables under plugins."io.containerd.cri.v1.'
                            'runtime") or version 2 (plugins."io.containerd.grpc.v1.cri") by hand, keeping its '
                            'runtimes, then run again.' % (path, file_version, lost))
    raise DocumentError('%s says version = %s; the installed containerd %s reads versions 2 and 3. Nothing was '
                        'changed; write version = 3.' % (path, file_version, shown))


# The plugin ids that make up the CRI service (1.x: "cri" is the short id containerd also accepts; 2.x: the
# runtime and images plugins and the gRPC service), in the form disabled_plugins names them.
CRI_PLUGIN_IDS = ('cri', 'io.containerd.grpc.v1.cri', 'io.containerd.cri.v1.runtime', 'io.containerd.cri.v1.images')


def cri_disabled(values):
    """The entry of ``disabled_plugins`` (in an effective configuration) that turns the CRI plugin off, or None."""
    for entry in values.get('disabled_plugins') or []:
        if entry in CRI_PLUGIN_IDS:
            return entry
    return None


# The keys of containerd's own configuration structs that this collection reads (or copies for a runtime), as
# containerd documents them. Its decoders also read them in other cases (1.6 and 1.7: the upper case too; 2.x:
# any case; docs/security.md): a file with one in another case is refused (``_toml_splice.check_key_case``).
OWN_KEYS = ('version', 'imports', 'disabled_plugins', 'required_plugins', 'plugins', 'containerd', 'runtimes',
            'default_runtime_name', 'default_runtime', 'untrusted_workload_runtime', 'runtime_type', 'runtime_path',
            'runtime_engine', 'runtime_root', 'options', 'BinaryName', 'SystemdCgroup', 'enable_cdi', 'cdi_spec_dirs',
            'sandboxer', 'privileged_without_host_devices', 'base_runtime_spec', 'cni_conf_dir', 'snapshotter')
# Tables whose keys are names (plugin ids, runtime names), whose case containerd keeps.
NAME_TABLES = ('plugins', 'runtimes')


def loads(text, path):
    """The values of config file ``text``; a DocumentError (the file untouched) when it is not valid TOML or writes
    one of containerd's own keys in another case than ``OWN_KEYS``."""
    values = loads_dump(text, path)
    return ts.check_key_case(text, values, path, OWN_KEYS, NAME_TABLES, 'containerd')


def loads_dump(text, what):
    """The values of TOML that containerd printed (``config dump``: its own spelling, nothing to check)."""
    return ts.parse(text, what, 'containerd would refuse it too. The file was left untouched.')


get = ts.get


class Config(object):
    """One config file, read once: ``text``, ``values`` (tomli), ``doc`` (spans), ``block`` (ours, or None)."""

    def __init__(self, text, path):
        self.text = text
        self.path = path
        self.values = loads(text, path)
        self.doc = ts.scan(text, path)
        self.block = find_block(text, path)
        self.version = self.values.get('version')
        # The BEGIN line a (re)written block gets: the block's own, so that a run keeps what it says.
        self.begin_line = BEGIN
        if self.block is not None:
            begin = text.find(BEGIN, self.block[0])
            self.begin_line = text[begin:text.find('\n', begin)].rstrip('\r')

    def ends_without_newline(self):
        return bool(self.text) and not self.text.endswith('\n')

    def defined_outside_block(self, prefix):
        """Headers or keys at or below ``prefix`` that are not in our block."""
        size = len(prefix)
        found = [h for h in self.doc.headers if h.path[:size] == tuple(prefix) and not self.in_block(h.start)]
        found += [e for e in self.doc.entries if e.path[:size] == tuple(prefix) and not self.in_block(e.start)]
        return found

    def in_block(self, pos):
        return self.block is not None and self.block[0] <= pos < self.block[1]

    def block_runtimes(self, schema):
        """The runtime names our block defines (the ones added, and containerd's defaults it carries)."""
        size = len(schema.runtimes)
        return sorted(set(h.path[size] for h in self.doc.headers
                          if self.in_block(h.start) and len(h.path) > size and h.path[:size] == schema.runtimes))

    def added_runtimes(self, schema):
        """The runtimes of our block this module registered: each has a BinaryName (the defaults it carries do not)."""
        return [name for name in self.block_runtimes(schema)
                if (get(self.values, schema.runtime(name) + ('options',)) or {}).get('BinaryName')]

    def line_of(self, pos):
        return self.text.count('\n', 0, pos) + 1


def find_block(text, path):
    """``(start, end)`` of our marked block (with the blank line before it), or None."""
    begin = text.find(BEGIN)
    if begin < 0:
        return None
    if text.find(BEGIN, begin + 1) >= 0:
        raise DocumentError('%s holds the block "%s" twice; remove one by hand. The file was left untouched.'
                            % (path, MARK))
    end = text.find(END, begin)
    if end < 0 or (begin and text[begin - 1] != '\n'):
        raise DocumentError('%s: the block "%s" is damaged (no END line, or not at a line start); fix it by hand. '
                            'The file was left untouched.' % (path, MARK))
    newline = text.find('\n', end)
    end = len(text) if newline < 0 else newline + 1
    return ts.blank_line_before(text, begin), end


class Plan(object):
    """``text`` (the new file), ``changes`` (what changes, in words), ``warnings``, ``runtime`` (the runtime's
    settings, for ``present``), ``cdi_keys`` (the CDI keys whose effective value the plan may change)."""

    def __init__(self, text, changes, warnings, runtime=None, cdi_keys=()):
        self.text = text
        self.changes = changes
        self.warnings = warnings
        self.runtime = runtime
        self.cdi_keys = list(cdi_keys)


def nonzero(options):
    """Runtime options without zero values: the dump lists every option, a file only those set."""
    return dict((key, value) for key, value in (options or {}).items() if value not in ZERO)


# Runtime settings whose value is what the CRI plugin uses when the key is left out. containerd 2.x's dump shows
# `sandboxer = 'podsandbox'` for its default runc and `''` for a runtime a file defines without it, and its CRI plugin
# starts both on podsandbox (measured on 2.1.9, in the configuration it logs at start): copying it from runc would
# rewrite, and restart, every host upgraded from 1.x for no change in effect.
IMPLIED = {'sandboxer': 'podsandbox'}


def runtime_settings(runtime, top=True):
    """A runtime table as a file writes it: every key (nested tables too) without zero values, which the dump
    lists and a file leaves out, and without the settings the CRI plugin implies (``IMPLIED``)."""
    found = {}
    for key, value in (runtime or {}).items():
        if isinstance(value, dict):
            value = runtime_settings(value, False)
        if value not in ZERO and not (top and IMPLIED.get(key) == value):
            found[key] = copy.deepcopy(value)
    return found


def as_written(runtime, config, schema, name):
    """``runtime`` with the implied settings (``IMPLIED``) the block already writes for ``name``: a block an earlier
    release wrote stays byte for byte when it means the same."""
    have = get(config.values, schema.runtime(name))
    if config.block is None or not isinstance(have, dict):
        return runtime
    kept = dict(runtime)
    for key, value in IMPLIED.items():
        if have.get(key) == value and key not in kept:
            kept[key] = value
    return kept


def carried_runtime(runtime):
    """A runtime the block carries as the dump shows it: its settings, and its options whole, zeros included (what
    the dump of the new file must show again)."""
    found = runtime_settings(runtime)
    found['runtime_type'] = runtime.get('runtime_type') or RUNC_V2
    if runtime.get('options'):
        found['options'] = copy.deepcopy(runtime['options'])
    return found


def runtime_lines(schema, name, runtime, indent):
    return table_lines(schema.runtime(name), runtime, indent, 0)


def table_lines(path, table, indent, depth):
    """``[path]`` and its keys (sorted, values first), then its sub-tables, indented by depth."""
    lines = ['%s[%s]' % (indent * depth, ts.dotted(path))]
    tables = []
    for key in sorted(table):
        if isinstance(table[key], dict):
            if table[key]:
                tables.append(key)
        else:
            lines.append('%s%s = %s' % (indent * (depth + 1), ts.quote_key(key), ts.scalar(table[key])))
    for key in tables:
        lines += table_lines(path + (key,), table[key], indent, depth + 1)
    return lines


def cri_runtimes(values, schema):
    """``(runtimes, default name)`` as the CRI plugin uses them. containerd 1.x's deprecated
    ``containerd.default_runtime`` table, when it has a runtime_type, becomes the runtime "default" and the default,
    whatever ``default_runtime_name`` says (measured in the configuration the 1.6 CRI plugin logs at start)."""
    runtimes = get(values, schema.runtimes)
    runtimes = dict(runtimes) if isinstance(runtimes, dict) else {}
    default = get(values, schema.containerd + ('default_runtime_name',)) or CONTAINERD_DEFAULT
    legacy = get(values, schema.containerd + ('default_runtime',))
    if isinstance(legacy, dict) and legacy.get('runtime_type'):
        runtimes[LEGACY_DEFAULT] = legacy
        default = LEGACY_DEFAULT
    return runtimes, default


def default_before_ours(config, schema, effective_default):
    """The default runtime as it was before this module made its own the default (the template follows it, so that
    ``default_runtime: true`` does not change what the runtime copies on the next run)."""
    entry = config.doc.entry(schema.containerd + ('default_runtime_name',))
    if entry is None:
        return effective_default
    marker = marker_before(config, entry)
    if marker is not None and marker[1] is not None:
        try:
            previous = ts.reader.loads('v = ' + marker[1]).get('v')
        except (ts.reader.TOMLDecodeError, ValueError, RecursionError):
            previous = None
        return previous if isinstance(previous, str) else effective_default
    if marker is not None or config.in_block(entry.start):
        return CONTAINERD_DEFAULT
    return effective_default


def choose_template(runtimes, default_name, name):
    """``(name, runtime)`` the new runtime copies, NVIDIA's order: the default runtime, runc, crun; never an nvidia*
    runtime or the runtime itself, and only a runc v2 runtime (BinaryName is an option of the runc v2 shim)."""
    for candidate in (default_name,) + TEMPLATES:
        runtime = runtimes.get(candidate)
        if candidate and candidate != name and not candidate.startswith('nvidia') and isinstance(runtime, dict) \
                and runtime.get('runtime_type', RUNC_V2) == RUNC_V2:
            return candidate, runtime
    return None, {}


def desired_runtime(request, template):
    """The runtime: the template's settings whole, runc v2, with our BinaryName."""
    want = runtime_settings(template)
    want['runtime_type'] = RUNC_V2
    want['options'] = dict(want.get('options') or {}, BinaryName=request.runtime_path)
    return want


def took_over_prefix(name):
    """The marker that comments out, line by line, a definition of ``name`` taken over (``take_over``)."""
    return '# %s took over %s: ' % (MARK, ts.quote_key(name))


def take_over(config, schema, name, splice):
    """Comment out every line that defines the runtime ``name`` outside our block; returns the line numbers."""
    path = schema.runtime(name)
    size = len(path)
    spans = [(h.start, config.doc.table_end(h)) for h in config.doc.headers
             if h.path[:size] == path and not config.in_block(h.start)]
    spans += [(e.start, e.end) for e in config.doc.entries
              if e.path[:size] == path and e.table[:size] != path and not config.in_block(e.start)]
    prefix = took_over_prefix(name)
    lines = []
    for start, end in sorted(spans):
        pos = start
        while pos < end:
            splice.insert(pos, prefix)
            lines.append(config.line_of(pos))
            newline = config.text.find('\n', pos, end)
            pos = end if newline < 0 else newline + 1
    return lines


def restore_taken_over(config, name, splice):
    """Uncomment the lines ``take_over`` commented out for ``name``; returns how many."""
    found = list(re.finditer('(?m)^' + re.escape(took_over_prefix(name)), config.text))
    for match in found:
        splice.remove(match.start(), match.end())
    return len(found)


def check_legacy_default(config, request, schema, legacy_in_effect):
    """``default_runtime: true`` has no effect while the deprecated ``default_runtime`` table is in effect."""
    if not (request.default_runtime and legacy_in_effect):
        return
    table = schema.containerd + ('default_runtime',)
    found = config.defined_outside_block(table)
    where = 'line %d sets' % config.line_of(found[0].start) if found else 'a file it imports sets'
    raise DocumentError(
        '%s: %s the deprecated table [%s] (with a runtime_type): the CRI plugin then takes that table as its default '
        'runtime, named "%s", whatever default_runtime_name says, so making "%s" the default would have no effect. '
        'Nothing was changed; move that runtime to [%s.NAME] and set default_runtime_name = "NAME" in [%s], or '
        'leave default_runtime unset to register "%s" beside it.'
        % (config.path, where, ts.dotted(table), LEGACY_DEFAULT, request.name, ts.dotted(schema.runtimes),
           ts.dotted(schema.containerd), request.name))


def plan_present(config, request, schema, before, dschema):
    """The new text for ``state=present``; ``before`` is the effective configuration (the dump's values, in the
    dump's schema ``dschema``)."""
    path, doc = config.path, config.doc
    dumped = get(before, dschema.runtimes, {}) or {}
    runtimes, effective_default = cri_runtimes(before, dschema)
    changes, warnings = [], []
    check_extendable(config, schema)
    check_legacy_default(config, request, schema, effective_default == LEGACY_DEFAULT)
    template_name, template = choose_template(runtimes, default_before_ours(config, schema, effective_default),
                                              request.name)
    want = desired_runtime(request, template)
    user_defined = config.defined_outside_block(schema.runtime(request.name))
    splice = ts.Splice(config.text)
    indent = key_indent(config)
    lines = [config.begin_line]
    if user_defined:
        have = runtime_settings(get(config.values, schema.runtime(request.name), {}))
        if have != want and not request.take_over:
            raise DocumentError(
                '%s: the runtime "%s" is already defined at line %d, differently (%s; wanted %s, copied from %s). '
                'Nothing was changed; set take_over: true to have this module comment that definition out (kept in '
                'the file for state=absent to put back) and write its own, or remove it, or choose another name.'
                % (path, request.name, config.line_of(user_defined[0].start), have, want,
                   'the runtime "%s"' % template_name if template_name else 'no runtime'))
    if not user_defined or have != want:
        if user_defined:
            taken = take_over(config, schema, request.name, splice)
            changes.append('the definition of runtime "%s" at lines %s commented out (state=absent puts it back)'
                           % (request.name, ', '.join(str(line) for line in taken)))
        own = schema.runtime(request.name)
        if not [d for d in config.defined_outside_block(schema.runtimes) if d.path[:len(own)] != own]:
            # The file defines no other runtime: defining one replaces containerd's defaults, so carry them.
            carried = sorted(dumped)
        else:
            # The runtimes the block already holds (other names registered here) stay.
            carried = config.block_runtimes(schema)
        for name in carried:
            if name != request.name and name in dumped:
                lines += runtime_lines(schema, name, as_written(carried_runtime(dumped[name]), config, schema, name),
                                       indent)
        lines += runtime_lines(schema, request.name, as_written(want, config, schema, request.name)
                               if not user_defined else want, indent)
    lines.append(END)
    default_lines = plan_default(config, request, schema, splice, indent, changes, warnings, effective_default)
    if default_lines:
        lines[-1:-1] = default_lines
    runtime_changes = len(changes)
    cdi_lines, cdi_keys = plan_cdi(config, request, schema, before, dschema, splice, indent, changes, warnings)
    kept_cdi = cdi_block_lines(schema, indent, block_cdi(config, schema))
    if len(lines) + len(cdi_lines) > 2:
        block_text = ''.join(line + doc.newline for line in lines[:-1] + cdi_lines + lines[-1:])
        if config.block is not None:
            start, end = config.block
            separator = config.text[start:config.text.find(BEGIN, start)]
            if config.text[start:end] != separator + block_text:
                splice.replace(start, end, separator + block_text)
                if config.text[start:end] != separator + ''.join(
                        line + doc.newline for line in lines[:-1] + kept_cdi + lines[-1:]):
                    changes.insert(runtime_changes, 'runtime "%s" updated in its block' % request.name)
        else:
            splice.append_lines(lines[:-1] + cdi_lines + lines[-1:], doc.newline)
            if len(lines) > 2:
                changes.insert(runtime_changes, 'runtime "%s" added (%s)'
                               % (request.name, ts.dotted(schema.runtime(request.name))))
    elif config.block is not None:
        splice.remove(*config.block)
        changes.append('the empty block removed')
    return Plan(splice.result(), changes, warnings, want, cdi_keys)


def check_extendable(config, schema):
    """A table written inline (``runtimes = {...}``) cannot get a new sub-table: say so before containerd does."""
    for entry in config.doc.entries:
        if schema.runtimes[:len(entry.path)] == entry.path:
            raise DocumentError('%s: line %d defines %s as an inline value, which TOML does not let another table '
                                'extend. Nothing was changed; write it as [%s] tables.'
                                % (config.path, config.line_of(entry.start), ts.dotted(entry.path),
                                   ts.dotted(entry.path)))


def plan_default(config, request, schema, splice, indent, changes, warnings, default_name):
    """Edits for ``default_runtime``; returns lines for the block (when the table must be created there)."""
    key = schema.containerd + ('default_runtime_name',)
    entry = config.doc.entry(key)
    ours = entry is not None and marker_before(config, entry) is not None
    in_block = entry is not None and config.in_block(entry.start)
    if request.default_runtime is None:
        # Left as it is; one our block holds (set by an earlier run) is written again with the block.
        if in_block:
            return ['[%s]' % ts.dotted(schema.containerd),
                    '%sdefault_runtime_name = %s' % (indent, ts.string(get(config.values, key)))]
        return []
    if request.default_runtime is False:
        if in_block:
            changes.append('default_runtime_name removed from the block')
            return []
        if ours:
            restore_marked(config, entry, splice)
            changes.append('default_runtime_name restored')
        elif entry is not None and get(config.values, key) == request.name:
            warnings.append('%s: default_runtime_name = "%s" was not set by this module; it was left as it is.'
                            % (config.path, request.name))
        return []
    want = ts.string(request.name)
    if entry is not None and not config.in_block(entry.start):
        if get(config.values, key) == request.name:
            return []
        previous = set_in_place(config, entry, want, splice)
        changes.append('default_runtime_name set to "%s" (was %s)' % (request.name, previous))
        return []
    if entry is not None:  # already in our block
        return ['[%s]' % ts.dotted(schema.containerd), '%sdefault_runtime_name = %s' % (indent, want)]
    header = config.doc.header(schema.containerd)
    if header is not None and not config.in_block(header.start):
        add_marked(config, header, 'default_runtime_name', want, splice)
        changes.append('default_runtime_name = "%s" added' % request.name)
        return []
    if config.defined_outside_block(schema.containerd + ('default_runtime_name',)) or any(
            e.path[:len(schema.containerd)] == schema.containerd and len(e.key) > 1 and not config.in_block(e.start)
            for e in config.doc.entries):
        raise DocumentError('%s: the table %s is written with dotted keys; cannot add default_runtime_name safely. '
                            'Nothing was changed; set it by hand.' % (config.path, ts.dotted(schema.containerd)))
    changes.append('default_runtime_name = "%s" added' % request.name)
    return ['[%s]' % ts.dotted(schema.containerd), '%sdefault_runtime_name = %s' % (indent, want)]


# --------------------------------------------------------------------------
# CDI: the CRI plugin's enable_cdi and cdi_spec_dirs (containerd 1.7 and later)
# --------------------------------------------------------------------------

def cdi_state(values, schema):
    """``{'enabled': bool, 'spec_dirs': [...]}`` of the CRI plugin in an effective configuration (a dump, in its
    schema), or None when the containerd that wrote it has no CDI (1.6: its dump has no ``enable_cdi``)."""
    cri = get(values, schema.cri)
    if not isinstance(cri, dict) or 'enable_cdi' not in cri:
        return None
    return {'enabled': cri.get('enable_cdi') is True, 'spec_dirs': list(cri.get('cdi_spec_dirs') or [])}


def check_cdi_request(request, path, before, dschema, version_text):
    """``cdi: true`` needs a containerd with CDI and absolute directories: the refusal, with the file untouched."""
    if request.state != 'present' or not request.cdi:
        return
    if cdi_state(before, dschema) is None:
        raise DocumentError('%s: cdi=true, but the installed containerd %s has no CDI (its `config dump` has no '
                            'enable_cdi in %s; CDI came with containerd 1.7). Nothing was changed; upgrade containerd '
                            'or leave cdi unset.' % (path, version_text, ts.dotted(dschema.cri)))
    relative = [item for item in request.cdi_spec_dirs if not posixpath.isabs(item)]
    if relative:
        raise DocumentError('%s: cdi_spec_dirs must be absolute directories, not %s. Nothing was changed.'
                            % (path, ', '.join(relative)))


def cdi_wanted(before, dschema, wanted_dirs):
    """What ``cdi: true`` must change in the effective configuration ``before``: ``{key: new effective value}``."""
    state = cdi_state(before, dschema)
    want = {}
    if not state['enabled']:
        want['enable_cdi'] = True
    missing = _cdi_dirs.missing_directories(state['spec_dirs'], wanted_dirs)
    if missing:
        want['cdi_spec_dirs'] = state['spec_dirs'] + missing
    return want


def block_cdi(config, schema):
    """``{key: value}`` of the CDI keys our block holds."""
    found = {}
    for key in CDI_KEYS:
        entry = config.doc.entry(schema.cri + (key,))
        if entry is not None and config.in_block(entry.start):
            found[key] = get(config.values, schema.cri + (key,))
    return found


def cdi_block_lines(schema, indent, values):
    """The CRI table with the CDI keys ``values`` (``{key: value}``) as the block writes them, enable_cdi first."""
    if not values:
        return []
    return ['[%s]' % ts.dotted(schema.cri)] + ['%s%s = %s' % (indent, key, ts.scalar(values[key]))
                                               for key in CDI_KEYS if key in values]


def undo_cdi(config, schema, splice, changes):
    """Put back the CDI keys this module changed outside its block (the block's go with it); returns the keys."""
    touched = []
    for key in CDI_KEYS:
        entry = config.doc.entry(schema.cri + (key,))
        if entry is not None and not config.in_block(entry.start) and marker_before(config, entry) is not None:
            restore_marked(config, entry, splice)
            changes.append('%s restored' % key)
            touched.append(key)
    return touched


def plan_cdi(config, request, schema, before, dschema, splice, indent, changes, warnings):
    """Edits for ``cdi``; returns ``(lines for the block, the CDI keys whose effective value may change)``.

    ``true``: what the effective configuration lacks (``cdi_wanted``) is set in place (the previous value kept in a
    marker comment), or added to the file's CRI table behind a marker, or written in the block when the file has no
    CRI table; ``false``: what this module did is put back; None: left as it is. The keys the block already holds
    stay in it unless ``false``.
    """
    in_block = block_cdi(config, schema)
    if request.cdi is None:
        return cdi_block_lines(schema, indent, in_block), []
    if request.cdi is False:
        touched = undo_cdi(config, schema, splice, changes) + sorted(in_block)
        if in_block:
            changes.append('%s removed from the block' % ', '.join(key for key in CDI_KEYS if key in in_block))
        entry = config.doc.entry(schema.cri + ('enable_cdi',))
        state = cdi_state(before, dschema)
        if state is not None and state['enabled'] and 'enable_cdi' not in touched:
            where = ('line %d sets it' % config.line_of(entry.start) if entry is not None
                     else 'containerd 2.x has it on by default, or a file it imports sets it')
            warnings.append('%s: CDI (enable_cdi = true) was not switched on by this module (%s); it was left on.'
                            % (config.path, where))
        return [], touched
    want = cdi_wanted(before, dschema, request.cdi_spec_dirs)
    header = config.doc.header(schema.cri)
    outside = header is not None and not config.in_block(header.start)
    block = dict(in_block)
    for key in CDI_KEYS:
        if key not in want:
            continue
        entry = config.doc.entry(schema.cri + (key,))
        value = want[key]
        if key == 'cdi_spec_dirs' and entry is not None:
            have = get(config.values, schema.cri + (key,))
            value = (have if isinstance(have, list) else []) + _cdi_dirs.missing_directories(have or [], request.cdi_spec_dirs)
        text = ts.scalar(value)
        if entry is not None and not config.in_block(entry.start):
            previous = set_in_place(config, entry, text, splice)
            changes.append('%s set to %s (was %s)' % (key, text, previous))
        elif entry is not None or not outside:
            check_cri_table(config, schema)
            block[key] = value
            changes.append('%s = %s added (in the block)' % (key, text))
        else:
            add_marked(config, header, key, text, splice)
            changes.append('%s = %s added to [%s]' % (key, text, ts.dotted(schema.cri)))
    return cdi_block_lines(schema, indent, block), sorted(want)


def check_cri_table(config, schema):
    """The block can write ``[CRI table]`` only when the file does not define that table with dotted keys."""
    size = len(schema.cri)
    for entry in config.doc.entries:
        if entry.path[:size] == schema.cri and len(entry.table) < size and not config.in_block(entry.start):
            raise DocumentError('%s: line %d writes the table %s with dotted keys; cannot add the CDI settings '
                                'safely. Nothing was changed; write it as a [%s] table, or set them by hand.'
                                % (config.path, config.line_of(entry.start), ts.dotted(schema.cri),
                                   ts.dotted(schema.cri)))


def key_indent(config):
    """The indentation of the block's keys under its headers (which start at column 0): the block's own when there
    is one (a run never rewrites the block for its indentation), else the file's ``indent_step``."""
    for entry in config.doc.entries:
        if entry.table and config.in_block(entry.start):
            return entry.indent
    return indent_step(config)


def indent_step(config):
    """How much deeper than its header the file indents a key (two spaces when it does not tell), learnt from the
    first key that is not one of our lines: what this module adds never changes what the next run learns."""
    headers = config.doc.headers
    for entry in config.doc.entries:
        if not entry.table or config.in_block(entry.start) or marker_before(config, entry):
            continue
        above = [header for header in headers if header.start < entry.start][-1]
        if entry.indent.startswith(above.indent) and entry.indent != above.indent:
            return entry.indent[len(above.indent):]
    return '  '


def own_key_indent(config, header):
    """The indentation of a key added to the table ``header``: that of its own last key, else one step deeper."""
    own = [entry for entry in config.doc.entries if entry.table == header.path and entry.start > header.start
           and not config.in_block(entry.start)]
    return own[-1].indent if own else header.indent + indent_step(config)


def set_in_place(config, entry, value, splice):
    """Give ``entry`` the value text ``value`` in place, its previous value kept in a marker comment above it (an
    existing marker keeps the first value); returns the previous value text."""
    previous = config.text[entry.value_start:entry.value_end]
    if marker_before(config, entry) is None:
        splice.insert(entry.start, entry.indent + key_mark(entry.path[-1]) + previous + config.doc.newline)
    splice.replace(entry.value_start, entry.value_end, value)
    return previous


def add_marked(config, header, key, value, splice):
    """Add ``key = value`` (value text) at the end of the own keys of the table ``header``, behind an added
    marker."""
    indent = own_key_indent(config, header)
    newline = config.doc.newline
    splice.insert(config.doc.table_end(header), indent + key_added(key) + newline + indent + ts.quote_key(key) + ' = ' +
                  value + newline)


def marker_before(config, entry):
    """Our marker line right above ``entry`` (``key_mark`` or ``key_added`` of its key): ``(start, previous value
    text or None)``."""
    text = config.text
    line_end = entry.start - 1
    if line_end <= 0:
        return None
    if text[line_end - 1:line_end] == '\r':
        line_end -= 1
    line_start = text.rfind('\n', 0, line_end) + 1
    line = text[line_start:line_end].strip()
    key = entry.path[-1]
    if line.startswith(key_mark(key)):
        return line_start, line[len(key_mark(key)):]
    if line == key_added(key):
        return line_start, None
    return None


def restore_marked(config, entry, splice):
    """Put back what ``set_in_place`` or ``add_marked`` did to ``entry`` (its marker says which)."""
    start, previous = marker_before(config, entry)
    if previous is None:
        splice.remove(start, entry.end)
    else:
        splice.remove(start, entry.start)
        splice.replace(entry.value_start, entry.value_end, previous)


def plan_absent(config, request, schema):
    """The new text for ``state=absent``: our block and our default_runtime_name edit undone, nothing else. The CDI
    settings this module made (``plan_cdi``) are put back with the last runtime of the block; while others stay,
    they stay too."""
    splice = ts.Splice(config.text)
    changes, warnings = [], []
    key = schema.containerd + ('default_runtime_name',)
    others = [name for name in config.added_runtimes(schema) if name != request.name]
    cdi_keys = []
    if not others:
        cdi_keys = undo_cdi(config, schema, splice, changes) + sorted(block_cdi(config, schema))
    if config.block is not None and not others:
        splice.remove(*config.block)
        changes.append('the block of runtime "%s" removed' % request.name)
    elif config.block is not None and request.name in config.block_runtimes(schema):
        # Other runtimes registered here stay: the block is written again without this one.
        indent = key_indent(config)
        lines = [config.begin_line]
        for name in config.block_runtimes(schema):
            if name != request.name:
                runtime = get(config.values, schema.runtime(name)) or {}
                lines += runtime_lines(schema, name, dict(runtime, runtime_type=runtime.get('runtime_type') or RUNC_V2),
                                       indent)  # as the file has it
        entry = config.doc.entry(key)
        if entry is not None and config.in_block(entry.start) and get(config.values, key) != request.name:
            lines += ['[%s]' % ts.dotted(schema.containerd),
                      '%sdefault_runtime_name = %s' % (indent, ts.string(get(config.values, key)))]
        lines += cdi_block_lines(schema, indent, block_cdi(config, schema))
        lines.append(END)
        start, end = config.block
        separator = config.text[start:config.text.find(BEGIN, start)]
        splice.replace(start, end, separator + ''.join(line + config.doc.newline for line in lines))
        changes.append('runtime "%s" removed from the block (%s stay)' % (request.name, ', '.join(others)))
    entry = config.doc.entry(key)
    if entry is not None and not config.in_block(entry.start) and marker_before(config, entry) is not None and (
            not others or get(config.values, key) == request.name):
        restore_marked(config, entry, splice)
        changes.append('default_runtime_name restored')
    if restore_taken_over(config, request.name, splice):
        changes.append('the definition of runtime "%s" this module took over put back' % request.name)
    elif config.defined_outside_block(schema.runtime(request.name)):
        warnings.append('%s: the runtime "%s" is defined outside this module\'s block; it was left as it is.'
                        % (config.path, request.name))
    return Plan(splice.result(), changes, warnings, cdi_keys=cdi_keys)


def dead_default(config, schema, after, dschema, request):
    """For ``absent``: the refusal, with a way forward, when taking our lines out leaves ``default_runtime_name``
    naming a runtime that no longer exists (``after``: the planned file's dump), which the CRI plugin refuses; None
    when the default names a runtime."""
    default = get(after, dschema.containerd + ('default_runtime_name',))
    runtimes = sorted(get(after, dschema.runtimes) or {})
    if default in runtimes:
        return None
    entry = config.doc.entry(schema.containerd + ('default_runtime_name',))
    also = ''
    if entry is None or config.in_block(entry.start):
        where, how = 'set in a file %s imports' % config.path, 'in that file'
    else:
        where = 'line %d of %s' % (config.line_of(entry.start), config.path)
        how = 'at line %d' % config.line_of(entry.start)
        marker = marker_before(config, entry)
        if marker is not None and marker[1] is not None:
            where += ', the value it had before this module set "%s"' % request.name
            also = ' and delete the comment line "%s..." above it' % DEFAULT_MARK.strip()
    return ('%s: taking the runtime "%s" out would leave default_runtime_name = "%s" (%s), which names no runtime: '
            'the CRI plugin would not start. Nothing was changed. To go on, set default_runtime_name %s to a runtime '
            'that stays (%s) or remove it (containerd then uses "runc")%s, then run state=absent again.'
            % (config.path, request.name, default, where, how, ', '.join(runtimes) or 'none is left', also))


def plan(config, request, schema, before, dschema):
    """One dispatch for both states.

    A file that ends without a line ending is planned as if it had one, and a block added to it says so on its
    BEGIN line: the run that takes our lines out again (absent) takes that line ending out too, so the file gets
    its exact bytes back.
    """
    work = config
    if config.ends_without_newline():
        work = Config(config.text + config.doc.newline, config.path)
        if work.block is None:
            work.begin_line = BEGIN + NO_FINAL_NEWLINE
    if request.state == 'absent':
        planned = plan_absent(work, request, schema)
    else:
        planned = plan_present(work, request, schema, before, dschema)
    newline = config.doc.newline
    if planned.text == work.text:
        planned.text = config.text
    elif BEGIN not in planned.text and planned.text.endswith(newline) and (
            (work is not config and config.block is None)  # the line ending added above for planning
            or (config.block is not None and config.block[1] == len(config.text)
                and config.begin_line.endswith(NO_FINAL_NEWLINE))):  # the one the block's BEGIN line speaks of
        planned.text = planned.text[:-len(newline)]
    return planned


# --------------------------------------------------------------------------
# The effective configuration: what `containerd config dump` says
# --------------------------------------------------------------------------

def relative_to_file(entry, globs_from_file):
    """Whether containerd resolves the relative ``imports`` entry against the directory of the file naming it: a
    file name always; a glob (``*``) on containerd 2.x only (1.6 globs against its working directory; 2.1.9 resolves
    every relative entry against the file's directory, both measured with ``config dump``)."""
    return not entry.startswith('/') and (globs_from_file or '*' not in entry)


def globs_from_file(version):
    """Whether this containerd (``(major, minor, ...)``, None when unknown: as 1.x) takes a relative glob from the
    directory of the file naming it."""
    return bool(version) and version[0] >= 2


def import_patterns(values, source, cwd, globs_from_file=False):
    """The ``imports`` of a file's ``values`` as containerd resolves them: ``[(absolute pattern, is a glob)]``.

    An entry with ``*`` is a glob (``filepath.Glob``); a relative entry is taken from the directory of the file
    ``source`` that names it (``relative_to_file``), else from containerd's working directory, here ``cwd``.
    """
    found = []
    for entry in values.get('imports') or []:
        if not isinstance(entry, str) or not entry:
            continue
        base = posixpath.dirname(source) if relative_to_file(entry, globs_from_file) else cwd
        found.append((posixpath.normpath(posixpath.join(base, entry)), '*' in entry))
    return found


def probe_text(text, path, directory, globs_from_file=False):
    """``text`` to be read from standard input as if it were the file ``path`` in ``directory``: the relative
    imports containerd takes from the file's directory (``relative_to_file``) made absolute; every other byte as
    it is."""
    values = loads(text, path)
    imports = values.get('imports')
    if not isinstance(imports, list) or not any(
            isinstance(entry, str) and relative_to_file(entry, globs_from_file) for entry in imports):
        return text
    entry = ts.scan(text, path).entry(('imports',))
    fixed = [posixpath.normpath(posixpath.join(directory, item))
             if isinstance(item, str) and relative_to_file(item, globs_from_file) else item for item in imports]
    return text[:entry.value_start] + '[%s]' % ', '.join(ts.string(item) for item in fixed) + text[entry.value_end:]


def _normalise(values, schema, name, cdi_keys=()):
    values = copy.deepcopy(values)
    cri = get(values, schema.cri)
    if isinstance(cri, dict):
        for key in cdi_keys:
            cri.pop(key, None)
    values.pop('imports', None)
    runtimes = get(values, schema.runtimes)
    if isinstance(runtimes, dict):
        runtimes.pop(name, None)
        for runtime in runtimes.values():
            if isinstance(runtime, dict):
                runtime['options'] = nonzero(runtime.get('options'))
    containerd = get(values, schema.containerd)
    if isinstance(containerd, dict):
        containerd.pop('default_runtime_name', None)
    return values


def differences(before, after, path=()):
    """Paths (dotted) where two value trees differ."""
    if isinstance(before, dict) and isinstance(after, dict):
        found = []
        for key in sorted(set(before) | set(after)):
            if key not in before:
                found.append('%s added' % ts.dotted(path + (key,)))
            elif key not in after:
                found.append('%s removed' % ts.dotted(path + (key,)))
            else:
                found += differences(before[key], after[key], path + (key,))
        return found
    return [] if before == after else ['%s changed' % ts.dotted(path)]


def compare_effective(before, after, request, schema, want_default, want_runtime=None, cdi_keys=()):
    """What differs between two dumps beyond what was asked; empty when only the runtime (and default) changed.

    ``want_default``: the default_runtime_name the after dump must show (None: any runtime it names);
    ``want_runtime``: the runtime's settings it must show (None: any with our runtime_type and BinaryName);
    ``cdi_keys``: the CDI keys the plan changes (``Plan.cdi_keys``), which may differ; with ``cdi: true`` the after
    dump must have CDI on and read every directory of ``cdi_spec_dirs``.
    """
    problems = differences(_normalise(before, schema, request.name, cdi_keys),
                           _normalise(after, schema, request.name, cdi_keys))
    if request.state == 'present' and request.cdi:
        state = cdi_state(after, schema) or {'enabled': None, 'spec_dirs': []}
        if state['enabled'] is not True:
            problems.append('enable_cdi is %s, not true' % ts.scalar(state['enabled']) if state['enabled'] is not None
                            else 'enable_cdi is missing')
        missing = _cdi_dirs.missing_directories(state['spec_dirs'], request.cdi_spec_dirs)
        if missing:
            problems.append('cdi_spec_dirs %s lacks %s' % (ts.scalar(state['spec_dirs']), ', '.join(missing)))
    runtime = get(after, schema.runtime(request.name))
    if request.state == 'present':
        if not isinstance(runtime, dict):
            problems.append('the runtime "%s" is missing from the effective configuration' % request.name)
        else:
            if runtime.get('runtime_type') != RUNC_V2:
                problems.append('runtime_type of "%s" is %r' % (request.name, runtime.get('runtime_type')))
            if (runtime.get('options') or {}).get('BinaryName') != request.runtime_path:
                problems.append('BinaryName of "%s" is %r' % (request.name, (runtime.get('options') or {}).get(
                    'BinaryName')))
            elif want_runtime is not None and runtime_settings(runtime) != runtime_settings(want_runtime):
                problems.append('the runtime "%s" is %s, not %s'
                                % (request.name, runtime_settings(runtime), want_runtime))
    default = get(after, schema.containerd + ('default_runtime_name',))
    if want_default is not None and default != want_default:
        problems.append('default_runtime_name is %r, not %r' % (default, want_default))
    runtimes = get(after, schema.runtimes) or {}
    if default not in runtimes:
        problems.append('default_runtime_name "%s" names no runtime: the CRI plugin would fail to start' % default)
    return problems
