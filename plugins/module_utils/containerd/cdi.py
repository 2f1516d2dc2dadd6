# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The CRI plugin's CDI settings in config.toml: enable_cdi and cdi_spec_dirs (containerd 1.7 and later).

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It is pure: the file's text and the request in, the marked lines
that give the CRI plugin CDI out.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import posixpath

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import dirs
from ansible_collections.gpufleet.nvidia.plugins.module_utils.formats import toml_splice as ts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import DocumentError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd.config import (
    CDI_KEYS, add_marked, check_cri_table, get, marker_before, restore_marked, set_in_place)


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
    missing = dirs.missing_directories(state['spec_dirs'], wanted_dirs)
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
            value = (have if isinstance(have, list) else []) + dirs.missing_directories(have or [], request.cdi_spec_dirs)
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
