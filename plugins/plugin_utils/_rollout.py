# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The health gate of playbooks/site.yml's rollout: did a node that changed come back worse than it went in?

This module is PRIVATE to the gpufleet.nvidia collection: its API may change at any time. Plain Python, tested with
pytest; the filter plugins ``health_regression``, ``node_changed`` and ``rollout_stop`` are thin wrappers around it.

Both verdicts come from the host (node_state's gpu_health verdict before its concerns ran, gpu_health's after):
untrusted data, checked here; a verdict of the wrong shape is no evidence of a regression and is said so (the gate
does not stop a rollout on a malformed answer, nor let one pass as healthy: ``malformed``).

Compared: each check's worst verdict over its GPUs, leaving out node_state's own checks (``configuration``, which
is WARN whenever a concern drifted, i.e. whenever a node is about to change, and ``persistence``, the wish that the
change itself fulfils). A check worse after than before (a new one counts from PASS) is a regression.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._untrusted import TEXT, Malformed, expect, printable

RANK = {'PASS': 0, 'WARN': 1, 'UNKNOWN': 2, 'FAIL': 3}
# node_state's checks of the configuration itself: not the GPUs' health
NOT_HEALTH = ('configuration', 'persistence')
MAX_CHECKS = 256


def _checks(result, what):
    """``{check: worst verdict}`` and the node's verdict of a gpu_health result (a host's, untrusted)."""
    result = expect(result, dict, what)
    verdict = expect(result.get('verdict'), TEXT, what + '.verdict')
    if verdict not in RANK:
        raise Malformed('%s.verdict is not a verdict (%s)' % (what, printable(verdict[:20])))
    checks = expect(result.get('checks'), list, what + '.checks', [])
    if len(checks) > MAX_CHECKS:
        raise Malformed('%s.checks has %d entries' % (what, len(checks)))
    worst = {}
    for entry in checks:
        entry = expect(entry, dict, what + '.checks[]')
        name = expect(entry.get('check'), TEXT, what + '.checks[].check')
        found = expect(entry.get('verdict'), TEXT, what + '.checks[].verdict')
        if found not in RANK:
            raise Malformed('%s.checks[].verdict is not a verdict' % what)
        if name in NOT_HEALTH:
            continue
        gpu = entry.get('gpu')
        label = printable(name[:64]) + ('' if gpu is None else ' GPU %s' % printable(str(gpu)[:8]))
        if RANK[found] > RANK.get(worst.get(label), -1):
            worst[label] = found
    node = max([RANK['PASS']] + [RANK[v] for v in worst.values()])
    return worst, node


def node_verdict(result):
    """A gpu_health result's node verdict without node_state's own checks, or None when it cannot be read."""
    try:
        return dict((rank, name) for name, rank in RANK.items())[_checks(result, 'the verdict')[1]]
    except Malformed:
        return None


def regression(before, after):
    """None when the node is no worse after its change; else ``{'before', 'after', 'checks', 'msg'}`` (``checks``:
    ``CHECK: BEFORE -> AFTER``), or ``{'malformed': msg}`` when a verdict cannot be read."""
    try:
        was, was_node = _checks(before, 'the verdict before')
        now, now_node = _checks(after, 'the verdict after')
    except Malformed as exc:
        return {'malformed': str(exc), 'msg': 'the health gate could not read a verdict (%s)' % exc}
    worse = sorted('%s: %s -> %s' % (label, was.get(label, 'PASS'), verdict) for label, verdict in now.items()
                   if RANK[verdict] > RANK[was.get(label, 'PASS')])
    if not worse:
        return None
    names = dict((rank, name) for name, rank in RANK.items())
    return {'before': names[was_node], 'after': names[now_node], 'checks': worse,
            'msg': 'health %s -> %s (%s)' % (names[was_node], names[now_node], '; '.join(worse[:5]))}


def changed(node):
    """Whether a host's gpu_node_result says one of its concerns changed it (untrusted: a wrong shape is False)."""
    if not isinstance(node, dict):
        return False
    for key, value in node.items():
        if key in ('state', 'gpu_health'):
            continue
        if isinstance(value, dict) and value.get('changed') is True:
            return True
    return False


def _verdict(result):
    verdict = result.get('verdict') if isinstance(result, dict) else None
    return verdict if isinstance(verdict, TEXT) and verdict in RANK else None


def gate(before, after, rollback=None):
    """gpu_node_result's ``health_gate``: the verdicts before and after, the regression (or None), what the rollback
    did, and ``stop``: whether the rollout stops at this node (it came back worse, or its verdict could not be read)."""
    found = regression(before, after)
    return {'before': _verdict(before), 'after': _verdict(after), 'regression': found,
            'stop': found is not None, 'msg': found['msg'] if found else None,
            'rollback': rollback if isinstance(rollback, dict) else None}


def stops(hosts, hostvars):
    """``{host: health_gate}`` of the ``hosts`` whose gpu_node_result says the rollout stops at them."""
    found = {}
    for host in hosts:
        variables = hostvars.get(host) if hasattr(hostvars, 'get') else None
        node = variables.get('gpu_node_result') if hasattr(variables, 'get') else None
        health_gate = node.get('health_gate') if isinstance(node, dict) else None
        if isinstance(health_gate, dict) and health_gate.get('stop') is True:
            found[host] = health_gate
    return found
