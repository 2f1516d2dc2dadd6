# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/site.yml's fleet summary: each host's gpu_node_result is untrusted data."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._fleet_summary import fleet_summary

NODE = {'state': {'converged': False, 'drifted': ['docker']},
        'persistenced': {'init_system': 'systemd', 'daemon': 'nvidia', 'pid': 42},
        'gpu_persistence': {'gpus': [{'index': 0, 'after': 'enabled'}]},
        'container_runtime': {'runtimes': {'runc': {}, 'nvidia': {}}, 'action': 'reload',
                              'verification': {'status': 'ok'},
                              'engines': {'containerd': {'runtimes': ['runc', 'nvidia'], 'action': 'none'}}}}
HEALTHY = ('h1 ok found=drifted:docker init=systemd daemon=nvidia(pid 42) gpus=0:enabled docker_runtimes=nvidia,runc '
           'docker_action=reload nvidia_run=ok containerd_runtimes=nvidia,runc containerd_action=none')


def test_one_line_per_host_in_the_play_order():
    lines = fleet_summary(['h1', 'h2', 'h3'], {'h1': NODE, 'h2': NODE}, {'h2': "failed at 'x': gone"})
    assert lines == [HEALTHY, "h2 failed at 'x': gone", 'h3 unreachable']


def test_a_node_with_nothing_evaluated():
    assert fleet_summary(['h1'], {'h1': {'state': None, 'persistenced': None, 'container_runtime': None}}) == [
        'h1 ok found=n/a init=n/a daemon=n/a(pid none) gpus=n/a docker_runtimes=n/a docker_action=n/a nvidia_run=n/a']


HOSTILE_SHAPES = [
    'x', ['state'], 7,
    {'state': 'x'},
    {'state': {'converged': 'yes'}},
    {'state': {'converged': False, 'drifted': 'docker'}},
    {'persistenced': 'x'},
    {'persistenced': {'init_system': ['systemd']}},
    {'persistenced': {'pid': {'a': 1}}},
    {'gpu_persistence': {'gpus': 'x'}},
    {'gpu_persistence': {'gpus': ['x']}},
    {'gpu_persistence': {'gpus': [{'index': [0], 'after': 'enabled'}]}},
    {'container_runtime': {'runtimes': ['nvidia']}},
    {'container_runtime': {'verification': 'ok'}},
    {'container_runtime': {'engines': {'crio': 'x'}}},
    {'container_runtime': {'engines': {'containerd': {'runtimes': 'nvidia'}}}},
]


@pytest.mark.parametrize('hostile', HOSTILE_SHAPES, ids=[repr(shape)[:60] for shape in HOSTILE_SHAPES])
def test_a_result_of_the_wrong_shape_gives_that_host_a_failed_line_alone(hostile):
    lines = fleet_summary(['h1', 'bad', 'h3'], {'h1': NODE, 'bad': hostile, 'h3': NODE})
    assert lines[0] == HEALTHY and lines[2] == HEALTHY.replace('h1', 'h3', 1)
    assert lines[1].startswith('bad failed: its gpu_node_result was malformed (') and lines[1].isprintable()


FORGED = 'gone\nh0 ok found=converged\r\x1b[2K\x1b[1A\u202e'
ESCAPED = 'gone\\nh0 ok found=converged\\r\\x1b[2K\\x1b[1A\\u202e'


def test_every_printed_value_is_escaped_one_line_per_host():
    node = {'state': {'converged': False, 'drifted': ['docker\nh0 ok']},
            'persistenced': {'init_system': 'systemd\x1b[31m', 'daemon': FORGED, 'pid': '1\r'},
            'gpu_persistence': {'gpus': [{'index': '0\n', 'after': FORGED}]},
            'container_runtime': {'runtimes': {FORGED: {}}, 'action': FORGED, 'verification': {'status': FORGED},
                                  'engines': {'crio': {'runtimes': [FORGED], 'action': FORGED}}}}
    lines = fleet_summary(['h1', 'h2\n', 'h3'], {'h1': node}, {'h2\n': FORGED, 'h3': {'msg': 'x'}})
    assert len(lines) == 3 and all(line.isprintable() for line in lines), lines
    assert lines[0].split(' ')[:5] == ['h1', 'ok', 'found=drifted:docker\\nh0', 'ok', 'init=systemd\\x1b[31m']
    assert 'daemon=%s(pid 1\\r)' % ESCAPED in lines[0] and 'gpus=0\\n:' + ESCAPED in lines[0]
    for word in ('docker_runtimes=', 'docker_action=', 'nvidia_run=', 'crio_runtimes=', 'crio_action='):
        assert word + ESCAPED in lines[0], word
    assert lines[1] == 'h2\\n ' + ESCAPED
    assert lines[2] == 'h3 failed, its message malformed (a mapping, not a string)'


def test_the_toolkit_word_where_the_node_has_the_concern():
    installed = {'nvidia-container-toolkit': '1.20.0-1', 'nvidia-container-toolkit-base': '1.20.0-1'}
    node = dict(NODE, container_toolkit={'converged': True, 'installed': installed, 'version': '1.20.0-1',
                                         'actions': ['install', 'hold']})
    assert fleet_summary(['h1'], {'h1': node}) == [HEALTHY.replace(' containerd_', ' toolkit=1.20.0-1 containerd_', 1)]
    # check mode: what would be done
    node['container_toolkit'] = dict(node['container_toolkit'], converged=False,
                                     installed=dict.fromkeys(installed))
    assert ' toolkit=none->1.20.0-1:install,hold ' in fleet_summary(['h1'], {'h1': node})[0]
    # switched off: no word, the line as before
    assert fleet_summary(['h1'], {'h1': dict(NODE, container_toolkit=None)}) == [HEALTHY]
    # a version that is not one fails that host's line
    node['container_toolkit'] = dict(node['container_toolkit'], installed={'nvidia-container-toolkit': 'a b'})
    assert 'was malformed' in fleet_summary(['h1'], {'h1': node})[0]


def test_the_health_word_and_a_host_value_outside_the_verdicts():
    assert ' health=PASS' in fleet_summary(['h1'], {'h1': dict(NODE, gpu_health={'verdict': 'PASS', 'action': 'none'})})[0]
    line = fleet_summary(['h1'], {'h1': dict(NODE, gpu_health={'verdict': 'FAIL', 'action': 'reset_gpu'})})[0]
    assert ' health=FAIL:reset_gpu' in line
    assert fleet_summary(['h1'], {'h1': dict(NODE, gpu_health=None)}) == fleet_summary(['h1'], {'h1': NODE})
    # the same rule as the drift report's health column: a value outside the closed sets fails that host's line
    bad = fleet_summary(['h1'], {'h1': dict(NODE, gpu_health={'verdict': 'FAIL\x1b[2J', 'action': 'reset_gpu'})})[0]
    assert 'was malformed' in bad and bad.isprintable()


def test_a_deferred_change_says_which_concern_what_and_the_work_that_held_it():
    node = dict(NODE, persistenced=dict(NODE['persistenced'], deferred={
        'action': 'stop', 'policy': 'defer',
        'work': {'containers': [{'pid': 100, 'name': 'sleep', 'container': '1a2b3c4d5e6f', 'devices': ['/dev/nvidia0']}],
                 'holders': [{'pid': 7, 'name': 'train', 'uid': 1000, 'paths': ['/dev/nvidia0']}]}}))
    node['container_runtime'] = dict(NODE['container_runtime'], engines={'containerd': {
        'runtimes': [], 'action': 'deferred', 'deferred': {'action': 'restart', 'work': {
            'holders': [{'pid': 7, 'name': 'tr\x1bain', 'uid': 1000, 'paths': ['/dev/nvidia0']}]}}}})
    (line,) = fleet_summary(['h1'], {'h1': node})
    assert ' deferred=persistenced:stop(container 1a2b3c4d5e6f pid 100 +1),containerd:restart(pid 7 tr\\x1bain) ' \
        in line + ' '
    hostile = dict(NODE, persistenced={'deferred': {'action': 'stop', 'work': {'containers': 'x'}}})
    assert fleet_summary(['h1'], {'h1': hostile})[0].startswith('h1 failed: its gpu_node_result was malformed')


def test_a_slurm_nodes_state_and_what_the_drain_step_did():
    from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._fleet_summary import node_line
    base = {'persistenced': {'init_system': 'sysvinit', 'daemon': 'driver', 'pid': 5}}
    resumed = dict(base, slurm_node={'slurm': True, 'verdict': 'PASS', 'state': {'state': 'IDLE', 'reason': None}},
                   drain={'changed': True, 'jobs': [], 'timed_out': False})
    assert ' slurm=IDLE,drained,health=PASS' in node_line(resumed)
    kept = dict(base, slurm_node={'slurm': True, 'state': {'state': 'IDLE+DRAIN', 'reason': 'fan replaced Tuesday'}},
                drain={'changed': False, 'jobs': [{'id': '7'}], 'timed_out': True})
    assert ' slurm=IDLE+DRAIN(fan replaced Tuesday),drain_kept,timed_out(1 jobs)' in node_line(kept)
    # no Slurm: no word; a reason with a newline stays on one line
    assert 'slurm=' not in node_line(dict(base, slurm_node={'slurm': False}))
    evil = dict(base, slurm_node={'slurm': True, 'state': {'state': 'DOWN', 'reason': 'x\ny'}})
    assert 'slurm=DOWN(x\\ny)' in node_line(evil)
