# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The container_runtime role and docker_runtime module, run by ansible-playbook against the lab dockerd.

This goes through the real module (argument spec, init-system detection, PID
discovery in /proc, the API client, atomic_move) rather than module_utils.
Only reloads happen here: restarts need an init system that manages this
dockerd (the lab hosts in tests/lab cover those).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))

PLAYBOOK = '''
- name: Register the nvidia runtime on the lab dockerd
  hosts: localhost
  gather_facts: false
  roles:
    - role: gpufleet.nvidia.container_runtime
  post_tasks:
    - name: Save the module result
      ansible.builtin.copy:
        content: "{{ container_runtime_result | to_json }}"
        dest: "{{ result_file }}"
        mode: "0600"
      check_mode: false
'''


def play(lab, tmp_path, *extra):
    playbook = tmp_path / 'site.yml'
    playbook.write_text(PLAYBOOK)
    result_file = tmp_path / 'result.json'
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, '.build', 'collections'),
               ANSIBLE_NOCOLOR='1', ANSIBLE_STDOUT_CALLBACK='default')
    argv = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', 'localhost,', '-c', 'local',
            '-e', 'ansible_python_interpreter=%s' % sys.executable,
            '-e', 'result_file=%s' % result_file,
            '-e', 'container_runtime_daemon_json=%s' % lab.config,
            '-e', 'container_runtime_docker_host=unix://%s' % lab.socket,
            '-e', '{"container_runtime_default": true}'] + list(extra) + [str(playbook)]
    # In the lab's namespace, as on a host of the engine's release: the module takes a dockerd for the docker
    # service only when it runs the installed dockerd binary (the engine's, bound at /usr).
    proc = subprocess.run(lab.inside(argv), capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(result_file.read_text()), proc.stdout


def test_role_reloads_then_does_nothing(lab_dockerd, tmp_path):
    lab = lab_dockerd
    pid = lab.pid()
    before = open(lab.config).read()

    predicted, out = play(lab, tmp_path, '--check', '--diff')
    assert predicted['changed'] and predicted['action'] == 'reload'
    assert open(lab.config).read() == before
    assert '"default-runtime": "nvidia"' in out  # the diff

    first, out = play(lab, tmp_path)
    assert first['changed'] and first['action'] == 'reload', first['msg']
    assert first['dockerd_pid_before'] == first['dockerd_pid_after'] == pid == lab.pid()
    info = lab.api.info()
    assert info['DefaultRuntime'] == 'nvidia' and 'nvidia' in info['Runtimes']
    assert any('nvidia-container-toolkit' in w for w in first['warnings'])

    second, out = play(lab, tmp_path)
    assert not second['changed'] and second['action'] == 'none'
    role_task = out.split('TASK [Save the module result]')[0]
    assert 'ok: [localhost]' in role_task and 'changed: [localhost]' not in role_task
