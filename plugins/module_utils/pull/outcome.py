# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A pull run's outcome, pure: what ansible-pull's output and the result ``playbooks/site.yml`` left say
(``classify``), what ``last-run.json`` keeps (``next_state``) and the textfile metrics (``render_metrics``).

This module is PRIVATE to the gpufleet.nvidia collection: its API may change at any time. ``pull.runner`` is the
program that uses it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.gpufleet.nvidia.plugins.module_utils.health import metrics

# Outcomes, in the order of the metric's samples. A success: the node is as its commit says (or will be, once the
# work a change waits for is done).
OUTCOMES = ('ok', 'changed', 'deferred', 'unchanged', 'refused', 'failed')
SUCCESS = ('ok', 'changed', 'deferred', 'unchanged')
# The runs ``last-run.json`` lists (when each started and ended, its outcome, the commit checked out).
HISTORY = 20
# What ansible-pull prints: its checkout's failure (``localhost | FAILED! => {...}``), the repository unchanged.
CHECKOUT_FAILED = re.compile(r'^\S+ \| FAILED! => (\{.*?^\})', re.M | re.S)
UNCHANGED = 'Repository has not changed, quitting'
ERROR_LINE = re.compile(r'^(?:ERROR!|\[ERROR\]:|fatal:)\s*(.*)$', re.M)
RECAP = re.compile(r'^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)', re.M)
# ansible-playbook's exit status for a playbook it could not parse (nothing ran).
PARSE_ERROR = 4
HELP = {
    'gpufleet_last_run_timestamp_seconds': "When this node's last gpufleet pull run ended (Unix time).",
    'gpufleet_last_run_duration_seconds': "How long this node's last gpufleet pull run took.",
    'gpufleet_last_run_outcome': "The last pull run's outcome as a state set: 1 for the outcome (ok, changed, "
                                 "deferred, unchanged, refused, failed).",
    'gpufleet_last_success_timestamp_seconds': 'When a pull run last succeeded (ok, changed, deferred, unchanged).',
    'gpufleet_applied_commit_info': 'The commit of the site repository the last successful run applied (always 1).',
    'gpufleet_fetched_commit_info': 'The commit checked out on the node after the last run (always 1).',
    'gpufleet_last_evaluation_timestamp_seconds': 'When a run last evaluated every concern (its drift below).',
    'gpufleet_concern_drifted': 'Whether that evaluation found the concern drifted (1) or converged (0).',
}


# --------------------------------------------------------------------------
# The outcome (pure)
# --------------------------------------------------------------------------

def _first_line(text):
    text = (text or '').strip()
    return ' '.join(text.splitlines()[0].split()) if text else ''


def checkout_failure(output):
    """The message of ansible-pull's failed checkout (its git task's ``msg``), or None when the checkout did not
    fail."""
    match = CHECKOUT_FAILED.search(output)
    if not match:
        return None
    try:
        msg = json.loads(match.group(1)).get('msg')
    except (ValueError, AttributeError):
        msg = None
    return _first_line(msg if isinstance(msg, str) else match.group(1)) or 'the checkout failed'


def error_line(output):
    found = ERROR_LINE.findall(output)
    return _first_line(found[0]) if found else ''


def node_record(result, name):
    """What playbooks/site.yml left for this node: ``(gpu_node_result or None, error message or None, stopped or
    None)``; anything not of the expected shape is None."""
    if not isinstance(result, dict):
        return None, None, None
    picked = []
    for key in ('hosts', 'errors', 'stopped'):
        table = result.get(key)
        picked.append(table.get(name) if isinstance(table, dict) else None)
    node, error, stopped = picked
    return (node if isinstance(node, dict) else None, error if isinstance(error, str) else None,
            stopped if stopped is not None else None)


def deferred(node):
    """Whether a concern of this node's result deferred a change for GPU work."""
    runtime = node.get('container_runtime') if isinstance(node.get('container_runtime'), dict) else {}
    engines = runtime.get('engines') if isinstance(runtime.get('engines'), dict) else {}
    results = [node.get('persistenced'), runtime] + list(engines.values())
    return any(isinstance(entry, dict) and entry.get('deferred') for entry in results)


def drift(node):
    """``{concern: drifted}`` from the node's ``state`` (node_state's evaluation), or None."""
    state = node.get('state') if isinstance(node, dict) else None
    if not isinstance(state, dict):
        return None
    evaluated = state.get('evaluated')
    drifted = state.get('drifted')
    if not isinstance(evaluated, list) or not isinstance(drifted, list):
        return None
    return dict((str(name), name in drifted) for name in evaluated if isinstance(name, str))


def classify(rc, timed_out, output, result, name, timeout=None):
    """``(outcome, reason, drift or None)`` of a run: its exit status, whether it was ended for its time, its
    output (text), what the playbook left (the parsed result file, or None) and this node's name."""
    if timed_out:
        return 'failed', 'ended after %s s (timeout): the playbook did not finish' % timeout, None
    failure = checkout_failure(output)
    if failure is not None:
        return 'refused', 'the checkout of the site repository failed or was refused: %s' % failure, None
    if rc == 0 and UNCHANGED in output and result is None:
        return 'unchanged', 'the repository has no new commit since the last successful run', None
    node, error, stopped = node_record(result, name)
    if result is None and rc == PARSE_ERROR:
        return 'refused', 'the playbook could not be parsed, nothing ran: %s' % (error_line(output) or 'exit 4'), None
    if node is None:
        if rc != 0:
            return 'failed', 'ansible-pull exited %d: %s' % (rc, error_line(output) or 'see the log'), None
        changed = [int(m[2]) for m in RECAP.findall(output) if m[0] == name]
        reason = 'the playbook left no gpufleet result (does it import gpufleet.nvidia.site?)'
        return ('changed' if changed and changed[0] else 'ok'), reason, None
    found = drift(node)
    if error or stopped is not None or rc != 0:
        reason = error or ('the health gate stopped the rollout on this node' if stopped is not None else
                           'ansible-pull exited %d: %s' % (rc, error_line(output) or 'see the log'))
        return 'failed', _first_line(reason), found
    if deferred(node):
        return 'deferred', 'a change waits for the GPU work on the node', found
    if found is not None and any(found.values()):
        return 'changed', 'drifted: %s' % ', '.join(sorted(k for k in found if found[k])), found
    return 'ok', 'converged', found


# --------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------

def render_metrics(state):
    """The textfile of the run ``state`` (what ``last-run.json`` holds)."""
    fam = metrics.Families(HELP)
    fam.add('gpufleet_last_run_timestamp_seconds', [], state['ended'])
    fam.add('gpufleet_last_run_duration_seconds', [], state['duration'])
    for outcome in OUTCOMES:
        fam.add('gpufleet_last_run_outcome', [('outcome', outcome)], outcome == state['outcome'])
    fam.add('gpufleet_last_success_timestamp_seconds', [], state.get('last_success'))
    if state.get('applied'):
        fam.add('gpufleet_applied_commit_info', [('commit', state['applied'])], 1)
    if state.get('fetched'):
        fam.add('gpufleet_fetched_commit_info', [('commit', state['fetched'])], 1)
    if isinstance(state.get('drift'), dict):
        fam.add('gpufleet_last_evaluation_timestamp_seconds', [], state.get('evaluated'))
        for concern in sorted(state['drift']):
            fam.add('gpufleet_concern_drifted', [('concern', concern)], bool(state['drift'][concern]))
    return fam.text()


def next_state(previous, outcome, reason, found, started, ended, head):
    """What ``last-run.json`` keeps after a run: the previous run's applied commit, success time and drift carried
    over where this run did not replace them."""
    previous = previous if isinstance(previous, dict) else {}
    state = dict(outcome=outcome, reason=reason, started=started, ended=ended, duration=round(ended - started, 3),
                 fetched=head, applied=previous.get('applied'), last_success=previous.get('last_success'),
                 drift=previous.get('drift'), evaluated=previous.get('evaluated'))
    if outcome in SUCCESS:
        state['last_success'] = ended
        if outcome != 'unchanged':
            state['applied'] = head
    if found is not None:
        state['drift'], state['evaluated'] = found, ended
    history = previous.get('history') if isinstance(previous.get('history'), list) else []
    run = dict(started=started, ended=ended, outcome=outcome, fetched=head)
    state['history'] = (history + [run])[-HISTORY:]
    return state
