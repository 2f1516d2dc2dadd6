# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The health check program slurm_node installs for slurmd (``HealthCheckProgram``): built, and installed as root.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change at any time.

``build`` makes the program from the sources of the modules its entry (``slurm.health_check``) loads, as the running
Python holds them, not from files of the collection on disk. The module that installs it runs on the node inside
Ansible's module zip (AnsiballZ), which carries exactly the module_utils its module imports, the entry's among them,
and nothing else of the collection: the program is made of those sources, nothing extra is transferred to the
node, and the program is pinned to the collection version that installed it (the next run of a newer collection
replaces it). ``module.__loader__.get_source`` reads a source from a file tree (pytest) and from the module zip
alike.

Which modules: the entry and, from its source on, every module its import statements name under
``ansible.module_utils.`` or this collection's ``module_utils.`` (what Ansible's own dependency finder puts in a
module zip), with their packages; not every such module the running process has loaded, which depends on the
module that builds it (node_state loads every concern): the same sources give the same program, whoever builds it.
A module whose name another module took over in ``sys.modules`` (``ansible.module_utils.distro`` gives way to a
system ``distro``) is found through its package; one with no source (made at run time) is left out. The imports are
found with a regular expression over the sources, not ``ast``: node_state builds the program on every run to find
its drift, and parsing half a megabyte of sources costs ten times more (a test holds the two to the same set).

The program is a Python zip application (``#!/usr/bin/python3``, then a zip): entries sorted, every timestamp the
same, stored uncompressed (the bytes depend on the sources only, not on the host's zlib), so that an unchanged
collection leaves an installed program unchanged. ``install`` writes it, ``install_config`` its JSON configuration,
both atomically, root's, never through a link, in a directory only root can write.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import hashlib
import importlib
import importlib.machinery
import importlib.util
import io
import json
import os
import re
import stat
import sys
import zipfile

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import HostFileError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files, paths

ENTRY = 'ansible_collections.gpufleet.nvidia.plugins.module_utils.slurm.health_check'
# The modules a program carries: this collection's module_utils and Ansible's (those a module zip carries).
PREFIXES = ('ansible_collections.gpufleet.nvidia.plugins.module_utils.', 'ansible.module_utils.')
INTERPRETER = '/usr/bin/python3'
# zip's earliest date: every entry gets it, whenever the program is built
STAMP = (1980, 1, 1, 0, 0, 0)
PROGRAM_MODE = 0o755
CONFIG_MODE = 0o600
READER = 'slurmd, as root'
# The program's code, as a module's, compiled once per run and kept compiled between root's runs (zipimport compiles
# each file twice and keeps nothing): common.compile_once, which every program carries.
COMPILE_ONCE = 'ansible_collections.gpufleet.nvidia.plugins.module_utils.common.compile_once'
MAIN = '''# -*- coding: utf-8 -*-
"""The program: %(entry)s.main(), whose return value is the exit status (made by slurm.program.build)."""
import sys

from %(compile_once)s import compiled_once, program_store

with compiled_once(program_store()):
    import %(entry)s as entry
    status = entry.main()
sys.exit(status)
'''

# ``from X import a, b`` (parenthesised over lines, or continued with a backslash) and ``import X.Y as Z, W``.
IMPORT = re.compile(r'^[ \t]*(?:from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|(?:\\\n|[^\n])*)'
                    r'|import[ \t]+((?:\\\n|[^\n])*))', re.M)
COMMENT = re.compile(r'#[^\n]*')


class BuildError(Exception):
    """The program cannot be built from the modules this Python holds: the message names the module."""


# --------------------------------------------------------------------------
# Which modules, and their sources
# --------------------------------------------------------------------------

def ours(name):
    return name.startswith(PREFIXES)


def _names(text):
    """The dotted names of an import list: ``(a as b, c)`` -> ``['a', 'c']``."""
    text = COMMENT.sub('', text).replace('\\\n', ' ').split(';')[0].strip().strip('()')
    return [item.split()[0] for item in text.split(',') if item.split()]


def imported(source, name, package):
    """The module names the import statements of ``source`` (the module ``name``; ``package``: whether it is a
    package) may load: each module imported, and ``M.n`` for each name of ``from M import n`` (a submodule or not)."""
    found = []
    for match in IMPORT.finditer(source):
        module, names, plain = match.groups()
        if plain is not None:
            found.extend(_names(plain))
            continue
        dots = len(module) - len(module.lstrip('.'))
        if dots:
            base = name.split('.') if package else name.split('.')[:-1]
            base = base[:len(base) - dots + 1]
            module = '.'.join(base + ([module[dots:]] if module[dots:] else []))
        found.append(module)
        found.extend('%s.%s' % (module, item) for item in _names(names) if item != '*')
    return found


# The names six serves from the standard library at run time (no source of their own to carry).
SIX_MOVES = 'ansible.module_utils.six.moves'


def find_spec(name):
    """The spec of the module ``name``: the loaded module's, unless another module took its place in
    ``sys.modules`` (then, and for a module not loaded, found in its package's directories), or None."""
    module = sys.modules.get(name)
    spec = getattr(module, '__spec__', None)
    if spec is not None and spec.name == name:
        return spec
    parent = name.rpartition('.')[0]
    if not parent:
        return importlib.util.find_spec(name)
    parent_spec = find_spec(parent)
    locations = parent_spec.submodule_search_locations if parent_spec is not None else None
    if not locations:
        return None
    return importlib.machinery.PathFinder.find_spec(name, list(locations))


def source_of(name):
    """``(source bytes, is_package)`` of the module ``name``, or None where there is no such module or it has no
    source (a module made at run time: six makes ``six.moves.*`` from the standard library when it is imported,
    and older ansible-core releases import ``ansible.module_utils.six.moves.collections_abc``)."""
    if name == SIX_MOVES or name.startswith(SIX_MOVES + '.'):
        return None
    spec = find_spec(name)
    if spec is None:
        return None
    package = spec.submodule_search_locations is not None
    module = sys.modules.get(name)
    loader = module.__loader__ if getattr(module, '__spec__', None) is spec else spec.loader
    if loader is None or not hasattr(loader, 'get_source'):
        return (b'', True) if package else None
    try:
        source = loader.get_source(name)
    except ImportError as exc:
        raise BuildError('cannot read the source of %s: %s' % (name, exc))
    if source is None:
        return None
    # as it is written in the zip: a file tree's and zipimport's loaders give text, the collection loader bytes
    return (source if isinstance(source, bytes) else source.encode('utf-8')), package


def modules(entry=ENTRY):
    """``{name: (source bytes, is_package)}``: the entry and every module of ours its imports reach, with their packages."""
    found = {}
    pending = [entry, COMPILE_ONCE]
    while pending:
        name = pending.pop()
        if name in found or not (ours(name) or name == entry):
            continue
        found[name] = source_of(name)
        if found[name] is None:
            if name == entry:
                raise BuildError('%s has no source this Python can read' % entry)
            continue
        source, package = found[name]
        parts = name.split('.')
        pending.extend('.'.join(parts[:end]) for end in range(1, len(parts)))
        pending.extend(imported(source.decode('utf-8', 'replace'), name, package))
    return dict((name, found[name]) for name in found if found[name] is not None)


def archive_files(found, entry=ENTRY):
    """``{path in the zip: bytes}``: each module's source, an empty ``__init__.py`` for every package level none
    of them is, and ``__main__.py``."""
    entries = {}
    for name, (source, package) in found.items():
        path = name.replace('.', '/') + ('/__init__.py' if package else '.py')
        entries[path] = source
        parts = name.split('.')
        for end in range(1, len(parts)):
            entries.setdefault('/'.join(parts[:end]) + '/__init__.py', b'')
    entries['__main__.py'] = (MAIN % {'entry': entry, 'compile_once': COMPILE_ONCE}).encode('utf-8')
    return entries


def build(entry=ENTRY, interpreter=INTERPRETER):
    """The program's bytes: ``#!interpreter``, then a zip of ``archive_files`` (sorted, fixed timestamps, stored).
    The entry is imported here; it must have a ``main()``."""
    if not callable(getattr(importlib.import_module(entry), 'main', None)):
        raise BuildError('%s has no main(): it cannot be a program' % entry)
    buffer = io.BytesIO()
    buffer.write(b'#!' + interpreter.encode('utf-8') + b'\n')
    with zipfile.ZipFile(buffer, 'w', zipfile.ZIP_STORED) as archive:
        for path, data in sorted(archive_files(modules(entry), entry).items()):
            info = zipfile.ZipInfo(path, date_time=STAMP)
            info.create_system = 3
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            info.compress_type = zipfile.ZIP_STORED
            archive.writestr(info, data)
    return buffer.getvalue()


def sha256(data):
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------
# Installing
# --------------------------------------------------------------------------

def resolve(path, reader=READER):
    """Where ``path`` is written: not a link, in directories only root can change (``host.paths.resolve_path``);
    ``reader``: who runs or reads it as root, for the messages."""
    if not os.path.isabs(path):
        raise HostFileError('%s: give an absolute path.' % path)
    try:
        st = os.lstat(path)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
            raise HostFileError('%s: cannot inspect it: %s' % (path, exc.strerror))
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise HostFileError('%s is a symbolic link: refusing to write through it a file for %s. '
                            'Remove the link and run again.' % (path, reader))
    return paths.resolve_path(path, reader=reader)


def current(real, path):
    """``(sha256, stat)`` of the file at ``real`` (not following a link), or ``(None, None)`` where there is none."""
    try:
        fd = os.open(real, os.O_RDONLY | paths.NOFOLLOW | paths.NONBLOCK | paths.CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None, None
        raise HostFileError('%s: cannot read it: %s' % (path, exc.strerror))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise HostFileError('%s is not a regular file: remove it and run again.' % path)
        digest = hashlib.sha256()
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            digest.update(chunk)
    except OSError as exc:
        raise HostFileError('%s: cannot read it: %s' % (path, exc.strerror))
    finally:
        os.close(fd)
    return digest.hexdigest(), st


def _install(path, data, mode, check_mode, label, reader):
    real = resolve(path, reader)
    before, st = current(real, path)
    after = sha256(data)
    if before == after and stat.S_IMODE(st.st_mode) == mode and st.st_uid == os.geteuid():
        return False, before, after
    if not check_mode:
        files.ensure_directory(real)
        files.write_atomic(real, data, mode=mode, label=label)
    return True, before, after


def install(path, data, check_mode=False, label=None, reader=READER):
    """Install the program ``data`` at ``path`` (root's, mode 0755), unless it is there already with those bytes,
    owner and mode. ``label(temp, path)``: see ``host.files.write_atomic``; ``reader``: who runs it, for the messages.
    Returns ``(changed, sha256 before (None: no file), sha256 after)``; raises HostFileError naming ``path``."""
    return _install(path, data, PROGRAM_MODE, check_mode, label, reader)


def config_bytes(config):
    return (json.dumps(config, sort_keys=True, indent=2) + '\n').encode('utf-8')


def install_config(path, config, check_mode=False, label=None, reader=READER):
    """Install the program's configuration ``config`` (a dict, as JSON with sorted keys) at ``path``, root's, mode
    0600; as ``install``."""
    return _install(path, config_bytes(config), CONFIG_MODE, check_mode, label, reader)


def remove(path, check_mode=False, reader=READER):
    """Remove the file ``path`` (never through a link); whether there was one."""
    real = resolve(path, reader)
    if not os.path.lexists(real):
        return False
    if not check_mode:
        files.remove_root_file(real, reader=reader)
    return True
