# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A TOML definition taken over: its lines commented out behind a marker prefix, and put back byte for byte.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It is pure (no files, no processes) and imports nothing of ours
but ``formats.toml_splice``.

``take_over: true`` of containerd_runtime and crio_runtime: every line that
defines a table (its header and keys, its sub-tables, and dotted keys that
reach into it from another table) gets the prefix ``# <mark> took over
<name>: `` at its start, through a ``toml_splice.Splice``; nothing else of the
line changes, so taking exactly that prefix off again (``restore``) gives the
text back byte for byte, whatever its line endings.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.nvidia.plugins.module_utils.formats import toml_splice as ts


def prefix(mark, name):
    """The marker that comments out, line by line, a definition of ``name`` that ``mark`` (a module) took over."""
    return '# %s took over %s: ' % (mark, ts.quote_key(name))


def spans(doc, path, keep=None):
    """``(start, end)`` of every header at or below ``path`` (its keys included) and of every key that reaches into
    ``path`` from another table (``toml_splice.Document`` ``doc``), in file order; ``keep(pos)``: a position whose
    line is not taken (our own block)."""
    size = len(path)
    keep = keep or (lambda pos: False)
    found = [(h.start, doc.table_end(h)) for h in doc.headers if h.path[:size] == path and not keep(h.start)]
    found += [(e.start, e.end) for e in doc.entries
              if e.path[:size] == path and e.table[:size] != path and not keep(e.start)]
    return sorted(found)


def comment_out(text, found, marker, splice):
    """``marker`` at the start of every line of the spans ``found`` (``spans``); returns their line numbers."""
    lines = []
    for start, end in found:
        pos = start
        while pos < end:
            splice.insert(pos, marker)
            lines.append(text.count('\n', 0, pos) + 1)
            newline = text.find('\n', pos, end)
            pos = end if newline < 0 else newline + 1
    return lines


def marked(text, marker):
    """The line numbers that start with ``marker``."""
    return [text.count('\n', 0, match.start()) + 1 for match in re.finditer('(?m)^' + re.escape(marker), text)]


def restore(text, marker, splice):
    """Take ``marker`` off every line that starts with it (``comment_out`` undone); returns how many."""
    found = list(re.finditer('(?m)^' + re.escape(marker), text))
    for match in found:
        splice.remove(match.start(), match.end())
    return len(found)
