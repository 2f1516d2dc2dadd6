# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The roles' decisions and published results (container_runtime_result, gpu_node_result), in plain Python.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change at any time. The roles call these
functions through the filters of ``plugins/filter/results.py``, one template each; the role variables hold data
and those calls only. A registered result that Ansible skipped (``skipped: true``) counts as not run, like one
never registered (``None``: the roles pass ``| default(none)``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from collections.abc import Mapping

from ansible_collections.gpufleet.nvidia.plugins.module_utils.engines.names import ENGINES
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._role_table import DECLARED

# ENGINES: the container engines, in the order the container_runtime role registers with them (module_utils'
# engines.names: the one list, on the hosts and here; the engines' declarations say the same, a unit test holds it).
# gpu_node's concerns, in the order it runs them (their declarations').
CONCERNS = tuple(concern['name'] for concern in DECLARED)
# The inner roles' results gpu_node publishes, with the device_links module's, by key of gpu_node_result.
NODE_KEYS = tuple(concern['name'] for concern in DECLARED if not concern.get('engine'))


def ran(result):
    """Whether a registered result is one of a task that ran (registered, and not skipped)."""
    return isinstance(result, dict) and not result.get('skipped')


def runtime_engines(named, found=None):
    """The engines container_runtime registers with: those ``named`` (container_runtime_engines), with ``auto``
    those container_engines_info ``found``, in ``ENGINES`` order, each once."""
    wanted = [name for name in named or [] if name != 'auto']
    if 'auto' in (named or []) and isinstance(found, dict):
        wanted += found.get('auto') or []
    return [name for name in ENGINES if name in wanted]


def runtime_apply_refused(apply, engine_list):
    """The message that refuses ``apply`` before anything changes ('' when it is accepted): containerd has no
    reload (docker_runtime and crio_runtime have one)."""
    if apply == 'reload' and 'containerd' in engine_list:
        return ('container_runtime_apply is reload, but containerd has no reload (it is restarted when its '
                'configuration changed): use auto, restart or none, or leave containerd out of '
                'container_runtime_engines (%s)' % ', '.join(engine_list))
    return ''


def runtime_result(engine_list, containerd=None, crio=None, docker=None, found=None):
    """container_runtime_result: dockerd's module result (its verification included) at the top, as before there
    were other engines, every listed engine's result under ``engines``, the list, and what ``auto`` found."""
    published = docker if 'docker' in engine_list and isinstance(docker, dict) else {}
    given = {'containerd': containerd, 'crio': crio, 'docker': published}
    engines = dict((name, given[name]) for name in ENGINES if name in engine_list)
    result = dict(published)
    result.update(engines=engines, engine_list=list(engine_list),
                  found=found.get('engines') if isinstance(found, dict) else None,
                  changed=any(isinstance(value, dict) and bool(value.get('changed')) for value in engines.values()))
    return result


def evaluated(state):
    """Whether node_state ran (gpu_node_evaluate_first): its result is registered, not skipped, and says what
    to run."""
    return ran(state) and 'run' in state


def node_run(state, drift_only=False):
    """The concerns gpu_node runs: none when only evaluating, node_state's choice, else all of them."""
    if drift_only:
        return []
    return list(state['run']) if evaluated(state) else list(CONCERNS)


def node_result(state=None, device_links=None, persistenced=None, gpu_persistence=None, container_toolkit=None,
                container_runtime=None, cdi=None, gpu_health=None, slurm_node=None, drain=None, health_gate=None):
    """gpu_node_result: each concern's role result where its role ran, else node_state's check-mode verdict for
    it (a concern it found converged), else None; node_state's whole result under ``state``.

    The container engines: the role's result, and for the engines it did not run, node_state's verdicts. ``drain``:
    the slurm_node drain step's result (gpu_node_disruption: drain), under ``drain`` where it ran; ``health_gate``: the
    health gate's record (plugin_utils/_rollout.py), where it ran."""
    roles = {'device_links': device_links, 'persistenced': persistenced, 'gpu_persistence': gpu_persistence,
             'container_toolkit': container_toolkit, 'cdi': cdi, 'gpu_health': gpu_health, 'slurm_node': slurm_node}
    checked = {}
    if isinstance(state, dict) and isinstance(state.get('concerns'), dict):
        checked = dict((name, verdict.get('result') if isinstance(verdict, dict) else None)
                       for name, verdict in state['concerns'].items())
    result = {'state': state if evaluated(state) else None, 'drain': drain if ran(drain) else None,
              'health_gate': health_gate if isinstance(health_gate, dict) else None}
    for key in NODE_KEYS:
        result[key] = roles[key] if ran(roles[key]) else checked.get(key)
    engines_checked = dict((name, value) for name, value in checked.items() if name in ENGINES)
    runtime_ran = container_runtime if ran(container_runtime) else {}
    if runtime_ran or engines_checked:
        runtime = dict(engines_checked.get('docker') or {})
        runtime.update(runtime_ran)
        engines = dict(engines_checked)
        engines.update(runtime_ran.get('engines') or {})
        state_dict = state if isinstance(state, dict) else {}
        runtime.update(
            engines=engines,
            engine_list=state_dict['engine_list'] if 'engine_list' in state_dict
            else runtime_ran.get('engine_list', []),
            found=state_dict['engines_found'] if 'engines_found' in state_dict else runtime_ran.get('found'),
            changed=runtime_ran.get('changed', False))
        result['container_runtime'] = runtime
    else:
        result['container_runtime'] = None
    return result


def host_values(hosts, hostvars, name, key=None, missing=None, every=False):
    """``{host: value}``: the variable ``name`` of each of ``hosts`` (``hostvars``, Ansible's, or any mapping of host
    to its variables) where it is defined, with every host (``None`` where it is not) when ``every``. With ``key``,
    that key of the variable, ``missing`` where the variable is not a mapping or has no such key: what a playbook
    wrote as a loop over ``hostvars`` with ``default()``."""
    found = {}
    for host in hosts:
        variables = hostvars[host] if host in hostvars else {}
        if name not in variables:
            if every:
                found[host] = None
            continue
        value = variables[name]
        if key is not None:
            value = value[key] if isinstance(value, Mapping) and key in value else missing
        found[host] = value
    return found
