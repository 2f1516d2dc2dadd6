# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA's CDI spec (``nvidia-ctk cdi generate``): what it says, why it is stale, whether to write it (pure).

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. Text in, findings out, no host access: a concern runs NVIDIA's
``nvidia-ctk`` (``generate_argv``), reads the spec file, and writes through
the host layer; this file decides.

What it relies on, measured with NVIDIA's toolkit 1.20.0 on the driver kit's
fake hosts: ``--format json`` prints one line of JSON (no trailing newline)
that is the same bytes on every run on the same host; the driver version is in
the ``enable-cuda-compat`` hook (``--host-driver-version=535.171.04``) and in
the versioned driver libraries it mounts (``libcuda.so.535.171.04``); devices
are named by index (``0``, MIG ``0:1``), UUID (``GPU-...``, ``MIG-...``) or
type and index (``gpu0``, ``mig0:1``), plus ``all``; a GPU with MIG enabled
appears only as its MIG devices. ``parse_spec`` reads JSON, ``parse_yaml_spec`` YAML where PyYAML is installed;
``outline_yaml`` reads nvidia-ctk's own YAML layout on a host without PyYAML.

The spec on the host is read as untrusted text: its size, nesting depth, number of values and integer lengths are
checked before anything is built from it, and YAML anchors, aliases and explicit tags (which nvidia-ctk never
writes) are refused, so no file can make the reader exhaust memory, time or the stack; every problem is a
CdiSpecError.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import DocumentError

# The directories container engines read CDI specs from (the CDI library's defaults); /var/run/cdi wins over
# /etc/cdi for a device both name. /run/cdi is /var/run/cdi on the hosts we support.
SPEC_DIRS = ('/etc/cdi', '/var/run/cdi', '/run/cdi')
# What NVIDIA's nvidia-cdi-refresh.service writes (its Environment=NVIDIA_CTK_CDI_OUTPUT_FILE_PATH).
DEFAULT_SPEC_PATH = '/var/run/cdi/nvidia.yaml'

# The CDI library reads only these; nvidia-ctk adds ``.yaml`` to any other name. JSON is valid YAML: the CDI
# library reads a ``.yaml`` file holding JSON text.
SPEC_EXTENSIONS = {'.json': 'json', '.yaml': 'yaml'}
# The kind of NVIDIA's GPU spec (``state: absent`` removes no other).
KIND = 'nvidia.com/gpu'
# nvidia-ctk's --device-name-strategy values, and its default (both index and uuid names, each device twice).
STRATEGIES = ('index', 'uuid', 'type-index')
DEFAULT_STRATEGIES = ('index', 'uuid')

CDI_VERSION_RE = re.compile(r'\A[0-9]+\.[0-9]+\.[0-9]+\Z')
KIND_RE = re.compile(r'\A[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*\Z')
HOOK_VERSION_RE = re.compile(r'\A--host-driver-version=(.+)\Z')
# A driver library under its versioned name, as the spec mounts it or links to it.
LIBRARY_VERSION_RE = re.compile(r'(?:\A|/)lib(?:cuda|nvidia-ml)\.so\.([0-9]+\.[0-9]+(?:\.[0-9]+)?)\Z')
MAX_SPEC_BYTES = 16 * 1024 * 1024
# Bounds checked before a spec is built (nvidia-ctk's: 6 levels deep, a few hundred values a GPU). A YAML alias
# bomb of 700 bytes expands to 13 GB; 5000 nested lists overflow the stack; a 16 MiB spec of tiny values would
# take gigabytes as parsed nodes; converting an integer of millions of digits takes hours on Python 3.8.
MAX_DEPTH = 64
MAX_VALUES = 100000
MAX_INTEGER_CHARS = 64


class CdiSpecError(DocumentError, ValueError):
    """A CDI spec that cannot be read: not JSON, or not the shape of a CDI spec. The message names the field."""


# --------------------------------------------------------------------------
# Running nvidia-ctk and choosing the file
# --------------------------------------------------------------------------

def generate_argv(nvidia_ctk, strategies=DEFAULT_STRATEGIES, all_device=True, fmt='json'):
    """NVIDIA's generator printing the spec on stdout, as ``fmt`` (``json``, or ``yaml``: what the file holds).

    ``--output=`` is explicit so that an ``NVIDIA_CTK_CDI_OUTPUT_FILE_PATH`` in the environment (NVIDIA's
    nvidia-cdi-refresh.env sets it for its service) cannot make nvidia-ctk write a file itself: its own
    writer replaces the file on every run and leaves ``spec.*.tmp`` in the spec directory while it writes.
    ``--quiet`` keeps only errors on stderr (without it, dozens of "Could not locate" warnings).
    """
    check_strategies(strategies)
    if fmt not in ('json', 'yaml'):
        raise CdiSpecError('spec format %r: json or yaml' % (fmt,))
    argv = [nvidia_ctk, '--quiet', 'cdi', 'generate', '--format', fmt, '--output=']
    for strategy in strategies:
        argv.append('--device-name-strategy=%s' % strategy)
    if not all_device:
        argv.append('--no-all-device')
    return argv


def check_strategies(strategies):
    if not strategies or any(s not in STRATEGIES for s in strategies) or len(set(strategies)) != len(strategies):
        raise CdiSpecError('device name strategies %r: give one or more of %s, each once' % (
            list(strategies), ', '.join(STRATEGIES)))


def spec_format(path):
    """``json`` or ``yaml``: what the CDI library reads ``path`` as. Raises CdiSpecError for another path.

    Only a file directly in one of SPEC_DIRS, named ``<name>.json`` or ``<name>.yaml``, is one the engines read.
    """
    if not isinstance(path, str) or not path.startswith('/'):
        raise CdiSpecError('spec path %r: give an absolute path in %s' % (path, ' or '.join(SPEC_DIRS)))
    directory, _sep, name = path.rpartition('/')
    if directory not in SPEC_DIRS:
        raise CdiSpecError('spec path %s: container engines read CDI specs only from %s; put it there' % (
            path, ' and '.join(SPEC_DIRS[:2])))
    stem, dot, extension = name.rpartition('.')
    if not dot or not stem or stem.startswith('.') or '.' + extension not in SPEC_EXTENSIONS:
        raise CdiSpecError('spec path %s: the CDI library reads only <name>.json and <name>.yaml files' % path)
    return SPEC_EXTENSIONS['.' + extension]


def needs_write(current, generated):
    """Whether the file must be written: it is missing (``None``) or its bytes differ from the generated text.

    nvidia-ctk gives the same bytes on every run on an unchanged host, so a byte comparison is the whole test;
    ``current`` and ``generated`` are both text or both bytes.
    """
    return current is None or current != generated


# --------------------------------------------------------------------------
# Reading a spec
# --------------------------------------------------------------------------

def _text(text):
    """``text`` (str, or UTF-8 bytes) when it is not blank and at most MAX_SPEC_BYTES characters: checked before
    any parser sees it."""
    if isinstance(text, bytes):
        try:
            text = text.decode('utf-8')
        except UnicodeDecodeError as exc:
            raise CdiSpecError('the CDI spec is not UTF-8 text: %s' % exc)
    if not isinstance(text, str):
        raise CdiSpecError('the CDI spec is a %s, not text' % type(text).__name__)
    if len(text) > MAX_SPEC_BYTES:
        raise CdiSpecError('the CDI spec is %d characters, more than the %d this reader takes' % (
            len(text), MAX_SPEC_BYTES))
    if not text.strip():
        raise CdiSpecError('the CDI spec is empty')
    return text


def _too_deep():
    return CdiSpecError('the CDI spec is nested deeper than %d levels' % MAX_DEPTH)


def _too_many():
    return CdiSpecError('the CDI spec holds more than %d values' % MAX_VALUES)


def _integer(digits):
    """An integer's text as a number, refused past MAX_INTEGER_CHARS: int() is quadratic in the digits on Python
    releases without sys.set_int_max_str_digits (before 3.8.14)."""
    if len(digits) > MAX_INTEGER_CHARS:
        raise CdiSpecError('the CDI spec holds an integer of %d characters, more than %d' % (
            len(digits), MAX_INTEGER_CHARS))
    return int(digits)


# A JSON string (skipped whole: a bracket in it is text), a bracket, or a comma: about one token a value.
_JSON_TOKEN_RE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{},]', re.DOTALL)


def _check_json(text):
    """Refuse JSON nested deeper than MAX_DEPTH or holding more than MAX_VALUES values, in one scan without
    recursion, before ``json.loads`` builds it (its decoder recurses once per level: RecursionError)."""
    depth = values = 0
    for match in _JSON_TOKEN_RE.finditer(text):
        token = match.group(0)
        if token in ']}':
            depth -= 1
            continue
        values += 1
        if values > MAX_VALUES:
            raise _too_many()
        if token in '[{':
            depth += 1
            if depth > MAX_DEPTH:
                raise _too_deep()


def _load(text):
    text = _text(text)
    stripped = text.strip()
    if stripped.startswith('---') or re.match(r'\A[A-Za-z_]+\s*:', stripped):
        raise CdiSpecError('the CDI spec is YAML; this reader takes JSON (nvidia-ctk cdi generate --format json, '
                           'or a .json spec path)')
    _check_json(text)
    try:
        return json.loads(text, parse_int=_integer)
    except CdiSpecError:
        raise
    except ValueError as exc:
        raise CdiSpecError('the CDI spec is not valid JSON: %s' % exc)


_YAML_LOADER = []


def _yaml_loader(yaml):
    """PyYAML's safe loader (libyaml's where there is one) that reads a date as the text it is (the summary
    holds only JSON's types) and refuses an integer longer than MAX_INTEGER_CHARS."""
    if not _YAML_LOADER:
        base = getattr(yaml, 'CSafeLoader', yaml.SafeLoader)

        class SpecLoader(base):
            yaml_implicit_resolvers = dict(
                (first, [(tag, regexp) for tag, regexp in resolvers if tag != 'tag:yaml.org,2002:timestamp'])
                for first, resolvers in base.yaml_implicit_resolvers.items())

            def construct_bounded_int(self, node):
                _integer(node.value)  # its length; the YAML forms (0x, 1_000, 1:30) are base's to read
                return base.construct_yaml_int(self, node)

        SpecLoader.add_constructor('tag:yaml.org,2002:int', SpecLoader.construct_bounded_int)
        _YAML_LOADER.append(SpecLoader)
    return _YAML_LOADER[0]


def _load_yaml(text):
    """The YAML spec's document. Its events are walked first (PyYAML's parser, and libyaml's, is a loop that keeps
    only the open collections; building the document recurses once per level, and an alias repeats what it names
    however often it is used): more than MAX_DEPTH levels or MAX_VALUES values, an anchor, an alias or an explicit
    tag is refused before any of it is built. Only then does PyYAML build it (libyaml builds in C, past any hook on
    the events, hence two passes). Raises ImportError without PyYAML."""
    import yaml

    text = _text(text)
    loader = _yaml_loader(yaml)
    depth = values = 0
    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
            if not isinstance(event, yaml.NodeEvent):
                continue
            values += 1
            if values > MAX_VALUES:
                raise _too_many()
            line = event.start_mark.line + 1
            if isinstance(event, yaml.AliasEvent) or event.anchor is not None:
                raise CdiSpecError('the CDI spec has a YAML anchor or alias at line %d (nvidia-ctk writes none)'
                                   % line)
            if event.tag is not None:
                raise CdiSpecError('the CDI spec has an explicit YAML tag at line %d (nvidia-ctk writes none)' % line)
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise _too_deep()
        document = yaml.load(text, Loader=loader)
    except CdiSpecError:
        raise
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: an integer such as 0x_, text libyaml cannot encode
        raise CdiSpecError('the CDI spec is not YAML: %s' % ' '.join(str(exc).split()))
    if document is None:
        raise CdiSpecError('the CDI spec is empty')
    return document


def _object(value, where):
    if not isinstance(value, dict):
        raise CdiSpecError('%s is %s, not an object' % (where, _kind_of(value)))
    return value


def _list(container, key, where):
    value = container.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise CdiSpecError('%s.%s is %s, not a list' % (where, key, _kind_of(value)))
    return value


def _string(container, key, where, required=True):
    value = container.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise CdiSpecError('%s.%s is %s, not a non-empty string' % (where, key, 'empty' if value == '' else _kind_of(value)))
    return value


def _kind_of(value):
    if value is None:
        return 'missing'
    if isinstance(value, bool):
        return 'a boolean'
    return {dict: 'an object', list: 'a list', str: 'a string', int: 'a number', float: 'a number'}.get(
        type(value), 'a %s' % type(value).__name__)


def _device_nodes(edits, where):
    nodes = []
    for position, node in enumerate(_list(edits, 'deviceNodes', where)):
        node_where = '%s.deviceNodes[%d]' % (where, position)
        node = _object(node, node_where)
        path = _string(node, 'path', node_where)
        numbers = []
        for key in ('major', 'minor'):
            value = node.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise CdiSpecError('%s.%s is %r, not a device number' % (node_where, key, value))
            numbers.append(value)
        nodes.append({'path': path, 'major': numbers[0], 'minor': numbers[1]})
    return nodes


def _edits(container, where):
    edits = container.get('containerEdits')
    if edits is None:
        return {}
    return _object(edits, where + '.containerEdits')


def _driver_versions(edits, where):
    """Driver versions the common edits name: (from the enable-cuda-compat hook, from library names)."""
    from_hooks, from_libraries = [], []
    for position, hook in enumerate(_list(edits, 'hooks', where)):
        hook_where = '%s.hooks[%d]' % (where, position)
        hook = _object(hook, hook_where)
        for arg in _list(hook, 'args', hook_where):
            if not isinstance(arg, str):
                raise CdiSpecError('%s.args holds %s, not a string' % (hook_where, _kind_of(arg)))
            match = HOOK_VERSION_RE.match(arg)
            if match:
                from_hooks.append(match.group(1))
            for part in arg.split('::'):  # create-symlinks: --link TARGET::LINK
                match = LIBRARY_VERSION_RE.search(part)
                if match:
                    from_libraries.append(match.group(1))
    for position, mount in enumerate(_list(edits, 'mounts', where)):
        mount_where = '%s.mounts[%d]' % (where, position)
        match = LIBRARY_VERSION_RE.search(_string(_object(mount, mount_where), 'hostPath', mount_where))
        if match:
            from_libraries.append(match.group(1))
    return from_hooks, from_libraries


# The daemons' sockets nvidia-ctk mounts only when they exist at generation time: the persistence daemon's and the
# fabric manager's.
SOCKET_RE = re.compile(r'/nvidia-(persistenced|fabricmanager)/socket\Z')
_SOCKET_TEXT_RE = re.compile(r'^\s*-?\s*hostPath: ["\']?(\S*/nvidia-(?:persistenced|fabricmanager)/socket)["\']?\s*$',
                             re.MULTILINE)


def _sockets(edits, where):
    """The daemons' sockets the common edits mount (their host paths), sorted."""
    found = set()
    for position, mount in enumerate(_list(edits, 'mounts', where)):
        mount_where = '%s.mounts[%d]' % (where, position)
        path = _string(_object(mount, mount_where), 'hostPath', mount_where)
        if SOCKET_RE.search(path):
            found.add(path)
    return sorted(found)


def parse_spec(text):
    """The parts of a CDI spec (JSON text or bytes) that say which driver and GPUs it was made for.

    Returns a dict: ``cdi_version``, ``kind``, ``devices`` (names, in the spec's order), ``device_nodes``
    ({name: [{path, major, minor}]}), ``common_device_nodes`` (the paths every device gets: nvidiactl, uvm, ...),
    ``driver_version`` (None when the spec names none) and ``driver_version_source`` (``hook``: the
    enable-cuda-compat hook's ``--host-driver-version``; ``libraries``: the versioned libcuda/libnvidia-ml names
    when that hook is disabled; None). Raises CdiSpecError naming the first field that
    is wrong: not JSON, a missing or ill-formed ``cdiVersion``/``kind``, a device without a name, a name twice,
    a device node without a path, or driver libraries of two versions and no hook to decide.
    """
    return _summary(_load(text))


def parse_yaml_spec(text):
    """``parse_spec`` for a spec in YAML (text or bytes). Raises ImportError without PyYAML."""
    return _summary(_load_yaml(text))


def _summary(document):
    spec = _object(document, 'the CDI spec')
    cdi_version = _string(spec, 'cdiVersion', 'the CDI spec')
    if not CDI_VERSION_RE.match(cdi_version):
        raise CdiSpecError('the CDI spec\'s cdiVersion %r is not a version such as 0.5.0' % cdi_version)
    kind = _string(spec, 'kind', 'the CDI spec')
    if not KIND_RE.match(kind):
        raise CdiSpecError('the CDI spec\'s kind %r is not vendor/class (such as %s)' % (kind, KIND))
    if 'devices' not in spec:
        raise CdiSpecError('the CDI spec has no devices list')
    names, nodes = [], {}
    for position, device in enumerate(_list(spec, 'devices', 'the CDI spec')):
        where = 'devices[%d]' % position
        device = _object(device, where)
        name = _string(device, 'name', where)
        if name in nodes:
            raise CdiSpecError('%s: the device name %r is already used by an earlier device' % (where, name))
        names.append(name)
        nodes[name] = _device_nodes(_edits(device, where), where + '.containerEdits')
    common = _edits(spec, 'the CDI spec')
    from_hooks, from_libraries = _driver_versions(common, 'containerEdits')
    if len(set(from_hooks)) > 1:
        raise CdiSpecError('containerEdits.hooks name two driver versions: %s' % ', '.join(sorted(set(from_hooks))))
    if from_hooks:
        version, source = from_hooks[0], 'hook'
    elif len(set(from_libraries)) > 1:
        raise CdiSpecError('containerEdits mount driver libraries of two versions: %s' % ', '.join(
            sorted(set(from_libraries))))
    elif from_libraries:
        version, source = from_libraries[0], 'libraries'
    else:
        version, source = None, None
    return {
        'cdi_version': cdi_version,
        'kind': kind,
        'devices': names,
        'device_nodes': nodes,
        'driver_version': version,
        'driver_version_source': source,
        'common_device_nodes': [n['path'] for n in _device_nodes(common, 'containerEdits')],
        'sockets': _sockets(common, 'containerEdits'),
    }


_YAML_DEVICE_RE = re.compile(r'\A    - name: (?:"([^"]*)"|\'([^\']*)\'|(\S.*))\Z')
_HOOK_VERSION_TEXT_RE = re.compile(r'--host-driver-version=([0-9][0-9.]*)')


def outline_yaml(text):
    """``kind``, ``devices`` and ``driver_version`` of a spec in the YAML layout nvidia-ctk writes (top-level keys
    at column 0, each device a ``    - name: NAME`` item of ``devices:``, the driver version in the
    enable-cuda-compat hook's ``--host-driver-version=``), for hosts without PyYAML; None for text not laid out
    so (then nothing is said about it but that it differs). Not a YAML parser: it reads nvidia-ctk's own output.
    """
    kind, devices, in_devices = None, [], False
    for line in text.splitlines():
        if not line.startswith(' '):
            in_devices = line == 'devices:'
            if line.startswith('kind: '):
                kind = line[len('kind: '):].strip().strip('"')
            continue
        found = _YAML_DEVICE_RE.match(line) if in_devices else None
        if found:
            devices.append(next(group for group in found.groups() if group is not None).strip())
    versions = set(_HOOK_VERSION_TEXT_RE.findall(text))
    if kind is None or not devices or len(versions) > 1:
        return None
    return {'kind': kind, 'devices': devices, 'driver_version': versions.pop() if versions else None,
            'sockets': sorted(set(_SOCKET_TEXT_RE.findall(text)))}


# --------------------------------------------------------------------------
# Why the spec on the host is not what nvidia-ctk generates now
# --------------------------------------------------------------------------

def differences(old, new):
    """Why a spec (``old``: its summary, as ``parse_spec`` or ``outline_yaml`` give it) is not the one nvidia-ctk
    generates now (``new``: its summary), for a text that differs: the driver version, the devices added or gone
    (a GPU added or taken out, MIG turned on or off: nvidia-ctk names MIG devices instead of their GPU), else
    the nodes, libraries or hooks."""
    reasons = []
    if old['driver_version'] != new['driver_version']:
        reasons.append('driver %s, the spec names %s'
                       % (new['driver_version'] or 'unknown', old['driver_version'] or 'none'))
    added = [name for name in new['devices'] if name not in old['devices']]
    gone = [name for name in old['devices'] if name not in new['devices']]
    if added:
        reasons.append('devices not in the spec: %s' % ', '.join(added))
    if gone:
        reasons.append('devices in the spec that are gone: %s' % ', '.join(gone))
    # nvidia-ctk mounts a daemon's socket only if it existed when it ran: a spec made while the persistence daemon was
    # stopped lacks it, one made before it was removed names a socket that is gone
    old_sockets, new_sockets = set(old.get('sockets') or ()), set(new.get('sockets') or ())
    for path in sorted(new_sockets - old_sockets):
        reasons.append('%s exists now and the spec does not mount it (made while its daemon was stopped)' % path)
    for path in sorted(old_sockets - new_sockets):
        reasons.append('the spec mounts %s, which is gone (its daemon stopped or removed)' % path)
    return reasons or ['the devices\' nodes, libraries or hooks changed']
