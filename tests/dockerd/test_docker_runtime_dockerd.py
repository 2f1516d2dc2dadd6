# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""docker_runtime's apply logic against a real dockerd 20.10 (see conftest.py).

Run as root:
    PYTHONPATH=.build/collections .venv/bin/python -m pytest -v tests/dockerd
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker import apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker import dockerd

from .conftest import DOCKERD, LabService

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
COLLECTIONS = os.path.join(REPO, '.build', 'collections')


def converge(lab, service=None, **params):
    service = service or LabService(lab)
    request = apply.Request(path=lab.config, timeout=params.pop('timeout', 45), **params)
    result = apply.converge(request, service, lab.api, poll=0.1)
    return result, service


def read(path):
    with open(path, 'rb') as handle:
        return handle.read()


def running_container(lab, image):
    return lab.docker('run', '-d', '--runtime', 'runc', '--network', 'none', '--stop-timeout', '1', image,
                      'sh', '-c', "trap 'exit 0' TERM; while :; do sleep 1; done")


def is_running(lab, container):
    try:
        return lab.api.get('/containers/%s/json' % container)['State']['Running']
    except Exception:
        return False


def test_first_registration_is_a_reload_and_containers_survive(lab_dockerd, busybox_image):
    lab = lab_dockerd
    container = running_container(lab, busybox_image)
    assert is_running(lab, container)
    pid = lab.pid()
    user_before = read(lab.config)

    result, service = converge(lab)

    assert result['action'] == 'reload', result['msg']
    assert result['changed'] and result['file_changed']
    assert (service.reloads, service.restarts) == (1, 0)
    assert result['dockerd_pid_before'] == result['dockerd_pid_after'] == pid == lab.pid()
    info = lab.api.info()
    assert info['Runtimes']['nvidia'] == {'path': 'nvidia-container-runtime'}
    assert info['DefaultRuntime'] == 'runc'
    assert is_running(lab, container), 'a reload must not stop containers'
    # The user's keys are still there, byte for byte.
    after = read(lab.config).decode()
    for line in user_before.decode().splitlines()[1:3]:
        assert line.rstrip(',') in after
    assert any('not found on this host' in w and 'nvidia-container-toolkit' in w for w in result['warnings'])

    # A re-run sends no signal at all and does not rewrite the file.
    inode = os.stat(lab.config).st_ino
    again, service = converge(lab)
    assert again['action'] == 'none' and not again['changed'], again['msg']
    assert (service.reloads, service.restarts) == (0, 0)
    assert os.stat(lab.config).st_ino == inode
    assert is_running(lab, container)


def test_default_runtime_reload_then_removal_needs_restart(lab_dockerd):
    lab = lab_dockerd
    pid = lab.pid()
    original = read(lab.config)
    result, service = converge(lab, default_runtime=True, runtime_args=['--debug'])
    assert result['action'] == 'reload' and (service.reloads, service.restarts) == (1, 0)
    assert lab.pid() == pid
    info = lab.api.info()
    assert info['DefaultRuntime'] == 'nvidia'
    assert info['Runtimes']['nvidia'] == {'path': 'nvidia-container-runtime', 'runtimeArgs': ['--debug']}

    # Dropping default-runtime from the file: a reload would keep it, so restart.
    result, service = converge(lab, default_runtime=False, runtime_args=['--debug'])
    assert result['action'] == 'restart', result['msg']
    assert (service.reloads, service.restarts) == (0, 1)
    assert result['dockerd_pid_after'] != pid and result['dockerd_pid_after'] == lab.pid()
    assert lab.api.info()['DefaultRuntime'] == 'runc'

    # state=absent removes the runtime: a restart as well, then nothing.
    result, service = converge(lab, state='absent')
    assert result['action'] == 'restart' and service.restarts == 1
    assert 'nvidia' not in lab.api.info()['Runtimes']
    # The "runtimes" object the first run added goes with the runtime: the user's file, byte for byte.
    assert read(lab.config) == original
    result, service = converge(lab, state='absent')
    assert result['action'] == 'none' and (service.reloads, service.restarts) == (0, 0)


def test_absent_of_the_running_default_never_reloads(lab_dockerd):
    """dockerd 20.10 panics when a reload drops the running default runtime: restart instead."""
    lab = lab_dockerd
    converge(lab, default_runtime=True)
    result, service = converge(lab, state='absent')
    assert result['action'] == 'restart' and service.reloads == 0
    info = lab.api.info()
    assert info['DefaultRuntime'] == 'runc' and 'nvidia' not in info['Runtimes']


def test_file_written_earlier_but_never_applied_is_applied(lab_dockerd):
    lab = lab_dockerd
    first, service = converge(lab, apply='none')
    assert first['action'] == 'deferred' and first['file_changed'] and service.reloads == 0
    assert 'nvidia' not in lab.api.info()['Runtimes']
    second, service = converge(lab)
    assert not second['file_changed'] and second['action'] == 'reload' and service.reloads == 1
    assert 'nvidia' in lab.api.info()['Runtimes']


def test_check_mode_predicts_and_touches_nothing(lab_dockerd):
    lab = lab_dockerd
    before = read(lab.config)
    service = LabService(lab)
    result = apply.converge(apply.Request(path=lab.config, default_runtime=True), service, lab.api, check_mode=True)
    assert result['changed'] and result['action'] == 'reload' and result['file_changed']
    assert read(lab.config) == before and service.reloads == 0
    assert '"default-runtime": "nvidia"' in result['after']


@pytest.mark.dockerd_flags('--default-runtime=runc')
def test_flag_conflict_refused_before_writing(lab_dockerd):
    lab = lab_dockerd
    before = read(lab.config)
    service = LabService(lab)
    with pytest.raises(GpufleetError) as excinfo:
        converge(lab, service=service, default_runtime=True)
    assert 'refusing to write' in str(excinfo.value) and '--default-runtime=runc' in str(excinfo.value)
    assert read(lab.config) == before
    assert (service.reloads, service.restarts) == (0, 0)


@pytest.mark.dockerd_flags('--default-runtime=runc')
def test_config_dockerd_rejects_is_rolled_back(lab_dockerd):
    """Flags we cannot see (a wrapper script): reload is refused, restart fails, the file is restored."""
    lab = lab_dockerd
    before = read(lab.config)
    pid = lab.pid()
    service = LabService(lab, flags_visible=False)
    started = time.time()
    with pytest.raises(GpufleetError) as excinfo:
        converge(lab, service=service, default_runtime=True, timeout=20)
    message = str(excinfo.value)
    print(message)
    assert 'previous file was restored and dockerd restarted with it' in message
    assert 'both as a flag and in the configuration file' in message, message
    assert read(lab.config) == before
    assert lab.pid() and lab.pid() != pid
    assert lab.api.info()['DefaultRuntime'] == 'runc'
    assert service.reloads == 1 and service.restarts == 2
    assert time.time() - started < 60


def test_dockerd_not_running_defers(lab_dockerd):
    lab = lab_dockerd
    lab.stop()
    result, service = converge(lab)
    assert result['action'] == 'deferred' and result['changed']
    assert 'not running' in result['msg'] and result['dockerd_pid_before'] is None
    assert 'nvidia' in json.loads(read(lab.config))['runtimes']
    again, service = converge(lab)
    assert again['action'] == 'none' and not again['changed']
    lab.start()
    assert 'nvidia' in lab.api.info()['Runtimes']


WORKER = textwrap.dedent('''
    import sys
    sys.path.insert(0, %(collections)r)
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker import apply

    class NoDockerd(object):
        def pid(self): return None
        def flags(self): return []

    path, name, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    sys.stdout.write('ready\\n')  # imported: the writes start now
    sys.stdout.flush()
    for index in range(rounds):
        request = apply.Request(path=path, name=name, runtime_path='/opt/%%s/%%d' %% (name, index), apply='none')
        apply.converge(request, NoDockerd(), api=None)
''')


def _worker(tmp_path):
    script = tmp_path / 'worker.py'
    script.write_text(WORKER % {'collections': COLLECTIONS})
    return str(script)


def test_concurrent_merges_lose_nothing(tmp_path):
    path = str(tmp_path / 'daemon.json')
    with open(path, 'w') as handle:
        handle.write('{\n  "log-driver": "local"\n}\n')
    script = _worker(tmp_path)
    names = ['gpu-a', 'gpu-b', 'gpu-c', 'gpu-d']
    procs = [subprocess.Popen([sys.executable, script, path, name, '25']) for name in names]
    assert [p.wait(120) for p in procs] == [0] * len(names)
    config = json.loads(read(path))
    assert config['log-driver'] == 'local'
    assert sorted(config['runtimes']) == names
    for name in names:
        assert config['runtimes'][name]['path'] == '/opt/%s/24' % name


def test_kill_9_mid_write_leaves_a_valid_file(tmp_path):
    path = str(tmp_path / 'daemon.json')
    original = '{\n  "data-root": "/srv/docker",\n  "x-big": 123456789012345678901234567890\n}\n'
    with open(path, 'w') as handle:
        handle.write(original)
    script = _worker(tmp_path)
    rng = random.Random(8)
    kills = 0
    progressed = set()
    stale = 0
    for _round in range(25):
        proc = subprocess.Popen([sys.executable, script, path, 'nvidia', '100000'], stdout=subprocess.PIPE)
        # Kill it while it writes, not while Python starts (which takes longer than the sleep on a busy machine).
        assert proc.stdout.readline() == b'ready\n'
        time.sleep(0.15 + rng.random() * 0.2)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        kills += 1
        text = read(path).decode()
        config = json.loads(text)
        assert config['data-root'] == '/srv/docker'
        assert '123456789012345678901234567890' in text
        # Killed before its first write (a slow start on a busy machine), the file is still the original.
        assert 'runtimes' not in config or config['runtimes']['nvidia']['path'].startswith('/opt/nvidia/')
        progressed.add(config.get('runtimes', {}).get('nvidia', {}).get('path'))
        stale = max(stale, len([n for n in os.listdir(str(tmp_path)) if n.endswith('.tmp')]))
    assert kills == 25
    assert len(progressed) > 10, 'the writer must have been killed at many different points'
    print('distinct states seen: %d, temp files left by a kill: %d' % (len(progressed), stale))
    # Temp files a killed writer left are removed by the next run (under the lock).
    subprocess.run([sys.executable, script, path, 'nvidia', '1'], check=True)
    assert sorted(os.listdir(str(tmp_path))) == ['daemon.json', 'worker.py']


def test_dockerd_reading_another_file_is_refused(lab_dockerd, tmp_path):
    lab = lab_dockerd
    other = str(tmp_path / 'daemon.json')
    service = LabService(lab)
    with pytest.raises(GpufleetError) as excinfo:
        apply.converge(apply.Request(path=other), service, lab.api)
    assert 'reads %s, not %s' % (lab.config, other) in str(excinfo.value)
    assert not os.path.exists(other) and service.reloads == 0


def server_major(lab):
    return int(lab.api.info()['ServerVersion'].split('.')[0])


def test_cdi_switch_applied_as_each_dockerd_needs(lab_dockerd):
    """features.cdi, per dockerd release (measured): 20.10 has no CDI and does not report it, so a change is
    reloaded and cannot be checked; 26 reports CDISpecDirs (empty while CDI is off) and a SIGHUP leaves CDI as
    it was, so switching it is a restart; 28 has CDI on by default, so cdi=true changes the file and nothing
    else, and cdi=false is a restart."""
    lab = lab_dockerd
    converge(lab)
    pid = lab.pid()
    info = lab.api.info()
    major = server_major(lab)
    if major < 25:
        assert 'CDISpecDirs' not in info
        result, service = converge(lab, cdi=True)
        assert result['action'] == 'reload' and service.reloads == 1 and lab.pid() == pid
    else:
        on_by_default = bool(info['CDISpecDirs'])
        assert on_by_default == (major >= 28), info['CDISpecDirs']
        if on_by_default:  # saying what dockerd already does only writes the file
            result, service = converge(lab, cdi=True)
            assert result['action'] == 'none' and result['file_changed'], result['msg']
            assert (service.reloads, service.restarts) == (0, 0) and lab.pid() == pid
        result, service = converge(lab, cdi=not on_by_default)
        assert result['action'] == 'restart', result['msg']
        assert (service.reloads, service.restarts) == (0, 1) and lab.pid() != pid
        assert 'dockerd reads features.cdi only when it starts' in result['msg']
        assert bool(lab.api.info()['CDISpecDirs']) is (not on_by_default)
    cdi = json.loads(read(lab.config))['features']['cdi']
    again, service = converge(lab, cdi=cdi)
    assert again['action'] == 'none' and not again['changed'] and (service.reloads, service.restarts) == (0, 0)


def test_absent_with_cdi_takes_back_what_present_with_cdi_added(lab_dockerd):
    """present with cdi=true, then absent with the same options: the file's exact bytes come back, and the running
    dockerd has its release's own CDI default again (26: off; 28: on, so CDI is no reason to restart there)."""
    lab = lab_dockerd
    original = read(lab.config)
    major = server_major(lab)
    default_on = bool(lab.api.info().get('CDISpecDirs'))
    converge(lab, cdi=True, default_runtime=True)
    assert json.loads(read(lab.config))['features'] == {'cdi': True}
    if major >= 25:
        assert lab.api.info()['CDISpecDirs']
    result, service = converge(lab, state='absent', cdi=True)
    assert read(lab.config) == original
    assert result['action'] == 'restart', result['msg']  # a runtime's removal is a restart on every release
    # CDI's own reason only where the file's missing features.cdi means off while dockerd runs with it on (25 to 27).
    assert ('dockerd reads features.cdi only when it starts' in result['msg']) is (25 <= major < 28), result['msg']
    if major >= 25:
        assert bool(lab.api.info()['CDISpecDirs']) is default_on is (major >= 28)
    again, service = converge(lab, state='absent', cdi=True)
    assert again['action'] == 'none' and not again['changed'] and (service.reloads, service.restarts) == (0, 0)


@pytest.mark.daemon_json('{\n  "live-restore": true\n}\n')
def test_restart_with_live_restore_keeps_containers(lab_dockerd, busybox_image):
    """docs/usage.md's advice: with live-restore, even the restart a removal needs keeps containers running."""
    lab = lab_dockerd
    converge(lab, default_runtime=True)
    container = running_container(lab, busybox_image)
    result, service = converge(lab, state='absent')
    assert result['action'] == 'restart' and service.restarts == 1
    assert result['dockerd_pid_after'] != result['dockerd_pid_before']
    assert is_running(lab, container)


def _option_keys(lab):
    def run(argv):  # the engine's own dockerd, in the lab's namespace
        proc = subprocess.run(lab.inside(argv), capture_output=True, text=True)
        return proc.returncode, proc.stdout, proc.stderr
    return dockerd.option_keys_from_help(dockerd.dockerd_help(run, DOCKERD))


def test_option_keys_from_help_match_this_dockerd(lab_dockerd):
    """Before --validate (dockerd 23), every key we derive from `dockerd --help` is one this dockerd accepts (checked
    by dockerd itself). From 23 the module asks `dockerd --validate` instead: the help still lists flags the file
    no longer takes (26 and 28: graph, cluster-store, cluster-store-opts, cluster-advertise), so there the validator
    must refuse an unknown key and accept what the module writes."""
    lab = lab_dockerd
    keys = _option_keys(lab)
    assert {'runtimes', 'default-runtime', 'features', 'log-opts', 'live-restore'} <= keys

    def run(argv, data=None):  # the module's run_command: the validator hands dockerd the file on its stdin
        proc = subprocess.run(lab.inside(argv), capture_output=True, text=True, input=data)
        return proc.returncode, proc.stdout, proc.stderr
    validate = dockerd.dockerd_validator(run, DOCKERD)
    if server_major(lab) >= 23:
        assert validate is not None
        assert "x-not-an-option" in validate('{"x-not-an-option": 1}')
        merged = apply.Request(path=lab.config, default_runtime=True, cdi=True).merge(read(lab.config).decode())
        assert validate(merged.text) is None
        return
    assert validate is None
    lab.stop()
    flags_in_lab = {'config-file', 'data-root', 'exec-root', 'pidfile', 'host', 'hosts', 'iptables', 'bridge',
                    'storage-driver', 'validate', 'help', 'version'}
    with open(lab.config, 'w') as handle:
        json.dump(dict((key, None) for key in sorted(keys - flags_in_lab) + ['x-not-an-option']), handle)
    lab.start(wait=False)
    lab.proc.wait(30)
    assert lab.log_tail().strip().endswith("don't match any configuration option: x-not-an-option")


def test_unknown_key_already_in_file_is_refused_not_restarted(lab_dockerd):
    """A key dockerd never saw (never restarted since) would keep it down: refuse before touching anything."""
    lab = lab_dockerd
    text = read(lab.config).decode().replace('"log-level": "info"', '"log-level": "info",\n  "//": "edited by hand"')
    with open(lab.config, 'w') as handle:
        handle.write(text)
    pid = lab.pid()
    service = LabService(lab)
    with pytest.raises(GpufleetError) as excinfo:
        apply.converge(apply.Request(path=lab.config, state='present'), service, lab.api, option_keys=_option_keys(lab))
    assert '"//" is not a dockerd option' in str(excinfo.value)
    assert read(lab.config).decode() == text and lab.pid() == pid and (service.reloads, service.restarts) == (0, 0)


def test_apply_none_does_not_depend_on_a_dockerd_that_does_not_answer(lab_dockerd, tmp_path):
    """apply=none only writes the file, even when the dockerd found does not answer its API.

    dockerd is stopped (SIGSTOP): its socket still accepts, it never answers. Both for the file it reads and for
    another file, apply=none writes and succeeds; asked to apply, the module still refuses.
    """
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker.api import DockerAPI
    lab = lab_dockerd
    pid = lab.pid()
    api = DockerAPI(lab.socket, timeout=2)
    other = str(tmp_path / 'other.json')
    os.kill(pid, signal.SIGSTOP)
    try:
        result = apply.converge(apply.Request(path=lab.config, apply='none'), LabService(lab), api)
        assert result['action'] == 'deferred' and result['file_changed'], result['msg']
        assert any('did not answer' in w for w in result['warnings'])
        assert 'nvidia' in json.loads(read(lab.config))['runtimes']
        result = apply.converge(apply.Request(path=other, apply='none'), LabService(lab), api)
        assert result['action'] == 'deferred' and result['dockerd_pid_before'] is None
        assert 'reads %s, not this file' % lab.config in result['msg']
        assert 'nvidia' in json.loads(read(other))['runtimes']
        with pytest.raises(GpufleetError, match='does not answer'):
            apply.converge(apply.Request(path=lab.config, name='other-runtime'), LabService(lab), api)
        assert 'other-runtime' not in read(lab.config).decode()
    finally:
        os.kill(pid, signal.SIGCONT)
    assert lab.pid() == pid


def test_a_restart_under_gpu_work_waits_with_defer_and_runs_with_force(lab_dockerd, monkeypatch):
    # The work is given (host.workload.find reads this machine's /proc, where other suites' GPU work may run): the
    # policy's decision is what is tested here; molecule scenario upgrade finds real work in lab hosts.
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import workload
    work = {'holders': [], 'containers': [{'pid': 9, 'name': 'python', 'container': '1a2b3c4d5e6f',
                                          'devices': ['/dev/nvidia0']}]}
    monkeypatch.setattr(workload, 'find', lambda exclude=(), proc='/proc': work)
    lab = lab_dockerd
    original, pid = read(lab.config), lab.pid()
    result, service = converge(lab, apply='restart', disruption='defer')
    assert result['action'] == 'deferred' and not result['changed'] and result['deferred']['work'] == work
    assert 'Restarting dockerd deferred' in result['msg'] and 'container 1a2b3c4d5e6f' in result['msg']
    assert lab.pid() == pid and read(lab.config) == original
    result, service = converge(lab, apply='restart', disruption='force')
    assert result['action'] == 'restart' and lab.pid() != pid
