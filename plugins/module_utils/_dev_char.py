# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``/dev/char/MAJOR:MINOR`` links for NVIDIA device nodes, so ``systemctl daemon-reload`` keeps GPU containers' devices.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time.

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

import calendar
import errno
import os
import posixpath
import re
import stat
import time
from collections import namedtuple

from ansible_collections.gpufleet.nvidia.plugins.module_utils import _boot_files
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _engine_names
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _host
from ansible_collections.gpufleet.nvidia.plugins.module_utils._docker_api import DockerAPIError
from ansible_collections.gpufleet.nvidia.plugins.module_utils._errors import GpufleetError, HostFileError, RunFailed
from ansible_collections.gpufleet.nvidia.plugins.module_utils._init_files import INIT_SYSTEMS, unit_mode, unit_path
from ansible_collections.gpufleet.nvidia.plugins.module_utils._service import Service

DEV_ROOT = '/dev'
CHAR_DIR = 'char'
CAPS_DIR = 'nvidia-caps'
MARKER = _boot_files.MARKER
SERVICE = 'gpufleet-dev-char-links'
SCRIPT_PATH = '/usr/local/sbin/gpufleet-dev-char-links'
UDEV_RULE_PATH = '/etc/udev/rules.d/71-gpufleet-nvidia-dev-char.rules'
UNIT_PATHS = dict((init, unit_path(init, SERVICE)) for init in INIT_SYSTEMS)
# The container engines' services (whose runc asks systemd for device access); the boot piece runs before each.
# dockerd first, as the boot pieces have always named them: another order would rewrite every host's unit.
ENGINES = ('docker',) + tuple(engine for engine in _engine_names.ENGINES if engine != 'docker')

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
    real = _host.resolve_path(char_dir, reader='systemd, which grants containers device access through these links')
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
    problem = _host.untrusted(st)
    if problem:
        _host.refuse(char_dir, 'the directory %s' % char_dir, problem,
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
        problem = _host.untrusted(caps_st)
        if problem:
            _host.refuse(caps, 'the directory %s' % caps, problem,
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
    """Create the missing link of each node; a link or file that is there already is never replaced."""
    plan = Plan()
    seen = set()
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
            self.fd = _host.open_directory(self.path)
        except OSError as exc:
            raise HostFileError('%s: not a directory that can be used (%s); nothing was changed'
                                % (self.path, exc.strerror))
        st = os.fstat(self.fd)
        problem = _host.untrusted(st)
        if problem:
            os.close(self.fd)
            self.fd = None
            _host.refuse(self.path, 'the directory %s' % self.path, problem,
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


# --------------------------------------------------------------------------
# Boot-time pieces
# --------------------------------------------------------------------------

def _header(comment):
    return _boot_files.header(comment, 'device_links')


def render_script():
    """The boot-time program: one POSIX sh script that links every NVIDIA node and replaces nothing."""
    return '''#!/bin/sh
%(header)s# Creates /dev/char/MAJOR:MINOR -> ../NODE for every NVIDIA character device node, as
# gpufleet.nvidia.device_links does: with the systemd cgroup driver, systemd keeps a container's
# access to a device across "systemctl daemon-reload" only when such a link exists.
# Run by udev (driver and module loads) and by the boot unit, before the container engines start.
# An existing entry is never replaced.
set -u
dev=/dev
[ -d "$dev/char" ] || mkdir -m 0755 "$dev/char" 2>/dev/null || [ -d "$dev/char" ] || exit 1
[ ! -L "$dev/char" ] || exit 1
for node in "$dev"/nvidia* "$dev"/nvidia-caps/nvidia-cap*; do
    name=${node#"$dev"/}
    case "$name" in
        nvidiactl|nvidia-uvm|nvidia-uvm-tools|nvidia-modeset) ;;
        nvidia[0-9]*) case "${name#nvidia}" in *[!0-9]*) continue ;; esac ;;
        nvidia-caps/nvidia-cap[0-9]*) case "${name#nvidia-caps/nvidia-cap}" in *[!0-9]*) continue ;; esac ;;
        *) continue ;;
    esac
    [ -c "$node" ] && [ ! -L "$node" ] || continue
    numbers=$(stat -c '%%t %%T' "$node" 2>/dev/null) || continue
    major=$((0x${numbers%% *}))
    minor=$((0x${numbers#* }))
    link="$dev/char/$major:$minor"
    [ -e "$link" ] || [ -L "$link" ] || ln -s "../$name" "$link" 2>/dev/null || :
done
exit 0
''' % {'header': _header('#')}


def render_udev_rule(script=SCRIPT_PATH):
    """udev runs the script when the NVIDIA driver binds and when its modules load."""
    return ('%s'
            '# The NVIDIA driver makes no sysfs class entry, so udev makes no /dev/char links for its nodes.\n'
            'ACTION=="add", DEVPATH=="/bus/pci/drivers/nvidia", RUN+="%s"\n'
            'ACTION=="add", SUBSYSTEM=="module", KERNEL=="nvidia|nvidia_uvm|nvidia_modeset", RUN+="%s"\n'
            % (_header('#'), script, script))


def render_systemd(script=SCRIPT_PATH):
    return _boot_files.render_systemd(
        _header('#'), '/dev/char links for NVIDIA device nodes (keeps containers\' GPUs across daemon-reload)',
        ('systemd-modules-load.service', 'systemd-udev-settle.service', 'nvidia-persistenced.service'),
        tuple('%s.service' % engine for engine in ENGINES) + ('kubelet.service',), script)


def render_sysv(script=SCRIPT_PATH):
    return _boot_files.render_sysv(
        _header('#'), SERVICE, ('nvidia-persistenced',), ENGINES, '/dev/char links for NVIDIA device nodes',
        ('Keeps containers\' GPU devices across systemd reloads of their',
         'cgroups (systemd cgroup driver); runs before the container engines.'), '14 86', script)


def render_upstart(script=SCRIPT_PATH):
    return _boot_files.render_upstart(_header('#'), '/dev/char links for NVIDIA device nodes', ENGINES, script)


RENDER_UNIT = {'systemd': render_systemd, 'sysvinit': render_sysv, 'upstart': render_upstart}
BOOT_KINDS = ('script', 'udev_rule', 'unit')  # the order they are written in (the unit runs the script)


def boot_files(init_system):
    """{kind: (path, text, mode)} of the boot-time pieces: the script and udev rule, and the unit of
    ``init_system`` when it is one we know."""
    files = {'script': (SCRIPT_PATH, render_script(), 0o755),
             'udev_rule': (UDEV_RULE_PATH, render_udev_rule(), 0o644)}
    if init_system in RENDER_UNIT:
        files['unit'] = (UNIT_PATHS[init_system], RENDER_UNIT[init_system](), unit_mode(init_system))
    return files


def is_ours(text):
    return _boot_files.is_ours(text)


def plan_boot_present(current, desired, enabled):
    """``write_<kind>`` per changed piece, ``reload_init`` for a changed unit the init system has read
    already, ``enable`` when the unit does not start at boot. ``current``/``desired``: {kind: text}."""
    return _boot_files.plan_present(BOOT_KINDS, current, desired, enabled)


def plan_boot_absent(current, enabled):
    """``disable`` and ``remove_<kind>`` for the pieces this collection wrote (files without its marker stay)."""
    return _boot_files.plan_absent(BOOT_KINDS, current, enabled)


# --------------------------------------------------------------------------
# Containers started without the links
# --------------------------------------------------------------------------

_STARTED_RE = re.compile(r'^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})$')


def parse_time(text):
    """dockerd's RFC 3339 time (nanoseconds, ``Z`` or an offset) as epoch seconds, or None."""
    match = _STARTED_RE.match(text or '')
    if not match:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    seconds = calendar.timegm((int(year), int(month), int(day), int(hour), int(minute), int(second)))
    if fraction:
        seconds += float('0.' + fraction)
    if zone != 'Z':
        sign = 1 if zone[0] == '+' else -1
        seconds -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return seconds


def uses_nvidia(container, dev_root=DEV_ROOT):
    """Whether an inspected container has NVIDIA devices: ``--device`` of a node, ``--gpus``, the nvidia
    runtime, or ``NVIDIA_VISIBLE_DEVICES`` (which the nvidia runtime acts on)."""
    host_config = container.get('HostConfig') or {}
    for device in host_config.get('Devices') or []:
        path = posixpath.normpath((device or {}).get('PathOnHost') or '')
        if path.startswith(dev_root.rstrip('/') + '/') and is_node_name(path[len(dev_root.rstrip('/')) + 1:]):
            return True
    for request in host_config.get('DeviceRequests') or []:
        request = request or {}
        capabilities = request.get('Capabilities') or []
        if request.get('Driver') == 'nvidia' or any('gpu' in (caps or []) for caps in capabilities):
            return True
    if host_config.get('Runtime') == 'nvidia':
        return True
    for item in (container.get('Config') or {}).get('Env') or []:
        if item.startswith('NVIDIA_VISIBLE_DEVICES=') and item.split('=', 1)[1] not in ('', 'void'):
            return True
    return False


def exposed_containers(cgroup_driver, containers, ready):
    """The running GPU containers a ``daemon-reload`` would cut off their devices, as dicts (id, name, started_at).

    Only the systemd cgroup driver is exposed. ``containers``: inspected
    containers; ``ready``: when the links existed (None: a node has none, so
    every GPU container is exposed).
    """
    if cgroup_driver != 'systemd':
        return []
    found = []
    for container in containers:
        state = container.get('State') or {}
        if not state.get('Running') or not uses_nvidia(container):
            continue
        started = parse_time(state.get('StartedAt'))
        if ready is not None and started is not None and started >= ready:
            continue
        found.append({'id': (container.get('Id') or '')[:12], 'name': (container.get('Name') or '').lstrip('/'),
                      'started_at': state.get('StartedAt')})
    return sorted(found, key=lambda c: (c['name'], c['id']))


def exposure_warning(container):
    return ('container %s (%s, started %s) was started before the /dev/char links of its NVIDIA devices existed: '
            'the next "systemctl daemon-reload" cuts it off its GPUs ("Failed to initialize NVML: Unknown Error"), '
            'because dockerd uses the systemd cgroup driver. Restart it to be safe; this module does not touch it.'
            % (container['name'], container['id'], container['started_at']))


def docker_report(api, ready):
    """``(cgroup_driver, exposed)`` from dockerd; ``(None, [])`` when dockerd does not answer."""
    try:
        driver = api.info().get('CgroupDriver')
        if driver != 'systemd':
            return driver, []
        inspected = []
        for summary in api.get('/containers/json'):
            ident = summary.get('Id') or ''
            if re.match(r'^[0-9a-f]{12,64}$', ident):
                inspected.append(api.get('/containers/%s/json' % ident))
    except DockerAPIError as exc:
        if exc.unreachable:
            return None, []
        raise
    return driver, exposed_containers(driver, inspected, ready)


# --------------------------------------------------------------------------
# One run
# --------------------------------------------------------------------------

class Runner(object):
    """One run of the device_links module; ``converge()`` returns the result for ``exit_json``, its warnings in
    ``warnings``, or raises RunFailed (the message; ``result`` is what was found and done until then).

    It holds no AnsibleModule: ``params`` are the module's options, ``run(argv) -> (rc, out, err)`` runs a host
    command, ``init_system(chosen) -> (init, tools, detected)`` finds the init system (``_module.init_system``),
    ``label`` is the SELinux labeller of ``_host.write_atomic``. ``root`` is where the boot files go ('/' on a
    host), ``lstat`` reads the device nodes, ``api`` is dockerd's API client (or None) and ``clock`` the time:
    tests replace them.

    Order is the point: the links exist before anything here can make
    systemd reload (the boot unit's ``daemon-reload``/``enable``), and the boot
    pieces go before the links on ``absent``, so nothing recreates them.
    """

    def __init__(self, params, run, init_system, check_mode=False, diff=False, label=None, root='/', lstat=os.lstat,
                 api=None, clock=time.time):
        self._run = run
        self.init_system = init_system
        self.check_mode = check_mode
        self.diff = diff
        self.label = label
        self.warnings = []
        self.params = params
        self.root = root
        self.lstat = lstat
        self.api = api
        self.clock = clock
        self.host = os.uname()[1]
        self.result = {'changed': False, 'actions': [], 'links': [], 'created': [], 'removed': [], 'conflicts': [],
                       'boot_files': [], 'init_system': None, 'cgroup_driver': None, 'exposed_containers': []}
        self.service = None
        self.files = {}

    def fail(self, msg):
        raise RunFailed('%s: %s' % (self.host, msg))

    def run(self, argv):
        return self._run(argv)

    def host_path(self, path):
        return os.path.join(self.root, path.lstrip('/'))

    # ---- facts ----------------------------------------------------------------
    def detect_init(self):
        chosen = self.params['init_system']
        init, tools, detected = self.init_system(chosen)
        if init not in RENDER_UNIT:
            self.warnings.append('%s: no init system recognised (%s): only the udev rule will run %s at boot; set '
                                 'init_system if this host runs systemd, SysV or Upstart'
                                 % (self.host, detected['reason'], SCRIPT_PATH))
            init = None
        self.service = Service(init, SERVICE, self.run, tools, find_pid=lambda: None) if init else None
        self.result['init_system'] = init
        self.files = boot_files(init)
        self.result['boot_files'] = [self.files[kind][0] for kind in BOOT_KINDS if kind in self.files]

    def read_boot(self):
        return dict((kind, _host.read_root_text(self.host_path(path)))
                    for kind, (path, _text, _mode) in self.files.items())

    # ---- the run ----------------------------------------------------------------
    def converge(self):
        try:
            self._converge()
        except GpufleetError as exc:
            self.fail(str(exc))
        return self.result

    def _converge(self):
        p = self.params
        dev_root = p['dev_root']
        char_dir = check_dirs(dev_root)
        nodes = find_nodes(dev_root, lstat=self.lstat)
        entries = read_char_dir(char_dir)
        boot_current = boot_actions = None
        if p['boot']:
            self.detect_init()
            boot_current = self.read_boot()
            enabled = self.service.is_enabled() if self.service and boot_current.get('unit') is not None else False
        if p['state'] == 'present':
            plan = plan_present(nodes, entries, dev_root)
            if p['boot']:
                desired = dict((kind, text) for kind, (_path, text, _mode) in self.files.items())
                boot_actions = plan_boot_present(boot_current, desired, enabled)
            actions = (['create_links'] if plan.create else []) + (boot_actions or [])
        else:
            plan = plan_absent(entries, dev_root)
            if p['boot']:
                boot_actions = plan_boot_absent(boot_current, enabled)
            actions = (boot_actions or []) + (['remove_links'] if plan.remove else [])
        self.result.update(
            actions=actions, changed=bool(actions),
            links=[{'link': os.path.join(char_dir, link), 'target': target}
                   for link, target in plan.keep + plan.create],
            created=[os.path.join(char_dir, link) for link, _target in plan.create],
            removed=[os.path.join(char_dir, link) for link, _target in plan.remove],
            conflicts=[{'link': os.path.join(char_dir, link), 'problem': problem}
                       for link, problem in plan.conflicts])
        if self.diff:
            boot_diffs = _boot_files.diffs(BOOT_KINDS, self.files, boot_current or {}, actions)
            self.result['diff'] = [diff(plan, char_dir)] + boot_diffs
        if not self.check_mode:
            if p['state'] == 'present':
                self.apply_links(char_dir, plan)
                self.apply_boot(boot_actions or [])
            else:
                self.apply_boot(boot_actions or [])
                self.apply_links(char_dir, plan)
        for conflict in self.result['conflicts']:
            self.warnings.append('%s: %s %s' % (self.host, conflict['link'], conflict['problem']))
        if p['state'] == 'present' and p['report_containers'] and self.api is not None:
            self.report(plan, entries)

    def apply_links(self, char_dir, plan):
        if not plan.changes:
            return
        with CharDir(char_dir) as directory:
            for link, target in plan.create:
                if not directory.create(link, target):
                    self.result['created'].remove(os.path.join(char_dir, link))
                    self.result['conflicts'].append({'link': os.path.join(char_dir, link),
                                                     'problem': 'appeared while this module ran: left as it is'})
            for link, target in plan.remove:
                if not directory.remove(link, target):
                    self.result['removed'].remove(os.path.join(char_dir, link))
            directory.fsync()

    def apply_boot(self, actions):
        for action in actions:
            try:
                if action.startswith('write_'):
                    path, text, mode = self.files[action[len('write_'):]]
                    _host.write_boot_file(self.host_path(path), text, mode, label=self.label)
                elif action.startswith('remove_'):
                    _host.remove_root_file(self.host_path(self.files[action[len('remove_'):]][0]))
                else:
                    getattr(self.service, action)()
            except (GpufleetError, OSError) as exc:
                self.fail('%s failed: %s; the /dev/char links are %s' % (
                    action, exc, 'in place' if self.params['state'] == 'present' else 'unchanged'))

    def report(self, plan, entries):
        ready = links_ready(plan, entries, self.clock())
        try:
            driver, exposed = docker_report(self.api, ready)
        except DockerAPIError as exc:
            self.warnings.append('%s: could not list the running containers to find those started without the '
                                 '/dev/char links: %s' % (self.host, exc))
            return
        self.result.update(cgroup_driver=driver, exposed_containers=exposed)
        for container in exposed:
            self.warnings.append('%s: %s' % (self.host, exposure_warning(container)))
