# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Init-system detection for gpufleet.nvidia.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It holds no AnsibleModule so that pytest can drive it on fixture
trees (``root``) with a fake command runner.

The rule, in order (the evidence for each step is returned with the verdict):

1. ``systemd``  -- PID 1 is systemd (its comm, or its executable resolves to
   a ``systemd`` binary) *and* ``/run/systemd/system`` exists (what
   ``sd_booted()`` checks). Systemd merely installed, or a ``/run`` shared
   from another host, is not enough.
2. ``upstart``  -- PID 1 is ``init`` and the running init daemon answers
   ``initctl version`` with ``init (upstart X.Y.Z)`` (it is asked over its
   socket, so this is PID 1 speaking, not just an installed ``initctl``).
   When the daemon cannot be asked (no privileges), ``initctl --version``
   naming upstart is taken instead and the reason says so. The version is
   reported (``1.13.2``, ``0.6.5``): 0.6.x and 1.x differ in override files,
   ``initctl`` output and ``expect`` handling.
3. ``sysvinit`` -- PID 1 is ``init`` (not a link to systemd) and
   ``/etc/init.d`` exists.
4. ``unknown``  -- anything else, e.g. containers whose PID 1 is ``tini``,
   ``dumb-init``, ``sh`` or an application: nothing there starts services at
   boot, so deploying a boot-time service would be a lie.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import systems
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host.procs import TOOL_DIRS

INIT_SYSTEMS = ('systemd', 'upstart', 'sysvinit', 'unknown')

# The service tools looked for in host.procs.TOOL_DIRS.
SERVICE_TOOLS = ('systemctl', 'initctl', 'service', 'update-rc.d', 'chkconfig', 'insserv')

# Names PID 1 has when it is a container shim rather than an init system.
CONTAINER_SHIMS = ('tini', 'tini-static', 'dumb-init', 'catatonit', 'docker-init', 'sh', 'bash', 'dash', 'conmon')


def _read_first_line(path):
    try:
        with open(path, 'rb') as handle:
            return handle.read().split(b'\n', 1)[0].decode('utf-8', 'replace').strip()
    except (IOError, OSError):
        return None


def _pid1_argv0(root):
    try:
        with open(os.path.join(root, 'proc/1/cmdline'), 'rb') as handle:
            raw = handle.read()
    except (IOError, OSError):
        return None
    argv0 = raw.split(b'\0', 1)[0].decode('utf-8', 'replace')
    return argv0 or None


def _pid1_exe(root):
    """Target of /proc/1/exe; None when not readable (needs privileges)."""
    try:
        return os.readlink(os.path.join(root, 'proc/1/exe'))
    except (IOError, OSError):
        return None


def _host_path(root, path):
    return os.path.join(root, path.lstrip('/'))


def _resolves_to_systemd(root, path):
    """True when ``path`` (host-absolute) is, or links to, a binary named systemd."""
    if not path:
        return False
    if os.path.basename(path) == 'systemd':
        return True
    host = _host_path(root, path)
    try:
        target = os.path.realpath(host)
    except (IOError, OSError):
        return False
    return os.path.basename(target) == 'systemd'


def find_tools(root='/', dirs=TOOL_DIRS, names=SERVICE_TOOLS):
    """Map each service tool name to its host path, or None when absent."""
    found = {}
    for name in names:
        found[name] = None
        for directory in dirs:
            candidate = os.path.join(directory, name)
            host = _host_path(root, candidate)
            if os.path.isfile(host) and os.access(host, os.X_OK):
                found[name] = candidate
                break
    return found


_UPSTART_VERSION = re.compile(r'\(upstart ([0-9][0-9A-Za-z.~+-]*)\)')


def upstart_version(text):
    """``'1.13.2'`` from ``init (upstart 1.13.2)``; None when it names no upstart."""
    match = _UPSTART_VERSION.search(text or '')
    return match.group(1) if match else None


def version_tuple(version):
    """``(0, 6, 5)`` from ``'0.6.5'``, for comparisons (0.6.x against 1.x)."""
    parts = []
    for part in (version or '').split('.'):
        digits = re.match(r'\d+', part)
        if not digits:
            break
        parts.append(int(digits.group(0)))
        if digits.group(0) != part:
            break
    return tuple(parts)


def _first_line(rc, out, err):
    text = ((out or '') + (err or '')).strip()
    return text.splitlines()[0] if text else ('rc=%s' % rc)


def gather_evidence(root='/', run_command=None):
    """Collect everything the verdict rests on.

    ``run_command(argv) -> (rc, stdout, stderr)`` runs a host command; it is
    only used when initctl exists: ``initctl version`` (asks the running
    init daemon) and ``initctl --version`` (the installed tool's own).
    """
    tools = find_tools(root)
    evidence = {
        'pid1_comm': _read_first_line(os.path.join(root, 'proc/1/comm')),
        'pid1_argv0': _pid1_argv0(root),
        'pid1_exe': _pid1_exe(root),
        'run_systemd_system': os.path.isdir(_host_path(root, '/run/systemd/system')),
        'etc_init_d': os.path.isdir(_host_path(root, '/etc/init.d')),
        'etc_init': os.path.isdir(_host_path(root, '/etc/init')),
        'tools': tools,
        'initctl_version': None,
        'init_daemon_version': None,
    }
    if tools.get('initctl') and run_command is not None:
        rc, out, err = run_command([tools['initctl'], 'version'])
        evidence['init_daemon_version'] = _first_line(rc, out, err) if rc == 0 \
            else 'initctl version failed: %s' % _first_line(rc, out, err)
        rc, out, err = run_command([tools['initctl'], '--version'])
        evidence['initctl_version'] = _first_line(rc, out, err)
    return evidence


def _pid1_names(evidence):
    names = []
    for key in ('pid1_comm', 'pid1_argv0', 'pid1_exe'):
        value = evidence.get(key)
        if value:
            names.append(os.path.basename(value.split(' (deleted)')[0]))
    return names


def decide(evidence, root='/'):
    """Return ``(init_system, reason)`` from gathered evidence."""
    names = _pid1_names(evidence)
    if not names:
        return 'unknown', 'PID 1 could not be inspected (/proc/1 not readable)'
    pid1_is_systemd = 'systemd' in names or any(
        _resolves_to_systemd(root, evidence.get(key)) for key in ('pid1_argv0', 'pid1_exe'))
    if pid1_is_systemd:
        if evidence.get('run_systemd_system'):
            return 'systemd', 'PID 1 is systemd and /run/systemd/system exists'
        return 'unknown', 'PID 1 is systemd but /run/systemd/system is missing (not booted by systemd?)'
    if evidence.get('run_systemd_system'):
        # /run shared from a systemd host into a container, or a stale tree.
        stale = ' (/run/systemd/system exists but PID 1 is %s, so systemd is not running here)' % names[0]
    else:
        stale = ''
    if 'init' in names:
        daemon = evidence.get('init_daemon_version') or ''
        if upstart_version(daemon):
            return 'upstart', 'PID 1 is init and answers initctl version with %s%s' % (daemon, stale)
        if upstart_version(evidence.get('initctl_version')):
            return 'upstart', ('PID 1 is init and initctl --version reports %s (the init daemon itself '
                               'could not be asked: %s)%s' % (evidence['initctl_version'], daemon or 'not run', stale))
        if evidence.get('etc_init_d'):
            return 'sysvinit', 'PID 1 is init (not systemd, not upstart) and /etc/init.d exists%s' % stale
        return 'unknown', 'PID 1 is init but neither upstart nor /etc/init.d was found%s' % stale
    shim = [n for n in names if n in CONTAINER_SHIMS]
    if shim:
        return 'unknown', 'PID 1 is %s, a container entrypoint, not an init system%s' % (shim[0], stale)
    return 'unknown', 'PID 1 is %s, not a known init system%s' % (names[0], stale)


def service_tools(init_system, tools):
    """Which tool starts/stops services and which enables them at boot (the init system's class says)."""
    return systems.get(init_system).service_tools(tools)


def init_version(init_system, evidence):
    """The running init system's version where the evidence has it (Upstart)."""
    if init_system != 'upstart':
        return None
    return upstart_version(evidence.get('init_daemon_version')) or \
        upstart_version(evidence.get('initctl_version'))


def detect(root='/', run_command=None):
    """Detect the init system of the host whose filesystem is at ``root``.

    Returns a dict: init_system, version, reason, service_manager,
    enable_tool, evidence.
    """
    evidence = gather_evidence(root, run_command)
    init_system, reason = decide(evidence, root)
    manager, enable = service_tools(init_system, evidence['tools'])
    return {
        'init_system': init_system,
        'version': init_version(init_system, evidence),
        'reason': reason,
        'service_manager': manager,
        'enable_tool': enable,
        'evidence': evidence,
    }
