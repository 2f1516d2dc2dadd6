# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""containerd's config.toml plans: the nvidia runtime's block, default_runtime_name, take-over, removal.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It is pure: text in, text and findings out (the schema and the
file's reading are ``containerd.config``'s, the CDI settings ``containerd.cdi``'s).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.gpufleet.nvidia.plugins.module_utils.formats import take_over as take_over_lines
from ansible_collections.gpufleet.nvidia.plugins.module_utils.formats import toml_splice as ts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import DocumentError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd.cdi import (
    block_cdi, cdi_block_lines, plan_cdi, undo_cdi)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd.config import (
    BEGIN, CONTAINERD_DEFAULT, Config, DEFAULT_MARK, END, LEGACY_DEFAULT, MARK, NO_FINAL_NEWLINE, Plan, RUNC_V2,
    TEMPLATES, ZERO, add_marked, get, key_indent, marker_before, restore_marked, set_in_place)


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
    runtime or the runtime itself, and only a runc v2 runtime (BinaryName is an option of the runc v2 shim). An
    empty or missing ``runtime_type`` is runc v2, as containerd runs it and as NVIDIA's ``nvidia-ctk runtime
    configure`` copies it (its options, ``SystemdCgroup`` among them, with the type set to runc v2)."""
    for candidate in (default_name,) + TEMPLATES:
        runtime = runtimes.get(candidate)
        if candidate and candidate != name and not candidate.startswith('nvidia') and isinstance(runtime, dict) \
                and (runtime.get('runtime_type') or RUNC_V2) == RUNC_V2:
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
    return take_over_lines.prefix(MARK, name)


def take_over(config, schema, name, splice):
    """Comment out every line that defines the runtime ``name`` outside our block; returns the line numbers."""
    found = take_over_lines.spans(config.doc, schema.runtime(name), keep=config.in_block)
    return take_over_lines.comment_out(config.text, found, took_over_prefix(name), splice)


def restore_taken_over(config, name, splice):
    """Uncomment the lines ``take_over`` commented out for ``name``; returns how many."""
    return take_over_lines.restore(config.text, took_over_prefix(name), splice)


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
