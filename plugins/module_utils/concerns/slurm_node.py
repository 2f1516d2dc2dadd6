# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The slurm_node concern: this host as a Slurm node (its state and drain reason, our health check program), and
the drain and resume a rollout asks for.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change at any time (see ``concerns.base``).
What it converges is the health check program (``slurm.program``) and its configuration; a host without Slurm (no
configuration, no clients) is converged as it is and says so. ``action: drain`` and ``action: resume`` are the gpu_node
role's steps around a change under ``gpu_node_disruption: drain`` (``slurm.node`` has the rules).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import module as concerns_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.base import Concern
from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import backends
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health import contract
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health.apply import HealthRun
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import slurm as slurm_node

# This concern, declared once (the keys: concerns/base.py, DECLARATION_KEYS); scripts/sync-roles builds the rest.
DECLARATION = {
    'name': 'slurm_node',
    'module': 'slurm_node',
    'order': 95,
    'role': 'gpu_node',
    'switch': 'gpu_node_slurm',
    'variables': (
        ('gpu_node_slurm_health_check', 'health_check'),
        ('gpu_node_slurm_health_check_act', 'health_check_act'),
        ('gpu_node_contract', 'contract'),
    ),
    'module_only': ('action', 'health_check_path', 'health_check_config', 'name', 'reason', 'wait_timeout'),
    'drift': 'slurm',
    'drift_optional': True,
    'summary': ('slurm',),
}

SPEC = dict(
    name=dict(type='str'),
    health_check=dict(type='bool', default=True),
    health_check_act=dict(type='bool', default=True),
    health_check_path=dict(type='path', default='/usr/sbin/gpufleet-slurm-health-check'),
    health_check_config=dict(type='path', default='/etc/gpufleet/slurm-health-check.json'),
    contract=dict(type='dict', options=contract.SPEC),
    action=dict(type='str', default='none', choices=['none', 'drain', 'resume']),
    reason=dict(type='str', default='rollout'),
    wait_timeout=dict(type='int', default=0),
)


def _config(params, name):
    config = {'contract': params.get('contract') or {}, 'act': params['health_check_act']}
    if params.get('name'):
        config['node_name'] = name
    return config


def _program(module, result):
    """Converge the health check program and its configuration (``health_check``); their changes in ``result``.
    ``slurm.program`` is imported here, on a Slurm node: node_state evaluates this concern on every host, and a host
    compiles every module it imports on every run (Ansible's dependency finder still packs it into the zip)."""
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.slurm import program
    p = module.params
    entries = []
    if p['health_check']:
        changed, before, after = program.install(p['health_check_path'], program.build(), check_mode=module.check_mode)
        entries.append({'path': p['health_check_path'], 'changed': changed, 'sha256_before': before,
                        'sha256_after': after})
        changed, before, after = program.install_config(p['health_check_config'], _config(p, result['node']),
                                                        check_mode=module.check_mode)
        entries.append({'path': p['health_check_config'], 'changed': changed, 'sha256_before': before,
                        'sha256_after': after})
    else:
        for path in (p['health_check_path'], p['health_check_config']):
            changed = program.remove(path, check_mode=module.check_mode)
            entries.append({'path': path, 'changed': changed, 'sha256_before': None, 'sha256_after': None})
    result['health_check'] = entries
    for entry in entries:
        if entry['changed']:
            result['changed'] = True
            result['changes'].append('health check program %s' % entry['path'])


def _health(module):
    run = HealthRun(dict(contract=module.params.get('contract'), kernel_log=None, metrics=False),
                    backends.load_pynvml, concerns_module.runner(module))
    return run.evaluate()


def _drain(module, node, result):
    """Drain for the change (the node's own rules: ``SlurmNode.drain``), then wait for its jobs."""
    p = module.params
    words = p['reason'] + (' (run %s)' % p['audit_run_id'] if p.get('audit_run_id') else '')
    reason = slurm_node.clean_reason('%s %s' % (slurm_node.PREFIX, words))
    state = result['state']
    if state is None:
        module.fail_json(msg='slurm_node: slurmctld does not know the node %s: name it (name) as slurm.conf does'
                             % node.name, **result)
    if node.drain(reason, state, module.check_mode)[0]:
        result['changed'] = True
        result['actions'].append('drain')
        result['changes'].append('drained with reason "%s"' % reason)
    else:
        result['msg'] = 'out of scheduling already (%s, reason: %s): reason kept' % (state['state'], state['reason'])
    if module.check_mode:
        return
    jobs = node.wait_jobs(p['wait_timeout'])
    result['jobs'] = jobs
    result['timed_out'] = bool(jobs)
    result['state'] = node.state()


def _resume(module, node, result):
    """Resume by the node's own rules (``SlurmNode.resume``: only a drain of ours), when its health passes; a
    rollout's drain whose health does not pass becomes a health drain, which the health check program resumes."""
    state = result['state']
    if state is None or state['available']:
        return
    health = _health(module) if state['ours'] else None  # NVML is read only for a drain we may end
    verdict = health.get('verdict') if health else None
    result['verdict'] = verdict
    resumed, unused, why = node.resume(verdict == 'PASS', state, module.check_mode)
    if resumed:
        result['changed'] = True
        result['actions'].append('resume')
        result['changes'].append('resumed (drained for "%s"), health PASS' % state['reason'])
        if not module.check_mode:
            result['state'] = node.state()
        return
    if health is None:
        result['msg'] = why
        return
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.slurm import health_check
    decision = health_check.decide(state, health)
    result['msg'] = 'not resumed: the health verdict is %s (%s)' % (verdict, decision.get('why'))
    reason = decision.get('reason')
    if reason and state['reason'] != reason and health_check.is_rollout_reason(state['reason']):
        # the rollout's drain becomes a health drain: the health check program resumes it once the GPUs pass
        result['changed'] = True
        result['actions'].append('drain_reason')
        result['changes'].append('drain reason "%s" -> "%s"' % (state['reason'], reason))
        if not module.check_mode:
            node.update('DRAIN', reason)
            result['state'] = node.state()


def run(module):
    p = module.params
    node = slurm_node.local(p.get('name'), concerns_module.runner(module))
    result = {'changed': False, 'slurm': False, 'node': node.name if node else p.get('name') or slurm_node.default_name(),
              'state': None, 'jobs': [], 'actions': [], 'changes': [], 'health_check': [], 'verdict': None,
              'timed_out': False, 'msg': ''}
    if node is None:
        result['msg'] = 'not a Slurm node: no Slurm configuration or no Slurm clients (scontrol, squeue) on this host'
        if p['action'] != 'none':
            result['msg'] += '; nothing to %s' % p['action']
        return result
    result['slurm'] = True
    try:
        result['state'] = node.state()
        if p['action'] == 'drain':
            _drain(module, node, result)
        else:
            result['jobs'] = node.jobs()
        if p['action'] == 'resume':
            _resume(module, node, result)
        _program(module, result)
    except slurm_node.SlurmError as exc:
        module.fail_json(msg='slurm_node %s: %s' % (node.name, exc), **result)
    except GpufleetError as exc:
        module.fail_json(msg=str(exc), **result)
    return result


CONCERN = Concern.declared(DECLARATION, SPEC, run)
