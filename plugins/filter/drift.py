# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet's drift report, from each host's node_state result (playbooks/drift.yml)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: drift_report
short_description: A fleet drift report from each host's node_state result
version_added: 0.1.0
description:
  - Turns a dict of host name to that host's M(gpufleet.nvidia.node_state) result (null for a host that has none,
    unreachable or failed before it) into the fleet's drift report, one row per host, and a readable table.
  - C(playbooks/drift.yml) writes the report as JSON and prints the table.
options:
  _input:
    description: Host name to node_state result (or null).
    type: dict
    required: true
  errors:
    description: Host name to an error message, for hosts that failed or were unreachable.
    type: dict
    default: {}
author:
  - gpufleet.nvidia maintainers (@gpufleet)
'''

EXAMPLES = r'''
- name: The fleet's drift report
  ansible.builtin.debug:
    msg: "{{ (states | gpufleet.nvidia.drift_report).table }}"
'''

RETURN = r'''
_value:
  description:
    - C(hosts), one row per host (C(host), C(status) converged/drifted/failed/unreachable, C(init), C(daemon),
      C(gpus_off) (the GPUs not in their mode, as C(index:mode->wanted)), C(engines_off) (the engines whose runtime
      registration drifted, as C(engine:action)), C(drifted), C(errors)); C(counts) per status; C(table), the rows as
      text lines.
  type: dict
'''

ENGINES = ('containerd', 'crio', 'docker')
COLUMNS = ('host', 'status', 'init', 'daemon', 'gpus_off', 'engines_off')


def _row(host, state, error):
    row = {'host': host, 'status': 'unreachable', 'init': 'n/a', 'daemon': 'n/a', 'gpus_off': [], 'engines_off': [],
           'drifted': [], 'errors': {}}
    if state is None:
        if error:
            row['status'] = 'failed'
            row['errors'] = {'host': error}
        return row
    concerns = state.get('concerns') or {}
    results = dict((name, (verdict or {}).get('result') or {}) for name, verdict in concerns.items())
    row['drifted'] = list(state.get('drifted') or [])
    row['errors'] = dict((name, results[name].get('msg', '')) for name, verdict in concerns.items()
                         if verdict.get('failed'))
    row['status'] = 'failed' if row['errors'] else 'converged' if state.get('converged') else 'drifted'
    row['init'] = (results.get('persistenced', {}).get('init_system') or results.get('device_links', {}).get(
        'init_system') or 'n/a')
    if 'persistenced' in concerns:
        verdict = concerns['persistenced']
        row['daemon'] = ('%s ok' % results['persistenced'].get('daemon', '')).strip() if verdict.get('converged') \
            else 'error' if verdict.get('failed') else ','.join(results['persistenced'].get('actions') or []) or 'drifted'
    row['gpus_off'] = ['%s:%s->%s' % (gpu.get('index'), gpu.get('before'), gpu.get('after'))
                       for gpu in results.get('gpu_persistence', {}).get('gpus') or [] if gpu.get('changed')]
    row['engines_off'] = ['%s:%s' % (name, 'error' if concerns[name].get('failed') else results[name].get('action'))
                          for name in ENGINES if name in concerns and not concerns[name].get('converged')]
    return row


def drift_report(states, errors=None):
    errors = errors or {}
    rows = [_row(host, states[host], errors.get(host)) for host in sorted(states)]
    counts = {}
    for row in rows:
        counts[row['status']] = counts.get(row['status'], 0) + 1
    cells = [[(','.join(row[c]) or '-') if isinstance(row[c], list) else row[c] for c in COLUMNS] for row in rows]
    widths = [max([len(c)] + [len(cell[i]) for cell in cells]) for i, c in enumerate(COLUMNS)]
    line = '  '.join('%%-%ds' % w for w in widths)
    table = [(line % COLUMNS).rstrip()] + [(line % tuple(cell)).rstrip() for cell in cells]
    for row in rows:
        for concern, msg in sorted(row['errors'].items()):
            table.append('%s %s: %s' % (row['host'], concern, msg))
    return {'hosts': rows, 'counts': counts, 'table': table}


class FilterModule(object):
    def filters(self):
        return {'drift_report': drift_report}
