# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The verification of a registered runtime (engines.verify): what is run, and what its answers mean.

Moved here from tests/unit/test_role_results.py, where the same decisions were Jinja in the
container_runtime role's vars; the engine modules now decide them in Python.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.engines import verify as v

SCRIPT = "'for d in /dev/nvidia*; do [ -e \"$d\" ] && echo \"$d\"; done; echo gpufleet-verify-end'"
THROUGH_NVIDIA = ('docker run --rm --network none --runtime nvidia -e NVIDIA_VISIBLE_DEVICES=%s '
                  '--entrypoint sh gpufleet/busybox:lab -c ' + SCRIPT)
PLAIN = 'docker run --rm --network none --entrypoint sh gpufleet/busybox:lab -c ' + SCRIPT
IMAGES = '<none>:<none>\ngpufleet/busybox:lab\ncuda:12\n'
# The last line of a whole output (a container's output can be lost: engines.verify.END).
END = 'gpufleet-verify-end\n'
TWO = '/dev/nvidia-uvm\n/dev/nvidia1\n/dev/nvidia0\n/dev/nvidiactl\n/dev/nvidia-uvm-tools\n' + END


class Host(object):
    """The host's commands: ``answers`` maps a command's first words to ``(rc, out, err)``; every call is kept."""

    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def __call__(self, argv):
        self.calls.append(argv)
        text = ' '.join(argv)
        for start in sorted(self.answers, key=len, reverse=True):
            if text.startswith(start):
                answer = self.answers[start]
                return answer(argv) if callable(answer) else answer
        raise AssertionError('unexpected command: %s' % text)


def request(**changed):
    values = dict(verify=True, image='', devices=['all'], name='nvidia', runtime_path='nvidia-container-runtime')
    values.update(changed)
    return v.Request(**values)


def docker_verify(host, req=None, default_runtime='runc', **kwargs):
    arguments = dict(check_mode=False, state='present', loaded=True, loaded_why='action reload')
    arguments.update(kwargs)
    return v.verify(req or request(), v.Docker('docker'), host, default_runtime=default_runtime, **arguments)


def test_verification_runs_a_container_through_the_runtime_with_the_first_tagged_local_image():
    host = Host({'docker image ls': (0, IMAGES, ''), 'docker run': (0, TWO, '')})
    result = docker_verify(host)
    assert host.calls[0] == ['docker', 'image', 'ls', '--format', '{{.Repository}}:{{.Tag}}']
    assert result == {
        'status': 'ok', 'verified': True, 'image': 'gpufleet/busybox:lab',
        'runs': [{'visible_devices': 'all', 'command': THROUGH_NVIDIA % 'all', 'rc': 0,
                  'devices': ['/dev/nvidia-uvm', '/dev/nvidia-uvm-tools', '/dev/nvidia0', '/dev/nvidia1',
                              '/dev/nvidiactl']}],
        'msg': 'ran 1 container: dockerd runs containers through the "nvidia" runtime (NVIDIA_VISIBLE_DEVICES=all saw '
               '/dev/nvidia-uvm, /dev/nvidia-uvm-tools, /dev/nvidia0, /dev/nvidia1, /dev/nvidiactl)'}


def test_one_container_per_value_each_with_the_nodes_it_saw():
    seen = {'all': TWO, '1': '/dev/nvidia1\n/dev/nvidiactl\n', 'GPU-b': '/dev/nvidia1\n', 'none': ''}

    def container(argv):
        value = [arg for arg in argv if arg.startswith('NVIDIA_VISIBLE_DEVICES=')][0].split('=', 1)[1]
        return 0, seen[value] + END, ''

    host = Host({'docker image ls': (0, IMAGES, ''), 'docker run': container})
    result = docker_verify(host, request(devices=['all', '1', 'GPU-b', 'none']))
    assert [(run['visible_devices'], run['devices']) for run in result['runs']] == [
        ('all', ['/dev/nvidia-uvm', '/dev/nvidia-uvm-tools', '/dev/nvidia0', '/dev/nvidia1', '/dev/nvidiactl']),
        ('1', ['/dev/nvidia1', '/dev/nvidiactl']), ('GPU-b', ['/dev/nvidia1']), ('none', [])]
    values = ('all', '1', 'GPU-b', 'none')
    assert [run['command'] for run in result['runs']] == [THROUGH_NVIDIA % value for value in values]
    assert result['status'] == 'ok' and 'NVIDIA_VISIBLE_DEVICES=none saw no /dev/nvidia* node' in result['msg']


def test_a_container_that_asked_for_gpus_and_saw_none_fails_naming_the_value():
    # A runtime that runs containers but injects nothing (runc under NVIDIA's name, a toolkit in a mode that
    # finds no GPU): the control nodes alone are not a GPU.
    seen = {'all': '/dev/nvidiactl\n/dev/nvidia-uvm\n', '1': '/dev/nvidia1\n'}

    def container(argv):
        value = [arg for arg in argv if arg.startswith('NVIDIA_VISIBLE_DEVICES=')][0].split('=', 1)[1]
        return 0, seen[value] + END, ''

    host = Host({'docker image ls': (0, IMAGES, ''), 'docker run': container})
    result = docker_verify(host, request(devices=['1', 'all']))
    assert result['status'] == 'no_gpu' and result['verified'] is False
    assert [run['rc'] for run in result['runs']] == [0, 0]
    assert result['msg'].startswith('"%s" ran, but the container saw no GPU device node (/dev/nvidia-uvm, '
                                    '/dev/nvidiactl)' % (THROUGH_NVIDIA % 'all'))
    assert 'the GPUs NVIDIA_VISIBLE_DEVICES=all asks for' in result['msg']
    # A value that asks for no GPU, and dockerd's plain run through its default runtime, are not judged.
    host = Host({'docker image ls': (0, IMAGES, ''), 'docker run': (0, END, '')})
    assert docker_verify(host, request(devices=['void', 'none']))['status'] == 'ok'


def test_only_device_node_lines_count():
    assert v.devices_seen('/dev/nvidia1\nsh: warning\n/dev/nvidia0 \n/dev/nvidia1\n\n/dev/null\n') == [
        '/dev/nvidia0', '/dev/nvidia1']


def test_verification_also_runs_a_plain_container_when_the_runtime_is_dockerds_default():
    host = Host({'docker image ls': (0, IMAGES, ''), 'docker run': (0, TWO, '')})
    result = docker_verify(host, default_runtime='nvidia')
    assert result['verified'] is True
    assert [run['command'] for run in result['runs']] == [THROUGH_NVIDIA % 'all', PLAIN]
    assert [run['visible_devices'] for run in result['runs']] == ['all', None]
    assert result['msg'].startswith('ran 2 containers: ') and '; the default runtime saw /dev/nvidia-uvm, ' in result['msg']


def test_a_container_that_does_not_run_fails_with_the_command_and_dockers_words():
    stderr = 'docker: Error response from daemon: exec: "nvidia-container-runtime": executable file not found.\n'
    host = Host({'docker image ls': (0, IMAGES, ''), 'docker run': (127, '', stderr)})
    result = docker_verify(host)
    assert result['verified'] is False and result['status'] == 'failed'
    assert result['msg'].startswith('"%s" failed (rc 127): %s. ' % (THROUGH_NVIDIA % 'all', stderr.strip().rstrip('.')))
    assert 'NVIDIA Container Toolkit' in result['msg'] and 'verify to false' in result['msg']
    assert 'stderr' not in result['runs'][0]
    # A second run that failed after a first that worked fails too.
    host = Host({'docker image ls': (0, IMAGES, ''), 'docker run --rm --network none --runtime': (0, TWO, ''),
                 'docker run': (1, '', 'boom')})
    result = docker_verify(host, default_runtime='nvidia')
    assert result['verified'] is False and result['msg'].startswith('"%s" failed (rc 1): boom. ' % PLAIN)
    assert [run['rc'] for run in result['runs']] == [0, 1]


def test_no_local_image_runs_nothing_and_says_which_image_to_load_or_name():
    host = Host({'docker image ls': (0, '', '')})
    none = docker_verify(host)
    assert none['verified'] is None and none['status'] == 'no_image' and none['runs'] == []
    assert 'never pulls' in none['msg'] and 'verify_image' in none['msg'] and 'docker load' in none['msg']
    assert len(host.calls) == 1
    assert docker_verify(Host({'docker image ls': (0, '<none>:<none>\n', '')}))['status'] == 'no_image'
    # A named image is looked up by itself; when it is missing, the message names it.
    cuda = 'nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04'
    host = Host({'docker image inspect': (1, '', 'Error: No such image: %s' % cuda)})
    result = docker_verify(host, request(image=cuda))
    assert host.calls == [['docker', 'image', 'inspect', '--format', '{{.Id}}', cuda]]
    assert result['status'] == 'no_image' and result['image'] is None
    assert result['msg'].startswith('image "%s" is not present locally (Error: No such image' % cuda)
    host = Host({'docker image inspect': (0, 'sha256:1\n', ''), 'docker run': (0, END, '')})
    found = docker_verify(host, request(image=cuda))
    assert found['image'] == cuda and [call[-3] for call in host.calls[1:]] == [cuda]


@pytest.mark.parametrize('changed, status', [
    ({'req': request(verify=False)}, 'off'),
    ({'check_mode': True}, 'check_mode'),
    ({'state': 'absent'}, 'absent'),
    ({'loaded': False, 'loaded_why': 'action deferred, dockerd is not running'}, 'not_loaded'),
])
def test_nothing_is_run_where_there_is_nothing_to_verify(changed, status):
    host = Host({})
    result = docker_verify(host, **changed)
    assert result['verified'] is None and result['status'] == status and result['runs'] == []
    assert host.calls == []
    if status == 'not_loaded':
        assert result['msg'] == ('dockerd does not run the "nvidia" runtime (action deferred, dockerd is not '
                                 'running); no container was run')


def test_no_client_runs_nothing_and_says_so():
    result = v.verify(request(), v.Docker(None), Host({}), False, 'present', True)
    assert result['status'] == 'no_client' and result['verified'] is None
    assert result['msg'] == 'the dockerd client (docker) is not installed; no container was run'


def test_the_result_holds_the_documented_keys_and_only_known_statuses():
    result = docker_verify(Host({}), check_mode=True)
    assert sorted(result) == ['image', 'msg', 'runs', 'status', 'verified']
    assert set(v.SKIPPED) < set(v.STATUSES)


# containerd: ctr in its own namespace, through the registered runtime binary.

CTR = ['ctr', '--address', '/run/containerd/containerd.sock', '--namespace', 'gpufleet']


def ctr_verify(host, req=None, **kwargs):
    arguments = dict(check_mode=False, state='present', loaded=True, loaded_why='action restart')
    arguments.update(kwargs)
    client = v.Ctr('ctr', '/run/containerd/containerd.sock', run_id=7)
    return v.verify(req or request(runtime_path='/usr/bin/nvidia-container-runtime'), client, host, **arguments)


def test_containerd_runs_ctr_in_its_namespace_through_the_runtime_binary():
    refs = 'sha256:abc\nimport-2026@sha256:def\ndocker.io/gpufleet/busybox:1\ndocker.io/a/b:2\n'
    host = Host({' '.join(CTR + ['images']): (0, refs, ''), ' '.join(CTR + ['run']): (0, TWO, '')})
    result = ctr_verify(host, request(runtime_path='/usr/bin/nvidia-container-runtime', devices=['all', '1']))
    assert host.calls[0] == CTR + ['images', 'ls', '--quiet']
    assert result['image'] == 'docker.io/a/b:2' and result['status'] == 'ok'
    assert host.calls[1] == CTR + ['run', '--rm', '--runc-binary', '/usr/bin/nvidia-container-runtime', '--env',
                                   'NVIDIA_VISIBLE_DEVICES=all', 'docker.io/a/b:2', 'gpufleet-verify-7-0', 'sh', '-c',
                                   v.SCRIPT]
    assert host.calls[2][-4] == 'gpufleet-verify-7-1' and len(host.calls) == 3
    assert 'containerd runs containers through the "nvidia" runtime' in result['msg']


def test_containerd_named_image_must_be_in_its_namespace():
    host = Host({' '.join(CTR + ['images']): (0, 'docker.io/gpufleet/busybox:1\n', '')})
    result = ctr_verify(host, request(image='gpufleet/busybox:1', runtime_path='/usr/bin/nvidia-container-runtime'))
    assert result['status'] == 'no_image'
    assert 'ctr -n gpufleet images ls lists no tagged image' in result['msg']
    assert 'ctr -n gpufleet images import' in result['msg']


def test_a_failed_ctr_run_deletes_the_container_it_may_have_left():
    host = Host({' '.join(CTR + ['images']): (0, 'docker.io/gpufleet/busybox:1\n', ''),
                 ' '.join(CTR + ['run']): (1, '', 'ctr: failed to create shim task: OCI runtime create failed'),
                 ' '.join(CTR + ['containers']): (0, '', '')})
    result = ctr_verify(host)
    assert result['status'] == 'failed' and result['verified'] is False
    assert host.calls[-1] == CTR + ['containers', 'delete', 'gpufleet-verify-7-0']
    assert 'containerd has the "nvidia" runtime (/usr/bin/nvidia-container-runtime) registered' in result['msg']


def test_containerd_not_loaded_says_why():
    result = ctr_verify(Host({}), loaded=False, loaded_why='action deferred, containerd is not running')
    assert result['msg'] == ('containerd does not run the "nvidia" runtime (action deferred, containerd is not '
                             'running); no container was run')


@pytest.mark.parametrize('module', ['docker_runtime', 'containerd_runtime'])
def test_each_engine_module_documents_the_verification_it_returns(module):
    # Ansible has doc fragments for options but none for RETURN: each engine module repeats the verification's
    # return docs, held here to what engines.verify returns (keys and every status, in engines.verify's order).
    import importlib

    import yaml

    doc = yaml.safe_load(importlib.import_module(
        'ansible_collections.gpufleet.nvidia.plugins.modules.%s' % module).RETURN)['verification']
    assert sorted(doc['contains']) == sorted(docker_verify(Host({}), check_mode=True))
    assert tuple(doc['contains']['status']['choices']) == v.STATUSES


def test_a_lost_output_is_run_again_and_never_read_as_no_gpu():
    # containerd's I/O can lose the output of a container that prints and exits at once: rc 0, nothing printed.
    answers = [(0, '', ''), (0, '/dev/nvidia0\n', ''), (0, TWO, '')]  # lost, cut short, whole
    host = Host({' '.join(CTR + ['images']): (0, 'docker.io/gpufleet/busybox:1\n', ''),
                 ' '.join(CTR + ['run']): lambda argv: answers.pop(0),
                 ' '.join(CTR + ['containers']): (0, '', '')})
    result = ctr_verify(host)
    assert result['status'] == 'ok' and result['runs'][0]['devices'] == [
        '/dev/nvidia-uvm', '/dev/nvidia-uvm-tools', '/dev/nvidia0', '/dev/nvidia1', '/dev/nvidiactl']
    runs = [call for call in host.calls if call[len(CTR)] == 'run']
    deletes = [call for call in host.calls if call[len(CTR)] == 'containers']
    assert len(runs) == 3 and len(deletes) == 2  # each lost run's container is deleted before the next
    assert sorted(result['runs'][0]) == ['command', 'devices', 'rc', 'visible_devices']


def test_an_output_lost_every_time_fails_saying_so_not_no_gpu():
    host = Host({'docker image ls': (0, IMAGES, ''), 'docker run': (0, '', '')})
    result = docker_verify(host)
    assert result['status'] == 'failed' and result['verified'] is False
    assert len([call for call in host.calls if call[1] == 'run']) == v.ATTEMPTS
    assert result['msg'].startswith('"%s" exited 0 but its output never arrived (the line gpufleet-verify-end '
                                    'missing), 3 times in a row: dockerd lost the output' % (THROUGH_NVIDIA % 'all'))
