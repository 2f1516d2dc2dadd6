# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The effective configuration: what ``containerd config dump`` says, and what a plan may change in it.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It is pure: the files containerd imports, the probe text handed
to ``config dump``, and the comparison of two dumps (only what was asked may
differ).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import posixpath

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import dirs
from ansible_collections.gpufleet.nvidia.plugins.module_utils.formats import toml_splice as ts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd.cdi import cdi_state
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd.config import RUNC_V2, get, loads
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd.plan import nonzero, runtime_settings


# --------------------------------------------------------------------------
# The effective configuration: what `containerd config dump` says
# --------------------------------------------------------------------------

def relative_to_file(entry, globs_from_file):
    """Whether containerd resolves the relative ``imports`` entry against the directory of the file naming it: a
    file name always; a glob (``*``) on containerd 2.x only (1.6 globs against its working directory; 2.1.9 resolves
    every relative entry against the file's directory, both measured with ``config dump``)."""
    return not entry.startswith('/') and (globs_from_file or '*' not in entry)


def globs_from_file(version):
    """Whether this containerd (``(major, minor, ...)``, None when unknown: as 1.x) takes a relative glob from the
    directory of the file naming it."""
    return bool(version) and version[0] >= 2


def import_patterns(values, source, cwd, globs_from_file=False):
    """The ``imports`` of a file's ``values`` as containerd resolves them: ``[(absolute pattern, is a glob)]``.

    An entry with ``*`` is a glob (``filepath.Glob``); a relative entry is taken from the directory of the file
    ``source`` that names it (``relative_to_file``), else from containerd's working directory, here ``cwd``.
    """
    found = []
    for entry in values.get('imports') or []:
        if not isinstance(entry, str) or not entry:
            continue
        base = posixpath.dirname(source) if relative_to_file(entry, globs_from_file) else cwd
        found.append((posixpath.normpath(posixpath.join(base, entry)), '*' in entry))
    return found


# What each containerd does with an imported file whose `version` differs from the main file's, measured with
# `config dump`: 1.6.20 reads an imported file's tables by their names whatever its version says (version 3's names
# are silently ignored); 1.7.24 refuses a file above 2 ("containerd config version `3` is not supported, the max
# version is `2`", naming no file); 2.1.9 refuses one above 3 (a drop-in NVIDIA's installer makes from a newer
# containerd's `config dump`, version 4) and, given a version 3 drop-in that sets the CRI runtime plugin beside a
# version 2 main file, drops the main file's settings for that plugin (runc's `SystemdCgroup = true` read as false,
# its sandbox image back to the default).
def max_import_version(version):
    """The highest ``version`` this containerd (``(major, minor, ...)``) takes in an imported file; None: any."""
    if not version:
        return None
    if version[0] >= 2:
        return 3
    return 2 if version[:2] >= (1, 7) else None


def _integer(value):
    return isinstance(value, int) and not isinstance(value, bool)


def import_versions(root_version, declared, version):
    """``[(message, refused)]`` for the imported files whose ``version`` differs from the main file's (``declared``:
    ``{path: its version}``), saying what this containerd does with each; ``refused``: the module must change
    nothing (containerd refuses the file, or reads the main file otherwise than it says)."""
    found = []
    shown = '.'.join(str(part) for part in version) if version else 'unknown'
    for path, file_version in sorted(declared.items()):
        if not _integer(file_version) or not _integer(root_version) or file_version == root_version:
            continue
        limit = max_import_version(version)
        if limit is not None and file_version > limit:
            what, refused = 'containerd %s refuses it (it reads up to version %d)' % (shown, limit), True
        elif version and version[0] >= 2:
            what, refused = ('containerd %s then drops settings of the main file for a plugin both set (measured on '
                             '2.1.9: runc\'s SystemdCgroup = true read as false)' % shown), True
        elif file_version > 2:
            what, refused = ('containerd %s reads its tables by their names whatever its version, so tables under '
                             'version %d names are silently ignored' % (shown, file_version)), False
        else:
            continue
        found.append(('%s declares config version %d, the main file %d: %s. Rewrite it in the main file\'s version '
                      '(a drop-in made from a newer containerd\'s `config dump`, as NVIDIA\'s installer writes one, '
                      'is not)' % (path, file_version, root_version, what), refused))
    return found


def probe_text(text, path, directory, globs_from_file=False):
    """``text`` to be read from standard input as if it were the file ``path`` in ``directory``: the relative
    imports containerd takes from the file's directory (``relative_to_file``) made absolute; every other byte as
    it is."""
    values = loads(text, path)
    imports = values.get('imports')
    if not isinstance(imports, list) or not any(
            isinstance(entry, str) and relative_to_file(entry, globs_from_file) for entry in imports):
        return text
    entry = ts.scan(text, path).entry(('imports',))
    fixed = [posixpath.normpath(posixpath.join(directory, item))
             if isinstance(item, str) and relative_to_file(item, globs_from_file) else item for item in imports]
    return text[:entry.value_start] + '[%s]' % ', '.join(ts.string(item) for item in fixed) + text[entry.value_end:]


def _normalise(values, schema, name, cdi_keys=()):
    values = copy.deepcopy(values)
    cri = get(values, schema.cri)
    if isinstance(cri, dict):
        for key in cdi_keys:
            cri.pop(key, None)
    values.pop('imports', None)
    runtimes = get(values, schema.runtimes)
    if isinstance(runtimes, dict):
        runtimes.pop(name, None)
        for runtime in runtimes.values():
            if isinstance(runtime, dict):
                runtime['options'] = nonzero(runtime.get('options'))
    containerd = get(values, schema.containerd)
    if isinstance(containerd, dict):
        containerd.pop('default_runtime_name', None)
    return values


def differences(before, after, path=()):
    """Paths (dotted) where two value trees differ."""
    if isinstance(before, dict) and isinstance(after, dict):
        found = []
        for key in sorted(set(before) | set(after)):
            if key not in before:
                found.append('%s added' % ts.dotted(path + (key,)))
            elif key not in after:
                found.append('%s removed' % ts.dotted(path + (key,)))
            else:
                found += differences(before[key], after[key], path + (key,))
        return found
    return [] if before == after else ['%s changed' % ts.dotted(path)]


def compare_effective(before, after, request, schema, want_default, want_runtime=None, cdi_keys=()):
    """What differs between two dumps beyond what was asked; empty when only the runtime (and default) changed.

    ``want_default``: the default_runtime_name the after dump must show (None: any runtime it names);
    ``want_runtime``: the runtime's settings it must show (None: any with our runtime_type and BinaryName);
    ``cdi_keys``: the CDI keys the plan changes (``Plan.cdi_keys``), which may differ; with ``cdi: true`` the after
    dump must have CDI on and read every directory of ``cdi_spec_dirs``.
    """
    problems = differences(_normalise(before, schema, request.name, cdi_keys),
                           _normalise(after, schema, request.name, cdi_keys))
    if request.state == 'present' and request.cdi:
        state = cdi_state(after, schema) or {'enabled': None, 'spec_dirs': []}
        if state['enabled'] is not True:
            problems.append('enable_cdi is %s, not true' % ts.scalar(state['enabled']) if state['enabled'] is not None
                            else 'enable_cdi is missing')
        missing = dirs.missing_directories(state['spec_dirs'], request.cdi_spec_dirs)
        if missing:
            problems.append('cdi_spec_dirs %s lacks %s' % (ts.scalar(state['spec_dirs']), ', '.join(missing)))
    runtime = get(after, schema.runtime(request.name))
    if request.state == 'present':
        if not isinstance(runtime, dict):
            problems.append('the runtime "%s" is missing from the effective configuration' % request.name)
        else:
            if runtime.get('runtime_type') != RUNC_V2:
                problems.append('runtime_type of "%s" is %r' % (request.name, runtime.get('runtime_type')))
            if (runtime.get('options') or {}).get('BinaryName') != request.runtime_path:
                problems.append('BinaryName of "%s" is %r' % (request.name, (runtime.get('options') or {}).get(
                    'BinaryName')))
            elif want_runtime is not None and runtime_settings(runtime) != runtime_settings(want_runtime):
                problems.append('the runtime "%s" is %s, not %s'
                                % (request.name, runtime_settings(runtime), want_runtime))
    default = get(after, schema.containerd + ('default_runtime_name',))
    if want_default is not None and default != want_default:
        problems.append('default_runtime_name is %r, not %r' % (default, want_default))
    runtimes = get(after, schema.runtimes) or {}
    if default not in runtimes:
        problems.append('default_runtime_name "%s" names no runtime: the CRI plugin would fail to start' % default)
    return problems
