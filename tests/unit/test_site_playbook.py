# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/site.yml: one broken host does not stop the fleet, and the fleet summary names it.

The templates are evaluated with Ansible's own templar; the playbook itself is run by
ansible-playbook on a small inventory (local connections, and one host that refuses SSH)
with a stand-in gpu_node role made only of controller-side actions (set_fact, fail,
debug), so nothing runs on this machine.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import subprocess
import sys

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from core_compat import trust_as_template

from role_templates import site_summary

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SITE = os.path.join(ROOT, 'playbooks', 'site.yml')


def plays():
    with open(SITE) as handle:
        return yaml.safe_load(handle)


def render(template, **variables):
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(template))


def rescue():
    converge = plays()[0]['tasks'][0]
    return converge['rescue']


def fleet_summary():
    return plays()[-1]['tasks'][0]


def test_the_role_runs_in_a_block_whose_rescue_fails_the_host_again():
    converge = plays()[0]['tasks'][0]
    assert converge['block'] == [{'name': "The node's concerns",
                                  'ansible.builtin.import_role': {'name': 'gpufleet.nvidia.gpu_node',
                                                                  'rolespec_validate': False}}]
    # One task: the host fails again at once (a threshold counts it), under any --tags.
    [fail] = rescue()
    assert 'ansible.builtin.fail' in fail and fail['tags'] == ['always']
    assert fail['register'] == '__site_node_error'


def test_no_failure_threshold_unless_one_is_asked_for():
    play = plays()[0]
    assert play['serial'] == "{{ gpufleet_serial | default('100%') }}"
    assert play['max_fail_percentage'] == '{{ gpufleet_max_fail_percentage | default(omit) }}'
    assert 'any_errors_fatal' not in play


def failure_message(**variables):
    return render(rescue()[0]['ansible.builtin.fail']['msg'], **variables)


def test_the_rescue_names_the_failed_task_and_its_message():
    task = {'name': 'Deploy the persistence daemon', 'action': 'gpufleet.nvidia.persistenced'}
    result = {'failed': True, 'msg': 'nvidia-persistenced not found on PATH'}
    assert failure_message(ansible_failed_task=task, ansible_failed_result=result) == (
        "failed at 'Deploy the persistence daemon': nvidia-persistenced not found on PATH")
    # An unnamed task is named by its action; a result without a message says so.
    assert failure_message(ansible_failed_task=dict(task, name=''), ansible_failed_result={'failed': True}) == (
        "failed at 'gpufleet.nvidia.persistenced': no message")


def summary_lines(hosts, hostvars):
    return site_summary(hosts, hostvars)


def test_the_fleet_summary_has_one_line_per_host_healthy_failed_or_unreachable():
    node = {'state': {'converged': False, 'drifted': ['docker']},
            'persistenced': {'init_system': 'systemd', 'daemon': 'nvidia', 'pid': 42},
            'gpu_persistence': {'gpus': [{'index': 0, 'after': 'enabled'}]},
            'container_runtime': {'runtimes': {'runc': {}, 'nvidia': {}}, 'action': 'reload',
                                  'verification': {'status': 'ok'}}}
    healthy = ('found=drifted:docker init=systemd daemon=nvidia(pid 42) gpus=0:enabled docker_runtimes=nvidia,runc '
               'docker_action=reload nvidia_run=ok')
    hostvars = {
        'h1': {'gpu_node_result': node},
        'h2': {'__site_node_error': {'failed': True, 'msg': "failed at 'Deploy the persistence daemon': gone"},
               'gpu_node_result': node},
        'h3': {},
    }
    assert summary_lines(['h1', 'h2', 'h3'], hostvars) == [
        'h1 ok ' + healthy,
        "h2 failed at 'Deploy the persistence daemon': gone",
        'h3 unreachable',
    ]
    assert fleet_summary()['run_once'] is True and fleet_summary()['tags'] == ['always']
    assert plays()[-1]['hosts'] == plays()[0]['hosts']


def test_no_task_per_host_after_the_role():
    # Each task a host goes through costs a forked worker on the controller: the per-host lines are the
    # fleet summary's, made in one task.
    assert 'post_tasks' not in plays()[0]
    assert [list(task) for task in plays()[0]['tasks']] == [
        ['name', 'block', 'rescue'], ['name', 'ansible.builtin.meta', 'when', 'tags']]
    # the health gate's stop: a meta task, which the strategy runs on the controller (no worker per host)
    assert plays()[0]['tasks'][1]['ansible.builtin.meta'] == 'end_play'


# The playbook run: a stand-in gpu_node role with the real one's shape (a concern, then the
# next ones, then gpu_node_result), which fails on the hosts named in `broken`.
STUB_ROLE = '''
- name: Deploy the persistence daemon
  ansible.builtin.fail:
    msg: "nvidia-persistenced: driver daemon binary not found"
  when: inventory_hostname in broken | default([])
  tags: [persistenced]

- name: Reach the host
  ansible.builtin.ping:
  when: ansible_connection == 'ssh'
  tags: [persistenced]

- name: Per-GPU persistence and the container runtime
  ansible.builtin.set_fact:
    __stub_converged: true
  tags: [gpu_persistence, container_runtime]

- name: Publish the node's result
  ansible.builtin.set_fact:
    gpu_node_result:
      state: {converged: true, drifted: []}
      persistenced: {init_system: systemd, daemon: nvidia, pid: 42}
      gpu_persistence: {gpus: [{index: 0, after: enabled}]}
      container_runtime: {runtimes: {nvidia: {}}, action: none, verification: {status: ok}}
  when: __stub_converged | default(false)
  tags: [always]
'''

HEALTHY = ('found=converged init=systemd daemon=nvidia(pid 42) gpus=0:enabled docker_runtimes=nvidia docker_action=none '
           'nvidia_run=ok')
BROKEN = "failed at 'Deploy the persistence daemon': nvidia-persistenced: driver daemon binary not found"


@pytest.fixture
def fleet(tmp_path):
    role = tmp_path / 'collections' / 'ansible_collections' / 'gpufleet' / 'nvidia' / 'roles' / 'gpu_node'
    (role / 'tasks').mkdir(parents=True)
    (role.parent.parent / 'plugins').symlink_to(os.path.join(ROOT, 'plugins'))  # the summary's filter
    (role / 'tasks' / 'main.yml').write_text(STUB_ROLE)
    inventory = tmp_path / 'inventory.ini'
    local = 'ansible_connection=local ansible_python_interpreter=%s' % sys.executable
    inventory.write_text('[gpu_nodes]\n'
                         'h1 %s\n'
                         'h2 %s\n'
                         'h3 ansible_connection=ssh ansible_host=127.0.0.1 ansible_port=1 ansible_user=nobody\n'
                         'h4 %s\n' % (local, local, local))
    return tmp_path


def run_site(fleet, *extra):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(fleet / 'collections'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_STDOUT_CALLBACK='default', ANSIBLE_HOST_KEY_CHECKING='false', ANSIBLE_RETRY_FILES_ENABLED='false',
               ANSIBLE_LOCAL_TEMP=str(fleet / 'tmp'), ANSIBLE_REMOTE_TEMP=str(fleet / 'tmp'))
    argv = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', str(fleet / 'inventory.ini'),
            '-e', 'ansible_become=false', '-e', '{"broken": ["h2"]}'] + list(extra) + [SITE]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, cwd=str(fleet), check=False)
    return proc.returncode, proc.stdout + proc.stderr


def printed_summary(out):
    """The fleet summary's lines as the default callback prints them."""
    tail = out.split('TASK [Summarise the fleet]', 1)
    if len(tail) == 1:
        return None
    block = tail[1].split('PLAY RECAP', 1)[0]
    return [yaml.safe_load('"%s"' % line) for line in re.findall(r'^ {8}"(.*)",?$', block, re.M)]


def recap(out):
    return dict((host, dict(re.findall(r'(\w+)=(\d+)', counts)))
                for host, counts in re.findall(r'^(h\d)\s+:(.*)$', out.split('PLAY RECAP', 1)[1], re.M))


def test_healthy_hosts_converge_past_a_broken_one_and_the_run_still_fails(fleet):
    rc, out = run_site(fleet)
    # 4: a host was unreachable (2 would be failed hosts only).
    assert rc == 4, out
    assert printed_summary(out) == ['h1 ok ' + HEALTHY, 'h2 ' + BROKEN, 'h3 unreachable', 'h4 ok ' + HEALTHY], out
    counts = recap(out)
    assert counts['h2']['failed'] == '1' and counts['h2']['rescued'] == '1'
    assert counts['h3']['unreachable'] == '1'
    assert counts['h1']['failed'] == counts['h4']['failed'] == '0'


def test_a_failed_host_alone_exits_2(fleet):
    rc, out = run_site(fleet, '--limit', 'h1,h2')
    assert rc == 2, out
    assert printed_summary(out) == ['h1 ok ' + HEALTHY, 'h2 ' + BROKEN], out


def test_a_failure_under_tags_still_fails_the_host(fleet):
    rc, out = run_site(fleet, '--limit', 'h1,h2', '--tags', 'persistenced')
    assert rc == 2, out
    assert recap(out)['h2']['failed'] == '1'
    assert printed_summary(out)[1] == 'h2 ' + BROKEN, out


def test_a_failure_threshold_still_stops_the_rollout(fleet):
    # Rolling safety: with a threshold of 0 the first failure stops every host, and no summary is printed.
    rc, out = run_site(fleet, '--limit', 'h1,h2,h4', '-e', 'gpufleet_max_fail_percentage=0')
    assert rc == 2, out
    assert 'NO MORE HOSTS LEFT' in out and printed_summary(out) is None
    assert 'TASK [Summarise the fleet]' not in out
    # Batches of one: the broken host's batch stops the run; the hosts after it are never touched.
    rc, out = run_site(fleet, '--limit', 'h2,h1,h4', '-e', 'gpufleet_serial=1', '-e', '{"broken": ["h1"]}')
    assert rc == 2, out
    assert sorted(recap(out)) == ['h1'] and printed_summary(out) is None
