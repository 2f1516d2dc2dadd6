# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A concern module's entry point (``Concern``: its argument spec and its run) and what the engines share.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. Each concern has a file of its own (``concerns/<name>.py``, with
its spec, its run and its ``CONCERN``), so that a concern module's payload
holds that concern's code alone; ``concerns.registry`` gathers them for node_state.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.options import AUDIT_LOG, ROLLBACK_STORE
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import module as concerns_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init.service import Service


# What a concern's ``DECLARATION`` (a literal in its own file, concerns/<name>.py) says; scripts/sync-roles reads it
# without importing the file and builds from it node_state's registry (concerns/registry.py), the controller's table
# (plugins/plugin_utils/_role_table.py), the roles' argument specs and defaults, and docs/role-variables.md.
DECLARATION_KEYS = {
    'name': 'the concern: node_state\'s option and verdict key, gpu_node_result\'s key',
    'module': 'its module (gpufleet.nvidia.<module>)',
    'order': 'where node_state evaluates it and gpu_node runs it, lowest first',
    'after': 'the concerns whose drift makes node_state run it again (optional)',
    'role': 'the role whose variables give its options',
    'switch': "gpu_node's boolean variable that turns it on",
    'off_when': '(variable, value): also off while that variable has that value (optional)',
    'engine': 'a container engine: evaluated only for the engines chosen (optional)',
    'variables': '(role variable, module option[, when]): when is truthy (left out when empty or false) or '
                 '(without, V) (left out when V is set); passed unless null otherwise',
    'module_only': 'the module options no role variable gives',
    'drift': "its column in the drift report (optional)",
    'drift_optional': 'that column only where a host evaluated it (optional)',
    'summary': "the words site.yml's fleet summary prints for it (optional)",
}


class Concern(object):
    """A concern module: ``spec`` (its argument spec), ``checks`` (AnsibleModule's cross-option rules) and
    ``run(module) -> result``."""

    def __init__(self, name, module, spec, run, audited=True, **checks):
        self.name = name
        self.module = module
        self.spec = spec
        self.run = run
        self.audited = audited  # a module that changes the host: its changes go to the audit trail
        self.checks = checks
        self.declaration = {'name': name, 'module': module}

    @classmethod
    def declared(cls, declaration, spec, run, audited=True, **checks):
        """The concern its ``DECLARATION`` names (its file's literal: scripts/sync-roles reads the same)."""
        concern = cls(declaration['name'], declaration['module'], spec, run, audited, **checks)
        concern.declaration = declaration
        return concern

    def argument_spec(self):
        """The module's whole argument spec: ``spec``, ``role_vars``, which the module's action plugin handles
        (plugin_utils/_role_action.py) and never sends, in the spec so that the documented option is one the module
        has (node_state validates a concern's options against this same spec), and the audit trail's and the rollback
        store's options (the action plugin gives ``audit_run_id``)."""
        spec = dict(self.spec, role_vars=dict(type='bool', default=False))
        if self.audited:
            spec.update(audit_log=dict(type='path', default=AUDIT_LOG), audit_run_id=dict(type='str'),
                        rollback_store=dict(type='path', default=ROLLBACK_STORE))
        return spec

    def execute(self, module):
        """``run(module)``'s result; a run that changed the host (not in check mode) appends its line to the audit
        trail (``host.audit``) and saves what it changed to the rollback store (``host.rollback``, under the run's
        ``audit_run_id``). The run's diffs are computed for them (their hashes, the files' texts before) and returned
        only when the task asked for them. A trail or a record that cannot be written is a warning and
        ``audit_error`` / ``rollback_error``: the change is made.

        ``host.audit`` and ``host.rollback`` are imported here, for a run that changed the host, not with this file:
        node_state's check path (``run`` in check mode) never writes either, and a host compiles every module it
        imports on every run (zipimport keeps no bytecode). Ansible's dependency finder still packs them into every
        concern module's zip (an import in a function is found as one at the top is)."""
        params = module.params
        if not self.audited or module.check_mode or not (params.get('audit_log') or params.get('rollback_store')):
            return self.run(module)  # no trail or record to write: no diffs computed for them
        asked = module._diff
        module._diff = True
        try:
            result = self.run(module)
        finally:
            module._diff = asked
        if result.get('changed') and params.get('audit_log'):
            from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import audit
            try:
                audit.append([audit.record(self.name, self.module, result, module.params.get('audit_run_id'),
                                           by=os.environ.get('SUDO_USER'), policy=module.params.get('disruption'))],
                             module.params['audit_log'])
            except (GpufleetError, OSError) as exc:
                result['audit_error'] = str(exc)
                module.warn('the audit trail was not written: %s' % exc)
        if result.get('changed') and params.get('rollback_store'):
            from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import rollback
            try:
                rollback.save(params.get('audit_run_id'), self.name, self.module, result, params, params['rollback_store'])
            except (GpufleetError, OSError) as exc:
                result['rollback_error'] = str(exc)
                module.warn('nothing was saved to roll this change back: %s' % exc)
        if not asked:
            result.pop('diff', None)
        return result

    def module_args(self):
        """The keyword arguments of the concern module's AnsibleModule."""
        args = dict(argument_spec=self.argument_spec(), supports_check_mode=True)
        args.update(self.checks)
        return args


def engine_service(module, executable, find_pid, **kwargs):
    """``(Service, run_command)``: the engine's service (``service_name``) under this host's init system, whose
    process runs ``executable`` (``Service.processes``)."""
    run_command = concerns_module.runner(module)
    init, tools, unused_detected = concerns_module.init_system(module, run_command)
    return Service(init, module.params['service_name'], run_command, tools, find_pid, executable=executable,
                   together=concerns_module.run_state(module).together, **kwargs), run_command


def engine_binary(module, name, install):
    """The engine daemon's executable; the module fails, naming its file (``path``), when there is none."""
    binary = module.get_bin_path(name)
    if binary is None:
        module.fail_json(msg='%s is not installed on this host (no %s executable found); %s'
                             % (name, name, install), path=module.params['path'])
    return binary
