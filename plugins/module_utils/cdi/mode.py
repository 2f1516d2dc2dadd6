# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA's runtime's mode (``nvidia-container-runtime.mode`` in its config.toml), changed in place.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It is pure (no files, no processes).

In ``cdi`` mode NVIDIA's ``nvidia-container-runtime`` turns a container's
``NVIDIA_VISIBLE_DEVICES`` (and ``cdi.k8s.io/`` annotations) into CDI device
names of ``modes.cdi.default-kind`` and applies them from the specs in
``modes.cdi.spec-dirs``: the spec cdi_spec keeps, not a just-in-time one.

The mode's value is changed in place (``_toml_splice``): every other byte of
the file stays. A file without the key gets it at the end of its
``[nvidia-container-runtime]`` table, or that table at its end. The result is
parsed again and must differ from the file only in the mode. NVIDIA's own
package rewrites the file with ``nvidia-ctk config --in-place`` on every
upgrade, which keeps the mode (and drops comments), so no marker of ours is
kept there: ``state: absent`` puts NVIDIA's default mode back when the file
has the mode this run asks for.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import re

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import dirs as cdi_dirs
from ansible_collections.gpufleet.nvidia.plugins.module_utils.formats import toml_splice as ts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import DocumentError

DEFAULT_CONFIG = '/etc/nvidia-container-runtime/config.toml'
TABLE = ('nvidia-container-runtime',)
KEY = TABLE + ('mode',)
SPEC_DIRS = TABLE + ('modes', 'cdi', 'spec-dirs')
MAX_CONFIG_BYTES = 1024 * 1024
# What `nvidia-ctk config default` says (1.14 to 1.20); read from nvidia-ctk whenever it is installed.
NVIDIA_DEFAULT_MODE = 'auto'
# NVIDIA's mode names (auto, legacy, csv, cdi, jit-cdi, ...): a word, checked for shape only, so a mode a newer
# toolkit adds is not refused here.
MODE_NAME = re.compile(r'^[a-z][a-z0-9-]{0,31}$')


def check_mode_name(mode):
    if not MODE_NAME.match(mode or ''):
        raise DocumentError('runtime_mode %r is not a mode name of NVIDIA\'s runtime (auto, cdi, jit-cdi, legacy, '
                            'csv)' % (mode,))


def loads(text, path):
    """The values of the config file's ``text``; a DocumentError naming ``path`` when it is not valid TOML, writes a
    key this module reads in another case (``OWN_KEYS``), or when a value this module reads (``SHAPES``) has another
    type than NVIDIA's runtime reads there."""
    values = ts.parse(text, path, 'NVIDIA\'s runtime would refuse it too. The file was left untouched.')
    return check_types(ts.check_key_case(text, values, path, OWN_KEYS, (), 'NVIDIA\'s runtime'), text, path)


# The keys of NVIDIA's runtime's config this module reads, as NVIDIA documents them. The toolkit decodes the file
# with go-toml v1, which also takes a key in upper case (``MODE`` is the mode: measured with the toolkit's own
# nvidia-container-runtime, 1.20.0): such a key in another case is refused (``_toml_splice.check_key_case``).
OWN_KEYS = ('nvidia-container-runtime', 'mode', 'modes', 'cdi', 'spec-dirs')


# Every value read on the way to the mode and the spec directories, parents first, and the type NVIDIA's runtime
# decodes it into (its config struct: a table, a string, an array of strings). Any other type there (``mode = 1``,
# ``[[nvidia-container-runtime]]``, an array of tables) makes the runtime refuse the file: refused here too.
SHAPES = ((TABLE, dict), (KEY, str), (TABLE + ('modes',), dict), (TABLE + ('modes', 'cdi'), dict),
          (SPEC_DIRS, list))


def check_types(values, text, path):
    """``values`` when each key of ``SHAPES`` is absent or of its type; else a DocumentError naming ``path``, the key
    and its line."""
    for key, wanted in SHAPES:
        value = get(values, key)  # a parent of another type was refused before its child is reached
        if value is None:
            continue
        found = _type_name(value)
        if wanted is list and isinstance(value, list):
            odd = [item for item in value if not isinstance(item, str)]
            if not odd:
                continue
            found = 'an array holding %s' % _type_name(odd[0])
        elif isinstance(value, wanted):
            continue
        raise DocumentError('%s: %s%s is %s, where NVIDIA\'s runtime reads %s; it would refuse the file too. The '
                            'file was left untouched.' % (path, ts.dotted(key), _line_of(text, path, key), found,
                                                          WANTED[wanted]))
    return values


WANTED = {dict: 'a table', str: 'a string', list: 'an array of strings'}


def _type_name(value):
    if isinstance(value, bool):
        return 'a boolean'
    if isinstance(value, int):
        return 'an integer'
    if isinstance(value, float):
        return 'a float'
    if isinstance(value, str):
        return 'a string'
    if isinstance(value, dict):
        return 'a table'
    if isinstance(value, list):
        return 'an array of tables' if value and all(isinstance(item, dict) for item in value) else 'an array'
    return 'a date or time'


def _line_of(text, path, key):
    line = ts.key_line(text, path, key)
    return '' if line is None else ' (line %d)' % line


get = ts.get


def mode_of(values, default):
    """The mode the runtime uses with these values: the file's, else NVIDIA's ``default``."""
    value = get(values, KEY)
    return value if isinstance(value, str) and value else default


def spec_dir_problem(values, defaults, spec_dir, path):
    """Why the runtime in cdi mode would not read the spec in ``spec_dir`` (None when it would)."""
    dirs = get(values, SPEC_DIRS, get(defaults, SPEC_DIRS, []))
    if not isinstance(dirs, list) or cdi_dirs.missing_directories(dirs, [spec_dir]):
        return ('%s: in cdi mode NVIDIA\'s runtime reads CDI specs from %s (nvidia-container-runtime.modes.cdi.'
                'spec-dirs), not from %s where the spec is written; add %s there or write the spec into one of '
                'them. Nothing was changed.' % (path, dirs, spec_dir, spec_dir))
    return None


def set_mode(text, path, mode):
    """``text`` with ``nvidia-container-runtime.mode = mode``; ``text`` itself when it says so already."""
    values = loads(text, path)
    if get(values, KEY) == mode:
        return text
    doc = ts.scan(text, path)
    splice = ts.Splice(text)
    entry = doc.entry(KEY)
    line = 'mode = %s' % ts.string(mode)
    newline = doc.newline
    if entry is not None:
        splice.replace(entry.value_start, entry.value_end, ts.string(mode))
    else:
        header = doc.header(TABLE)
        dotted = [e for e in doc.entries if e.path[:len(TABLE)] == TABLE and e.table != TABLE]
        if header is not None:
            own = doc.entries_in(TABLE)
            indent = own[-1].indent if own else header.indent
            pos = doc.table_end(header)
            if pos == len(text) and not text.endswith(('\n', '\r')):
                splice.insert(pos, newline)
            splice.insert(pos, indent + line + newline)
        elif dotted or doc.defines_below(TABLE):
            where = dotted[0] if dotted else None
            raise DocumentError('%s: the table [nvidia-container-runtime] is written with dotted keys or only as '
                                'sub-tables%s, so its mode cannot be added safely. Nothing was changed; add '
                                '`mode = %s` under [nvidia-container-runtime] by hand.'
                                % (path, ' (line %d)' % (text.count('\n', 0, where.start) + 1) if where else '',
                                   ts.string(mode)))
        else:
            splice.append_lines(['[%s]' % ts.dotted(TABLE), line], newline)
    new = splice.result()
    want = copy.deepcopy(values)
    want.setdefault(TABLE[0], {})['mode'] = mode
    if loads(new, path) != want:  # a defect of the splice, never of the input
        raise DocumentError('%s: setting the mode in place would change more than the mode. Nothing was changed.'
                            % path)
    return new
