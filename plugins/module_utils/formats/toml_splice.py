# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Edit a TOML document as text, keeping every byte that is not changed.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It is pure (no files, no processes) and imports nothing of ours
but ``common.errors`` and the vendored reader ``formats._tomli`` (the bottom layer): ``parse``
reads a document's values, with the file's name in the error.

``scan`` finds the document's structure with spans: each table header
(``[a."b.c".d]``, ``[[x]]``) and each key/value line, with the table it
belongs to, where its value starts and ends and where its line ends. It
reads strings (basic, literal, multi-line), comments, arrays that span lines
and inline tables, so a ``[`` or ``=`` inside a value is never taken for
structure. It does not decide what is valid TOML: the caller checks that
with a real parser first (``formats._tomli``), and ``scan`` refuses, with a
DocumentError, anything it cannot place.

The edits (``Splice``) insert lines, replace a value or remove a span, and
write new lines with the document's own line ending (LF or CRLF): comments,
key order, quoting, indentation and every other line stay as they were.

Nesting deeper than ``MAX_DEPTH`` (arrays, inline tables, tables) is refused
with a DocumentError naming the file: a configuration file is a few levels
deep, and no reader here recurses without bound. Every step is linear in the
document's size.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import re

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import DocumentError

try:  # Python 3.11+: the standard library's reader, tomli itself, compiled once with the interpreter
    import tomllib as reader
except ImportError:  # Python 3.8-3.10: the vendored copy, compiled from the module's zip on every run
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.formats import _tomli as reader

MAX_DEPTH = 64
_BARE = re.compile(r'[A-Za-z0-9_-]+')
_ESCAPES = {'b': '\b', 't': '\t', 'n': '\n', 'f': '\f', 'r': '\r', 'e': '\x1b', '"': '"', '\\': '\\'}


class Header(object):
    """``[path]`` or ``[[path]]``: ``start`` (line start), ``end`` (after its line ending), ``indent``."""

    __slots__ = ('path', 'array', 'start', 'end', 'indent')

    def __init__(self, path, array, start, end, indent):
        self.path = path
        self.array = array
        self.start = start
        self.end = end
        self.indent = indent


class Entry(object):
    """``key = value`` in ``table``: ``key`` is the (dotted) key path; spans of the line and the value."""

    __slots__ = ('table', 'key', 'start', 'value_start', 'value_end', 'end', 'indent')

    def __init__(self, table, key, start, value_start, value_end, end, indent):
        self.table = table
        self.key = key
        self.start = start
        self.value_start = value_start
        self.value_end = value_end
        self.end = end
        self.indent = indent

    @property
    def path(self):
        return self.table + self.key


class Document(object):
    """What ``scan`` found: ``headers`` and ``entries`` in file order, ``newline`` ('\\n' or '\\r\\n')."""

    def __init__(self, text, headers, entries, newline):
        self.text = text
        self.headers = headers
        self.entries = entries
        self.newline = newline

    def header(self, path):
        for header in self.headers:
            if header.path == tuple(path) and not header.array:
                return header
        return None

    def entries_in(self, table):
        return [entry for entry in self.entries if entry.table == tuple(table)]

    def entry(self, path):
        """The entry that defines ``path`` exactly (whatever table or dotted key it was written with)."""
        for entry in self.entries:
            if entry.path == tuple(path):
                return entry
        return None

    def defines_below(self, path):
        """Whether any header or dotted key defines something at or below ``path``."""
        path = tuple(path)
        size = len(path)
        return any(h.path[:size] == path for h in self.headers) or \
            any(e.path[:size] == path for e in self.entries)

    def table_end(self, header):
        """Where the lines of ``header``'s own keys end (after its last entry, else after the header)."""
        end = header.end
        nxt = self.next_header_start(header)
        for entry in self.entries:
            if nxt is not None and entry.start >= nxt:
                break
            if entry.start >= header.end and entry.table == header.path:
                end = max(end, entry.end)
        return end

    def next_header_start(self, header):
        later = [h.start for h in self.headers if h.start > header.start]
        return min(later) if later else None

    def key_indent(self, default='  '):
        """The indentation the document uses for keys under a header (default two spaces)."""
        for entry in self.entries:
            if entry.table:
                return entry.indent
        return default


def parse(text, path, refusal):
    """The values of TOML ``text`` (``formats._tomli``), checked for depth; a DocumentError naming ``path`` when it is not
    valid TOML, ending with ``refusal`` (what its reader would do, and that nothing was changed)."""
    try:
        values = reader.loads(text)
    except (reader.TOMLDecodeError, ValueError) as exc:
        raise DocumentError('%s: not valid TOML (%s); %s' % (path, exc, refusal))
    except RecursionError:
        raise too_deep(path)
    return check_depth(values, path)


def get(values, path, default=None):
    """The value at the key ``path`` (a tuple) of parsed ``values``, else ``default``."""
    node = values
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def _line_col(text, pos):
    return text.count('\n', 0, pos) + 1, pos - (text.rfind('\n', 0, pos) + 1) + 1


class _Scanner(object):
    def __init__(self, text, name):
        self.text = text
        self.name = name
        self.pos = 0

    def fail(self, what, pos=None):
        line, col = _line_col(self.text, self.pos if pos is None else pos)
        raise DocumentError('%s: cannot place %s at line %d, column %d; the file was left untouched.'
                            % (self.name, what, line, col))

    def peek(self, size=1):
        return self.text[self.pos:self.pos + size]

    def skip_blank(self):
        while self.pos < len(self.text) and self.text[self.pos] in ' \t':
            self.pos += 1

    def skip_comment_and_eol(self):
        """Rest of a line: blanks, an optional comment, the line ending. Returns the position after it."""
        self.skip_blank()
        if self.peek() == '#':
            newline = self.text.find('\n', self.pos)
            self.pos = len(self.text) if newline < 0 else newline
        if self.peek(2) == '\r\n':
            self.pos += 2
        elif self.peek() == '\n':
            self.pos += 1
        elif self.pos < len(self.text):
            self.fail('text after a value')
        return self.pos

    def skip_ws_newlines_comments(self):
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char in ' \t\r\n':
                self.pos += 1
            elif char == '#':
                newline = self.text.find('\n', self.pos)
                self.pos = len(self.text) if newline < 0 else newline
            else:
                return

    # ---- keys -------------------------------------------------------------------
    def basic_string(self):
        """A one-line basic string at pos (after its opening quote handling); returns its value."""
        self.pos += 1
        out = []
        while True:
            if self.pos >= len(self.text) or self.text[self.pos] in '\r\n':
                self.fail('an unterminated string')
            char = self.text[self.pos]
            if char == '"':
                self.pos += 1
                return ''.join(out)
            if char == '\\':
                code = self.text[self.pos + 1:self.pos + 2]
                if code in _ESCAPES:
                    out.append(_ESCAPES[code])
                    self.pos += 2
                elif code in ('u', 'U'):
                    size = 4 if code == 'u' else 8
                    digits = self.text[self.pos + 2:self.pos + 2 + size]
                    try:
                        out.append(chr(int(digits, 16)))
                    except ValueError:
                        self.fail('a bad escape')
                    self.pos += 2 + size
                else:
                    self.fail('a bad escape')
                continue
            out.append(char)
            self.pos += 1

    def literal_string(self):
        end = self.text.find("'", self.pos + 1)
        newline = self.text.find('\n', self.pos + 1)
        if end < 0 or (0 <= newline < end):
            self.fail('an unterminated string')
        value = self.text[self.pos + 1:end]
        self.pos = end + 1
        return value

    def key(self):
        """A dotted key at pos: a tuple of its parts."""
        parts = []
        while True:
            self.skip_blank()
            char = self.peek()
            if char == '"':
                parts.append(self.basic_string())
            elif char == "'":
                parts.append(self.literal_string())
            else:
                match = _BARE.match(self.text, self.pos)
                if not match:
                    self.fail('a key')
                parts.append(match.group(0))
                self.pos = match.end()
            self.skip_blank()
            if self.peek() != '.':
                return tuple(parts)
            self.pos += 1

    # ---- values -----------------------------------------------------------------
    def value(self, depth=1):
        """Skip one value at pos (``depth``: how many arrays and inline tables hold it); returns its end."""
        text = self.text
        if text.startswith('"""', self.pos) or text.startswith("'''", self.pos):
            quote = text[self.pos:self.pos + 3]
            cursor = self.pos + 3
            while True:
                found = text.find(quote, cursor)
                if found < 0:
                    self.fail('an unterminated multi-line string')
                if quote == '"""':
                    backslashes = 0
                    back = found - 1
                    while back >= cursor and text[back] == '\\':
                        backslashes += 1
                        back -= 1
                    if backslashes % 2:
                        cursor = found + 1
                        continue
                end = found + 3
                while end < len(text) and text[end] == quote[0] and end - found < 5:
                    end += 1  # up to two quotes may end the content: """a""""" is 'a""'
                self.pos = end
                return end
        char = self.peek()
        if char == '"':
            self.basic_string()
            return self.pos
        if char == "'":
            self.literal_string()
            return self.pos
        if char in '[{':
            if depth > MAX_DEPTH:
                self.fail('a value nested deeper than %d levels (a configuration file is a few levels deep)'
                          % MAX_DEPTH)
            closer = ']' if char == '[' else '}'
            self.pos += 1
            while True:
                self.skip_ws_newlines_comments()
                if self.peek() == closer:
                    self.pos += 1
                    return self.pos
                if self.peek() == ',':
                    self.pos += 1
                    continue
                if self.pos >= len(text):
                    self.fail('an unterminated array or inline table')
                if closer == '}':
                    self.key()
                    self.skip_blank()
                    if self.peek() != '=':
                        self.fail('an inline table member')
                    self.pos += 1
                    self.skip_blank()
                self.value(depth + 1)
        match = re.compile(r'[^\s,\]\}#]+(?: [0-9:.+Z-]+)?').match(text, self.pos)  # numbers, bools, dates
        if not match:
            self.fail('a value')
        self.pos = match.end()
        return self.pos


def scan(text, name='the document'):
    """The structure of TOML ``text`` (already checked to be valid TOML): a Document."""
    scanner = _Scanner(text, name)
    headers, entries = [], []
    table = ()
    while scanner.pos < len(text):
        start = scanner.pos
        scanner.skip_blank()
        indent = text[start:scanner.pos]
        char = scanner.peek()
        if char in ('', '\n', '\r', '#'):
            scanner.skip_comment_and_eol()
            continue
        if char == '[':
            array = text.startswith('[[', scanner.pos)
            scanner.pos += 2 if array else 1
            path = scanner.key()
            if len(path) > MAX_DEPTH:
                scanner.fail('a table nested deeper than %d levels (a configuration file is a few levels deep)'
                             % MAX_DEPTH, start)
            closer = ']]' if array else ']'
            if not text.startswith(closer, scanner.pos):
                scanner.fail('a table header')
            scanner.pos += len(closer)
            end = scanner.skip_comment_and_eol()
            headers.append(Header(path, array, start, end, indent))
            table = path
            continue
        key = scanner.key()
        if len(table + key) > MAX_DEPTH:
            scanner.fail('a key nested deeper than %d levels (a configuration file is a few levels deep)'
                         % MAX_DEPTH, start)
        scanner.skip_blank()
        if scanner.peek() != '=':
            scanner.fail('a key/value line')
        scanner.pos += 1
        scanner.skip_blank()
        value_start = scanner.pos
        value_end = scanner.value()
        end = scanner.skip_comment_and_eol()
        entries.append(Entry(table, key, start, value_start, value_end, end, indent))
    newline = '\r\n' if '\r\n' in text else '\n'
    return Document(text, headers, entries, newline)


def check_depth(values, name):
    """Refuse parsed TOML ``values`` nested deeper than MAX_DEPTH, naming the file ``name`` (no recursion)."""
    pending = [(values, 0)]
    while pending:
        node, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise DocumentError('%s: TOML nested deeper than %d levels; a configuration file is a few levels deep. '
                                'Fix the file by hand; it was left untouched.' % (name, MAX_DEPTH))
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        pending.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return values


def too_deep(name):
    """The error for a document a parser could not read without recursing past Python's limit."""
    return DocumentError('%s: TOML nested too deeply to read (more than %d levels is refused); a configuration file '
                         'is a few levels deep. Fix the file by hand; it was left untouched.' % (name, MAX_DEPTH))


def fold(key):
    """``key`` folded so that two keys a Go TOML decoder may take for one struct field fold alike: go-toml v2 lowers
    with ``strings.ToLower`` (U+0130 becomes i), BurntSushi's toml compares with ``strings.EqualFold`` (U+017F is s,
    the Kelvin sign k); Python's ``casefold`` does both of the latter, and more (it may refuse a key no decoder
    would match: never the other way round)."""
    return key.replace(u'\u0130', 'i').casefold()


def check_key_case(text, values, name, own_keys, name_tables, program):
    """Refuse, naming the file ``name`` and the line, a key of ``program``'s own written in another case than its
    documented spelling (``own_keys``).

    containerd's and CRI-O's TOML decoders find a struct field under more spellings than the documented one
    (go-toml v1, containerd 1.6 and 1.7: the tag and the tag in upper case; go-toml v2, containerd 2.x, and
    BurntSushi's toml, CRI-O: any case), so such a key is read by the program and missed by a reader that looks up the
    documented spelling: a check of ``imports`` would not see ``IMPORTS``. One rule serves every version: refuse.
    The keys of a table named in ``name_tables`` (plugin ids, runtime names) are names, whose case matters to the
    program, and are not checked."""
    folded = dict((fold(key), key) for key in own_keys)
    pending = [((), values)]
    while pending:
        path, table = pending.pop()
        naming = bool(path) and fold(path[-1]) in name_tables
        for key, value in table.items():
            known = None if naming else folded.get(fold(key))
            if known is not None and key != known:
                raise DocumentError('%s%s: the key %s is %s\'s "%s" written in another case; %s may read it as '
                                    '"%s" (its TOML decoder matches keys in other cases too) while this collection '
                                    'reads only "%s". Write "%s"; the file was left untouched.' % (
                                        name, _at_line(text, name, path + (key,)), dotted(path + (key,)),
                                        program, known, program, known, known, known))
            for child in value if isinstance(value, list) else [value]:
                if isinstance(child, dict):
                    pending.append((path + (key,), child))
    return values


def key_line(text, name, path):
    """The line where the key ``path`` (a tuple) is first written: the first header or key line that names it
    (``[a.B.c]`` names ``a.B``), else the line whose inline table or dotted key holds it; None when unknown."""
    try:
        doc = scan(text, name)
    except DocumentError:
        return None
    path = tuple(path)
    items = doc.headers + doc.entries
    naming = [item.start for item in items if item.path[:len(path)] == path]
    holding = [(len(item.path), item.start) for item in items if item.path == path[:len(item.path)]]
    start = min(naming) if naming else max(holding)[1] if holding else None
    return None if start is None else _line_col(text, start)[0]


def _at_line(text, name, path):
    line = key_line(text, name, path)
    return '' if line is None else ' line %d' % line


# --------------------------------------------------------------------------
# Writing TOML pieces and splicing them in
# --------------------------------------------------------------------------

def quote_key(part):
    """A key part as TOML writes it: bare when it can be, else a basic string."""
    if _BARE.match(part) and _BARE.match(part).group(0) == part:
        return part
    return string(part)


def string(value):
    """A TOML basic string."""
    out = ['"']
    for char in value:
        if char == '"':
            out.append('\\"')
        elif char == '\\':
            out.append('\\\\')
        elif char in '\b\t\n\f\r':
            out.append({'\b': '\\b', '\t': '\\t', '\n': '\\n', '\f': '\\f', '\r': '\\r'}[char])
        elif ord(char) < 0x20 or ord(char) == 0x7f:
            out.append('\\u%04x' % ord(char))
        else:
            out.append(char)
    out.append('"')
    return ''.join(out)


def dotted(path):
    return '.'.join(quote_key(part) for part in path)


def scalar(value):
    """A bool, int, float, str or an array of them as TOML text."""
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and not math.isnan(value) and not math.isinf(value):
        return repr(value)
    if isinstance(value, str):
        return string(value)
    if isinstance(value, list):
        return '[%s]' % ', '.join(scalar(item) for item in value)
    raise DocumentError('cannot write %r as a TOML value' % (value,))


def blank_line_before(text, pos):
    """Where the empty line that ends at ``pos`` starts, else ``pos``: only an empty line after another line counts
    (the one ``Splice.append_lines`` writes), whatever the line endings of the two (LF, CRLF, mixed)."""
    for blank in ('\n\r\n', '\n\n'):
        if text.endswith(blank, 0, pos):
            return pos - len(blank) + 1
    return pos


class Splice(object):
    """Edits of one text, applied at once from the end so that earlier spans stay valid."""

    def __init__(self, text):
        self.text = text
        self.edits = []  # (start, end, replacement)

    def replace(self, start, end, replacement):
        self.edits.append((start, end, replacement))

    def insert(self, pos, replacement):
        self.edits.append((pos, pos, replacement))

    def remove(self, start, end):
        self.edits.append((start, end, ''))

    def append_lines(self, lines, newline, blank_before=True):
        """Lines at the end of the text; a final line without an ending gets one first. With ``blank_before``, a
        text that is not empty gets a blank line before them, also one that is only blanks or ends with blank lines
        of its own: ``blank_line_before`` finds exactly that line again, so taking the lines out with it gives the
        text back byte for byte."""
        text = self.text
        prefix = ''
        if text and not text.endswith('\n'):
            prefix = newline
        if blank_before and text:
            prefix += newline
        self.insert(len(text), prefix + ''.join(line + newline for line in lines))

    def result(self):
        edits = sorted(self.edits, key=lambda edit: (edit[0], edit[1]))
        for first, second in zip(edits, edits[1:]):
            if first[1] > second[0]:
                raise DocumentError('overlapping edits')  # a bug of ours, never a user's file
        text = self.text
        for start, end, replacement in reversed(edits):
            text = text[:start] + replacement + text[end:]
        return text
