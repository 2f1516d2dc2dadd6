# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""slurmd's ``HealthCheckProgram``: the GPU health evaluation of gpu_health, run on the node between two Ansible
runs, and the drain or resume it calls for.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change at any time. ``slurm.program`` builds
it into a program (a Python zip application of this collection's code) that slurm_node installs with its
configuration; ``main`` is that program.

The rules, as LBNL NHC keeps them (``decide``, pure): a FAIL drains a node that takes jobs, with the reason
``gpufleet: health <check>: <detail>``; a PASS resumes a node drained for such a reason, and only such a node;
WARN and UNKNOWN change nothing. A drain or down a person gave is never touched nor its reason replaced, and a
rollout's drain (``gpufleet: rollout``) is the rollout's to end. slurmd kills the program after 60 seconds: every
command it runs has a short time limit, and a Slurm error is printed, never raised.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import os
import sys

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import HostFileError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import backends
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health.apply import HealthRun
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import paths
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import config as program_config
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import slurm as slurm_node

DEFAULT_CONFIG = '/etc/gpufleet/slurm-health-check.json'
# slurmd kills a HealthCheckProgram after 60 s: at most two reads of the state and one update, and the journal.
SLURM_TIMEOUT = 10
JOURNAL_TIMEOUT = 15
CONFIG_LIMIT = 1 << 20
READER = "slurmd's health check, as root"
# The configuration's keys (slurm.program.install_config writes them) and their types.
CONFIG_KEYS = {'contract': dict, 'node_name': str, 'kernel_log': str, 'act': bool, 'scontrol': str, 'squeue': str}
NOT_DONE = {'none': 'no action', 'drain': 'not drained', 'resume': 'not resumed'}


class ConfigError(Exception):
    """The program's own configuration cannot be used: the message names the file and what to do."""


# --------------------------------------------------------------------------
# The rules
# --------------------------------------------------------------------------

def is_health_reason(reason):
    return isinstance(reason, str) and reason.startswith(slurm_node.HEALTH)


def is_rollout_reason(reason):
    return isinstance(reason, str) and reason.startswith(slurm_node.ROLLOUT)


def health_reason(health):
    """The drain reason for ``health``'s verdict: ``gpufleet: health <check>: <detail>`` of its first check with that
    verdict, or None for PASS (or a verdict no check carries)."""
    verdict = health.get('verdict')
    if verdict == 'PASS':
        return None
    for result in health.get('checks') or ():
        if result.get('verdict') == verdict:
            where = 'GPU %s: ' % result['gpu'] if result.get('gpu') is not None else ''
            detail = result.get('reason') or 'value %s' % (result.get('value'),)
            return slurm_node.clean_reason('%s %s: %s%s' % (slurm_node.HEALTH, result.get('check'), where, detail))
    return None


def _first_reason(health):
    reasons = health.get('reasons') or []
    return reasons[0] if reasons else health.get('msg') or 'no reason given'


def _kept(state):
    """Why a drained or down node is none of the health check's business, or None when it is (a health drain)."""
    if state['held']:
        return 'drained or down by %s for a reason of theirs (%s): never touched by us' % (
            state['reason_user'] or 'someone', state['reason'] or 'no reason')
    if is_rollout_reason(state['reason']):
        return 'drained by a rollout (%s): the rollout resumes it' % state['reason']
    if not is_health_reason(state['reason']):
        return 'drained by us, not for health (%s): left as it is' % state['reason']
    return None


def decide(state, health):
    """What the health check does to a node: ``{'action': 'drain'|'resume'|'none', 'reason', 'why'}``.

    ``state``: ``SlurmNode.state()`` (``node.describe``), None for a node slurmctld does not know; ``health``:
    ``HealthRun.evaluate()``'s result. ``reason`` is the drain reason of the verdict (``health_reason``: set for
    every verdict but PASS, whether or not the node is drained now: slurm_node turns a rollout's drain into a
    health drain with it); ``why`` says, in words, why this action.
    """
    verdict = health.get('verdict')
    reason = health_reason(health)

    def answer(action, why):
        return {'action': action, 'reason': reason, 'why': why}

    if state is None:
        return answer('none', 'slurmctld does not know this node: name it (node_name) as slurm.conf does')
    if verdict == 'FAIL':
        if state['available']:
            return answer('drain', 'the health verdict is FAIL: %s' % _first_reason(health))
        if is_health_reason(state['reason']) and not state['held']:
            return answer('none', 'drained for health already (%s)' % state['reason'])
        return answer('none', _kept(state))
    if verdict == 'PASS':
        if state['available']:
            return answer('none', 'the node is in service')
        kept = _kept(state)
        if kept:
            return answer('none', kept)
        return answer('resume', 'the health verdict is PASS; it was drained for "%s"' % state['reason'])
    return answer('none', 'the health verdict is %s (%s): a node is drained only on FAIL and resumed only on PASS'
                  % (verdict or 'UNKNOWN', _first_reason(health)))


# --------------------------------------------------------------------------
# One check
# --------------------------------------------------------------------------

def failed_checks(health):
    """The names of the checks that failed, in order, each once."""
    names = []
    for result in health.get('checks') or ():
        if result.get('verdict') == 'FAIL' and result.get('check') not in names:
            names.append(result.get('check'))
    return names


def check(config, node, health_run):
    """Evaluate (``health_run()``: ``HealthRun.evaluate()``'s result), read the node's state, decide and, unless
    ``config['act']`` is false, drain or resume through ``node`` (a SlurmNode). Returns what happened: ``node``,
    ``verdict``, ``failed`` (the failing checks), ``state`` (before), ``action``, ``reason``, ``why``, ``acted``,
    ``error`` (a Slurm error or a failed evaluation, in words; never raised)."""
    result = {'node': node.name, 'verdict': 'UNKNOWN', 'failed': [], 'state': None, 'action': 'none',
              'reason': None, 'why': '', 'acted': False, 'error': None}
    try:
        health = health_run()
    except Exception as exc:  # pylint: disable=broad-except  # the program reports; slurmd runs it again
        result['error'] = 'the health evaluation failed: %s: %s' % (type(exc).__name__, exc)
        result['why'] = 'no verdict'
        return result
    result['verdict'] = health.get('verdict') or 'UNKNOWN'
    result['failed'] = failed_checks(health)
    if not node.present:
        result['error'] = "Slurm's clients (scontrol, squeue) were not found on this host"
        result['why'] = 'not a Slurm node'
        return result
    try:
        result['state'] = node.state()
    except slurm_node.SlurmError as exc:
        result['error'] = str(exc)
        result['why'] = 'the node\'s state is unknown'
        return result
    result.update(decide(result['state'], health))
    if result['action'] == 'none' or not config.get('act', True):
        return result
    try:
        if result['action'] == 'drain':
            node.update('DRAIN', result['reason'])
        else:
            node.update('RESUME')
        result['acted'] = True
    except slurm_node.SlurmError as exc:
        result['error'] = str(exc)
    return result


def summary(result):
    """The program's one line: ``gpufleet health: PASS; node h2 idle; no action: the node is in service``."""
    verdict = result['verdict'] + (' (%s)' % ', '.join(result['failed']) if result['failed'] else '')
    state = result['state']
    if state is None:
        where = 'node %s' % result['node']
    else:
        where = 'node %s %s' % (result['node'], state['state'].lower())
        if state['reason']:
            where += ' (%s)' % state['reason']
    action = result['action']
    if result['error'] and not result['acted']:
        done = 'error: %s; %s' % (result['error'], NOT_DONE[action])
    elif action == 'none':
        done = 'no action: %s' % result['why']
    elif not result['acted']:
        done = 'would %s (act is false): %s' % (action, result['reason'] if action == 'drain' else result['why'])
    elif action == 'drain':
        done = 'drained: %s' % result['reason']
    else:
        done = 'resumed: %s' % result['why']
    return ' '.join(('gpufleet health: %s; %s; %s' % (verdict, where, done)).split())


# --------------------------------------------------------------------------
# The program
# --------------------------------------------------------------------------

def read_config(path):
    """The configuration at ``path`` (``host.config.read_program_config``), validated. Raises ConfigError naming the
    file and the remedy."""
    return validate_config(path, program_config.read_program_config(
        path, READER, 'gpufleet.nvidia.slurm_node (health_check: true)', ConfigError, CONFIG_LIMIT))


def validate_config(path, config):
    """``config`` with its defaults, every key of the right type; ConfigError naming ``path`` otherwise."""
    if not isinstance(config, dict):
        raise ConfigError('%s: the configuration is a JSON %s, not an object' % (path, type(config).__name__))
    unknown = sorted(set(config) - set(CONFIG_KEYS))
    if unknown:
        raise ConfigError('%s: unknown keys %s (known: %s): converge the node with gpufleet.nvidia.slurm_node to '
                          'install a matching program' % (path, ', '.join(unknown), ', '.join(sorted(CONFIG_KEYS))))
    for key, kind in sorted(CONFIG_KEYS.items()):
        value = config.get(key)
        if value is not None and (not isinstance(value, kind) or (kind is str and not value)):
            wanted = 'non-empty string' if kind is str else kind.__name__
            raise ConfigError('%s: "%s" must be a %s, not %r' % (path, key, wanted, value))
    for key in ('scontrol', 'squeue'):
        if config.get(key) and not config[key].startswith('/'):
            raise ConfigError('%s: "%s" must be an absolute path, not %r' % (path, key, config[key]))
    return dict(config, contract=config.get('contract') or {}, act=config.get('act') is not False)


def binary(config, name, path):
    """The path of Slurm's client ``name``: the configuration's (a root-owned executable nobody else can write,
    in directories only root can change), else ``node.find_binary``'s."""
    given = config.get(name)
    if not given:
        return slurm_node.find_binary(name)
    try:
        real = paths.resolve_path(given, reader=READER)
    except HostFileError as exc:
        raise ConfigError('%s: "%s": %s' % (path, name, exc))
    found = slurm_node.find_binary(os.path.basename(real), (os.path.dirname(real),))
    if found is None:
        raise ConfigError('%s: "%s" is %s, which is not an executable file owned by root that only root can write: '
                          'fix the path or the file' % (path, name, given))
    return found


def run_with(timeout):
    def run(argv):
        return slurm_node.subprocess_run(argv, timeout=timeout)
    return run


def build_node(config, path):
    return slurm_node.SlurmNode(config.get('node_name') or slurm_node.default_name(), run_with(SLURM_TIMEOUT),
                                binary(config, 'scontrol', path), binary(config, 'squeue', path))


def build_health(config):
    kernel_log = config.get('kernel_log')
    params = {'contract': config['contract'], 'kernel_log': None if kernel_log in (None, 'auto') else kernel_log,
              'report_passed': False}
    return HealthRun(params, backends.load_pynvml, run_with(JOURNAL_TIMEOUT))


def main(argv=None):
    """The program: one line on standard output, exit 0; exit 1 (its message on standard error) only when its own
    configuration cannot be used."""
    parser = argparse.ArgumentParser(prog='gpufleet-slurm-health-check', description=(
        "slurmd's HealthCheckProgram: evaluate this node's GPU health (gpufleet.nvidia.gpu_health's checks) and drain "
        'it on FAIL, resume a node it drained on PASS.'))
    parser.add_argument('--config', default=DEFAULT_CONFIG, help='its configuration (default: %(default)s)')
    parser.add_argument('--no-act', action='store_true', help='print what it would do; drain and resume nothing')
    options = parser.parse_args(argv)
    try:
        config = read_config(options.config)
        node = build_node(config, options.config)
    except ConfigError as exc:
        sys.stderr.write('gpufleet health: cannot run: %s\n' % ' '.join(str(exc).split()))
        return 1
    if options.no_act:
        config['act'] = False
    health = build_health(config)
    sys.stdout.write(summary(check(config, node, health.evaluate)) + '\n')
    sys.stdout.flush()
    return 0
