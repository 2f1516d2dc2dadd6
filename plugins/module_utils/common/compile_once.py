# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Import from Ansible's module zip, compiling each source file once, and once per boot where the run is root's.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. A module runs on the host from the zip Ansible sends (AnsiballZ),
through Python's zipimport, which has no bytecode cache and compiles every
module's source twice: once while it builds the module's spec (to name the
file: ``zipimporter.get_filename``), once more to run it (CPython issue
gh-141276, open for every Python from 3.8 to 3.15). node_state imports the
host-side code of every concern it evaluates, thousands of lines, on every run.

``compiled_once()`` is a context manager: inside it, zipimport's compile step
(``_compile_source``, the same private function in 3.8-3.14) returns the code
it already compiled for the same file name and the same source bytes (code
objects are immutable, so sharing one is safe). Outside it, or on a Python
whose zipimport has no such step, nothing changes.

Where the run is root's, the code compiled is also kept between runs (a module's, and the programs built from
the collection's code that root runs outside Ansible: ``program_store``), in a
directory only root can open (``BYTECODE_DIR``, 0700, in /run: emptied at
every boot), one file per source file, named by the SHA-256 of what its code
depends on: the interpreter (its version, bytecode magic and cache tag), the
optimisation level, the file's path in the zip and its source bytes. A later
run with the same bytes for the same path loads the code (``marshal``) instead
of compiling it: about a tenth of the compile's CPU, where compiling is most
of what a converged host's run costs over Ansible's own module support.

What root executes from there, only root can have written: the directory is
opened without following a link and used only when root's and closed to other
users (its parent root's and writable by nobody else), each file opened
without following a link, used only when a regular file of root's closed to
other users, and a file that does not load as code is compiled over. Nothing
is written by a run in check mode (it only reads), by a run that is not
root's, or where the directory cannot be made or is not root's alone: the
cache can make a run cheaper, never different. The code kept names the file
it was compiled from (its path in the zip of the run that compiled it, under
that run's temp directory): only a traceback's file name shows it. Over
``MAX_ENTRIES`` files (source versions, from collection and Ansible upgrades
within one boot) the directory is emptied before the next is written.

Hand-written over a library: Python's own bytecode caches (``__pycache__``,
``PYTHONPYCACHEPREFIX``) apply to files imported from a directory, never from a
zip, and a prefix another user could write to would be code root runs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import hashlib
import json
import marshal
import os
import stat
import sys
import types

try:
    import zipimport
except ImportError:  # pragma: no cover - every CPython has it
    zipimport = None

BYTECODE_DIR = '/run/gpufleet-bytecode' if os.path.isdir('/run') else '/var/run/gpufleet-bytecode'
# Tests point this at a private directory; it is read from root's own environment only.
BYTECODE_DIR_VARIABLE = 'GPUFLEET_BYTECODE_DIR'
MAX_ENTRIES = 4096
MAX_BYTES = 16 << 20  # one file's code; node_state's largest is under 200 KB
SUFFIX = '.code'
NOFOLLOW = getattr(os, 'O_NOFOLLOW', 0)
DIRECTORY = getattr(os, 'O_DIRECTORY', 0)
CLOEXEC = getattr(os, 'O_CLOEXEC', 0)


def _interpreter():
    external = getattr(zipimport, '_bootstrap_external', None)
    magic = getattr(external, 'MAGIC_NUMBER', b'')
    tag = getattr(getattr(sys, 'implementation', None), 'cache_tag', None) or ''
    return ('%s\0%s\0%s\0%d\0' % (sys.version, magic.hex() if hasattr(magic, 'hex') else magic, tag,
                                  sys.flags.optimize)).encode('utf-8')


def _check_mode():
    """Whether this module run is in check mode (Ansible's arguments, as AnsibleModule will read them): True where
    that cannot be told, so that an unknown run only reads."""
    try:  # Ansible's wrapper has imported it (and set its arguments) before the module runs
        params = json.loads(sys.modules['ansible.module_utils.basic']._ANSIBLE_ARGS)['ANSIBLE_MODULE_ARGS']
        return params.get('_ansible_check_mode', False) is not False
    except Exception:  # pylint: disable=broad-except  # not run by Ansible, or arguments it cannot read
        return True


def _untrusted(st):
    """Not root's, or open to other users' writes (a directory) or reads (a file kept here)."""
    return st.st_uid != 0 or (stat.S_IMODE(st.st_mode) & (0o022 if stat.S_ISDIR(st.st_mode) else 0o077))


class Store:
    """The kept code of one interpreter, in ``path`` (``BYTECODE_DIR``): ``load(key)``, ``keep(key, code)``."""

    def __init__(self, path, writable):
        self.path = path.rstrip('/') or '/'
        self.writable = writable
        self.fd = None
        self.opened = False
        self.kept = 0

    def _open(self):
        if self.opened:
            return self.fd
        self.opened = True
        if os.geteuid() != 0 or not os.path.isabs(self.path):
            return None
        parent = os.path.dirname(self.path)
        try:  # the parent: a real directory (never a link) of root's that nobody else can write, so nobody else
            # can have taken the name first; then the directory itself, never through a link, root's alone
            st = os.lstat(parent)
            if not stat.S_ISDIR(st.st_mode) or _untrusted(st):
                return None
            if self.writable:
                try:
                    os.mkdir(self.path, 0o700)
                except OSError:
                    pass
            fd = os.open(self.path, os.O_RDONLY | DIRECTORY | NOFOLLOW | CLOEXEC)
        except OSError:
            return None
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or stat.S_IMODE(st.st_mode) & 0o077:
            os.close(fd)
            return None
        self.fd = fd
        return fd

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
        self.fd = None

    def load(self, key):
        """The code kept as ``key``, or None."""
        dfd = self._open()
        if dfd is None:
            return None
        try:
            fd = os.open(key + SUFFIX, os.O_RDONLY | NOFOLLOW | CLOEXEC, dir_fd=dfd)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or _untrusted(st) or st.st_size > MAX_BYTES:
                return None
            chunks = []
            while True:
                chunk = os.read(fd, max(st.st_size, 1 << 16))
                if not chunk:
                    break
                chunks.append(chunk)
        except OSError:
            return None
        finally:
            os.close(fd)
        try:
            code = marshal.loads(b''.join(chunks))
        except (EOFError, ValueError, TypeError):
            return None
        return code if isinstance(code, types.CodeType) else None

    def keep(self, key, code):
        """Keep ``code`` as ``key`` (replaced whole, 0600); nothing where that cannot be done."""
        if not self.writable:
            return False
        dfd = self._open()
        if dfd is None:
            return False
        temp = '.%s.%d.tmp' % (key, os.getpid())
        try:
            if not self.kept:
                self._bound(dfd)
            data = memoryview(marshal.dumps(code))
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC, 0o600, dir_fd=dfd)
            try:
                while data:
                    data = data[os.write(fd, data):]
            finally:
                os.close(fd)
            os.rename(temp, key + SUFFIX, src_dir_fd=dfd, dst_dir_fd=dfd)
        except (OSError, ValueError):
            try:
                os.unlink(temp, dir_fd=dfd)
            except OSError:
                pass
            return False
        self.kept += 1
        return True

    @staticmethod
    def _bound(dfd):
        """Empty the directory once it holds ``MAX_ENTRIES`` files (whatever this user's runs left there)."""
        names = os.listdir(dfd)
        if len(names) < MAX_ENTRIES:
            return
        for name in names:
            try:
                os.unlink(name, dir_fd=dfd)
            except OSError:
                pass


def _store():
    return Store(os.environ.get(BYTECODE_DIR_VARIABLE) or BYTECODE_DIR, writable=not _check_mode())


def program_store():
    """The store for a program of the collection's that root runs outside Ansible (the Slurm health check, the pull
    runner: ``slurm.program.build``), never in check mode: read and written."""
    return Store(os.environ.get(BYTECODE_DIR_VARIABLE) or BYTECODE_DIR, writable=True)


def key(pathname, source, interpreter):
    """What the code compiled from ``source`` at ``pathname`` depends on, hashed: the path in the zip (past the
    archive's own path, which is a fresh temp directory each run), the source bytes and the interpreter."""
    inner = pathname.split('.zip' + os.sep, 1)[-1]
    if isinstance(source, str):
        source = source.encode('utf-8', 'surrogateescape')
    digest = hashlib.sha256(interpreter)
    digest.update(inner.encode('utf-8', 'surrogateescape') + b'\0')
    digest.update(source)
    return digest.hexdigest()


@contextlib.contextmanager
def compiled_once(store=None):
    """``store``: where code is kept between runs (``Store``); by default root's ``BYTECODE_DIR``."""
    original = getattr(zipimport, '_compile_source', None)
    if not callable(original):
        yield
        return
    compiled = {}
    kept = store if store is not None else _store()
    interpreter = _interpreter()

    def compile_source(pathname, source):
        found = (pathname, source)
        if found not in compiled:
            name = key(pathname, source, interpreter)
            code = kept.load(name)
            if code is None:
                code = original(pathname, source)
                kept.keep(name, code)
            compiled[found] = code
        return compiled[found]

    zipimport._compile_source = compile_source
    try:
        yield
    finally:
        zipimport._compile_source = original
        if store is None:
            kept.close()
