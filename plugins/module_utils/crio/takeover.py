# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""crio_runtime's ``take_over``: a definition of the runtime that a drop-in read after ours makes, commented out.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It is pure: texts in, texts and findings out (CRI-O's merge and
our drop-in are ``crio.config``'s, which this module wraps: ``plan``).

* CRI-O takes a runtime's table whole from the last file that has it. One
  in a file read before our drop-in needs nothing: the drop-in replaces it
  (``crio.config``). One in a file read after it would win, with another
  ``runtime_path``: refused, unless ``take_over: true``. Then every line of
  the runtime's definition (its table, its sub-tables, dotted keys reaching
  into it) in each drop-in CRI-O reads after ours is commented out behind
  the marker ``# gpufleet.nvidia crio_runtime took over nvidia: ``
  (``formats.take_over``, as containerd_runtime does), and the drop-in is
  written.
* Only drop-ins beside ours are edited (``editable``): the directory whose
  lock the run holds, where every write is rolled back with the drop-in's.
  A definition in another file read after ours (a subdirectory's drop-in)
  is refused, naming that file: ``take_over`` cannot help there.
* ``state=absent`` removes the drop-in and takes the marker off every line
  of the drop-ins beside it that has it: each file byte for byte as before.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import posixpath

from ansible_collections.gpufleet.nvidia.plugins.module_utils.crio import config as cr
from ansible_collections.gpufleet.nvidia.plugins.module_utils.formats import take_over as take_over_lines
from ansible_collections.gpufleet.nvidia.plugins.module_utils.formats import toml_splice as ts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import DocumentError


def took_over_prefix(name):
    """The marker that comments out, line by line, a definition of ``name`` taken over."""
    return take_over_lines.prefix(cr.MARK, name)


def directory(path):
    return posixpath.dirname(posixpath.normpath(path))


def editable(source, path):
    """Whether ``take_over`` may edit ``source``: a drop-in (not the main file, not ours) beside the drop-in
    ``path``, in its directory."""
    return not source.main and source.path != path and directory(source.path) == directory(path)


def later_definitions(sources, request):
    """The files CRI-O reads after the drop-in that define the runtime (whatever their ``runtime_path``)."""
    return [source for source in sources
            if source.path != request.path and not cr.read_before(source, request.path)
            and cr.get(source.values, cr.RUNTIMES + (request.name,)) is not None]


def plan(sources, request, version=None):
    """``crio.config.plan``, with ``take_over`` and what ``absent`` puts back; the files it edits besides the drop-in
    are the plan's ``edits``."""
    if request.state == 'absent':
        return plan_absent(sources, request, version)
    return plan_present(sources, request, version)


def plan_present(sources, request, version=None):
    unused_ours, others = cr.split(sources, request.path)
    base = cr.Effective(others, version)
    if cr.rival(base, request) is None:
        return cr.plan_present(sources, request, version)
    later = later_definitions(others, request)
    blocked = [source for source in later if not editable(source, request.path)]
    if blocked:
        raise DocumentError(
            '%s Nothing was changed; take_over cannot help: this module edits only the drop-ins beside %s (in %s), '
            'and %s, which defines the runtime "%s" at line %s and is read after it, is not one of them. Remove that '
            'definition by hand, or give this drop-in a name that sorts after that file.'
            % (cr.defined_later(base, request), request.path, directory(request.path), blocked[0].path, request.name,
               blocked[0].line_of(cr.RUNTIMES + (request.name,))))
    if not request.take_over:
        return cr.plan_present(sources, request, version)  # refused, naming take_over: true
    edited, edits, changes = [], [], []
    for source in sources:
        if source in later:
            text, lines = take_over(source, request.name)
            edited.append(checked(source, text, request.name))
            edits.append((source, text))
            changes.append('the definition of runtime "%s" in %s at lines %s commented out (state=absent puts it '
                           'back)' % (request.name, source.path, ', '.join(str(line) for line in lines)))
        else:
            edited.append(source)
    planned = cr.plan_present(edited, request, version)
    planned.before = cr.Effective(sources, version)
    planned.changes.extend(changes)
    planned.edits = edits
    return planned


def take_over(source, name):
    """``(source's text with the runtime's definition commented out, the line numbers)``."""
    marker = took_over_prefix(name)
    earlier = take_over_lines.marked(source.text, marker)
    if earlier:
        raise DocumentError(
            '%s defines the runtime "%s" at line %s and also holds a definition this module took over earlier (lines '
            'starting with "%s", from line %d): state=absent would put that one back beside the new one. Nothing was '
            'changed; delete one of the two by hand.'
            % (source.path, name, source.line_of(cr.RUNTIMES + (name,)), marker.strip(), earlier[0]))
    splice = ts.Splice(source.text)
    found = take_over_lines.spans(ts.scan(source.text, source.path), cr.RUNTIMES + (name,))
    lines = take_over_lines.comment_out(source.text, found, marker, splice)
    return splice.result(), lines


def checked(source, text, name):
    """``source`` with ``text`` (its definition of ``name`` commented out), refused when CRI-O would still find the
    runtime there or could not read the file."""
    try:
        edited = cr.Source(source.path, text, ours=source.ours, main=source.main, host=source.host)
    except DocumentError as exc:
        raise DocumentError('%s: commenting out the definition of the runtime "%s" would leave a file CRI-O cannot '
                            'read (%s). Nothing was changed; remove that definition by hand.' % (source.path, name, exc))
    if cr.get(edited.values, cr.RUNTIMES + (name,)) is not None:
        raise DocumentError('%s: the runtime "%s" is defined at line %s inside a value (an inline table), which cannot '
                            'be commented out line by line. Nothing was changed; write it as a [%s] table, or remove '
                            'it by hand.' % (source.path, name, source.line_of(cr.RUNTIMES + (name,)),
                                             ts.dotted(cr.RUNTIMES + (name,))))
    return edited


def plan_absent(sources, request, version=None):
    """``crio.config.plan_absent`` over the files as they are with every definition ``take_over`` commented out put
    back."""
    marker = took_over_prefix(request.name)
    edited, edits, changes = [], [], []
    for source in sources:
        lines = take_over_lines.marked(source.text, marker) if editable(source, request.path) else []
        if not lines:
            edited.append(source)
            continue
        splice = ts.Splice(source.text)
        take_over_lines.restore(source.text, marker, splice)
        text = splice.result()
        try:
            edited.append(cr.Source(source.path, text, host=source.host))
        except DocumentError as exc:
            raise DocumentError('%s: putting back the definition of the runtime "%s" this module took over (the lines '
                                'starting with "%s") would leave a file CRI-O cannot read (%s): the file defines it '
                                'again since. Nothing was changed; delete one of the two by hand.'
                                % (source.path, request.name, marker.strip(), exc))
        edits.append((source, text))
        changes.append('the definition of runtime "%s" this module took over put back in %s (lines %s)'
                       % (request.name, source.path, ', '.join(str(line) for line in lines)))
    planned = cr.plan_absent(edited, request, version, put_back=bool(edits))
    planned.before = cr.Effective(sources, version)
    planned.changes.extend(changes)
    planned.edits = edits
    return planned
