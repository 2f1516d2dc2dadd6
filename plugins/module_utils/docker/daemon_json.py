# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The daemon.json merge rules: what our runtime looks like in dockerd's configuration.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It is pure: text in, text out (``merge``), and the comparison of
a configuration with what a running dockerd reports (``compare_running``).
The byte-preserving editing is ``formats.json_splice``; files are ``host.files``; dockerd
itself is ``docker.dockerd``; the whole operation is ``docker.apply``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.gpufleet.nvidia.plugins.module_utils.formats import json_splice as splice
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.formats.toml_splice import fold

DEFAULT_PATH = '/etc/docker/daemon.json'
# Runtime names dockerd reserves for itself (moby daemon/config, 20.10+).
RESERVED_RUNTIMES = ('runc', 'io.containerd.runc.v2', 'io.containerd.runtime.v1.linux')
STOCK_RUNTIME = 'runc'
RUNTIME_PACKAGE = 'nvidia-container-toolkit'
# The keys this collection manages.
OUR_KEYS = ('runtimes', 'default-runtime', 'features')
MAX_CONFIG_BYTES = 1024 * 1024


class DaemonJsonError(GpufleetError):
    """A daemon.json problem the user must fix; the message names the file and the problem."""


# The keys of a runtime's entry dockerd reads (moby's ``system.Runtime``). Go's encoding/json matches a struct field
# in any case, the last spelling in the file winning (measured on dockerd 20.10, 26.1 and 28.5: ``"Path"`` after
# ``"path"`` is the path that runs); a top-level key in another case dockerd refuses itself ("directives don't match
# any configuration option", measured with --validate on 26.1 and 28.5).
RUNTIME_KEYS = ('path', 'runtimeArgs', 'runtimeType', 'options')


def parse(text, path):
    """The daemon.json text's top Node (None when empty), refusing what dockerd could not use, and any key this
    module reads written in another case (``OUR_KEYS``, a runtime's ``RUNTIME_KEYS``): dockerd would read it
    otherwise than this module, or refuse it."""
    node = splice.parse_document(text, path)
    if node is not None:
        runtimes = node.value.get('runtimes')
        if 'runtimes' in node.value and not isinstance(runtimes, dict):
            raise DaemonJsonError('%s: "runtimes" must be a JSON object mapping names to {"path": ...}, found %s. '
                                  'The file was left untouched.' % (path, splice.json_type(runtimes)))
        _check_key_case(text, path, node.members, OUR_KEYS, '')
        member = node.member('runtimes')[1]
        for runtime in (member.node.members or ()) if member is not None else ():
            if runtime.node.kind == 'object':
                _check_key_case(text, path, runtime.node.members, RUNTIME_KEYS,
                                'runtimes.%s.' % json.dumps(runtime.key))
    return node


def _check_key_case(text, path, members, keys, where):
    folded = dict((fold(key), key) for key in keys)
    for member in members or ():
        known = folded.get(fold(member.key))
        if known is not None and member.key != known:
            raise DaemonJsonError('%s line %d: the key %s%s is dockerd\'s "%s" written in another case; dockerd '
                                  'reads it otherwise than this module, or refuses it. Write "%s"; the file was left '
                                  'untouched.' % (path, text.count('\n', 0, member.key_start) + 1, where,
                                                  json.dumps(member.key), known, known))


def config_of(text, path='daemon.json'):
    """The Python dict the text stands for (``{}`` when empty)."""
    node = parse(text, path)
    return {} if node is None else node.value


class Merged(object):
    """A merge's outcome: ``text`` (identical to the input when nothing changes), ``warnings``, and the
    configuration ``before`` and ``after`` as dicts (each document parsed once)."""

    def __init__(self, text, warnings, before, after):
        self.text = text
        self.warnings = warnings
        self.before = before
        self.after = after


def merge(text, path, state='present', name='nvidia', runtime_path='nvidia-container-runtime',
          runtime_args=None, default_runtime=None, cdi=None):
    """``text`` with our runtime merged in (or removed), as a ``Merged``.

    ``Merged.text == text`` exactly when nothing needs to change. ``runtime_args``
    None leaves an existing runtime's ``runtimeArgs`` alone (new entries get
    ``[]``); a missing ``runtimeArgs`` equals ``[]``. ``cdi`` None leaves
    ``features.cdi`` alone; a missing ``features.cdi`` equals ``false``.
    ``default_runtime`` None leaves ``default-runtime`` alone; true sets it to
    us; false removes it only when it names us (a replaced default is not
    remembered). ``state='absent'`` removes our runtime and a
    ``default-runtime`` naming it; a ``runtimes`` object that removal empties
    goes too, so a file we added ``runtimes`` to comes back byte for byte.
    With ``cdi`` true, absent also removes ``features.cdi: true`` (and a
    ``features`` object that leaves empty): what present with the same
    options added.
    """
    if name in RESERVED_RUNTIMES:
        raise DaemonJsonError('%s: the runtime name "%s" is reserved by dockerd; choose another name.' % (path, name))
    if not name:
        raise DaemonJsonError('%s: the runtime name must not be empty.' % path)
    warnings = []
    root = parse(text, path)
    editor = splice.Editor(text, path, root)
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
                has_args, _value = editor.get(['runtimes', name, 'runtimeArgs'])
                if not (not has_args and list(runtime_args) == []):
                    editor.set(['runtimes', name, 'runtimeArgs'], list(runtime_args))
            has_args, effective = editor.get(['runtimes', name, 'runtimeArgs'])
            if entry.get('args') and not splice.same_value(entry.get('args'), effective or []):
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
                                      % (path, splice.json_type(features)))
            has_cdi, _value = editor.get(['features', 'cdi'])
            if has_cdi or cdi:
                editor.set(['features', 'cdi'], bool(cdi))
    elif state == 'absent':
        # A "runtimes" object that held only ours goes with it (byte for byte what it was before we added it).
        editor.remove(['runtimes', name], prune=True)
        if current.get('default-runtime') == name:
            editor.remove(['default-runtime'])
        features = current.get('features')
        if cdi and isinstance(features, dict) and features.get('cdi') is True:
            # What present with cdi=true added goes: "features" too when that leaves it empty (the file had none).
            editor.remove(['features', 'cdi'], prune=True)
    else:
        raise DaemonJsonError('state must be present or absent, not %r' % (state,))
    if not editor.dirty:
        return Merged(text, warnings, current, current)
    return Merged(editor.text, warnings, current, editor.root.value)


def merge_text(text, path, **request):
    """``(new_text, warnings)`` of ``merge``."""
    merged = merge(text, path, **request)
    return merged.text, merged.warnings


# --------------------------------------------------------------------------
# Comparing a configuration with the running dockerd
# --------------------------------------------------------------------------

def expected_default_runtime(config, flags):
    value = config.get('default-runtime')
    if isinstance(value, str) and value:
        return value
    flag = flags.get('default-runtime')
    if flag:
        return flag.split('=', 1)[-1].split()[-1]
    return STOCK_RUNTIME


# The first dockerd release with CDI on when daemon.json does not set features.cdi.
CDI_DEFAULT_FROM = 28


def cdi_default(info, flags):
    """Whether the dockerd of ``/info`` has CDI on when the file does not set ``features.cdi``: on from dockerd 28
    (measured on 26.1 and 28.5); None when that cannot be told (no version, or a ``--feature`` flag decides)."""
    match = re.match(r'(\d+)\.', str(info.get('ServerVersion') or ''))
    if not match or any(key.startswith('feature') for key in flags):
        return None
    return int(match.group(1)) >= CDI_DEFAULT_FROM


def compare_running(config, info, name, state, flags=None):
    """Return ``(differences, removals)`` between the file's config and ``/info``.

    Only what this module manages is compared: our runtime, the default
    runtime and CDI. ``removals`` lists differences a SIGHUP cannot apply
    (a removal, and CDI switched on or off).
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
    want_cdi = features.get('cdi') if 'cdi' in features else cdi_default(info, flags)
    if want_cdi is not None and 'CDISpecDirs' in info:
        # dockerd 25+ lists CDI spec dirs only while CDI is enabled.
        if bool(want_cdi) != bool(info.get('CDISpecDirs')):
            differences.append('CDI is %s, the file says features.cdi=%s'
                               % ('enabled' if info.get('CDISpecDirs') else 'disabled',
                                  json.dumps(features['cdi']) if 'cdi' in features else 'nothing (%s by default on '
                                  'dockerd %s)' % ('on' if want_cdi else 'off', info.get('ServerVersion'))))
            # Measured on dockerd 26.1 and 28.5: a SIGHUP leaves CDI as it was; dockerd sets it up when it starts.
            removals.append('dockerd reads features.cdi only when it starts')
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
        if key in OUR_KEYS and (key not in before or not splice.same_value(before.get(key), after.get(key))):
            fatal.append('"%s" (also set by the dockerd flag %s)' % (key, flags[key]))
        else:
            preexisting.append('"%s" (also set by the dockerd flag %s)' % (key, flags[key]))
    return fatal, preexisting
