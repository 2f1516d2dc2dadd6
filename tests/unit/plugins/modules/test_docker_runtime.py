# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The docker_runtime module: arguments, check mode, diff, return values, failures."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

from core_compat import patch_module_args

from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import docker as concerns_docker
from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker import daemon_json as dj
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files
from ansible_collections.gpufleet.nvidia.plugins.modules import docker_runtime


class FakeDockerd(object):
    """dockerd as the module sees it: a PID, /info, reload/restart that change /info."""

    def __init__(self, running=True, runtimes=None, default='runc', path=None):
        self.running = running
        self.runtimes = dict(runtimes or {'runc': {'path': 'runc'}})
        self.default = default
        self.path = path
        self.pid_value = 4242
        self.calls = []
        self.socket_path = '/fake/docker.sock'

    # service side
    def pid(self):
        return self.pid_value if self.running else None

    def flags(self):
        return ['-H', 'fd://']

    def _load(self):
        config = dj.config_of(open(self.path).read())
        self.runtimes = dict({'runc': {'path': 'runc'}}, **config.get('runtimes', {}))
        self.default = config.get('default-runtime', 'runc')

    def reload(self):
        self.calls.append('reload')
        config = dj.config_of(open(self.path).read())
        self.runtimes.update(config.get('runtimes', {}))  # like dockerd: additions only
        if 'default-runtime' in config:
            self.default = config['default-runtime']

    def restart(self):
        self.calls.append('restart')
        self.pid_value += 1
        self._load()

    def recent_log(self, since=None):
        return ''

    # api side
    def info(self):
        if not self.running:
            raise dj.DaemonJsonError('down')
        return {'Runtimes': self.runtimes, 'DefaultRuntime': self.default}


# The option lines of dockerd 20.10's --help that matter here; None: no dockerd installed.
HELP_20_10 = {'text': None}
HELP_TEXT = '''Usage:	dockerd [OPTIONS]
Options:
      --add-runtime runtime                   Register an additional OCI compatible runtime (default [])
      --config-file string                    Daemon configuration file (default "/etc/docker/daemon.json")
  -D, --debug                                 Enable debug mode
      --default-runtime string                Default OCI runtime for containers (default "runc")
      --log-driver string                     Default driver for container logs (default "json-file")
      --log-opt map                           Default log driver options for containers (default map[])
'''


class ModuleExit(Exception):
    def __init__(self, result, failed):
        Exception.__init__(self, result)
        self.result = result
        self.failed = failed


@pytest.fixture
def run_module(monkeypatch, tmp_path):
    def exit_json(self, **kwargs):
        raise ModuleExit(kwargs, False)

    def fail_json(self, **kwargs):
        raise ModuleExit(kwargs, True)

    monkeypatch.setattr(docker_runtime.AnsibleModule, 'exit_json', exit_json)
    monkeypatch.setattr(docker_runtime.AnsibleModule, 'fail_json', fail_json)
    monkeypatch.setattr(concerns_docker.docker_dockerd, 'dockerd_help', lambda *a: HELP_20_10['text'])

    def run(args, dockerd):
        dockerd.path = args['path']
        monkeypatch.setattr(concerns_docker, 'build_dockerd', lambda module, socket_path: (dockerd, None))
        monkeypatch.setattr(concerns_docker, 'DockerAPI', lambda *a, **k: dockerd)
        with patch_module_args(args):
            with pytest.raises(ModuleExit) as excinfo:
                docker_runtime.main()
        return excinfo.value

    return run


def test_first_run_reloads_and_returns_everything(run_module, tmp_path):
    path = str(tmp_path / 'daemon.json')
    with open(path, 'w') as handle:
        handle.write('{\n  "log-driver": "local"\n}\n')
    dockerd = FakeDockerd()
    out = run_module({'path': path, '_ansible_diff': True}, dockerd)
    result = out.result
    assert not out.failed, result
    assert result['changed'] and result['action'] == 'reload' and dockerd.calls == ['reload']
    assert result['dockerd_pid_before'] == result['dockerd_pid_after'] == 4242
    assert result['runtimes']['nvidia'] == {'path': 'nvidia-container-runtime', 'runtimeArgs': []}
    assert result['diff']['before_header'] == result['diff']['after_header'] == path
    assert '"log-driver": "local"' in result['diff']['before']
    assert '"nvidia"' in result['diff']['after']
    assert result['backup_file'] is None
    assert set(result) >= {'changed', 'path', 'backup_file', 'action', 'runtimes', 'dockerd_pid_before',
                           'dockerd_pid_after', 'msg'}

    dockerd.calls = []
    again = run_module({'path': path}, dockerd).result
    assert not again['changed'] and again['action'] == 'none' and dockerd.calls == []


def test_a_no_op_run_does_not_start_dockerd_for_its_help(run_module, tmp_path, monkeypatch):
    asked = []

    def dockerd_help(*args):
        asked.append(args)
        return HELP_20_10['text']

    monkeypatch.setattr(concerns_docker.docker_dockerd, 'dockerd_help', dockerd_help)
    path = str(tmp_path / 'daemon.json')
    with open(path, 'w') as handle:
        handle.write('{}\n')
    dockerd = FakeDockerd()
    assert run_module({'path': path}, dockerd).result['action'] == 'reload'
    assert len(asked) == 1  # the change was checked against dockerd's options
    assert run_module({'path': path}, dockerd).result['action'] == 'none'
    assert len(asked) == 1  # the no-op run did not ask


def test_a_reload_command_that_fails_restores_the_file(run_module, tmp_path):
    path = str(tmp_path / 'daemon.json')
    original = '{\n  "log-driver": "local"\n}\n'
    with open(path, 'w') as handle:
        handle.write(original)
    dockerd = FakeDockerd()

    def broken_reload():
        dockerd.calls.append('reload')
        raise dj.DaemonJsonError('reloading dockerd failed (rc=1, `initctl reload docker`): Unknown job: docker')

    dockerd.reload = broken_reload
    out = run_module({'path': path}, dockerd)
    assert out.failed
    assert 'Unknown job: docker' in out.result['msg'] and 'previous file was restored' in out.result['msg']
    assert open(path).read() == original
    assert dockerd.calls == ['reload'] and dockerd.pid_value == 4242


def test_check_mode_predicts_without_touching(run_module, tmp_path):
    path = str(tmp_path / 'daemon.json')
    dockerd = FakeDockerd()
    result = run_module({'path': path, '_ansible_check_mode': True, '_ansible_diff': True}, dockerd).result
    assert result['changed'] and result['action'] == 'reload'
    assert not os.path.exists(path) and dockerd.calls == []
    assert result['diff']['before'] == '' and '"nvidia"' in result['diff']['after']


def test_check_mode_in_missing_directory(run_module, tmp_path):
    path = str(tmp_path / 'etc-docker' / 'daemon.json')
    result = run_module({'path': path, '_ansible_check_mode': True}, FakeDockerd(running=False)).result
    assert result['changed'] and result['action'] == 'deferred'
    assert not os.path.exists(os.path.dirname(path))


def test_not_running_creates_directory_and_defers(run_module, tmp_path):
    path = str(tmp_path / 'docker' / 'daemon.json')
    result = run_module({'path': path, 'default_runtime': True}, FakeDockerd(running=False)).result
    assert result['changed'] and result['action'] == 'deferred'
    assert 'not running' in result['msg']
    assert json.load(open(path))['default-runtime'] == 'nvidia'
    assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o755
    assert os.stat(path).st_mode & 0o777 == 0o644


def test_removing_default_restarts(run_module, tmp_path):
    path = str(tmp_path / 'daemon.json')
    dockerd = FakeDockerd()
    run_module({'path': path, 'default_runtime': True}, dockerd)
    assert dockerd.default == 'nvidia'
    dockerd.calls = []
    result = run_module({'path': path, 'state': 'absent'}, dockerd).result
    assert result['action'] == 'restart' and dockerd.calls == ['restart']
    assert result['dockerd_pid_after'] == result['dockerd_pid_before'] + 1
    assert 'nvidia' not in result['runtimes']


def test_apply_reload_defers_a_removal(run_module, tmp_path):
    path = str(tmp_path / 'daemon.json')
    dockerd = FakeDockerd()
    run_module({'path': path, 'default_runtime': True}, dockerd)
    dockerd.calls = []
    result = run_module({'path': path, 'state': 'absent', 'apply': 'reload'}, dockerd).result
    assert result['action'] == 'deferred' and dockerd.calls == []
    assert 'restart dockerd' in result['msg']


def test_apply_restart(run_module, tmp_path):
    path = str(tmp_path / 'daemon.json')
    dockerd = FakeDockerd()
    result = run_module({'path': path, 'apply': 'restart'}, dockerd).result
    assert result['action'] == 'restart' and dockerd.calls == ['restart']


def test_backup(run_module, tmp_path):
    path = str(tmp_path / 'daemon.json')
    with open(path, 'w') as handle:
        handle.write('{"debug": true}\n')
    result = run_module({'path': path, 'backup': True}, FakeDockerd()).result
    assert result['backup_file'] and open(result['backup_file']).read() == '{"debug": true}\n'


def test_bad_json_fails_naming_file(run_module, tmp_path):
    path = str(tmp_path / 'daemon.json')
    with open(path, 'w') as handle:
        handle.write('{"debug": true,}\n')
    out = run_module({'path': path}, FakeDockerd())
    assert out.failed
    assert path in out.result['msg'] and 'invalid JSON' in out.result['msg']
    assert open(path).read() == '{"debug": true,}\n'


def test_flag_conflict_fails_before_writing(run_module, tmp_path, monkeypatch):
    path = str(tmp_path / 'daemon.json')
    with open(path, 'w') as handle:
        handle.write('{}\n')
    dockerd = FakeDockerd()
    monkeypatch.setattr(dockerd, 'flags', lambda: ['--add-runtime', 'nvidia=/usr/bin/nvidia-container-runtime'])
    out = run_module({'path': path}, dockerd)
    assert out.failed and 'refusing to write' in out.result['msg'] and '--add-runtime' in out.result['msg']
    assert open(path).read() == '{}\n' and dockerd.calls == []


def test_runtime_not_found_warns(run_module, tmp_path, monkeypatch):
    warnings = []
    monkeypatch.setattr(docker_runtime.AnsibleModule, 'warn', lambda self, msg: warnings.append(msg))
    run_module({'path': str(tmp_path / 'daemon.json'), 'runtime_path': '/nonexistent/nvidia-container-runtime'},
               FakeDockerd())
    assert any('nvidia-container-toolkit' in w for w in warnings)


def test_symlinked_path_keeps_the_link(run_module, tmp_path):
    target = tmp_path / 'real.json'
    target.write_text('{\n\t"debug": true\n}\n')
    link = tmp_path / 'daemon.json'
    os.symlink(str(target), str(link))
    result = run_module({'path': str(link)}, FakeDockerd()).result
    assert result['changed'] and os.path.islink(str(link))
    assert '\t"runtimes": {' in target.read_text()


def test_restart_impossible_restores_and_keeps_dockerd(run_module, tmp_path, monkeypatch):
    path = str(tmp_path / 'daemon.json')
    dockerd = FakeDockerd()
    run_module({'path': path, 'default_runtime': True}, dockerd)
    before = open(path).read()

    def no_restart():
        raise dj.DaemonJsonError('cannot restart dockerd: no init system manages it here (init system: unknown)')

    monkeypatch.setattr(dockerd, 'restart', no_restart)
    out = run_module({'path': path, 'state': 'absent'}, dockerd)
    assert out.failed and 'no init system' in out.result['msg'] and 'keeps running' in out.result['msg']
    assert open(path).read() == before


def test_dockerd_that_never_comes_back_is_rolled_back(run_module, tmp_path, monkeypatch):
    path = str(tmp_path / 'daemon.json')
    with open(path, 'w') as handle:
        handle.write('{"debug": true}\n')
    dockerd = FakeDockerd()
    restarts = []

    def failing_restart():
        restarts.append(open(path).read())
        dockerd.pid_value += 1
        if len(restarts) == 1:
            dockerd.running = False  # dies on the new file
        else:
            dockerd.running = True
            dockerd._load()

    monkeypatch.setattr(dockerd, 'restart', failing_restart)
    monkeypatch.setattr(dockerd, 'recent_log', lambda since=None: 'level=fatal msg="bad things"')
    out = run_module({'path': path, 'apply': 'restart', 'timeout': 1}, dockerd)
    assert out.failed and 'previous file was restored' in out.result['msg'] and 'bad things' in out.result['msg']
    assert open(path).read() == '{"debug": true}\n'
    assert len(restarts) == 2 and '"nvidia"' in restarts[0] and restarts[1] == '{"debug": true}\n'


def test_unknown_key_refused_when_dockerd_must_apply(run_module, tmp_path, monkeypatch):
    monkeypatch.setitem(HELP_20_10, 'text', HELP_TEXT)
    path = str(tmp_path / 'daemon.json')
    with open(path, 'w') as handle:
        handle.write('{\n  "debug": true,\n  "log-opts": {},\n  "//": "managed by hand"\n}\n')
    dockerd = FakeDockerd()
    out = run_module({'path': path}, dockerd)
    assert out.failed and '"//" is not a dockerd option' in out.result['msg'] and 'Nothing was changed' in out.result['msg']
    assert dockerd.calls == [] and '"//"' in open(path).read() and 'nvidia' not in open(path).read()

    warnings = []
    monkeypatch.setattr(docker_runtime.AnsibleModule, 'warn', lambda self, msg: warnings.append(msg))
    result = run_module({'path': path, 'apply': 'none'}, dockerd).result
    assert result['action'] == 'deferred' and any('will refuse to start' in w for w in warnings)


def test_known_keys_pass_with_help(run_module, tmp_path, monkeypatch):
    monkeypatch.setitem(HELP_20_10, 'text', HELP_TEXT)
    path = str(tmp_path / 'daemon.json')
    with open(path, 'w') as handle:
        handle.write('{"debug": true, "log-opts": {}, "labels": ["a=b"], "features": {"buildkit": true}}\n')
    result = run_module({'path': path}, FakeDockerd()).result
    assert result['action'] == 'reload'


def test_default_runtime_not_given_keeps_the_users_default(run_module, tmp_path):
    path = str(tmp_path / 'daemon.json')
    with open(path, 'w') as handle:
        handle.write('{\n  "default-runtime": "nvidia",\n  "runtimes": {\n    "nvidia": {\n      "path": '
                     '"nvidia-container-runtime",\n      "runtimeArgs": []\n    }\n  }\n}\n')
    dockerd = FakeDockerd(runtimes={'runc': {'path': 'runc'}, 'nvidia': {'path': 'nvidia-container-runtime'}},
                          default='nvidia')
    result = run_module({'path': path}, dockerd).result
    assert not result['changed'] and result['action'] == 'none' and dockerd.calls == []
    assert json.load(open(path))['default-runtime'] == 'nvidia'
    result = run_module({'path': path, 'default_runtime': False}, dockerd).result
    assert result['action'] == 'restart' and 'default-runtime' not in json.load(open(path))


def test_apply_none_does_not_need_an_answering_dockerd(run_module, tmp_path, monkeypatch):
    path = str(tmp_path / 'daemon.json')
    dockerd = FakeDockerd()

    def hung():
        raise dj.DaemonJsonError('cannot query dockerd at unix:///fake/docker.sock (GET /info): timed out')

    monkeypatch.setattr(dockerd, 'info', hung)
    out = run_module({'path': path, 'apply': 'none'}, dockerd)
    assert not out.failed, out.result
    assert out.result['changed'] and out.result['action'] == 'deferred' and dockerd.calls == []
    assert 'nvidia' in json.load(open(path))['runtimes']
    # Asked to apply, the same dockerd is still an error (nothing written).
    out = run_module({'path': str(tmp_path / 'other.json')}, dockerd)
    assert out.failed and 'does not answer' in out.result['msg'] and not os.path.exists(str(tmp_path / 'other.json'))


def test_apply_none_ignores_a_dockerd_reading_another_file(run_module, tmp_path, monkeypatch):
    path = str(tmp_path / 'daemon.json')
    dockerd = FakeDockerd()
    dockerd.config_file = lambda: '/etc/docker/daemon.json'
    monkeypatch.setattr(dockerd, 'info', lambda: pytest.fail('the API of an unrelated dockerd was asked'))
    result = run_module({'path': path, 'apply': 'none'}, dockerd).result
    assert result['action'] == 'deferred' and result['dockerd_pid_before'] is None
    assert 'reads /etc/docker/daemon.json, not this file' in result['msg']


def test_write_failure_is_failed_not_a_traceback(run_module, tmp_path, monkeypatch):
    path = str(tmp_path / 'daemon.json')
    with open(path, 'w') as handle:
        handle.write('{}\n')

    def no_space(src, dest, **dir_fds):
        raise OSError(28, 'No space left on device')

    monkeypatch.setattr(files.os, 'rename', no_space)  # the rename of files.write_at
    out = run_module({'path': path}, FakeDockerd())
    assert out.failed and out.result['msg'].startswith(path + ': cannot write: No space left on device')
    assert open(path).read() == '{}\n' and os.listdir(str(tmp_path)) == ['daemon.json']
