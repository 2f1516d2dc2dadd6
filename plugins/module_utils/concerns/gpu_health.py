# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_health concern: its argument spec and run (read-only: a verdict, and the metrics node_exporter serves).

This module is PRIVATE to the gpufleet.nvidia collection: its API may change at any time (see ``concerns.base``).
It never drifts: node_state evaluates it with the others, in the same round trip, and nothing is ever run to
converge it; its verdict is ``verdict`` in its result. The textfile is written on every run but in a check-mode
play (it is monitoring output, not configuration: writing it is never a change).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import module as concerns_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.base import Concern
from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import backends
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health import contract, metrics
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health.apply import HealthRun

# This concern, declared once (the keys: concerns/base.py, DECLARATION_KEYS); scripts/sync-roles builds the rest.
DECLARATION = {
    'name': 'gpu_health',
    'module': 'gpu_health',
    'order': 90,
    'role': 'gpu_node',
    'switch': 'gpu_node_gpu_health',
    'variables': (
        ('gpu_node_contract', 'contract'),
        ('gpu_node_health_textfile_directory', 'textfile_directory'),
        ('gpu_node_health_metrics', 'metrics'),
        ('gpu_node_health_textfile_create', 'textfile_create'),
    ),
    'module_only': ('kernel_log', 'report_passed', 'verdict_before'),
    'drift': 'health',
    'summary': ('health',),
}

SPEC = dict(
    contract=dict(type='dict', options=contract.SPEC),
    metrics=dict(type='bool', default=True),
    textfile_directory=dict(type='str', default=metrics.DEFAULT_DIRECTORY),
    textfile_create=dict(type='bool', default=False),
    kernel_log=dict(type='str', default='auto'),
    report_passed=dict(type='bool', default=False),
    verdict_before=dict(type='str', choices=['PASS', 'WARN', 'FAIL', 'UNKNOWN']),
)


def _audit_gate(module, before, after):
    """The health gate's line in the audit trail: the node's verdicts before and after this run's changes (never in
    check mode: ``host.audit`` is imported here, so node_state's check path does not compile it)."""
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import audit
    entry = audit.record('gpu_health', 'gpu_health', {'actions': ['health_gate'],
                                                      'changes': ['health %s -> %s' % (before, after)]},
                         module.params.get('audit_run_id'), by=os.environ.get('SUDO_USER'))
    entry.update(verdict_before=before, verdict_after=after)
    try:
        audit.append([entry], module.params['audit_log'])
    except (GpufleetError, OSError) as exc:
        module.warn('the audit trail was not written: %s' % exc)


def run(module):
    params = module.params
    state = concerns_module.run_state(module)
    health = HealthRun(dict(params, kernel_log=None if params['kernel_log'] == 'auto' else params['kernel_log']),
                       backends.load_pynvml, concerns_module.runner(module), verdicts=state.verdicts)
    result = health.evaluate()
    # a concern module's own run writes unless in check mode; node_state's (its stand-in is always in check mode)
    # unless its play is (RunState.store)
    writes = state.store if state.verdicts is not None else not module.check_mode
    if params.get('verdict_before') and not module.check_mode and params.get('audit_log'):
        _audit_gate(module, params['verdict_before'], result.get('verdict'))
    result['metrics_file'] = None
    if params['metrics'] and writes:
        try:
            result['metrics_file'] = health.write_metrics(result)
        except metrics.MetricsError as exc:
            module.warn('%s; the verdict stands, the metrics were not written' % exc)
    return result


# It changes nothing of the host's configuration (no change is ever audited or saved for a rollback); audited for the
# health gate's own line (verdict_before), which run() writes.
CONCERN = Concern.declared(DECLARATION, SPEC, run)
