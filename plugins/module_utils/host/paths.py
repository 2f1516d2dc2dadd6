# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who may change a path: resolution and checks out of other users' reach.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It imports nothing of ours but ``common.errors``.

The modules run as root. Anyone who can write a directory on the way to a
file root writes could turn that write into a write anywhere, so:

* ``resolve_path`` checks every directory on the way: owned by root or by the
  user running the module, writable by nobody else (an ancestor may be a
  sticky directory such as /tmp); a symbolic link is followed only when it
  sits in such a directory and is owned by root or us.
* ``check_pattern``: every directory a path pattern (containerd's
  ``imports``) can match, now or once another user adds a name, is checked
  the same way.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fnmatch
import os
import stat

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import HostFileError


MAX_SYMLINKS = 40
NOFOLLOW = getattr(os, 'O_NOFOLLOW', 0)
CLOEXEC = getattr(os, 'O_CLOEXEC', 0)
DIRECTORY = getattr(os, 'O_DIRECTORY', 0)
NONBLOCK = getattr(os, 'O_NONBLOCK', 0)


# --------------------------------------------------------------------------
# Who may change a path
# --------------------------------------------------------------------------

def _trusted_uids():
    return (0, os.geteuid())


def untrusted(st, sticky_ok=False):
    """Why someone other than root (or us) can change this entry, or None."""
    if st.st_uid not in _trusted_uids():
        return 'is owned by uid %d' % st.st_uid
    if stat.S_ISLNK(st.st_mode):
        return None  # a link's own mode means nothing; its directory decides
    if st.st_mode & 0o022 and not (sticky_ok and st.st_mode & stat.S_ISVTX):
        who = 'every user' if st.st_mode & 0o002 else 'group %d' % st.st_gid
        return 'is writable by %s (mode %04o)' % (who, stat.S_IMODE(st.st_mode))
    return None


def refuse(path, what, why, fix, reader='the program that reads it'):
    raise HostFileError('%s: refusing to use %s: it %s, so another user could make this root-run module write '
                        'or replace any file, or control %s. %s' % (path, what, why, reader, fix))


def _split(path):
    return [part for part in path.split('/') if part]


def resolve_path(path, reader='the program that reads it', file_directory=True):
    """Where to write ``path``: its real location, checked to be out of other users' reach.

    Returns the real path; trailing components may not exist yet. Raises
    HostFileError when a directory on the way, a link followed or the file's
    directory can be changed by a user other than root or us, and for a
    dangling link (creating its target could write anywhere). ``reader`` names
    who would be controlled, for the message. ``file_directory``: also hold
    the last directory to ``_check_parent``'s rule (it will hold our temp files).
    """
    absolute = path if path.startswith('/') else os.getcwd() + '/' + path
    pending = _split(absolute)
    current = '/'
    problem = untrusted(os.lstat('/'), sticky_ok=True)
    if problem:
        refuse(path, 'the directory /', problem, 'Fix the ownership of /.', reader)
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
                raise HostFileError('%s: cannot inspect %s: %s' % (path, candidate, exc.strerror))
            if followed is not None and not pending:
                raise HostFileError('%s is a symbolic link to %s, which does not exist; create the target or '
                                    'remove the link.' % (path, candidate))
            if '..' in pending:
                raise HostFileError('%s: "%s" does not exist and the path goes on with "..": give a plain path.'
                                    % (path, candidate))
            real = os.path.join(candidate, *[part for part in pending if part != '.'])
            if file_directory:
                _check_parent(path, real, reader)
            return real
        if stat.S_ISLNK(st.st_mode):
            problem = untrusted(st)
            if problem:
                refuse(path, 'the symbolic link %s' % candidate, problem,
                       'Remove the link, or replace it with a link owned by root.', reader)
            hops += 1
            if hops > MAX_SYMLINKS:
                raise HostFileError('%s: too many levels of symbolic links.' % path)
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
            raise HostFileError('%s: %s is not a directory.' % (path, candidate))
        problem = untrusted(st, sticky_ok=True)
        if problem:
            refuse(path, 'the directory %s' % candidate, problem,
                   'Make it owned by root and writable only by root (chown root: %s; chmod go-w %s).'
                   % (candidate, candidate), reader)
        current = candidate
    if file_directory:
        _check_parent(path, current, reader)
    return current


def _check_parent(path, real, reader):
    """The file's own directory holds our temp files and backups: nobody else may write it, sticky or not."""
    directory = os.path.dirname(real)
    try:
        st = os.lstat(directory)
    except OSError:
        return  # missing: ensure_directory creates it
    problem = untrusted(st)
    if problem:
        refuse(path, 'the directory %s' % directory, problem,
               'Keep the configuration in a directory only root can write (chown root: %s; chmod 0755 %s).'
               % (directory, directory), reader)


def _magic(part):
    """Whether a path component is a pattern for Go's filepath.Glob (``*``, ``?``, ``[``, ``\\``)."""
    return any(char in part for char in '*?[\\')


def glob_match(name, part):
    """Go's filepath.Match for one component, near enough: ``[^...]`` is Go's negation, fnmatch's is ``[!...]``."""
    return fnmatch.fnmatchcase(name, part.replace('[^', '[!'))


def check_pattern(pattern, reader='the program that reads it', glob=True):
    """Refuse a path pattern (absolute) when another user could add a file it matches, now or later.

    Every directory in which a component is looked up must be owned by root
    or us and writable by nobody else; a sticky directory (/tmp) only on the
    way to an entry that exists (nobody else can replace it there): anyone
    who can create a name in such a directory could make the pattern match a
    file of theirs, today or after this check. Matching directories are
    followed as ``resolve_path`` follows them. ``glob``: the pattern's
    components may be patterns (``*``, ``?``, ``[...]``), else all are names.
    Returns the directories the last component is looked up in.
    """
    parts = _split(pattern)
    frontier = ['/']
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        found = []
        for directory in frontier:
            magic = glob and _magic(part)
            names = sorted(os.listdir(directory)) if magic else [part]
            present = [name for name in names if (glob_match(name, part) if magic else
                                                  os.path.lexists(os.path.join(directory, name)))]
            problem = untrusted(os.lstat(directory), sticky_ok=not magic and bool(present))
            if problem:
                refuse(pattern, 'the directory %s' % directory, problem,
                       'Another user could add a file there that %s would then load. Make it owned by root and '
                       'writable only by root (chown root: %s; chmod 0755 %s), or import from a directory that is.'
                       % (reader, directory, directory), reader)
            if last:
                continue
            for name in present:
                real = resolve_path(os.path.join(directory, name), reader, file_directory=False)
                if os.path.isdir(real):
                    found.append(real)
        if not last:
            frontier = found
    return frontier
