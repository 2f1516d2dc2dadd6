# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A concern is declared once (``DECLARATION`` in plugins/module_utils/concerns/<name>.py); what is built from the
declarations elsewhere is held to them here: the drift report's columns, the fleet summary's words, gpu_node's tasks
and tags, node_state's order and the engines' list. (The controller's table, node_state's registry, the roles'
argument specs and defaults and docs/role-variables.md are written from the declarations: test_role_specs.py.)"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

import yaml

from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import registry
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.base import DECLARATION_KEYS
from ansible_collections.gpufleet.nvidia.plugins.module_utils.engines.names import ENGINES
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import _drift, _fleet_summary, _results
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._role_table import DECLARED

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_each_declaration_uses_the_documented_keys_and_its_order_is_node_states():
    for declared in DECLARED:
        assert set(declared) - {'options'} <= set(DECLARATION_KEYS), declared['name']
    assert tuple(declared['name'] for declared in DECLARED) == registry.ORDER == _results.CONCERNS
    assert tuple(declared['name'] for declared in DECLARED if declared.get('engine')) == ENGINES == registry.ENGINES
    assert _results.NODE_KEYS == tuple(name for name in registry.ORDER if name not in ENGINES)
    assert registry.DEPENDS == dict((d['name'], tuple(d['after'])) for d in DECLARED if d.get('after'))


def test_a_role_variable_is_found_where_it_acts():
    # `git grep VARIABLE` finds its concern's file: the declaration names it whole, no prefix rule builds it
    for declared in DECLARED:
        with open(os.path.join(ROOT, 'plugins', 'module_utils', 'concerns', declared['name'] + '.py')) as handle:
            text = handle.read()
        for row in declared['variables']:
            assert "('%s', '%s'" % (row[0], row[1]) in text, (declared['name'], row)


def verdict(result, converged=True, failed=False):
    return {'converged': converged, 'failed': failed, 'result': result, 'changes': ''}


EVERY_CONCERN = {
    'converged': False, 'drifted': list(ENGINES),
    'concerns': dict([
        ('device_links', verdict({'init_system': 'systemd'})),
        ('persistenced', verdict({'init_system': 'systemd', 'daemon': 'driver', 'actions': []})),
        ('gpu_persistence', verdict({'gpus': [{'index': 0, 'before': 'disabled', 'after': 'enabled',
                                               'changed': True}]}, False)),
        ('container_toolkit', verdict({'converged': True, 'installed': {}, 'drift': []})),
        ('cdi', verdict({'stale': [], 'actions': []})),
        ('gpu_health', verdict({'verdict': 'FAIL', 'action': 'reset_gpu'})),
        ('slurm_node', verdict({'slurm': True, 'state': {'state': 'IDLE+DRAIN', 'reason': 'fan replaced Tuesday'}})),
    ] + [(name, verdict({'action': 'restart'}, False)) for name in ENGINES])}


def test_the_drift_report_has_the_declared_columns():
    row = _drift.drift_report({'h1': EVERY_CONCERN})['hosts'][0]
    declared = [d['drift'] for d in DECLARED if d.get('drift')]
    assert set(_drift.COLUMNS + _drift.OPTIONAL) == {'host', 'status', 'init'} | set(declared)
    assert set(_drift.OPTIONAL) == set(d['drift'] for d in DECLARED if d.get('drift_optional'))
    # every declared column is filled from its concern's verdict (not left at the empty row's n/a or [])
    empty = _drift.drift_report({'h1': None})['hosts'][0]
    assert [column for column in declared if row[column] == empty[column]] == [], row


def test_the_fleet_summary_prints_the_declared_words():
    node = {
        'state': {'converged': True, 'drifted': []},
        'persistenced': {'init_system': 'systemd', 'daemon': 'driver', 'pid': 12},
        'gpu_persistence': {'gpus': [{'index': 0, 'after': 'enabled'}]},
        'container_toolkit': {'converged': True, 'installed': {}, 'drift': []},
        'gpu_health': {'verdict': 'PASS', 'action': 'none'},
        'slurm_node': {'slurm': True, 'state': {'state': 'IDLE'}},
        'container_runtime': {'runtimes': {'nvidia': {}}, 'action': 'none', 'verification': {'status': 'ok'},
                              'engines': dict((name, {'runtimes': ['nvidia'], 'action': 'none'})
                                              for name in ENGINES)},
    }
    words = [word.split('=')[0] for word in _fleet_summary.node_line(node).split()
             if re.match(r'^\w+=', word)]
    assert set(words) == {'found'} | set(word for d in DECLARED for word in d.get('summary', ()))


def test_gpu_node_runs_every_declared_concern_under_its_tag():
    with open(os.path.join(ROOT, 'roles', 'gpu_node', 'tasks', 'concerns.yml')) as handle:
        tasks = yaml.safe_load(handle)
    tagged = [task['tags'][0] for task in tasks if task.get('tags') and task['tags'] != ['always']]
    # in node_state's order, the container runtime role where the engines are
    wanted = [name for name in registry.ORDER if name not in ENGINES[1:]]
    wanted[wanted.index(ENGINES[0])] = 'container_runtime'
    assert tagged == wanted
    with open(os.path.join(ROOT, 'roles', 'gpu_node', 'tasks', 'main.yml')) as handle:
        main = yaml.safe_load(handle)
    included = [task for task in main if 'ansible.builtin.include_tasks' in task][0]
    assert included['tags'] == wanted
    # each concern's task runs where node_state says it drifted (the engines: the container runtime's list)
    for task in tasks:
        if task.get('tags', [None])[0] in registry.ORDER:
            assert "'%s' in __gpu_node_run" % task['tags'][0] in task['when'], task['name']


def test_node_state_documents_an_option_per_declared_concern():
    # its argument spec is built from the registry; its documentation is written by hand and must follow
    from ansible_collections.gpufleet.nvidia.plugins.modules import node_state
    documented = yaml.safe_load(node_state.DOCUMENTATION)['options']
    assert [name for name in registry.ORDER if name not in documented] == []
    assert [name for name in documented if name not in registry.ORDER
            and name not in ('engines', 'role_vars', 'publish_result', 'bundled_source')] == []
