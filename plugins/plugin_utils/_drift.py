# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet's drift report, from each host's node_state result (the drift_report filter and action).

This module is PRIVATE to the gpufleet.nvidia collection: its API may change at any time. Plain Python, tested with
pytest; the filter plugin of the same name is a thin wrapper around it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._results import ENGINES
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._role_table import DECLARED
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._untrusted import (
    TEXT, Malformed, describe, expect, health_cell, printable, toolkit_cell)


def _declared_columns(optional):
    found = []
    for concern in DECLARED:
        if concern.get('drift') and bool(concern.get('drift_optional')) is optional and concern['drift'] not in found:
            found.append(concern['drift'])
    return tuple(found)


# The columns every report has: the host, its status, its init system, then each concern's declared column (its
# DECLARATION's ``drift``), in the concerns' order.
COLUMNS = ('host', 'status', 'init') + _declared_columns(False)
# Columns shown only when a host evaluated the concern (``drift_optional``: gpu_node_container_toolkit and gpu_node_cdi
# are off by default).
OPTIONAL = _declared_columns(True)


def _empty_row(host):
    return {'host': host, 'status': 'unreachable', 'init': 'n/a', 'daemon': 'n/a', 'gpus_off': [], 'engines_off': [],
            'toolkit': 'n/a', 'cdi': 'n/a', 'health': 'n/a', 'slurm': 'n/a', 'drifted': [], 'errors': {}}


def _text(mapping, key, what):
    return printable(expect(mapping.get(key, ''), TEXT, '%s.%s' % (what, key), u''))


def _texts(mapping, key, what):
    items = expect(mapping.get(key), list, '%s.%s' % (what, key), [])
    return [printable(expect(item, TEXT, '%s.%s[]' % (what, key))) for item in items]


def _verdicts(state):
    """Each concern's verdict (converged, failed, result), checked: a host's result is untrusted data."""
    concerns = expect(state.get('concerns'), dict, 'concerns', {})
    verdicts = {}
    for name, verdict in concerns.items():
        what = 'concerns.%s' % printable(name)
        verdict = expect(verdict, dict, what, {})
        verdicts[name] = {'converged': expect(verdict.get('converged', False), bool, what + '.converged'),
                          'failed': expect(verdict.get('failed', False), bool, what + '.failed'),
                          'result': expect(verdict.get('result'), dict, what + '.result', {})}
    return verdicts


def _daemon(verdict):
    result = verdict['result']
    if verdict['converged']:
        return ('%s ok' % _text(result, 'daemon', 'persistenced')).strip()
    if verdict['failed']:
        return 'error'
    return ','.join(_texts(result, 'actions', 'persistenced')) or 'drifted'


def _cdi(verdict):
    """The CDI spec: fresh, stale (the first reason), or what the module would do."""
    if verdict['failed']:
        return 'error'
    if verdict['converged']:
        return 'fresh'
    stale = _texts(verdict['result'], 'stale', 'cdi')
    if stale:
        return 'stale: %s' % stale[0]
    return ','.join(_texts(verdict['result'], 'actions', 'cdi')) or 'drifted'


def _gpus_off(result):
    """The GPUs not in their mode, as ``index:mode->wanted``."""
    off = []
    for gpu in expect(result.get('gpus'), list, 'gpu_persistence.gpus', []):
        gpu = expect(gpu, dict, 'gpu_persistence.gpus[]')
        if expect(gpu.get('changed', False), bool, 'gpu_persistence.gpus[].changed'):
            index = expect(gpu.get('index'), (int,) + TEXT, 'gpu_persistence.gpus[].index')
            off.append('%s:%s->%s' % (printable(index), _text(gpu, 'before', 'gpu'), _text(gpu, 'after', 'gpu')))
    return off


def _slurm(verdict):
    """A Slurm node's state and drain reason (``IDLE+DRAIN(fan replaced Tuesday)``), and ``program`` when our
    health check program drifted; n/a for a host that is no Slurm node."""
    if verdict['failed']:
        return 'error'
    result = verdict['result']
    if not expect(result.get('slurm', False), bool, 'slurm_node.slurm'):
        return 'n/a'
    state = expect(result.get('state'), dict, 'slurm_node.state', {})
    cell = _text(state, 'state', 'slurm_node.state') or 'unknown'
    if state.get('reason'):
        cell += '(%s)' % _text(state, 'reason', 'slurm_node.state')
    if not verdict['converged']:
        cell += ',program'
    return cell


def _state_row(host, state):
    row = _empty_row(host)
    state = expect(state, dict, 'the result')
    verdicts = _verdicts(state)
    results = dict((name, verdict['result']) for name, verdict in verdicts.items())
    row['drifted'] = _texts(state, 'drifted', 'result')
    row['errors'] = dict((printable(name), _text(verdict['result'], 'msg', 'concerns.%s.result' % printable(name)))
                         for name, verdict in verdicts.items() if verdict['failed'])
    converged = expect(state.get('converged', False), bool, 'converged')
    row['status'] = 'failed' if row['errors'] else 'converged' if converged else 'drifted'
    row['init'] = (_text(results.get('persistenced', {}), 'init_system', 'persistenced')
                   or _text(results.get('device_links', {}), 'init_system', 'device_links') or 'n/a')
    if 'persistenced' in verdicts:
        row['daemon'] = _daemon(verdicts['persistenced'])
    row['gpus_off'] = _gpus_off(results.get('gpu_persistence', {}))
    if 'container_toolkit' in verdicts:
        verdict = verdicts['container_toolkit']
        row['toolkit'] = toolkit_cell(verdict['result'], verdict['converged'], verdict['failed'])
    if 'cdi' in verdicts:
        row['cdi'] = _cdi(verdicts['cdi'])
    if 'slurm_node' in verdicts:
        row['slurm'] = _slurm(verdicts['slurm_node'])
    if 'gpu_health' in verdicts:
        row['health'] = health_cell(verdicts['gpu_health']['result'], verdicts['gpu_health']['failed'])
    row['engines_off'] = ['%s:%s' % (name, 'error' if verdicts[name]['failed'] else
                                     _text(results[name], 'action', name))
                          for name in ENGINES if name in verdicts and not verdicts[name]['converged']]
    return row


def _row(host, state, error):
    """One host's row. A result of the wrong shape gives the host a failed row saying so; no other row changes."""
    host = printable(host)
    if state is None:
        row = _empty_row(host)
        if error:
            row['status'] = 'failed'
            row['errors'] = {'host': printable(error) if isinstance(error, TEXT) else
                             'its failure message was malformed (%s, not a string)' % describe(error)}
        return row
    try:
        return _state_row(host, state)
    except Malformed as exc:
        row = _empty_row(host)
        row['status'] = 'failed'
        row['errors'] = {'host': 'its node_state result was malformed (%s); nothing in it was used' % exc}
        return row


def drift_report(states, errors=None):
    errors = errors or {}
    # a host that failed has no state: its task's registered result (a failed node_state) is not evaluated
    rows = [_row(host, None if host in errors else states[host], errors.get(host)) for host in sorted(states)]
    counts, health = {}, {}
    for row in rows:
        counts[row['status']] = counts.get(row['status'], 0) + 1
        verdict = row['health'].split(':', 1)[0]
        health[verdict] = health.get(verdict, 0) + 1
    columns = COLUMNS + tuple(column for column in OPTIONAL if any(row[column] != 'n/a' for row in rows))
    cells = [[(','.join(row[c]) or '-') if isinstance(row[c], list) else row[c] for c in columns] for row in rows]
    widths = [max([len(c)] + [len(cell[i]) for cell in cells]) for i, c in enumerate(columns)]
    line = '  '.join('%%-%ds' % w for w in widths)
    table = [(line % columns).rstrip()] + [(line % tuple(cell)).rstrip() for cell in cells]
    for row in rows:
        for concern, msg in sorted(row['errors'].items()):
            table.append('%s %s: %s' % (row['host'], concern, msg))
    return {'hosts': rows, 'counts': counts, 'health': health, 'table': table}
