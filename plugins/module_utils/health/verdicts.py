# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU health verdicts and actions: the closed vocabularies, one check's result and the node's verdict.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change at any time. Pure: no host access.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Worst last. A check that cannot be read is UNKNOWN, worse than PASS (nobody vouches for it) and better than WARN
# (nothing was seen wrong); the node's verdict is its worst check's.
VERDICTS = ('PASS', 'UNKNOWN', 'WARN', 'FAIL')
# Its value in the metrics (gpufleet_health_status): the index above.
STATUS = dict((verdict, index) for index, verdict in enumerate(VERDICTS))
# The recommended actions, mildest first: a node's action is the strongest of its worst checks' actions.
# none: nothing to do; drain: take no new work (jobs may finish); reset_gpu: drain, then reset the GPU;
# reboot_node: drain, then reboot; service: a person must look (hardware, driver, cooling, configuration);
# replace_gpu: the GPU must be replaced (its own memory gave up).
ACTIONS = ('none', 'drain', 'reset_gpu', 'reboot_node', 'service', 'replace_gpu')


def check(name, verdict, action='none', gpu=None, value=None, threshold=None, source=None, evidence=None,
          reason=None):
    """One check's result: a plain dict (a module result). ``gpu`` is the GPU's index, or None for the node."""
    if verdict not in STATUS:
        raise ValueError('verdict %r is not one of %s' % (verdict, ', '.join(VERDICTS)))
    if action not in ACTIONS:
        raise ValueError('action %r is not one of %s' % (action, ', '.join(ACTIONS)))
    return {'check': name, 'gpu': gpu, 'verdict': verdict, 'action': action, 'value': value,
            'threshold': threshold, 'source': source, 'evidence': evidence, 'reason': reason}


def worst(verdicts):
    """The worst of ``verdicts`` (PASS when there is none)."""
    return max(verdicts, key=STATUS.get) if verdicts else 'PASS'


def node_verdict(checks):
    """``(verdict, action, reasons)`` of a node from its checks: the worst verdict, the strongest action among
    the checks that have it, and each such check's one-line reason."""
    verdict = worst([c['verdict'] for c in checks])
    if verdict == 'PASS':
        return verdict, 'none', []
    worst_checks = [c for c in checks if c['verdict'] == verdict]
    action = max((c['action'] for c in worst_checks), key=ACTIONS.index)
    return verdict, action, [describe(c) for c in worst_checks]


def describe(result):
    """One line a person reads: ``GPU 1 ecc: FAIL (reset_gpu): 3 volatile uncorrected errors >= 1``."""
    where = 'GPU %s ' % result['gpu'] if result['gpu'] is not None else ''
    return '%s%s: %s (%s): %s' % (where, result['check'], result['verdict'], result['action'],
                                  result['reason'] or 'value %s' % (result['value'],))
