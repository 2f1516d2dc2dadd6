# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Edit a JSON document as text, keeping every byte that is not changed.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It is pure (no files, no processes) and imports nothing of ours
but ``common.errors`` (the bottom layer).

``parse_document`` parses with spans: each value knows where it stands in the
text. ``Editor`` sets and removes object members by splicing text: numbers
such as ``1.0``, ``1e3`` or 20-digit integers, escapes, key order,
indentation, CRLF, a BOM and the trailing newline all stay as they were;
members we add are formatted like their neighbours (``Style``). Duplicate
keys, non-object tops, NaN/Infinity and documents nested deeper than
``MAX_DEPTH`` are refused with a DocumentError naming the file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import DocumentError

MAX_DEPTH = 64
BOM = u'\ufeff'


# --------------------------------------------------------------------------
# Parsing with spans
# --------------------------------------------------------------------------

class Node(object):
    """A JSON value with its span ``[start, end)`` in the document text."""

    __slots__ = ('kind', 'start', 'end', 'members', 'value')

    def __init__(self, kind, start, end, members=None, value=None):
        self.kind = kind          # 'object', 'array' or 'scalar'
        self.start = start
        self.end = end
        self.members = members    # objects: list of Member
        self.value = value        # the Python value

    def member(self, key):
        for index, member in enumerate(self.members or ()):
            if member.key == key:
                return index, member
        return None, None


class Member(object):
    __slots__ = ('key', 'key_start', 'key_end', 'node')

    def __init__(self, key, key_start, key_end, node):
        self.key = key
        self.key_start = key_start
        self.key_end = key_end
        self.node = node


_WS = ' \t\n\r'
_NUMBER = re.compile(r'-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?')
_STRING = re.compile(r'"(?:[^"\\\x00-\x1f]|\\.)*"', re.DOTALL)


def _line_col(text, pos):
    line = text.count('\n', 0, pos) + 1
    col = pos - (text.rfind('\n', 0, pos) + 1) + 1
    return line, col


class _SpanParser(object):
    """Recursive-descent parser for text that json.loads already accepted."""

    def __init__(self, text):
        self.text = text

    def skip(self, pos):
        text = self.text
        while pos < len(text) and text[pos] in _WS:
            pos += 1
        return pos

    def value(self, pos):
        text = self.text
        pos = self.skip(pos)
        char = text[pos]
        if char == '{':
            return self.obj(pos)
        if char == '[':
            return self.array(pos)
        if char == '"':
            match = _STRING.match(text, pos)
            return Node('scalar', pos, match.end(), value=json.loads(match.group(0)))
        for literal, python in (('true', True), ('false', False), ('null', None)):
            if text.startswith(literal, pos):
                return Node('scalar', pos, pos + len(literal), value=python)
        match = _NUMBER.match(text, pos)
        if not match:
            raise ValueError('unexpected character %r at offset %d' % (char, pos))
        return Node('scalar', pos, match.end(), value=json.loads(match.group(0)))

    def obj(self, start):
        text = self.text
        members = []
        pos = self.skip(start + 1)
        if text[pos] == '}':
            return Node('object', start, pos + 1, members=members, value={})
        while True:
            pos = self.skip(pos)
            match = _STRING.match(text, pos)
            key = json.loads(match.group(0))
            key_end = match.end()
            pos = self.skip(key_end)
            pos += 1  # ':'
            node = self.value(pos)
            members.append(Member(key, match.start(), key_end, node))
            pos = self.skip(node.end)
            if text[pos] == ',':
                pos += 1
                continue
            # '}'
            return Node('object', start, pos + 1, members=members,
                        value=dict((m.key, m.node.value) for m in members))

    def array(self, start):
        text = self.text
        items = []
        pos = self.skip(start + 1)
        if text[pos] == ']':
            return Node('array', start, pos + 1, value=[])
        while True:
            node = self.value(pos)
            items.append(node.value)
            pos = self.skip(node.end)
            if text[pos] == ',':
                pos += 1
                continue
            return Node('array', start, pos + 1, value=items)


def _reject_constant(name):
    raise ValueError('%s is not valid JSON' % name)


def _check_duplicates(path):
    def hook(pairs):
        seen = {}
        for key, value in pairs:
            if key in seen:
                raise DocumentError(
                    '%s: duplicate key "%s" in one JSON object; the program reading it would silently keep only the '
                    'last one. Remove the duplicate and run again.' % (path, key))
            seen[key] = value
        return seen
    return hook


def parse_document(text, path='JSON document'):
    """Parse JSON text; returns the top-level object Node, or None for an empty text.

    An empty or whitespace-only text (a BOM aside) returns None: the caller
    decides what an empty file means. Raises DocumentError naming ``path`` and
    the problem for invalid JSON, duplicate keys, NaN/Infinity, nesting past
    MAX_DEPTH and a top level that is not an object.
    """
    body = text[1:] if text.startswith(BOM) else text
    if not body.strip(_WS):
        return None
    depth = nesting_depth(body, MAX_DEPTH)
    if depth > MAX_DEPTH:
        raise DocumentError('%s: JSON nested deeper than %d levels; a configuration file is a few levels deep. '
                            'Fix the file by hand; it was left untouched.' % (path, MAX_DEPTH))
    try:
        json.loads(body, object_pairs_hook=_check_duplicates(path), parse_constant=_reject_constant)
    except DocumentError:
        raise
    except ValueError as exc:
        raise DocumentError('%s: invalid JSON: %s. Fix the file by hand; it was left untouched.' % (path, exc))
    except (RecursionError, MemoryError) as exc:
        raise DocumentError('%s: JSON too complex to read (%s). Fix the file by hand; it was left untouched.'
                            % (path, type(exc).__name__))
    offset = len(text) - len(body)
    node = _SpanParser(text).value(offset)
    if node.kind != 'object':
        raise DocumentError('%s: the top level must be a JSON object ({...}), found %s. '
                            'The file was left untouched.' % (path, json_type(node.value)))
    return node


_STRUCTURE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)


def nesting_depth(text, limit=None):
    """How deep ``[``/``{`` nest in ``text`` (strings skipped), without recursion; stops past ``limit``."""
    depth = deepest = 0
    for match in _STRUCTURE.finditer(text):
        token = match.group(0)
        if token in ('[', '{'):
            depth += 1
            if depth > deepest:
                deepest = depth
                if limit is not None and deepest > limit:
                    break
        elif token in (']', '}'):
            depth -= 1
    return deepest


def json_type(value):
    if isinstance(value, bool):
        return 'a boolean (%s)' % json.dumps(value)
    if value is None:
        return 'null'
    if isinstance(value, dict):
        return 'an object'
    if isinstance(value, list):
        return 'an array'
    if isinstance(value, (int, float)):
        return 'a number (%s)' % json.dumps(value)
    return 'a string (%s)' % json.dumps(value)


def same_value(left, right):
    """JSON equality that tells ``true`` from ``1`` and ``1`` from ``1.0``."""
    return json.dumps(left, sort_keys=True) == json.dumps(right, sort_keys=True)


# --------------------------------------------------------------------------
# Style and splicing
# --------------------------------------------------------------------------

class Style(object):
    """How the file is written, learnt from the file itself."""

    def __init__(self, text, root):
        self.newline = '\r\n' if '\r\n' in text else '\n'
        self.kv_sep = ': '
        self.item_sep = ', '
        self.unit = '    '
        self.compact = False
        first = _first_member(root) if root is not None else None
        if first is not None:
            between = text[first.key_end:first.node.start]
            if between.strip(_WS) == ':':
                self.kv_sep = between.replace('\r', '').replace('\n', ' ')
        if root is not None and root.members:
            inside = text[root.start:root.end]
            self.compact = '\n' not in inside
            if len(root.members) > 1:
                sep = text[root.members[0].node.end:root.members[1].key_start]
                if '\n' not in sep:
                    self.item_sep = sep
            unit = _find_unit(text, root)
            if unit:
                self.unit = unit
        if self.compact and root is not None and len(root.members) < 2:
            self.item_sep = ',' if self.kv_sep == ':' else ', '

    def dump(self, value, base_indent, inline=False):
        """``value`` as JSON text in this style; ``inline`` for a spot inside a one-line object."""
        if self.compact or inline:
            item_sep = self.item_sep if self.compact else ', '
            return json.dumps(value, ensure_ascii=False, separators=(item_sep, self.kv_sep))
        text = json.dumps(value, ensure_ascii=False, indent=self.unit, separators=(',', self.kv_sep))
        return text.replace('\n', self.newline + base_indent)


def _first_member(node):
    if node.kind == 'object':
        for member in node.members:
            return member
    return None


def _line_indent(text, pos):
    line_start = text.rfind('\n', 0, pos) + 1
    indent = []
    for char in text[line_start:pos]:
        if char in ' \t':
            indent.append(char)
        else:
            break
    return ''.join(indent)


def _find_unit(text, node):
    """Indent unit: a member's line indent minus its object's line indent."""
    if node.kind != 'object' or not node.members:
        return None
    first = node.members[0]
    if '\n' in text[node.start:first.key_start]:
        outer = _line_indent(text, node.start)
        inner = _line_indent(text, first.key_start)
        if inner.startswith(outer) and len(inner) > len(outer):
            return inner[len(outer):]
    for member in node.members:
        unit = _find_unit(text, member.node)
        if unit:
            return unit
    return None


def _is_multiline(text, node, style):
    if node.members:
        return '\n' in text[node.start:node.members[0].key_start] or '\n' in text[node.members[-1].node.end:node.end]
    return not style.compact


def _insert_member(text, node, key, value, style):
    key_text = json.dumps(key, ensure_ascii=False)
    if node.members:
        last = node.members[-1]
        if _is_multiline(text, node, style):
            indent = _line_indent(text, last.key_start)
            piece = ',' + style.newline + indent + key_text + style.kv_sep + style.dump(value, indent)
        else:
            sep = style.item_sep if style.compact else ', '
            piece = sep + key_text + style.kv_sep + style.dump(value, '', inline=True)
        return text[:last.node.end] + piece + text[last.node.end:]
    if _is_multiline(text, node, style):
        base = _line_indent(text, node.start)
        inner = base + style.unit
        body = style.newline + inner + key_text + style.kv_sep + style.dump(value, inner) + style.newline + base
    else:
        body = key_text + style.kv_sep + style.dump(value, '', inline=True)
    return text[:node.start + 1] + body + text[node.end - 1:]


def _replace_value(text, parent, member, value, style):
    indent = _line_indent(text, member.key_start)
    inline = not _is_multiline(text, parent, style)
    return text[:member.node.start] + style.dump(value, indent, inline=inline) + text[member.node.end:]


def _remove_member(text, node, index):
    members = node.members
    member = members[index]
    if len(members) == 1:
        return text[:node.start + 1] + text[node.end - 1:]
    if index > 0:
        return text[:members[index - 1].node.end] + text[member.node.end:]
    return text[:member.key_start] + text[members[1].key_start:]


class Editor(object):
    """Applies one member edit at a time, re-parsing in between (files are tiny).

    ``root``: the text's parsed top (``parse_document``), when the caller has it
    already. ``root.value`` is always the document as it now stands.
    """

    def __init__(self, text, path, root=None):
        self.path = path
        if root is None:
            root = parse_document(text, path)
        if root is None:
            # Missing or empty file: start from an empty object, keeping any BOM.
            bom = BOM if text.startswith(BOM) else ''
            text = bom + '{}' + ('\r\n' if '\r\n' in text else '\n')
            root = parse_document(text, path)
        self.text = text
        self.dirty = False
        self.root = root
        self.style = Style(text, root)

    def _reparse(self):
        self.dirty = True
        self.root = parse_document(self.text, self.path)

    def _object_at(self, keys):
        node = self.root
        for key in keys:
            index, member = node.member(key)
            if member is None:
                return None
            node = member.node
        return node

    def get(self, keys):
        node = self._object_at(keys[:-1])
        if node is None or node.kind != 'object':
            return False, None
        index, member = node.member(keys[-1])
        if member is None:
            return False, None
        return True, member.node.value

    def set(self, keys, value):
        """Set ``keys`` (a path of object keys) to ``value``; True when the text changed."""
        node = self.root
        for depth, key in enumerate(keys[:-1]):
            index, member = node.member(key)
            if member is None:
                nested = value
                for inner in reversed(keys[depth + 1:]):
                    nested = {inner: nested}
                self.text = _insert_member(self.text, node, key, nested, self.style)
                self._reparse()
                return True
            if member.node.kind != 'object':
                raise DocumentError('%s: "%s" must be a JSON object, found %s. The file was left untouched.'
                                    % (self.path, '.'.join(keys[:depth + 1]), json_type(member.node.value)))
            node = member.node
        index, member = node.member(keys[-1])
        if member is None:
            self.text = _insert_member(self.text, node, keys[-1], value, self.style)
        elif same_value(member.node.value, value):
            return False
        else:
            self.text = _replace_value(self.text, node, member, value, self.style)
        self._reparse()
        return True

    def remove(self, keys, prune=False):
        """Remove the member at ``keys``, with its separator; True when the text changed.

        ``prune``: an enclosing object (not the top) that this removal leaves
        empty goes too, innermost first, each with its separator. So a member
        that ``set`` added together with its parents comes out with them, and
        the text is what it was before. An object that was already empty is
        never touched: only what this removal empties is pruned.
        """
        node = self._object_at(keys[:-1])
        if node is None or node.kind != 'object':
            return False
        index, member = node.member(keys[-1])
        if member is None:
            return False
        self.text = _remove_member(self.text, node, index)
        self._reparse()
        while prune and len(keys) > 1:
            keys = keys[:-1]
            parent = self._object_at(keys)
            if parent is None or parent.kind != 'object' or parent.members:
                break
            holder = self._object_at(keys[:-1])
            index, unused = holder.member(keys[-1])
            self.text = _remove_member(self.text, holder, index)
            self._reparse()
        return True
