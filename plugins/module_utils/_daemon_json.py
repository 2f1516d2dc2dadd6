# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Merge a container runtime into dockerd's daemon.json and apply it.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It holds no AnsibleModule so that pytest can drive it directly.

Three layers:

* **Text editing** (``parse_document``, ``merge_text``): daemon.json is edited
  as text. Every value we do not change keeps its exact bytes (numbers such as
  ``1.0``, ``1e3`` or 20-digit integers, escapes, key order, indentation,
  CRLF, the trailing newline); only the members we set are spliced in,
  formatted like their neighbours. Duplicate keys are refused, as are
  non-object tops and a ``runtimes`` that is not an object.
* **File handling** (``resolve_path``, ``open_config``, ``write_atomic``,
  ``backup_copy``, ``directory_lock``): the module runs as root, so every
  directory on the way must be out of other users' reach (else a clear
  refusal); trusted symlinks are written through (the link stays); files are
  opened with O_NOFOLLOW, new ones with O_EXCL, mode and owner set on the
  descriptor; writes are temp file in the same directory + fsync + rename +
  directory fsync; a flock on the directory serialises concurrent writers.
  Input is bounded (1 MiB, 64 levels) and every failure is a DaemonJsonError.
* **Applying** (``converge``): ask the running dockerd (``GET /info``) whether
  it already runs what the file says; reload (SIGHUP) when additions/changes
  suffice, restart when something was removed (dockerd 20.10 keeps removed
  keys on reload and panics when the running default runtime disappears from
  ``runtimes``), verify through the API, roll back the file and restart when
  dockerd does not come back.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import errno
import fcntl
import json
import os
import re
import shlex
import signal
import stat
import tempfile
import time

DEFAULT_PATH = '/etc/docker/daemon.json'
# Runtime names dockerd reserves for itself (moby daemon/config, 20.10+).
RESERVED_RUNTIMES = ('runc', 'io.containerd.runc.v2', 'io.containerd.runtime.v1.linux')
STOCK_RUNTIME = 'runc'
DEFAULT_PIDFILES = ('/var/run/docker.pid', '/run/docker.pid')
ACTIONS = ('none', 'reload', 'restart', 'deferred')
RUNTIME_PACKAGE = 'nvidia-container-toolkit'

# dockerd flags whose daemon.json key is not simply the long flag name.
FLAG_TO_KEY = {
    'add-runtime': 'runtimes',
    'host': 'hosts',
    'H': 'hosts',
    'label': 'labels',
    'storage-opt': 'storage-opts',
    'log-opt': 'log-opts',
    'registry-mirror': 'registry-mirrors',
    'insecure-registry': 'insecure-registries',
    'exec-opt': 'exec-opts',
    'dns-opt': 'dns-opts',
    'default-ulimit': 'default-ulimits',
    'authorization-plugin': 'authorization-plugins',
    'cluster-store-opt': 'cluster-store-opts',
    'default-address-pool': 'default-address-pools',
    'node-generic-resource': 'node-generic-resources',
    'D': 'debug',
    'G': 'group',
    'l': 'log-level',
    'b': 'bridge',
    's': 'storage-driver',
    'p': 'pidfile',
    'g': 'graph',
}
# Flags that are not daemon.json keys at all.
FLAG_NOT_KEYS = ('config-file', 'validate', 'version', 'v', 'help')
OUR_KEYS = ('runtimes', 'default-runtime', 'features')
# daemon.json keys dockerd accepts besides its flag names (moby daemon/config: NamedOption names,
# skipValidateOptions, and hidden deprecated flags `dockerd --help` does not list). dockerd refuses to start
# with any other key ("the following directives don't match any configuration option").
EXTRA_OPTION_KEYS = ('features', 'builder', 'deprecated-key-path', 'cluster-advertise', 'cluster-store',
                     'cluster-store-opts', 'graph', 'restart')


class DaemonJsonError(Exception):
    """A problem the user must fix; the message names the file and the problem."""


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
                raise DaemonJsonError(
                    '%s: duplicate key "%s" in one JSON object; dockerd would silently keep only the last '
                    'one. Remove the duplicate and run again.' % (path, key))
            seen[key] = value
        return seen
    return hook


BOM = u'\ufeff'


def parse_document(text, path='daemon.json'):
    """Parse daemon.json text; returns the top-level object Node.

    An empty or whitespace-only text is ``{}``. Raises DaemonJsonError naming
    ``path`` and the problem for anything dockerd could not use.
    """
    body = text[1:] if text.startswith(BOM) else text
    if not body.strip(_WS):
        return None
    depth = nesting_depth(body, MAX_DEPTH)
    if depth > MAX_DEPTH:
        raise DaemonJsonError('%s: JSON nested deeper than %d levels; a dockerd configuration is a few levels deep. '
                              'Fix the file by hand; it was left untouched.' % (path, MAX_DEPTH))
    try:
        json.loads(body, object_pairs_hook=_check_duplicates(path), parse_constant=_reject_constant)
    except DaemonJsonError:
        raise
    except ValueError as exc:
        raise DaemonJsonError('%s: invalid JSON: %s. Fix the file by hand; it was left untouched.' % (path, exc))
    except (RecursionError, MemoryError) as exc:
        raise DaemonJsonError('%s: JSON too complex to read (%s). Fix the file by hand; it was left untouched.'
                              % (path, type(exc).__name__))
    offset = len(text) - len(body)
    node = _SpanParser(text).value(offset)
    if node.kind != 'object':
        raise DaemonJsonError('%s: the top level must be a JSON object ({...}), found %s. '
                              'The file was left untouched.' % (path, _json_type(node.value)))
    runtimes = node.value.get('runtimes')
    if 'runtimes' in node.value and not isinstance(runtimes, dict):
        raise DaemonJsonError('%s: "runtimes" must be a JSON object mapping names to {"path": ...}, found %s. '
                              'The file was left untouched.' % (path, _json_type(runtimes)))
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


def _json_type(value):
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


class _Editor(object):
    """Applies one member edit at a time, re-parsing in between (files are tiny)."""

    def __init__(self, text, path):
        self.path = path
        self.style_root = None
        if parse_document(text, path) is None:
            # Missing or empty file: start from an empty object, keeping any BOM.
            bom = BOM if text.startswith(BOM) else ''
            text = bom + '{}' + ('\r\n' if '\r\n' in text else '\n')
        self.text = text
        self.dirty = False
        self.root = parse_document(text, path)
        self.style = Style(text, self.root)

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
                raise DaemonJsonError('%s: "%s" must be a JSON object, found %s. The file was left untouched.'
                                      % (self.path, '.'.join(keys[:depth + 1]), _json_type(member.node.value)))
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

    def remove(self, keys):
        node = self._object_at(keys[:-1])
        if node is None or node.kind != 'object':
            return False
        index, member = node.member(keys[-1])
        if member is None:
            return False
        self.text = _remove_member(self.text, node, index)
        self._reparse()
        return True


def merge_text(text, path, state='present', name='nvidia', runtime_path='nvidia-container-runtime',
               runtime_args=None, default_runtime=None, cdi=None):
    """Return ``(new_text, warnings)``: ``text`` with our runtime merged in (or removed).

    ``new_text == text`` exactly when nothing needs to change. ``runtime_args``
    None leaves an existing runtime's ``runtimeArgs`` alone (new entries get
    ``[]``); a missing ``runtimeArgs`` equals ``[]``. ``cdi`` None leaves
    ``features.cdi`` alone; a missing ``features.cdi`` equals ``false``.
    ``default_runtime`` None leaves ``default-runtime`` alone; true sets it to
    us; false removes it only when it names us.
    """
    if name in RESERVED_RUNTIMES:
        raise DaemonJsonError('%s: the runtime name "%s" is reserved by dockerd; choose another name.' % (path, name))
    if not name:
        raise DaemonJsonError('%s: the runtime name must not be empty.' % path)
    warnings = []
    editor = _Editor(text, path)
    current = editor.root.value
    if state == 'present':
        entry = current.get('runtimes', {}).get(name)
        if isinstance(entry, dict):
            old_path = entry.get('path')
            if editor.set(['runtimes', name, 'path'], runtime_path) and old_path is not None:
                warnings.append('%s: runtime "%s" had the path %s; it was replaced by %s (runtime_path). Set '
                                'runtime_path to %s to keep it.' % (path, name, json.dumps(old_path),
                                                                    json.dumps(runtime_path), json.dumps(old_path)))
            if runtime_args is not None:
                has_args, existing = editor.get(['runtimes', name, 'runtimeArgs'])
                if not (not has_args and list(runtime_args) == []):
                    editor.set(['runtimes', name, 'runtimeArgs'], list(runtime_args))
            has_args, effective = editor.get(['runtimes', name, 'runtimeArgs'])
            if entry.get('args') and not same_value(entry.get('args'), effective or []):
                warnings.append('%s: runtime "%s" has "args": %s, which dockerd ignores (it reads "runtimeArgs", '
                                'now %s); "args" was left as it is. Set runtime_args to pass arguments.'
                                % (path, name, json.dumps(entry['args']), json.dumps(effective or [])))
        else:
            editor.set(['runtimes', name], {'path': runtime_path, 'runtimeArgs': list(runtime_args or [])})
        if default_runtime:
            editor.set(['default-runtime'], name)
        elif default_runtime is not None and current.get('default-runtime') == name:
            editor.remove(['default-runtime'])
        if cdi is not None:
            features = current.get('features')
            if features is not None and not isinstance(features, dict):
                raise DaemonJsonError('%s: "features" must be a JSON object, found %s. The file was left untouched.'
                                      % (path, _json_type(features)))
            has_cdi, existing = editor.get(['features', 'cdi'])
            if has_cdi or cdi:
                editor.set(['features', 'cdi'], bool(cdi))
    elif state == 'absent':
        editor.remove(['runtimes', name])
        if current.get('default-runtime') == name:
            editor.remove(['default-runtime'])
    else:
        raise DaemonJsonError('state must be present or absent, not %r' % (state,))
    if not editor.dirty:
        return text, warnings
    return editor.text, warnings


def config_of(text, path='daemon.json'):
    """The Python dict the text stands for (``{}`` when empty)."""
    node = parse_document(text, path)
    return {} if node is None else node.value


# --------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------
#
# The module runs as root and writes daemon.json, its temporary file and its
# backups in the file's directory. Anyone who can write that directory (or
# the file) controls dockerd, which runs as root, and could turn a write by
# path into a write anywhere. So every directory on the way to the file is
# checked first (``resolve_path``): owned by root or by the user running the
# module, writable by nobody else (an ancestor may be a sticky directory such
# as /tmp, whose entries others cannot rename); a symbolic link is followed
# only when it sits in such a directory and is owned by root or us. In a
# directory only root can change, no other user can plant or swap a name, and
# the descriptor-based operations below (O_NOFOLLOW, O_EXCL, fchmod, fchown,
# fstat) keep it that way even against a careless root.

MAX_CONFIG_BYTES = 1024 * 1024
MAX_DEPTH = 64
MAX_SYMLINKS = 40
_NOFOLLOW = getattr(os, 'O_NOFOLLOW', 0)
_CLOEXEC = getattr(os, 'O_CLOEXEC', 0)
_DIRECTORY = getattr(os, 'O_DIRECTORY', 0)
_NONBLOCK = getattr(os, 'O_NONBLOCK', 0)


def _trusted_uids():
    return (0, os.geteuid())


def _untrusted(st, sticky_ok=False):
    """Why someone other than root (or us) can change this entry, or None."""
    if st.st_uid not in _trusted_uids():
        return 'is owned by uid %d' % st.st_uid
    if stat.S_ISLNK(st.st_mode):
        return None  # a link's own mode means nothing; its directory decides
    if st.st_mode & 0o022 and not (sticky_ok and st.st_mode & stat.S_ISVTX):
        who = 'every user' if st.st_mode & 0o002 else 'group %d' % st.st_gid
        return 'is writable by %s (mode %04o)' % (who, stat.S_IMODE(st.st_mode))
    return None


def _refuse(path, what, why, fix):
    raise DaemonJsonError('%s: refusing to use %s: it %s, so another user could make this root-run module write '
                          'or replace any file, or control dockerd. %s' % (path, what, why, fix))


def _split(path):
    return [part for part in path.split('/') if part]


def resolve_path(path):
    """Where to write ``path``: its real location, checked to be out of other users' reach.

    Returns the real path; trailing components may not exist yet. Raises
    DaemonJsonError when a directory on the way, a link followed or the file
    can be changed by a user other than root or us, and for a dangling link
    (creating its target could write anywhere).
    """
    absolute = path if path.startswith('/') else os.getcwd() + '/' + path
    pending = _split(absolute)
    current = '/'
    problem = _untrusted(os.lstat('/'), sticky_ok=True)
    if problem:
        _refuse(path, 'the directory /', problem, 'Fix the ownership of /.')
    hops = 0
    followed = None
    while pending:
        name = pending.pop(0)
        if name == '.':
            continue
        if name == '..':
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, name)
        try:
            st = os.lstat(candidate)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                raise DaemonJsonError('%s: cannot inspect %s: %s' % (path, candidate, exc.strerror))
            if followed is not None and not pending:
                raise DaemonJsonError('%s is a symbolic link to %s, which does not exist; create the target or '
                                      'remove the link.' % (path, candidate))
            if '..' in pending:
                raise DaemonJsonError('%s: "%s" does not exist and the path goes on with "..": give a plain path.'
                                      % (path, candidate))
            real = os.path.join(candidate, *[part for part in pending if part != '.'])
            _check_parent(path, real)
            return real
        if stat.S_ISLNK(st.st_mode):
            problem = _untrusted(st)
            if problem:
                _refuse(path, 'the symbolic link %s' % candidate, problem,
                        'Remove the link, or replace it with a link owned by root.')
            hops += 1
            if hops > MAX_SYMLINKS:
                raise DaemonJsonError('%s: too many levels of symbolic links.' % path)
            target = os.readlink(candidate)
            if target.startswith('/'):
                current = '/'
            if not pending:
                followed = candidate  # the file itself is a link: its target must exist
            pending = _split(target) + pending
            continue
        if not pending:
            current = candidate
            break
        if not stat.S_ISDIR(st.st_mode):
            raise DaemonJsonError('%s: %s is not a directory.' % (path, candidate))
        problem = _untrusted(st, sticky_ok=True)
        if problem:
            _refuse(path, 'the directory %s' % candidate, problem,
                    'Make it owned by root and writable only by root (chown root: %s; chmod go-w %s).'
                    % (candidate, candidate))
        current = candidate
    _check_parent(path, current)
    return current


def _check_parent(path, real):
    """The file's own directory holds our temp files and backups: nobody else may write it, sticky or not."""
    directory = os.path.dirname(real)
    try:
        st = os.lstat(directory)
    except OSError:
        return  # missing: ensure_directory creates it
    problem = _untrusted(st)
    if problem:
        _refuse(path, 'the directory %s' % directory, problem,
                'Keep dockerd\'s configuration in a directory only root can write (chown root: %s; chmod 0755 %s).'
                % (directory, directory))


class ConfigFile(object):
    """daemon.json as read: ``exists``, ``real`` (the path written), ``text``, ``stat`` (of the opened file)."""

    def __init__(self, exists, real, text, st):
        self.exists = exists
        self.real = real
        self.text = text
        self.stat = st


def open_config(path, real=None):
    """Read ``path`` (already resolved to ``real``) without following a link and within limits."""
    if real is None:
        real = resolve_path(path)
    try:
        fd = os.open(real, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return ConfigFile(False, real, '', None)
        if exc.errno == errno.ELOOP:
            raise DaemonJsonError('%s: %s became a symbolic link while being read; nothing was changed. Run again.'
                                  % (path, real))
        raise DaemonJsonError('%s: cannot read: %s' % (path, exc.strerror))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise DaemonJsonError('%s is not a regular file.' % path)
        problem = _untrusted(st)
        if problem:
            _refuse(path, 'the file %s' % real, problem,
                    'dockerd runs as root and reads it: make it owned by root and writable only by root '
                    '(chown root: %s; chmod 0644 %s).' % (real, real))
        if st.st_size > MAX_CONFIG_BYTES:
            raise DaemonJsonError('%s: the file is %d bytes; a dockerd configuration larger than %d bytes is refused. '
                                  'The file was left untouched.' % (path, st.st_size, MAX_CONFIG_BYTES))
        chunks = []
        size = 0
        while size <= MAX_CONFIG_BYTES:
            try:
                chunk = os.read(fd, 65536)
            except OSError as exc:
                raise DaemonJsonError('%s: cannot read: %s' % (path, exc.strerror))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_CONFIG_BYTES:
            raise DaemonJsonError('%s: the file grew past %d bytes while being read; it was left untouched.'
                                  % (path, MAX_CONFIG_BYTES))
    finally:
        os.close(fd)
    try:
        text = b''.join(chunks).decode('utf-8')
    except UnicodeDecodeError as exc:
        raise DaemonJsonError('%s: not valid UTF-8 (%s). The file was left untouched.' % (path, exc))
    return ConfigFile(True, real, text, st)


def read_config(path):
    """Return ``(exists, real_path, text)``; a missing file is ``(False, real_path, '')``."""
    found = open_config(path)
    return found.exists, found.real, found.text


def ensure_directory(path, mode=0o755):
    """Create the missing directories above ``path`` (a resolved path); True when one was created.

    Each is made with mkdir (which never follows a link) in a directory
    ``resolve_path`` found trusted; an existing entry (another run made it
    first) must be a real directory we trust. The mode is set on the
    descriptor, whatever the umask.
    """
    directory = os.path.dirname(path)
    missing = []
    while directory != '/' and not os.path.lexists(directory):
        missing.append(directory)
        directory = os.path.dirname(directory)
    created = False
    for directory in reversed(missing):
        try:
            os.mkdir(directory, mode)
            made = True
        except OSError as exc:
            if exc.errno != errno.EEXIST:
                raise DaemonJsonError('%s: cannot create the directory %s: %s. Nothing was written.'
                                      % (path, directory, exc.strerror))
            made = False
        try:
            fd = os.open(directory, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
        except OSError as exc:
            raise DaemonJsonError('%s: %s is not a directory we can use (%s). Nothing was written.'
                                  % (path, directory, exc.strerror))
        try:
            st = os.fstat(fd)
            if made:
                os.fchmod(fd, mode)
                created = True
            else:
                problem = _untrusted(st)
                if problem:
                    _refuse(path, 'the directory %s' % directory, problem,
                            'Make it owned by root and writable only by root.')
        except OSError as exc:
            raise DaemonJsonError('%s: cannot set the mode of %s: %s' % (path, directory, exc.strerror))
        finally:
            os.close(fd)
    return created


@contextlib.contextmanager
def directory_lock(path, timeout=120.0):
    """Exclusive flock on the file's directory: serialises our writers, leaves no lock file behind."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd = os.open(directory, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
    except OSError as exc:
        raise DaemonJsonError('%s: cannot open its directory %s to lock it: %s' % (path, directory, exc.strerror))
    try:
        deadline = time.time() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except (IOError, OSError) as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise DaemonJsonError('%s: cannot lock %s: %s' % (path, directory, exc.strerror))
                if time.time() > deadline:
                    raise DaemonJsonError('%s: another writer held the lock on %s for %ds' % (path, directory, timeout))
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def _no_lock():
    yield


def _fsync_directory(directory):
    try:
        fd = os.open(directory, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _new_file(directory, prefix, suffix):
    """A new file only we can have created: O_CREAT|O_EXCL|O_NOFOLLOW (``tempfile.mkstemp``), mode 0600."""
    return tempfile.mkstemp(dir=directory, prefix=prefix, suffix=suffix)


def _take_attributes(fd, like, new_mode):
    """Mode and owner of ``like`` (an os.stat_result, or None for a new file), set on the descriptor."""
    if like is None:
        os.fchmod(fd, new_mode)
        return
    os.fchmod(fd, stat.S_IMODE(like.st_mode))
    if (like.st_uid, like.st_gid) != (os.geteuid(), os.getegid()):
        try:
            os.fchown(fd, like.st_uid, like.st_gid)
        except OSError as exc:
            if exc.errno != errno.EPERM:
                raise


def _write_failed(path, exc, what='write'):
    reason = exc.strerror if getattr(exc, 'strerror', None) else str(exc)
    hint = {errno.EROFS: 'the file system is read-only', errno.ENOSPC: 'the file system is full',
            errno.EDQUOT: 'a disk quota is exceeded', errno.EPERM: 'the file or directory may be immutable '
            '(lsattr; chattr -i)', errno.EACCES: 'permission denied'}.get(getattr(exc, 'errno', None))
    return DaemonJsonError('%s: cannot %s: %s%s. The file was left as it was; no temporary file or backup was left.'
                           % (path, what, reason, ' (%s)' % hint if hint and hint != reason.lower() else ''))


def write_atomic(path, data, mover=None, new_mode=0o644, like=None):
    """Write ``data`` (bytes) to ``path`` (a resolved path): new file alongside, fsync, rename, fsync dir.

    The new file is created with O_EXCL|O_NOFOLLOW and gets its mode and
    owner through its descriptor: those of ``like`` (the existing file's
    stat; by default, an ``lstat`` of ``path``) or ``new_mode`` for a new
    file. ``mover(tmp, dest)`` does the rename when given (the module uses it
    to keep the SELinux context). On any failure the temp file is removed,
    ``path`` is as it was, and DaemonJsonError names ``path``.
    """
    directory = os.path.dirname(os.path.abspath(path))
    if like is None:
        try:
            like = os.lstat(path)
        except OSError:
            like = None
        if like is not None and not stat.S_ISREG(like.st_mode):
            like = None
    try:
        fd, tmp = _new_file(directory, temp_prefix(path), '.tmp')
    except OSError as exc:
        raise _write_failed(path, exc, 'create a temporary file in %s' % directory)
    try:
        try:
            _write_all(fd, data)
            _take_attributes(fd, like, new_mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        if mover is not None:
            mover(tmp, path)
        else:
            os.rename(tmp, path)
    except Exception as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, DaemonJsonError):
            raise
        raise _write_failed(path, exc)
    _fsync_directory(directory)


def backup_copy(path, like=None):
    """Copy ``path`` (a resolved path) to ``path.PID.YYYY-MM-DD@HH:MM:SS~``; returns the copy's name.

    The name is Ansible's ``backup_local`` one; the copy is a new file
    (O_EXCL|O_NOFOLLOW) with the original's mode and owner set on its
    descriptor. A failure removes the partial copy and names the file.
    """
    name = '%s.%s.%s' % (path, os.getpid(), time.strftime('%Y-%m-%d@%H:%M:%S~', time.localtime()))
    try:
        source = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
    except OSError as exc:
        raise DaemonJsonError('%s: cannot read it for the backup: %s. Nothing was changed.' % (path, exc.strerror))
    try:
        if like is None:
            like = os.fstat(source)
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600)
        except OSError as exc:
            raise _write_failed(path, exc, 'create the backup %s' % name)
        try:
            while True:
                chunk = os.read(source, 65536)
                if not chunk:
                    break
                _write_all(fd, chunk)
            _take_attributes(fd, like, 0o600)
            os.fsync(fd)
        except OSError as exc:
            os.close(fd)
            fd = None
            try:
                os.unlink(name)
            except OSError:
                pass
            raise _write_failed(path, exc, 'write the backup %s' % name)
        finally:
            if fd is not None:
                os.close(fd)
    finally:
        os.close(source)
    return name


def temp_prefix(path):
    return '.%s.' % os.path.basename(path)


def remove_stale_temps(path):
    """Remove temp files a killed writer left next to ``path``; call with the directory lock held."""
    directory = os.path.dirname(os.path.abspath(path))
    prefix = temp_prefix(path)
    removed = []
    try:
        entries = os.listdir(directory)
    except OSError:
        return removed
    for entry in entries:
        if entry.startswith(prefix) and entry.endswith('.tmp'):
            try:
                os.unlink(os.path.join(directory, entry))  # unlink never follows a link
                removed.append(entry)
            except OSError:
                pass
    return removed


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


# --------------------------------------------------------------------------
# dockerd: flags, processes, the init system
# --------------------------------------------------------------------------

def flags_to_keys(argv):
    """Map dockerd command-line flags to daemon.json keys: ``{key: '--flag value'}``."""
    found = {}
    args = list(argv)
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if not arg.startswith('-') or arg in ('-', '--'):
            continue
        stripped = arg.lstrip('-')
        value = None
        if '=' in stripped:
            stripped, value = stripped.split('=', 1)
        elif arg.startswith('-') and not arg.startswith('--') and len(stripped) > 1 and stripped[0] in 'Hlbsgp':
            stripped, value = stripped[0], stripped[1:]
        if stripped in FLAG_NOT_KEYS:
            continue
        key = FLAG_TO_KEY.get(stripped, stripped)
        found.setdefault(key, arg if value is not None else ' '.join(args[index - 1:index + 1]))
    return found


def config_file_of(argv):
    for index, arg in enumerate(argv):
        if arg.startswith('--config-file='):
            return arg.split('=', 1)[1]
        if arg == '--config-file' and index + 1 < len(argv):
            return argv[index + 1]
    return None


def _same_file(one, real, path):
    try:
        return os.path.realpath(one) in (os.path.realpath(real), os.path.realpath(path))
    except OSError:
        return False


def _read_options_file(path, variables=('DOCKER_OPTS', 'OPTIONS')):
    words = []
    try:
        with open(path) as handle:
            lines = handle.read().splitlines()
    except (IOError, OSError):
        return words
    for line in lines:
        line = line.strip()
        if line.startswith('export '):
            line = line[len('export '):]
        for variable in variables:
            if line.startswith(variable + '='):
                try:
                    parsed = shlex.split(line[len(variable) + 1:])
                    words.extend(shlex.split(parsed[0]) if len(parsed) == 1 else parsed)
                except ValueError:
                    pass
    return words


def process_argv(pid):
    try:
        with open('/proc/%d/cmdline' % pid, 'rb') as handle:
            raw = handle.read()
    except (IOError, OSError):
        return []
    return [part.decode('utf-8', 'replace') for part in raw.split(b'\0') if part]


def process_name(pid):
    try:
        with open('/proc/%d/comm' % pid) as handle:
            return handle.read().strip()
    except (IOError, OSError):
        return None


def is_dockerd(pid):
    return bool(pid) and process_name(pid) == 'dockerd'


def read_pidfile(path):
    try:
        with open(path) as handle:
            return int(handle.read().strip() or 0) or None
    except (IOError, OSError, ValueError):
        return None


def find_dockerd_pid(pidfiles=DEFAULT_PIDFILES, socket_path=None):
    """PID of the running dockerd, or None: pid files first, then /proc."""
    for pidfile in pidfiles:
        pid = read_pidfile(pidfile)
        if is_dockerd(pid):
            return pid
    candidates = []
    try:
        entries = os.listdir('/proc')
    except OSError:
        entries = []
    for entry in entries:
        if entry.isdigit() and process_name(int(entry)) == 'dockerd':
            candidates.append(int(entry))
    if socket_path and len(candidates) > 1:
        matching = [pid for pid in candidates if any(socket_path in arg for arg in process_argv(pid))]
        if len(matching) == 1:
            return matching[0]
    if len(candidates) == 1:
        return candidates[0]
    return None


def signal_pid(pid, signum=signal.SIGHUP):
    try:
        os.kill(pid, signum)
    except OSError as exc:
        raise DaemonJsonError('cannot send signal %d to dockerd (pid %d): %s' % (signum, pid, exc))


class InitSystemDockerd(object):
    """Controls the host's dockerd through its init system.

    The interface ``converge`` needs (tests provide their own): ``pid()``,
    ``reload()``, ``restart()``, ``flags()`` (dockerd's command-line words as
    it is or will be started), ``recent_log(since)`` (dockerd's own messages).
    ``run_command(argv) -> (rc, out, err)`` runs host commands.
    """

    def __init__(self, run_command, init_system, tools=None, service='docker', pidfiles=DEFAULT_PIDFILES,
                 socket_path=None, upstart_job_dir='/etc/init'):
        self.run_command = run_command
        if init_system == 'upstart' and not os.path.exists(os.path.join(upstart_job_dir, service + '.conf')):
            # No Upstart job: Upstart runs the SysV script through its rc job, so manage it as SysV does
            # (what Ubuntu's "service" command does on Upstart hosts).
            init_system = 'sysvinit'
        self.init_system = init_system
        self.tools = tools or {}
        self.service = service
        self.pidfiles = tuple(pidfiles)
        self.socket_path = socket_path

    def pid(self):
        return find_dockerd_pid(self.pidfiles, self.socket_path)

    def _tool(self, name):
        return self.tools.get(name) or name

    def _run(self, argv, what):
        rc, out, err = self.run_command(argv)
        if rc != 0:
            raise DaemonJsonError('%s failed (rc=%s, `%s`): %s' % (what, rc, ' '.join(argv), (err or out or '').strip()))
        return out

    def reload(self):
        if self.init_system == 'systemd':
            self._run([self._tool('systemctl'), 'reload', self.service], 'reloading dockerd')
        elif self.init_system == 'upstart':
            self._run([self._tool('initctl'), 'reload', self.service], 'reloading dockerd')
        else:
            # Debian's SysV script has no reload (its force-reload restarts): signal dockerd itself.
            pid = self.pid()
            if not pid:
                raise DaemonJsonError('cannot reload dockerd: no running dockerd found')
            signal_pid(pid)

    def restart(self):
        if self.init_system == 'systemd':
            # docker.service has StartLimitBurst=3: a failed start must not block the rollback's restart.
            self.run_command([self._tool('systemctl'), 'reset-failed', self.service])
            self._run([self._tool('systemctl'), 'restart', self.service], 'restarting dockerd')
        elif self.init_system == 'upstart':
            rc, out, err = self.run_command([self._tool('initctl'), 'restart', self.service])
            if rc != 0:
                self._run([self._tool('initctl'), 'start', self.service], 'starting dockerd')
        elif self.init_system == 'sysvinit':
            service = self.tools.get('service')
            argv = [service, self.service, 'restart'] if service else ['/etc/init.d/%s' % self.service, 'restart']
            self._run(argv, 'restarting dockerd')
        else:
            raise DaemonJsonError('cannot restart dockerd: no init system manages it here (init system: %s)'
                                  % self.init_system)

    def flags(self):
        words = []
        pid = self.pid()
        if pid:
            words.extend(process_argv(pid)[1:])
        if self.init_system == 'systemd':
            rc, out, err = self.run_command([self._tool('systemctl'), 'show', self.service, '-p', 'ExecStart'])
            match = re.search(r'argv\[\]=([^;]*)', out or '')
            if rc == 0 and match:
                words.extend(w for w in match.group(1).split() if not w.startswith('$'))
        for options_file in ('/etc/default/%s' % self.service, '/etc/sysconfig/%s' % self.service):
            words.extend(_read_options_file(options_file))
        return words

    def config_file(self):
        """The ``--config-file`` the running dockerd was given, or None (the default)."""
        pid = self.pid()
        return config_file_of(process_argv(pid)) if pid else None

    def recent_log(self, since=None):
        if self.init_system == 'systemd':
            argv = [self._tool('journalctl'), '-u', '%s.service' % self.service, '--no-pager', '-o', 'cat', '-n', '40']
            if since:
                argv.append('--since=@%d' % int(since))
            rc, out, err = self.run_command(argv)
            return out if rc == 0 else ''
        for log in ('/var/log/%s.log' % self.service, '/var/log/upstart/%s.log' % self.service):
            text = tail_file(log)
            if text:
                return text
        return ''


def tail_file(path, limit=16384):
    try:
        with open(path, 'rb') as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            return handle.read().decode('utf-8', 'replace')
    except (IOError, OSError):
        return ''


_ERROR_LINE = re.compile(r'level=(fatal|error)|failed to start daemon|unable to configure the docker daemon|'
                         r'panic:|^\S*Error', re.IGNORECASE)


_LOGRUS_MSG = re.compile(r'msg="((?:[^"\\]|\\.)*)"')


def dockerd_error(log_text, lines=4):
    """What dockerd's log says about why it failed: its last error messages, deduplicated."""
    log_lines = [line.strip() for line in (log_text or '').splitlines() if line.strip()]
    errors = [line for line in log_lines if _ERROR_LINE.search(line)] or log_lines
    messages = []
    for line in errors:
        match = _LOGRUS_MSG.search(line)
        message = match.group(1).replace('\\"', '"') if match else line
        if message in messages:
            messages.remove(message)
        messages.append(message)
    return ' | '.join(messages[-lines:])


# --------------------------------------------------------------------------
# Comparing the file with the running dockerd
# --------------------------------------------------------------------------

def expected_default_runtime(config, flags):
    value = config.get('default-runtime')
    if isinstance(value, str) and value:
        return value
    flag = flags.get('default-runtime')
    if flag:
        return flag.split('=', 1)[-1].split()[-1]
    return STOCK_RUNTIME


def compare_running(config, info, name, state, flags=None):
    """Return ``(differences, removals)`` between the file's config and ``/info``.

    Only what this module manages is compared: our runtime and the default
    runtime. ``removals`` lists differences a SIGHUP cannot apply.
    """
    flags = flags or {}
    differences = []
    removals = []
    running = info.get('Runtimes') or {}
    runtimes = config.get('runtimes') if isinstance(config.get('runtimes'), dict) else {}
    wanted = runtimes.get(name)
    have = running.get(name)
    if state == 'present' and isinstance(wanted, dict):
        if have is None:
            differences.append('runtime "%s" is not loaded' % name)
        else:
            if have.get('path') != wanted.get('path'):
                differences.append('runtime "%s" runs path %r, the file says %r'
                                   % (name, have.get('path'), wanted.get('path')))
            if list(have.get('runtimeArgs') or []) != list(wanted.get('runtimeArgs') or []):
                differences.append('runtime "%s" runs runtimeArgs %r, the file says %r'
                                   % (name, have.get('runtimeArgs') or [], wanted.get('runtimeArgs') or []))
    if wanted is None and have is not None and name not in RESERVED_RUNTIMES and 'runtimes' not in flags:
        differences.append('runtime "%s" is still loaded' % name)
        removals.append('runtime "%s" was removed from the file' % name)
    features = config.get('features') if isinstance(config.get('features'), dict) else {}
    if 'cdi' in features and 'CDISpecDirs' in info:
        # dockerd 25+ lists CDI spec dirs only while CDI is enabled.
        if bool(features['cdi']) != bool(info.get('CDISpecDirs')):
            differences.append('CDI is %s, the file says features.cdi=%s'
                               % ('enabled' if info.get('CDISpecDirs') else 'disabled', json.dumps(features['cdi'])))
    default = expected_default_runtime(config, flags)
    running_default = info.get('DefaultRuntime') or STOCK_RUNTIME
    if running_default != default:
        differences.append('default runtime is %r, the file says %r' % (running_default, default))
        if 'default-runtime' not in config:
            removals.append('"default-runtime" was removed from the file')
    if removals and running_default not in runtimes and running_default not in RESERVED_RUNTIMES:
        removals.append('the running default runtime "%s" is no longer in "runtimes"' % running_default)
    return differences, removals


def flag_conflicts(before, after, flags):
    """Keys in ``after`` also given as dockerd flags: ``(fatal, preexisting)``.

    dockerd refuses to start when a key is both in the file and a flag.
    Conflicts this change introduces in our keys are fatal.
    """
    fatal = []
    preexisting = []
    for key in after:
        if key not in flags:
            continue
        if key in OUR_KEYS and (key not in before or not same_value(before.get(key), after.get(key))):
            fatal.append('"%s" (also set by the dockerd flag %s)' % (key, flags[key]))
        else:
            preexisting.append('"%s" (also set by the dockerd flag %s)' % (key, flags[key]))
    return fatal, preexisting


def which(name, extra_dirs=('/usr/local/sbin', '/usr/local/bin', '/usr/sbin', '/usr/bin', '/sbin', '/bin')):
    if os.path.isabs(name):
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    dirs = os.environ.get('PATH', '').split(os.pathsep) + list(extra_dirs)
    for directory in dirs:
        candidate = os.path.join(directory, name)
        if directory and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


# --------------------------------------------------------------------------
# The whole operation
# --------------------------------------------------------------------------

class Request(object):
    """What the user asked for (the module's parameters)."""

    def __init__(self, path=DEFAULT_PATH, name='nvidia', runtime_path='nvidia-container-runtime', runtime_args=None,
                 default_runtime=None, cdi=None, state='present', apply='auto', timeout=60.0):
        self.path = path
        self.name = name
        self.runtime_path = runtime_path
        self.runtime_args = runtime_args
        self.default_runtime = default_runtime
        self.cdi = cdi
        self.state = state
        self.apply = apply
        self.timeout = timeout


class Result(dict):
    def __init__(self, path):
        dict.__init__(self, changed=False, path=path, backup_file=None, action='none', runtimes={},
                      dockerd_pid_before=None, dockerd_pid_after=None, msg='', file_changed=False,
                      before='', after='', warnings=[], default_runtime=None)


def wait_for(api, predicate, timeout, poll=0.2, alive=None, grace=8.0):
    """Poll ``GET /info`` until ``predicate(info)``; returns ``(info or None, last_error)``.

    ``alive()`` (e.g. "is there a dockerd process") lets the wait end early
    when dockerd has been gone for ``grace`` seconds: it died on its config.
    """
    deadline = time.time() + timeout
    last_error = None
    gone_since = None
    while True:
        try:
            info = api.info()
            if predicate(info):
                return info, None
            last_error = None
        except Exception as exc:  # DockerAPIError and socket errors alike
            info = None
            last_error = str(exc)
        now = time.time()
        if alive is not None and info is None:
            if alive():
                gone_since = None
            elif gone_since is None:
                gone_since = now
            elif now - gone_since >= grace:
                return None, 'dockerd exited'
        if now >= deadline:
            return info, last_error
        time.sleep(poll)


def converge(request, service, api, check_mode=False, backup=None, mover=None, validator=None,
             poll=0.2, reload_wait=5.0, option_keys=None, dockerd_checks=None):
    """Bring the file, then the running dockerd, to ``request``.

    ``service``: see InitSystemDockerd. ``api``: a DockerAPI. ``backup(path)``
    returns a backup file name. ``validator(text) -> error or None`` checks a
    candidate config with dockerd itself (``dockerd --validate``).
    ``option_keys``: the keys the installed dockerd accepts (``option_keys_from_help``),
    used when it has no ``--validate``. ``dockerd_checks() -> (validator, option_keys)``
    supplies both instead, and is only called when the file or dockerd must change:
    asking dockerd (``dockerd --help``) costs a process start that a no-op run skips.
    Raises DaemonJsonError; the file is then as it was (or restored).
    """
    checks = {}

    def dockerd_knows():
        if not checks:
            checks['found'] = dockerd_checks() if dockerd_checks is not None else (validator, option_keys)
        return checks['found']

    path = request.path
    result = Result(path)
    warnings = result['warnings'] = []
    real = resolve_path(path)
    created_dir = False
    if not check_mode:
        created_dir = ensure_directory(real)
    with directory_lock(real) if os.path.isdir(os.path.dirname(os.path.abspath(real))) else _no_lock():
        current = open_config(path, real)
        exists, before_text = current.exists, current.text
        after_text, merge_warnings = merge_text(
            before_text, path, state=request.state, name=request.name, runtime_path=request.runtime_path,
            runtime_args=request.runtime_args, default_runtime=request.default_runtime, cdi=request.cdi)
        warnings.extend(merge_warnings)
        before_cfg = config_of(before_text, path)
        after_cfg = config_of(after_text, path)
        file_changed = after_text != before_text
        result.update(file_changed=file_changed, before=before_text, after=after_text, changed=file_changed)
        if created_dir:
            result['changed'] = True

        if request.state == 'present' and not which(request.runtime_path):
            warnings.append('the runtime binary "%s" was not found on this host; dockerd accepts the runtime but '
                            'containers that use it will fail. Install the %s package.'
                            % (request.runtime_path, RUNTIME_PACKAGE))

        pid_before = service.pid()
        running_config = service.config_file() if pid_before and hasattr(service, 'config_file') else None
        elsewhere = None
        if running_config and not _same_file(running_config, real, path):
            if request.apply != 'none':
                raise DaemonJsonError('dockerd (pid %s) reads %s, not %s: applying %s would not change what dockerd '
                                      'runs. Set path to %s, or apply=none to only write the file.'
                                      % (pid_before, running_config, path, path, running_config))
            # Only the dockerd that reads this file matters, and apply=none does not touch it anyway.
            elsewhere = 'dockerd (pid %s) reads %s, not this file' % (pid_before, running_config)
            pid_before = None
        result['dockerd_pid_before'] = pid_before
        flags = flags_to_keys(service.flags()) if pid_before or file_changed else {}
        fatal, preexisting = flag_conflicts(before_cfg, after_cfg, flags)
        if fatal:
            raise DaemonJsonError('%s: refusing to write %s: dockerd would refuse to start because %s. Remove the '
                                  'flag from the docker service (unit, DOCKER_OPTS) or let the flag manage it.'
                                  % (path, ', '.join(fatal), 'they are set both as flags and in the file'))
        if preexisting:
            warnings.append('%s: %s: dockerd refuses keys set both as a flag and in the file.'
                            % (path, ', '.join(preexisting)))
        if file_changed and dockerd_knows()[0] is not None:
            problem = dockerd_knows()[0](after_text)
            if problem:
                raise DaemonJsonError('%s: dockerd --validate rejects the merged configuration, the file was left '
                                      'untouched: %s' % (path, problem))

        info = None
        if pid_before:
            try:
                info = api.info()
            except Exception as exc:
                if request.apply != 'none':
                    raise DaemonJsonError('dockerd (pid %s) is running but its API at %s does not answer: %s. '
                                          'Nothing was changed; check docker_host, or use apply=none.'
                                          % (pid_before, getattr(api, 'socket_path', 'the socket'), exc))
                # apply=none only writes the file: what dockerd runs is reported when it can be asked.
                warnings.append('dockerd (pid %s) did not answer on %s (%s): whether it runs %s is unknown; apply=none '
                                'only wrote the file.' % (pid_before, getattr(api, 'socket_path', 'its API'), exc,
                                                          path))
        differences, removals = compare_running(after_cfg, info or {}, request.name, request.state, flags)
        if info is not None and not differences and 'CDISpecDirs' not in info and \
                not same_value(before_cfg.get('features'), after_cfg.get('features')):
            # This dockerd does not show features in /info: apply what this run changed.
            differences = ['"features" changed (this dockerd does not report it in /info)']
        if info is None:
            action = 'deferred' if file_changed else 'none'
        elif not differences:
            action = 'none'
        elif request.apply == 'none':
            action = 'deferred'
        elif request.apply == 'restart':
            action = 'restart'
        elif request.apply == 'reload':
            action = 'deferred' if removals else 'reload'
        else:
            action = 'restart' if removals else 'reload'
        result['action'] = action
        if action in ('reload', 'restart'):
            result['changed'] = True
        unknown = []
        if file_changed or action in ('reload', 'restart'):
            known_validator, known_keys = dockerd_knows()
            unknown = unknown_keys(after_cfg, known_keys) if known_validator is None else []
        if unknown and action in ('reload', 'restart'):
            raise DaemonJsonError(
                '%s: dockerd would refuse this file: %s %s not a dockerd option (per the installed dockerd --help), '
                'so a reload would be rejected and a restart would leave dockerd down. Nothing was changed. Fix or '
                'remove %s, or use apply=none and restart dockerd yourself.'
                % (path, ', '.join('"%s"' % key for key in unknown), 'is' if len(unknown) == 1 else 'are',
                   'it' if len(unknown) == 1 else 'them'))
        if unknown:
            warnings.append('%s: %s %s not a dockerd option (per the installed dockerd --help): dockerd will refuse '
                            'to start with this file.' % (path, ', '.join('"%s"' % key for key in unknown),
                                                          'is' if len(unknown) == 1 else 'are'))

        if check_mode:
            result['runtimes'] = _runtimes_of(info) if info else {}
            result['default_runtime'] = info.get('DefaultRuntime') if info else None
            result['msg'] = _message(result, differences, removals, request, predicted=True, elsewhere=elsewhere)
            result['dockerd_pid_after'] = pid_before
            return result

        remove_stale_temps(real)
        if file_changed:
            if backup is True or (backup is not None and not callable(backup)):
                backup = backup_copy
            if backup is not None and exists:
                result['backup_file'] = backup(real)
            try:
                write_atomic(real, after_text.encode('utf-8'), mover=mover, like=current.stat)
            except DaemonJsonError:
                if result['backup_file']:  # a copy of a file that did not change: not worth keeping
                    try:
                        os.unlink(result['backup_file'])
                    except OSError:
                        pass
                raise

        if action in ('reload', 'restart'):
            info = _apply(request, service, api, action, result, before_text if exists else None, real, mover,
                          after_cfg, flags, poll, reload_wait)
        result['dockerd_pid_after'] = service.pid() if elsewhere is None else None
        if info:
            result['runtimes'] = _runtimes_of(info)
            result['default_runtime'] = info.get('DefaultRuntime')
        result['msg'] = _message(result, differences, removals, request, elsewhere=elsewhere)
        return result


def _runtimes_of(info):
    return dict((name, value) for name, value in (info.get('Runtimes') or {}).items())


def _message(result, differences, removals, request, predicted=False, elsewhere=None):
    verb = 'would' if predicted else 'was'
    parts = []
    if result['file_changed']:
        parts.append('%s %s' % (request.path, 'would change' if predicted else 'changed'))
    else:
        parts.append('%s already up to date' % request.path)
    action = result['action']
    if action == 'reload':
        parts.append('dockerd %s reloaded (SIGHUP, containers keep running): %s' % (verb, '; '.join(differences)))
    elif action == 'restart':
        why = removals or differences
        parts.append('dockerd %s restarted: %s' % (verb, '; '.join(why)))
    elif action == 'deferred':
        if elsewhere:
            parts.append('%s; not applied (apply=none)' % elsewhere)
        elif result['dockerd_pid_before'] is None:
            parts.append('dockerd is not running; the file takes effect when it next starts')
        elif request.apply == 'reload' and removals:
            parts.append('a reload cannot apply this (%s): restart dockerd to apply it' % '; '.join(removals))
        else:
            parts.append('not applied (apply=none); dockerd runs an older configuration: %s' % '; '.join(differences))
    elif elsewhere:
        parts.append(elsewhere)
    else:
        parts.append('dockerd already runs it' if result['dockerd_pid_before'] else 'dockerd is not running')
    return '; '.join(parts)


def _matches(after_cfg, name, state, flags):
    def predicate(info):
        return not compare_running(after_cfg, info, name, state, flags)[0]
    return predicate


def _apply(request, service, api, action, result, previous_text, real, mover, after_cfg, flags, poll, reload_wait):
    name, state, timeout = request.name, request.state, request.timeout
    pid_before = result['dockerd_pid_before']
    matches = _matches(after_cfg, name, state, flags)
    if action == 'reload':
        try:
            service.reload()
        except DaemonJsonError as exc:
            # Nothing reached dockerd: put the file back so it still describes what dockerd runs.
            _restore(real, previous_text, mover)
            raise DaemonJsonError('%s: %s. The previous file was restored; dockerd keeps running its previous '
                                  'configuration.' % (request.path, exc))
        info, error = wait_for(api, matches, min(timeout, reload_wait), poll)
        if info is not None and matches(info):
            return info
        if request.apply == 'reload':
            if info is not None and service.pid():
                _restore(real, previous_text, mover)
                service.reload()
                raise DaemonJsonError('%s: dockerd did not take the new configuration by reload (%s); the previous '
                                      'file was restored. dockerd said: %s'
                                      % (request.path, error or 'still differs',
                                         dockerd_error(service.recent_log(time.time() - 60)) or 'nothing'))
        result['action'] = 'restart'
        result['warnings'].append('a reload did not apply the change (%s); dockerd was restarted instead'
                                  % (error or 'the running configuration still differs'))
    reloaded = action == 'reload'
    started = time.time()
    restart_error = None
    try:
        service.restart()
    except DaemonJsonError as exc:
        restart_error = str(exc)
        if pid_before and service.pid() == pid_before:
            # The restart never happened and dockerd still runs: put the file back and leave it running.
            _restore(real, previous_text, mover)
            if reloaded:
                service.reload()
            raise DaemonJsonError('%s: %s. The previous file was restored; dockerd (pid %s) keeps running its '
                                  'previous configuration. Restart dockerd by hand, or use apply=none to only write '
                                  'the file.' % (request.path, restart_error, pid_before))

    def restarted(info):
        pid = service.pid()
        return bool(pid) and pid != pid_before and matches(info)

    if restart_error and not service.pid():
        info, error = None, restart_error
    else:
        info, error = wait_for(api, restarted, timeout, poll, alive=lambda: bool(service.pid()))
    if info is not None and restarted(info):
        return info
    why = dockerd_error(service.recent_log(started)) or restart_error or error or 'no message'
    _restore(real, previous_text, mover)
    rollback_error = None
    try:
        service.restart()
    except DaemonJsonError as exc:
        rollback_error = str(exc)
    back, back_error = wait_for(api, lambda _info: bool(service.pid()), timeout, poll,
                                alive=lambda: bool(service.pid()))
    if back is None:
        raise DaemonJsonError('%s: dockerd did not come back with the new configuration (%s); the previous file was '
                              'restored but dockerd did not come back either (%s). dockerd said: %s'
                              % (request.path, error or restart_error or 'verification failed',
                                 rollback_error or back_error, why))
    raise DaemonJsonError('%s: dockerd did not come back with the new configuration (%s); the previous file was '
                          'restored and dockerd restarted with it. dockerd said: %s'
                          % (request.path, error or restart_error or 'the running configuration differs', why))


def _restore(real, previous_text, mover):
    if previous_text is None:
        try:
            os.unlink(real)
        except OSError:
            pass
        return
    write_atomic(real, previous_text.encode('utf-8'), mover=mover)  # keeps the mode and owner it has now


def dockerd_help(run_command, dockerd_path):
    """``dockerd --help`` of the installed dockerd, or None."""
    if not dockerd_path:
        return None
    rc, out, err = run_command([dockerd_path, '--help'])
    text = (out or '') + (err or '')
    return text if '--config-file' in text else None


def option_keys_from_help(help_text):
    """Every daemon.json key this dockerd accepts, from its ``--help``; None when unknown."""
    if not help_text:
        return None
    names = set(re.findall(r'^\s+(?:-\w, )?--([a-z0-9][a-z0-9-]*)', help_text, re.M))
    return names | set(FLAG_TO_KEY.values()) | set(EXTRA_OPTION_KEYS)


def unknown_keys(config, option_keys):
    if not option_keys:
        return []
    return [key for key in config if key not in option_keys]


def dockerd_validator(run_command, dockerd_path, help_text=None):
    """A ``validator`` using ``dockerd --validate`` when this dockerd has it (23.0+), else None."""
    if help_text is None:
        help_text = dockerd_help(run_command, dockerd_path)
    if not help_text or '--validate' not in help_text:
        return None

    def validate(text):
        fd, tmp = tempfile.mkstemp(prefix='gpufleet-daemon-json.', suffix='.validate')
        try:
            with os.fdopen(fd, 'wb') as handle:
                handle.write(text.encode('utf-8'))
            rc, out, err = run_command([dockerd_path, '--validate', '--config-file', tmp])
            if rc != 0:
                return (err or out or 'rc=%s' % rc).strip().replace(tmp, 'the merged file')
            return None
        finally:
            os.unlink(tmp)
    return validate
