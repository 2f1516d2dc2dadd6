# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The device_links run: the links, the boot pieces, and the containers started without the links.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. ``Runner`` holds no AnsibleModule (the host's commands and the
init system are handed in); ``exposed_containers`` picks, from dockerd's
answers, the running GPU containers started before the links existed.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import os
import posixpath
import re
import time

from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import boot as init_boot
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files as host_files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker.api import DockerAPIError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError, RunFailed
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import systems
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init.service import Service
from ansible_collections.gpufleet.nvidia.plugins.module_utils.device_links.boot import (
    BOOT_KINDS, boot_files, plan_boot_absent, plan_boot_present)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.device_links.links import (
    CharDir, DEV_ROOT, SCRIPT_PATH, SERVICE, check_dirs, diff, find_nodes, is_node_name, links_ready, plan_absent,
    plan_present, read_char_dir)


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
    command, ``init_system(chosen) -> (init, tools, detected)`` finds the init system (``concerns.module.init_system``),
    ``label`` is the SELinux labeller of ``host.files.write_atomic``. ``root`` is where the boot files go ('/' on a
    host), ``lstat`` reads the device nodes, ``api`` is dockerd's API client (or None) and ``clock`` the time:
    tests replace them.

    Order is the point: the links exist before anything here can make
    systemd reload (the boot unit's ``daemon-reload``/``enable``), and the boot
    pieces go before the links on ``absent``, so nothing recreates them.
    """

    def __init__(self, params, run, init_system, check_mode=False, diff=False, label=None, root='/', lstat=os.lstat,
                 api=None, clock=time.time, together=None):
        self._run = run
        self.together = together
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
        if init not in systems.SYSTEMS:
            self.warnings.append('%s: no init system recognised (%s): only the udev rule will run %s at boot; set '
                                 'init_system if this host runs systemd, SysV or Upstart'
                                 % (self.host, detected['reason'], SCRIPT_PATH))
            init = None
        self.service = Service(init, SERVICE, self.run, tools, find_pid=lambda: None,
                               together=self.together) if init else None
        self.result['init_system'] = init
        self.files = boot_files(init)
        self.result['boot_files'] = [self.files[kind][0] for kind in BOOT_KINDS if kind in self.files]

    def read_boot(self):
        return dict((kind, host_files.read_root_text(self.host_path(path)))
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
            actions = ((['create_links'] if plan.create else []) + (['remove_links'] if plan.remove else [])
                       + (boot_actions or []))
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
            boot_diffs = init_boot.diffs(BOOT_KINDS, self.files, boot_current or {}, actions)
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
                    host_files.write_boot_file(self.host_path(path), text, mode, label=self.label)
                elif action.startswith('remove_'):
                    host_files.remove_root_file(self.host_path(self.files[action[len('remove_'):]][0]))
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
