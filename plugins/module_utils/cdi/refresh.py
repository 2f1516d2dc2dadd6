# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The boot refresh in a cdi_spec run: which pieces it plans, writes, enables and removes.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. ``cdi.boot`` says what the pieces are (their texts, paths and
source); ``BootRefresh`` reads the host's, plans the actions that bring them
there (or take them away for ``state: absent``) and carries them out, for
``cdi.apply.CdiRun``, which orders them among the spec's and the mode's.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import boot as init_boot
from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import boot
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files as host_files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init.service import Service


class BootRefresh(object):
    """The boot refresh's pieces for one cdi_spec run. ``request``, ``run``, ``init_system``, ``tools`` and
    ``label`` are the run's; ``host_path(path)`` is where a host path is, ``fail(msg)`` raises the run's error.
    ``plan`` fills ``files``, ``current``, ``actions`` and ``report`` (the result's ``boot``); until then
    there is nothing to do."""

    def __init__(self, request, run, init_system, tools, host_path, fail, label=None, together=None):
        self.request = request
        self.run = run
        self.together = together
        self.init = init_system
        self.tools = tools
        self.host_path = host_path
        self.fail = fail
        self.label = label
        self.files = {}
        self.current = {}
        self.actions = []
        self.service = None
        self.other_service = None
        self.report = None

    def plan(self):
        """The actions of the boot pieces for this run's state (also kept, with the pieces, in ``self``)."""
        p = self.request
        nvidia_unit = next((path for path in boot.NVIDIA_UNIT_PATHS if os.path.exists(self.host_path(path))), None)
        env_text = host_files.read_root_text(self.host_path(boot.NVIDIA_ENV_FILE))
        every = boot.every_piece(self.init)
        current = dict((kind, host_files.read_root_text(self.host_path(path))) for kind, path in every.items())
        self.current = current
        if p.state == 'absent':
            self.files = dict((kind, (path, None, None)) for kind, path in every.items())
            self.service = self.service_named(boot.SERVICE)
            enabled = (self.service.is_enabled() if self.service and init_boot.is_ours(current.get('unit'))
                       else False)
            self.actions = init_boot.plan_absent(('dropin', 'script', 'unit'), current, enabled)
            self.report = {'source': None, 'reason': 'state is absent', 'init_system': self.init, 'files': []}
            return self.actions
        try:
            source, reason = boot.choose_source(p.boot_unit, self.init, nvidia_unit, env_text, p.path,
                                                p.device_name_strategy)
        except ValueError as exc:
            self.fail(str(exc))
        files = boot.boot_files(source, self.init, p.path, p.nvidia_ctk, p.device_name_strategy)
        desired = dict((kind, text) for kind, (_path, text, _mode) in files.items())
        service = self.service_named(boot.NVIDIA_SERVICE if source == 'nvidia' else boot.SERVICE)
        if source == 'nvidia' or (service and current.get('unit') is not None):
            enabled = service.is_enabled()
        else:
            enabled = False if 'unit' in files else None
        actions = init_boot.plan_present(boot.BOOT_KINDS.get(source, ()), current, desired, enabled)
        # The other source's pieces, from a run that chose it, go: one refresh at boot.
        others = dict((kind, text) for kind, text in current.items() if kind not in files)
        other_service = self.service_named(boot.SERVICE) if source == 'nvidia' else None
        other_enabled = (other_service.is_enabled() if other_service and init_boot.is_ours(others.get('unit'))
                         else False)
        removals = init_boot.plan_absent(('dropin', 'script', 'unit'), others, other_enabled)
        # Disable and remove first, write next; the init system reads its files once, then the unit is enabled.
        planned = removals + actions
        actions = (['disable_other'] if 'disable' in removals else []) + [
            action for action in planned if action not in ('disable', 'reload_init', 'enable')]
        actions += [action for action in ('reload_init', 'enable') if action in planned]
        for kind, path in every.items():
            files.setdefault(kind, (path, None, None))
        self.report = {'source': source, 'reason': reason, 'init_system': self.init,
                       'files': [files[kind][0] for kind in sorted(files) if files[kind][1] is not None]}
        self.files, self.actions, self.service, self.other_service = files, actions, service, other_service
        return actions

    def service_named(self, name):
        return Service(self.init, name, self.run, self.tools, find_pid=lambda: None,
                       together=self.together) if self.init else None

    def diffs(self):
        """The planned pieces' diffs (none before ``plan``)."""
        return init_boot.diffs(sorted(self.files), self.files, self.current, self.actions)

    def apply(self, action):
        """Carry out one of ``plan``'s actions; raises what the write or the init system raises."""
        if action.startswith('write_'):
            path, text, mode = self.files[action[len('write_'):]]
            host_files.write_boot_file(self.host_path(path), text, mode, label=self.label)
        elif action.startswith('remove_'):
            host_files.remove_root_file(self.host_path(self.files[action[len('remove_'):]][0]))
        elif action == 'disable_other':
            self.other_service.disable()
        else:
            getattr(self.service, action)()
