# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_persistence run: plan every GPU and the state file, then set the GPUs, then record them.

PRIVATE to the gpufleet.nvidia collection: the API may change at any time.
No AnsibleModule here; pytest drives it directly.

``PersistenceRun.plan`` reads each GPU's mode (``backends.converge`` in check
mode) and the state file, so a bad state file or directory fails before any
GPU changes. ``apply`` sets the GPUs, then records their modes in the state
file (inspected again: the users may have changed since). ``result`` is what
the module returns. Failures are ``RunError`` with the fields the module
fails with.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import backends
from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import state
from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import state_dir


class RunError(Exception):
    """A failed run: ``fields`` are ``fail_json``'s arguments (``msg`` and, once GPUs were read, ``gpus``)."""

    def __init__(self, msg, **fields):
        super(RunError, self).__init__(msg)
        self.fields = dict(fields, msg=msg)


def modes_text(report, key):
    return ''.join('%s: %s\n' % (backends.describe(entry), entry[key]) for entry in report)


def recorded_modes(report, params):
    """The state-file change: per-GPU entries, and the default when all GPUs were selected."""
    entries = dict((entry['uuid'], (entry['pci_bus_id'], entry['after'])) for entry in report if entry.get('uuid'))
    default = False
    if params['modes'] is None and any(str(s).strip().lower() == 'all' for s in params['gpus']):
        default = params['mode']
    return entries, default


class PersistenceRun(object):
    """One gpu_persistence run over ``backend`` with the module's ``params``."""

    def __init__(self, params, backend):
        self.params = params
        self.backend = backend
        self.report = []
        self.directory = self.owners = None
        self.state_before = self.state_after = None

    @property
    def state_changed(self):
        return self.state_before != self.state_after

    def converge(self, check_mode):
        p = self.params
        with self.backend:
            unused_gpus, self.report = backends.converge(self.backend, p['gpus'], p['mode'], p['modes'],
                                                         check_mode=check_mode)

    def plan(self):
        """Every GPU's mode and the state file's change, before anything changes."""
        p = self.params
        try:
            self.converge(check_mode=True)
        except backends.GpuError as exc:
            raise RunError(str(exc))
        if not p['persist']:
            return
        try:
            self.directory = state_dir.check_path(p['state_file'])
            self.owners = state_dir.service_owners(p['service_user'])
            facts = state_dir.inspect_dir(self.directory, self.owners)
            self.state_before = state.load(p['state_file']) if facts['exists'] else state.empty_state()
            entries, default = recorded_modes(self.report, p)
            self.state_after = state.with_modes(self.state_before, entries, default)
        except state_dir.StateError as exc:
            raise RunError('%s: %s' % (backends.host(), exc))

    def apply(self):
        """Set the GPUs, then record their modes."""
        p = self.params
        try:
            self.converge(check_mode=False)
        except backends.GpuError as exc:
            raise RunError(str(exc), gpus=self.report)
        if not self.state_changed:
            return
        try:
            # inspected again: the first look was before the GPUs changed
            facts = state_dir.inspect_dir(self.directory, self.owners)
            if not facts['exists']:
                os.close(state_dir.create_dir(self.directory, facts))
            entries, default = recorded_modes(self.report, p)
            state.update(p['state_file'], lambda current: state.with_modes(current, entries, default))
        except state_dir.StateError as exc:
            raise RunError('%s: GPU modes were set but could not be recorded in %s: %s; they will not survive a '
                           'daemon restart until this is fixed' % (backends.host(), p['state_file'], exc),
                           gpus=self.report)

    def warnings(self):
        if self.backend.name == 'nvml' and any(entry['changed'] for entry in self.report):
            return ['No persistence daemon answers on %s, so persistence was set through NVML\'s legacy kernel path, '
                    'which NVIDIA deprecates and which is lost at reboot. Deploy the daemon with '
                    'gpufleet.nvidia.persistenced.' % self.params['socket_path']]
        return []

    def result(self, diff=False):
        p = self.params
        result = dict(changed=any(entry['changed'] for entry in self.report) or self.state_changed, gpus=self.report,
                      backend=self.backend.name, state_changed=self.state_changed,
                      state_file=p['state_file'] if p['persist'] else None)
        if diff:
            result['diff'] = [dict(before_header='GPU persistence modes', after_header='GPU persistence modes',
                                   before=modes_text(self.report, 'before'), after=modes_text(self.report, 'after'))]
            if p['persist']:
                result['diff'].append(dict(before_header=p['state_file'], after_header=p['state_file'],
                                           before=state.serialize(self.state_before),
                                           after=state.serialize(self.state_after)))
        return result
