# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``/dev/char/MAJOR:MINOR`` links for NVIDIA device nodes, so ``systemctl daemon-reload`` keeps GPU containers' devices.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. The boot pieces are ``device_links.boot``, the run ``device_links.run``.

With the systemd cgroup driver, runc hands a device to systemd's
``DeviceAllow=`` only when ``/dev/char/M:m`` (or ``/sys/dev/char/M:m``)
exists. The NVIDIA driver creates no sysfs class entry, so without the links
systemd forgets the GPU devices of every container scope at the next
``daemon-reload`` and the containers get EPERM ("Failed to initialize NVML:
Unknown Error"). A container started before the links existed keeps that
flaw until it is restarted.

* ``find_nodes`` lists the NVIDIA character device nodes (``lstat``, never a
  link); ``read_char_dir`` the entries of ``/dev/char``.
* ``plan_present`` / ``plan_absent`` are pure: facts in, links to create or
  remove (and links to leave alone, reported) out.
* ``CharDir`` changes ``/dev/char`` through a descriptor of a directory only
  root can write: ``symlink`` never replaces an entry, ``unlink`` only a link
  read back as ours.
* ``render_*`` write the boot-time pieces (one POSIX sh script, a udev rule,
  a systemd unit, SysV script or Upstart job) that do the same at every boot
  and driver load, before the container engines start.
* ``exposed_containers`` picks, from dockerd's answers, the running GPU
  containers started before the links existed.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import posixpath
import re
import stat
from collections import namedtuple

from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import boot as init_boot
from ansible_collections.gpufleet.nvidia.plugins.module_utils.engines import names as engines_names
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files as host_files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import paths
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import HostFileError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init.systems import SYSTEMS, unit_path


DEV_ROOT = '/dev'
CHAR_DIR = 'char'
CAPS_DIR = 'nvidia-caps'
MARKER = init_boot.MARKER
SERVICE = 'gpufleet-dev-char-links'
SCRIPT_PATH = '/usr/local/sbin/gpufleet-dev-char-links'
UDEV_RULE_PATH = '/etc/udev/rules.d/71-gpufleet-nvidia-dev-char.rules'
UNIT_PATHS = dict((init, unit_path(init, SERVICE)) for init in SYSTEMS)


# The container engines' services (whose runc asks systemd for device access); the boot piece runs before each.
# dockerd first, as the boot pieces have always named them: another order would rewrite every host's unit.
ENGINES = ('docker',) + tuple(engine for engine in engines_names.ENGINES if engine != 'docker')


# nvidia0..nvidiaN, nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset; nvidia-caps/nvidia-capN
NODE_RE = re.compile(r'^nvidia(?:[0-9]+|ctl|-uvm|-uvm-tools|-modeset)$')
CAP_RE = re.compile(r'^nvidia-cap[0-9]+$')
LINK_RE = re.compile(r'^[0-9]+:[0-9]+$')


class Node(namedtuple('Node', 'name major minor')):
    """An NVIDIA character device node; ``name`` is relative to the dev root (``nvidia-caps/nvidia-cap1``)."""

    @property
    def link(self):
        return '%d:%d' % (self.major, self.minor)

    @property
    def target(self):
        """The link's text, relative like udev's own links: ``../nvidia0``."""
        return '../' + self.name


# kind: 'link' (target is its text), 'char' (rdev is (major, minor)), 'other'; mtime: when a link was made
Entry = namedtuple('Entry', 'kind target rdev mtime')


def is_node_name(name):
    if '/' in name:
        directory, base = name.split('/', 1)
        return directory == CAPS_DIR and bool(CAP_RE.match(base))
    return bool(NODE_RE.match(name))


def points_at(target, name, dev_root=DEV_ROOT):
    """Whether a link text in ``<dev_root>/char`` names the node ``name`` (read as text, never followed)."""
    char_dir = posixpath.join(dev_root, CHAR_DIR)
    return posixpath.normpath(posixpath.join(char_dir, target)) == posixpath.join(dev_root, name)


def node_of(target, dev_root=DEV_ROOT):
    """The NVIDIA node name a link text in ``<dev_root>/char`` points at, or None."""
    path = posixpath.normpath(posixpath.join(dev_root, CHAR_DIR, target))
    prefix = dev_root.rstrip('/') + '/'
    if not path.startswith(prefix):
        return None
    name = path[len(prefix):]
    return name if is_node_name(name) else None


# --------------------------------------------------------------------------
# Facts
# --------------------------------------------------------------------------

def check_dirs(dev_root):
    """The path of ``<dev_root>/char``, after checking that nobody but root can change the way there.

    Every directory on the way and ``dev_root`` itself must be root's (or
    ours) and writable by nobody else; an existing ``char`` entry must be
    such a directory, not a link. Raises HostFileError.
    """
    char_dir = os.path.join(dev_root, CHAR_DIR)
    why = 'the device directory holds the links root creates for containers'
    real = paths.resolve_path(char_dir, reader='systemd, which grants containers device access through these links')
    if real != os.path.normpath(os.path.abspath(char_dir)):
        raise HostFileError('%s: resolves to %s through a symbolic link; give the real device directory (%s)'
                            % (char_dir, real, why))
    try:
        st = os.lstat(char_dir)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return char_dir
        raise HostFileError('%s: cannot inspect it: %s' % (char_dir, exc.strerror))
    if not stat.S_ISDIR(st.st_mode):
        raise HostFileError('%s is not a directory; nothing was changed' % char_dir)
    problem = paths.untrusted(st)
    if problem:
        paths.refuse(char_dir, 'the directory %s' % char_dir, problem,
                     'Make it owned by root and writable only by root (chown root: %s; chmod 0755 %s).'
                     % (char_dir, char_dir), 'systemd, which grants containers device access through these links')
    return char_dir


def find_nodes(dev_root, lstat=os.lstat, listdir=os.listdir):
    """Every NVIDIA character device node under ``dev_root``, sorted; links and other files are ignored."""
    found = []

    def add(name):
        try:
            st = lstat(os.path.join(dev_root, name))
        except OSError:
            return
        if stat.S_ISCHR(st.st_mode):
            found.append(Node(name, os.major(st.st_rdev), os.minor(st.st_rdev)))

    try:
        entries = listdir(dev_root)
    except OSError as exc:
        raise HostFileError('%s: cannot list it: %s' % (dev_root, exc.strerror))
    for name in entries:
        if NODE_RE.match(name):
            add(name)
    caps = os.path.join(dev_root, CAPS_DIR)
    try:
        caps_st = lstat(caps)
    except OSError:
        caps_st = None
    if caps_st is not None and stat.S_ISDIR(caps_st.st_mode):
        problem = paths.untrusted(caps_st)
        if problem:
            paths.refuse(caps, 'the directory %s' % caps, problem,
                         'Make it owned by root and writable only by root (chown root: %s; chmod 0755 %s).'
                         % (caps, caps), 'systemd, which grants containers device access through these links')
        try:
            cap_names = listdir(caps)
        except OSError:
            cap_names = []
        for name in cap_names:
            if CAP_RE.match(name):
                add(CAPS_DIR + '/' + name)
    return sorted(found, key=lambda node: (node.major, node.minor, node.name))


def read_char_dir(char_dir, lstat=os.lstat, listdir=os.listdir, readlink=os.readlink):
    """``{name: Entry}`` for the ``M:m`` entries of ``char_dir`` ({} when it does not exist)."""
    try:
        names = listdir(char_dir)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return {}
        raise HostFileError('%s: cannot list it: %s' % (char_dir, exc.strerror))
    entries = {}
    for name in names:
        if not LINK_RE.match(name):
            continue
        path = os.path.join(char_dir, name)
        try:
            st = lstat(path)
            if stat.S_ISLNK(st.st_mode):
                entries[name] = Entry('link', readlink(path), None, st.st_mtime)
            elif stat.S_ISCHR(st.st_mode):
                entries[name] = Entry('char', None, (os.major(st.st_rdev), os.minor(st.st_rdev)), st.st_mtime)
            else:
                entries[name] = Entry('other', None, None, st.st_mtime)
        except OSError:
            continue  # removed while we looked
    return entries


# --------------------------------------------------------------------------
# Plans (pure)
# --------------------------------------------------------------------------

class Plan(object):
    """What a run does to ``/dev/char``: ``create``/``remove`` [(link, target)], ``keep`` (already right),
    ``conflicts`` [(link, problem)] (left alone and reported)."""

    def __init__(self):
        self.create = []
        self.remove = []
        self.keep = []
        self.conflicts = []

    @property
    def changes(self):
        return bool(self.create or self.remove)


def describe(entry):
    if entry.kind == 'link':
        return 'a link to %s' % entry.target
    if entry.kind == 'char':
        return 'the character device %d:%d' % entry.rdev
    return 'not a link'


def plan_present(nodes, entries, dev_root=DEV_ROOT):
    """Create the missing link of each node; a link or file that is there already is never replaced. A link to an
    NVIDIA node that is gone (a GPU off the bus, a driver reloaded with fewer GPUs) is removed: it points nowhere."""
    plan = Plan()
    seen = set()
    present = set(node.name for node in nodes)
    wanted = set(node.link for node in nodes)
    for name in sorted(entries):
        entry = entries[name]
        gone = node_of(entry.target, dev_root) if entry.kind == 'link' and name not in wanted else None
        if gone and gone not in present:
            plan.remove.append((name, entry.target))
    for node in nodes:
        if node.link in seen:
            continue  # two nodes with one number: the first (sorted) gets the link
        seen.add(node.link)
        entry = entries.get(node.link)
        if entry is None:
            plan.create.append((node.link, node.target))
        elif entry.kind == 'link' and points_at(entry.target, node.name, dev_root):
            plan.keep.append((node.link, entry.target))
        elif entry.kind == 'char' and entry.rdev == (node.major, node.minor):
            plan.keep.append((node.link, entry.target))
        else:
            plan.conflicts.append((node.link, 'is %s, not a link to %s (%s): left as it is; systemd may grant '
                                              'containers that ask for %s another device, or none'
                                   % (describe(entry), node.target, node.name, node.name)))
    return plan


def plan_absent(entries, dev_root=DEV_ROOT):
    """Remove the links that point at an NVIDIA node (the links ``plan_present`` makes); nothing else."""
    plan = Plan()
    for name in sorted(entries):
        entry = entries[name]
        if entry.kind == 'link' and node_of(entry.target, dev_root):
            plan.remove.append((name, entry.target))
    return plan


def links_text(pairs):
    return ''.join('%s -> %s\n' % (link, target) for link, target in sorted(pairs, key=lambda p: _link_key(p[0])))


def _link_key(link):
    major, minor = link.split(':')
    return int(major), int(minor)


def diff(plan, char_dir):
    """The NVIDIA links of ``char_dir`` before and after, one ``M:m -> target`` line each."""
    before = plan.keep + plan.remove
    after = plan.keep + plan.create
    return {'before_header': char_dir, 'after_header': char_dir,
            'before': links_text(before), 'after': links_text(after)}


# --------------------------------------------------------------------------
# Changing /dev/char
# --------------------------------------------------------------------------

class CharDir(object):
    """``<dev_root>/char`` held by a descriptor: entries are made and removed in it, never by path.

    ``open`` creates the directory when missing (mkdir never follows a link)
    and refuses anything but a directory only root (or we) can write.
    """

    def __init__(self, path):
        self.path = path
        self.fd = None

    def __enter__(self):
        try:
            os.mkdir(self.path, 0o755)
        except OSError as exc:
            if exc.errno != errno.EEXIST:
                raise HostFileError('%s: cannot create it: %s; nothing was changed' % (self.path, exc.strerror))
        try:
            self.fd = host_files.open_directory(self.path)
        except OSError as exc:
            raise HostFileError('%s: not a directory that can be used (%s); nothing was changed'
                                % (self.path, exc.strerror))
        st = os.fstat(self.fd)
        problem = paths.untrusted(st)
        if problem:
            os.close(self.fd)
            self.fd = None
            paths.refuse(self.path, 'the directory %s' % self.path, problem,
                         'Make it owned by root and writable only by root.',
                         'systemd, which grants containers device access through these links')
        return self

    def __exit__(self, *exc_info):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def create(self, link, target):
        """Make ``link -> target``; False when something took the name first (it is never replaced)."""
        try:
            os.symlink(target, link, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno == errno.EEXIST:
                return False
            raise HostFileError('%s/%s: cannot create the link to %s: %s' % (self.path, link, target, exc.strerror))
        return True

    def remove(self, link, target):
        """Remove ``link`` if it is still the link to ``target``; False when it changed meanwhile."""
        try:
            if os.readlink(link, dir_fd=self.fd) != target:
                return False
            os.unlink(link, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.EINVAL):
                return False
            raise HostFileError('%s/%s: cannot remove the link: %s' % (self.path, link, exc.strerror))
        return True

    def fsync(self):
        try:
            os.fsync(self.fd)
        except OSError:
            pass


def links_ready(plan, entries, now):
    """When the last of the NVIDIA links appeared: containers started before then may be exposed.

    ``now`` for links made by this run; an existing link's own mtime (a link
    is never modified); None when a node has no working link (a conflict).
    """
    if plan.conflicts:
        return None
    times = [now] if plan.create else []
    times += [entries[link].mtime for link, _target in plan.keep if link in entries]
    return max(times) if times else None
