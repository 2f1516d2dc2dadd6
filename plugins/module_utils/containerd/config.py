# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""containerd's config.toml read: the schema per installed version and file, the CRI table, the marked lines.

The plans built on it are ``containerd.plan`` (the runtime) and ``containerd.cdi`` (CDI); the dump comparison
``containerd.effective``.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It is pure: text in, text and findings out (docs/containerd.md
has the measurements these rules stand on). The rules of this package:

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

import re

from ansible_collections.gpufleet.nvidia.plugins.module_utils.formats import toml_splice as ts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import DocumentError


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
# any case; docs/security.md): a file with one in another case is refused (``formats.toml_splice.check_key_case``).
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
