# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How dockerd is reloaded/restarted on each init system (command doubles; the lab tests the real ones)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import signal

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker import dockerd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import service as init_service


class Recorder(object):
    def __init__(self, results=None):
        self.calls = []
        self.results = results or {}

    def __call__(self, argv):
        self.calls.append(list(argv))
        return self.results.get(tuple(argv[1:3]), (0, '', ''))


TOOLS = {'systemctl': '/usr/bin/systemctl', 'initctl': '/sbin/initctl', 'service': '/usr/sbin/service',
         'journalctl': '/usr/bin/journalctl'}


def test_systemd_reload_and_restart():
    run = Recorder()
    service = dockerd.Dockerd(run, 'systemd', TOOLS)
    service.reload()
    service.restart()
    assert run.calls == [['/usr/bin/systemctl', 'reload', 'docker'], ['/usr/bin/systemctl', 'reset-failed', 'docker'],
                         ['/usr/bin/systemctl', 'restart', 'docker']]


def test_upstart_reload_and_restart_is_stop_then_start(tmp_path):
    # The same restart as the persistence daemon's (init_service.Service): "initctl restart" keeps the old job
    # definition and fails on a stopped job; stop ("Unknown instance" = already stopped) waits for
    # stop/waiting, then start.
    (tmp_path / 'docker.conf').write_text('exec /usr/bin/dockerd\n')
    run = Recorder({('stop', 'docker'): (1, '', 'initctl: Unknown instance:'),
                    ('status', 'docker'): (0, 'docker stop/waiting\n', '')})
    service = dockerd.Dockerd(run, 'upstart', TOOLS, upstart_job_dir=str(tmp_path))
    service.reload()
    service.restart()
    assert run.calls == [['/sbin/initctl', 'reload', 'docker'], ['/sbin/initctl', 'stop', 'docker'],
                         ['/sbin/initctl', 'status', 'docker'], ['/sbin/initctl', 'start', 'docker']]


def test_sysvinit_reload_signals_pid_and_restart_runs_the_script(monkeypatch):
    sent = []
    monkeypatch.setattr(init_service.os, 'kill', lambda pid, signum: sent.append((pid, signum)))
    run = Recorder()
    service = dockerd.Dockerd(run, 'sysvinit', TOOLS)
    monkeypatch.setattr(service, 'pid', lambda: 777)
    service.reload()
    service.restart()
    assert sent == [(777, signal.SIGHUP)]
    assert run.calls == [['/etc/init.d/docker', 'restart']]


def test_upstart_host_without_docker_job_manages_the_sysv_script(tmp_path, monkeypatch):
    sent = []
    monkeypatch.setattr(init_service.os, 'kill', lambda pid, signum: sent.append((pid, signum)))
    run = Recorder()
    service = dockerd.Dockerd(run, 'upstart', TOOLS, upstart_job_dir=str(tmp_path))
    monkeypatch.setattr(service, 'pid', lambda: 778)
    service.reload()
    service.restart()
    assert sent == [(778, signal.SIGHUP)]
    assert run.calls == [['/etc/init.d/docker', 'restart']]


def test_unknown_init_cannot_restart():
    with pytest.raises(GpufleetError, match='no init system'):
        dockerd.Dockerd(Recorder(), 'unknown', TOOLS).restart()


def test_failed_command_message():
    run = Recorder({('restart', 'docker'): (1, '', 'Job for docker.service failed.')})
    with pytest.raises(GpufleetError, match='restart docker failed.*Job for docker.service failed'):
        dockerd.Dockerd(run, 'systemd', TOOLS).restart()


def test_systemd_flags_from_unit_and_defaults(tmp_path, monkeypatch):
    show = ('ExecStart={ path=/usr/sbin/dockerd ; argv[]=/usr/sbin/dockerd -H fd:// '
            '--containerd=/run/containerd/containerd.sock $DOCKER_OPTS ; ignore_errors=no }')
    run = Recorder({('show', '-p'): (0, 'LoadState=loaded\nMainPID=0\n' + show + '\n', '')})
    service = dockerd.Dockerd(run, 'systemd', TOOLS)
    monkeypatch.setattr(service, 'pid', lambda: None)
    defaults = tmp_path / 'docker'
    defaults.write_text('# comment\nDOCKER_OPTS="--default-runtime=nvidia --log-level warn"\n')
    monkeypatch.setattr(dockerd, 'read_options_file', lambda path, _real=dockerd.read_options_file: _real(str(defaults)))
    keys = dockerd.flags_to_keys(service.flags())
    assert keys['hosts'] == '-H fd://'
    assert keys['default-runtime'] == '--default-runtime=nvidia'
    assert 'containerd' in keys and 'log-level' in keys


def test_journal_since():
    run = Recorder()
    dockerd.Dockerd(run, 'systemd', TOOLS).recent_log(since=1700000000.5)
    assert run.calls[0][-1] == '--since=@1700000000'


def test_validator_only_when_dockerd_has_validate(tmp_path):
    help_old = Recorder({('--help',): (0, 'Usage: dockerd [OPTIONS]\n  --config-file string', '')})
    assert dockerd.dockerd_validator(help_old, '/usr/sbin/dockerd') is None
    assert dockerd.dockerd_validator(help_old, None) is None

    seen = []

    def run(argv, data=None):
        if argv[1] == '--help':
            return 0, '      --config-file string   Daemon configuration file\n      --validate   Validate and exit', ''
        seen.append((argv, data))
        return 1, '', 'unable to configure the Docker daemon with file %s: bad' % argv[3]

    validate = dockerd.dockerd_validator(run, '/usr/bin/dockerd')
    problem = validate('{"x": 1}')
    # The text on dockerd's standard input, no file anywhere (a read-only host validates too).
    assert seen == [(['/usr/bin/dockerd', '--validate', '--config-file', '/dev/stdin'], '{"x": 1}')]
    assert problem.endswith('the merged file: bad')


def test_option_keys_from_real_help():
    text = ('Options:\n      --add-runtime runtime   Register\n  -D, --debug   Enable debug mode\n'
            '  -H, --host list   Daemon socket(s) to connect to\n      --tlsverify   Use TLS\n')
    keys = dockerd.option_keys_from_help(text)
    assert {'add-runtime', 'debug', 'host', 'tlsverify', 'runtimes', 'hosts', 'features', 'builder'} <= keys
    assert dockerd.unknown_keys({'debug': 1, 'tls-verify': 1, 'runtimes': {}}, keys) == ['tls-verify']
    assert dockerd.option_keys_from_help(None) is None and dockerd.unknown_keys({'x': 1}, None) == []


def _serve_once(socket_path, body):
    import socket
    import threading

    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(socket_path)
    server.listen(1)

    def answer():
        conn, unused = server.accept()
        conn.recv(65536)
        conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n' % len(body))
        conn.sendall(body)
        conn.close()
        server.close()

    thread = threading.Thread(target=answer)
    thread.start()
    return thread


@pytest.mark.parametrize('body', [b'[' * 100000, b'{"Runtimes": ' * 100000])
def test_docker_api_deep_answer_is_an_api_error(tmp_path, body):
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker.api import DockerAPI, DockerAPIError
    socket_path = str(tmp_path / 'docker.sock')
    thread = _serve_once(socket_path, body)
    with pytest.raises(DockerAPIError, match='invalid JSON'):
        DockerAPI(socket_path, timeout=5).info()
    thread.join(5)


def test_docker_api_answers_and_http_client_is_imported_only_for_a_request(tmp_path):
    import subprocess
    import sys
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker.api import DockerAPI, DockerAPIError
    # a fresh interpreter: node_state (every concern's code, docker.api included) loads without http.client
    probe = ('import sys\nfrom ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import node_state as concerns_node_state\n'
             'concerns = list(concerns_node_state.registry.CONCERNS.values())\n'  # every concern's module, imported
             'print("http.client" in sys.modules)\n')
    out = subprocess.run([sys.executable, '-c', probe], check=False, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert out.stdout.split() == ['False'], out.stdout
    # here: a request works, twice (the connection class is made once), and an absent socket is unreachable
    socket_path = str(tmp_path / 'docker.sock')
    for unused in range(2):
        thread = _serve_once(socket_path, b'{"Runtimes": {"nvidia": {}}, "DefaultRuntime": "runc"}')
        assert DockerAPI('unix://' + socket_path, timeout=5).info()['Runtimes'] == {'nvidia': {}}
        thread.join(5)
        os.unlink(socket_path)
    with pytest.raises(DockerAPIError) as exc:
        DockerAPI(str(tmp_path / 'absent.sock'), timeout=5).info()
    assert exc.value.unreachable is True and 'cannot query dockerd' in str(exc.value)
