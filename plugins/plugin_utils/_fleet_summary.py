# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet summary of playbooks/site.yml, one line per host, from each host's gpu_node_result.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change at any time. Plain Python, tested with
pytest; the filter plugin of the same name is a thin wrapper around it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._results import ENGINES
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._untrusted import (
    TEXT, Malformed, describe, expect, health_cell, printable, toolkit_cell)

# dockerd's words come first, under their own names (docker_runtimes=, docker_action=, nvidia_run=).
OTHER_ENGINES = tuple(name for name in ENGINES if name != 'docker')


def _text(mapping, key, what):
    """The scalar ``mapping[key]`` for printing; ``n/a`` when missing or null."""
    value = expect(mapping.get(key, u'n/a'), TEXT + (int,), '%s.%s' % (what, key), u'n/a')
    return printable(value)


def _mapping(mapping, key, what):
    """``mapping[key]``, a mapping; empty when missing or null."""
    return expect(mapping.get(key), dict, '%s.%s' % (what, key), {})


def _texts(items, what):
    return [printable(expect(item, TEXT, what + '[]')) for item in expect(items, list, what, [])]


def _found(state):
    if state is None:
        return 'n/a'
    state = expect(state, dict, 'state')
    if expect(state.get('converged', False), bool, 'state.converged'):
        return 'converged'
    return 'drifted:' + ','.join(_texts(state.get('drifted'), 'state.drifted'))


def _gpus(node):
    gpus = expect(_mapping(node, 'gpu_persistence', 'gpu_node_result').get('gpus'), list, 'gpu_persistence.gpus', [])
    gpus = [expect(gpu, dict, 'gpu_persistence.gpus[]') for gpu in gpus]
    return ','.join('%s:%s' % (_text(gpu, 'index', 'gpus[]'), _text(gpu, 'after', 'gpus[]')) for gpu in gpus) or 'n/a'


def _engine_words(engines):
    """``ENGINE_runtimes=`` and ``ENGINE_action=`` for containerd and CRI-O, where the node has them."""
    words = []
    for name in OTHER_ENGINES:
        if engines.get(name) is not None:
            engine = _mapping(engines, name, 'engines')
            runtimes = ','.join(sorted(_texts(engine.get('runtimes'), name + '.runtimes'))) or 'n/a'
            words += ['%s_runtimes=%s' % (name, runtimes), '%s_action=%s' % (name, _text(engine, 'action', name))]
    return words


def _work_words(work):
    """The first piece of deferred work in words (and how many more), from a module's ``deferred.work``."""
    containers = [expect(entry, dict, 'work.containers[]') for entry in expect(work.get('containers'), list,
                                                                               'work.containers', [])]
    holders = [expect(entry, dict, 'work.holders[]') for entry in expect(work.get('holders'), list, 'work.holders', [])]
    jobs = [expect(entry, dict, 'work.slurm_jobs[]')
            for entry in expect(work.get('slurm_jobs'), list, 'work.slurm_jobs', [])]
    if jobs:
        first = 'slurm job %s %s' % (_text(jobs[0], 'id', 'work'), _text(jobs[0], 'user', 'work'))
    elif containers:
        first = 'container %s pid %s' % (_text(containers[0], 'container', 'work'), _text(containers[0], 'pid', 'work'))
    elif holders:
        first = 'pid %s %s' % (_text(holders[0], 'pid', 'work'), _text(holders[0], 'name', 'work'))
    else:
        first = 'no work listed'
    more = len(containers) + len(holders) + len(jobs) - 1
    return first + (' +%d' % more if more > 0 else '')


def _deferred(node, runtime):
    """``CONCERN:ACTION(the work)`` for each concern whose change the disruption policy deferred on this node."""
    results = [('persistenced', _mapping(node, 'persistenced', 'gpu_node_result'))]
    engines = _mapping(runtime, 'engines', 'container_runtime')
    results += [(name, _mapping(engines, name, 'engines')) for name in sorted(engines)]
    words = []
    for name, result in results:
        if result.get('deferred') is not None:
            deferred = _mapping(result, 'deferred', name)
            words.append('%s:%s(%s)' % (name, _text(deferred, 'action', name + '.deferred'),
                                        _work_words(_mapping(deferred, 'work', name + '.deferred'))))
    return words


def _slurm(node):
    """The Slurm node's state after the run (and its reason), with what the drain step did; None without Slurm."""
    result = _mapping(node, 'slurm_node', 'gpu_node_result')
    if not expect(result.get('slurm', False), bool, 'slurm_node.slurm'):
        return None
    state = _mapping(result, 'state', 'slurm_node')
    cell = _text(state, 'state', 'slurm_node.state')
    if state.get('reason'):
        cell += '(%s)' % _text(state, 'reason', 'slurm_node.state')
    drain = _mapping(node, 'drain', 'gpu_node_result')
    if drain:
        jobs = expect(drain.get('jobs'), list, 'drain.jobs', [])
        cell += ',drained' if expect(drain.get('changed', False), bool, 'drain.changed') else ',drain_kept'
        if expect(drain.get('timed_out', False), bool, 'drain.timed_out'):
            cell += ',timed_out(%d jobs)' % len(jobs)
        if result.get('verdict') is not None:
            cell += ',health=' + _text(result, 'verdict', 'slurm_node')
    return cell


def node_line(node):
    """The words after ``HOST ok`` for a healthy host whose gpu_node_result is ``node``."""
    node = expect(node, dict, 'gpu_node_result')
    persistenced = _mapping(node, 'persistenced', 'gpu_node_result')
    runtime = _mapping(node, 'container_runtime', 'gpu_node_result')
    pid = _text(persistenced, 'pid', 'persistenced') if persistenced.get('pid') else 'none'
    docker_runtimes = sorted(printable(name) for name in _mapping(runtime, 'runtimes', 'container_runtime'))
    words = [
        'found=' + _found(node.get('state')),
        'init=' + _text(persistenced, 'init_system', 'persistenced'),
        'daemon=%s(pid %s)' % (_text(persistenced, 'daemon', 'persistenced'), pid),
        'gpus=' + _gpus(node),
        'docker_runtimes=' + (','.join(docker_runtimes) or 'n/a'),
        'docker_action=' + _text(runtime, 'action', 'container_runtime'),
        'nvidia_run=' + _text(_mapping(runtime, 'verification', 'container_runtime'), 'status', 'verification'),
    ]
    if node.get('container_toolkit') is not None:
        toolkit = _mapping(node, 'container_toolkit', 'gpu_node_result')
        converged = expect(toolkit.get('converged', False), bool, 'container_toolkit.converged')
        words.append('toolkit=' + toolkit_cell(toolkit, converged, False))
    if node.get('gpu_health') is not None:
        words.append('health=' + health_cell(_mapping(node, 'gpu_health', 'gpu_node_result'), False))
    slurm = _slurm(node)
    if slurm:
        words.append('slurm=' + slurm)
    deferred = _deferred(node, runtime)
    if deferred:
        words.append('deferred=' + ','.join(deferred))
    return ' '.join(words + _engine_words(_mapping(runtime, 'engines', 'container_runtime')))


def _stop_words(stop):
    """A stopped rollout's words for the host that stopped it: what got worse and what the rollback did."""
    stop = expect(stop, dict, 'the rollout stop')
    words = [_text(stop, 'msg', 'the rollout stop')]
    rollback = _mapping(stop, 'rollback', 'the rollout stop')
    if rollback:
        restored = expect(rollback.get('restored'), list, 'rollback.restored', [])
        removed = expect(rollback.get('removed'), list, 'rollback.removed', [])
        conflicts = expect(rollback.get('conflicts'), list, 'rollback.conflicts', [])
        services = _texts(rollback.get('services'), 'rollback.services') if isinstance(rollback.get('services'), list) \
            and all(isinstance(item, TEXT) for item in rollback.get('services')) else []
        words.append('rolled back: %d file(s) restored, %d removed, %d conflict(s)%s'
                     % (len(restored), len(removed), len(conflicts),
                        (', services ' + ','.join(services)) if services else ''))
        if rollback.get('failed'):
            words.append('the rollback failed: ' + _text(rollback, 'msg', 'rollback'))
    else:
        words.append('not rolled back')
    return '; '.join(words)


def _line(host, result, error, stop=None, stopped_by=None):
    host = printable(host)
    if stop is not None:
        try:
            return '%s stopped the rollout: %s' % (host, _stop_words(stop))
        except Malformed as exc:
            return '%s stopped the rollout (its record was malformed: %s)' % (host, exc)
    if error is not None:
        message = printable(error) if isinstance(error, TEXT) else \
            'failed, its message malformed (%s, not a string)' % describe(error)
        return '%s %s' % (host, message)
    if result is None:
        if stopped_by:
            return '%s not reached: the rollout stopped at %s' % (host, stopped_by)
        return '%s unreachable' % host
    try:
        return '%s ok %s' % (host, node_line(result))
    except Malformed as exc:
        return '%s failed: its gpu_node_result was malformed (%s); nothing in it was used' % (host, exc)


def fleet_summary(hosts, results, errors=None, stopped=None):
    """One line per host; ``stopped``: host -> the record of the health gate's stop (site.yml's rollout), for the
    hosts that came back worse (the hosts without a result then were not reached)."""
    errors = errors or {}
    stopped = stopped if isinstance(stopped, dict) else {}
    by = ', '.join(printable(host) for host in hosts if host in stopped) or None
    return [_line(host, results.get(host), errors.get(host), stopped.get(host), by) for host in hosts]
