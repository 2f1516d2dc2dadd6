# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_state: each concern's verdict is that concern module's own check-mode result.

The docker_runtime scenarios of test_docker_runtime.py (a converged file, a runtime missing, a path
edited by hand, a removal, bad JSON, dockerd down) are run twice: through docker_runtime's main()
in check mode, and through node_state's evaluation; the two results must be equal, key for key.
The lab's molecule scenario ``site`` does the same for every concern on real hosts.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

from core_compat import patch_module_args

from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import base
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import docker as concerns_docker
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import registry
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import node_state as concerns_node_state
from ansible_collections.gpufleet.nvidia.plugins.modules import docker_runtime
from ansible_collections.gpufleet.nvidia.plugins.modules import node_state

from ansible_collections.gpufleet.nvidia.tests.unit.plugins.modules.test_docker_runtime import (
    FakeDockerd, HELP_20_10, ModuleExit)


class HostModule(object):
    """node_state's own AnsibleModule, as far as a concern's run reaches it (commands, tool lookup)."""

    def __init__(self, bins=None):
        self.bins = bins or {}
        self.commands = []

    def run_command(self, argv, **kwargs):
        self.commands.append(argv)
        return 1, '', 'not here'

    def get_bin_path(self, arg, required=False, opt_dirs=None):
        return self.bins.get(arg)

    def selinux_enabled(self):
        return False


@pytest.fixture
def fake_dockerd(monkeypatch):
    dockerd = FakeDockerd()
    monkeypatch.setattr(concerns_docker, 'build_dockerd', lambda module, socket_path: (dockerd, None))
    monkeypatch.setattr(concerns_docker, 'DockerAPI', lambda *a, **k: dockerd)
    monkeypatch.setattr(concerns_docker.docker_dockerd, 'dockerd_help', lambda *a: HELP_20_10['text'])
    return dockerd


def module_check(monkeypatch, args):
    def leave(failed):
        def method(self, **kwargs):
            raise ModuleExit(kwargs, failed)
        return method
    monkeypatch.setattr(docker_runtime.AnsibleModule, 'exit_json', leave(False))
    monkeypatch.setattr(docker_runtime.AnsibleModule, 'fail_json', leave(True))
    with patch_module_args(dict(args, _ansible_check_mode=True)):
        with pytest.raises(ModuleExit) as excinfo:
            docker_runtime.main()
    result = dict(excinfo.value.result)
    for key in ('invocation', 'warnings', 'deprecations'):
        result.pop(key, None)
    return result, excinfo.value.failed


SCENARIOS = {
    'converged': '{\n  "runtimes": {\n    "nvidia": {\n      "path": "nvidia-container-runtime",\n'
                 '      "runtimeArgs": []\n    }\n  }\n}\n',
    'runtime_missing': '{\n  "log-driver": "local"\n}\n',
    'path_edited_by_hand': '{\n  "runtimes": {\n    "nvidia": {\n      "path": "/opt/other",\n'
                           '      "runtimeArgs": []\n    }\n  }\n}\n',
    'bad_json': '{"runtimes": {',
    'no_file': None,
}


@pytest.mark.parametrize('state', ['present', 'absent'])
@pytest.mark.parametrize('scenario', sorted(SCENARIOS))
@pytest.mark.parametrize('running', [True, False], ids=['running', 'dockerd_down'])
def test_docker_verdict_is_the_modules_check_mode(monkeypatch, tmp_path, fake_dockerd, scenario, state, running):
    path = str(tmp_path / 'daemon.json')
    if SCENARIOS[scenario] is not None:
        with open(path, 'w') as handle:
            handle.write(SCENARIOS[scenario])
    fake_dockerd.path = path
    fake_dockerd.running = running
    if scenario == 'converged':
        fake_dockerd.runtimes['nvidia'] = {'path': 'nvidia-container-runtime', 'runtimeArgs': []}
    args = {'path': path, 'state': state}
    before = open(path, 'rb').read() if SCENARIOS[scenario] is not None else None

    theirs, failed = module_check(monkeypatch, args)
    verdict = concerns_node_state.check(HostModule(), registry.DOCKER, args)

    assert verdict['failed'] == failed
    assert verdict['result'] == theirs
    assert verdict['converged'] == (not failed and not theirs['changed'])
    assert fake_dockerd.calls == []
    assert (open(path, 'rb').read() if before is not None else None) == before
    if scenario == 'converged' and state == 'present' and running:
        assert verdict['converged']
    if scenario == 'bad_json':
        assert verdict['failed'] and path in verdict['result']['msg']


def test_options_are_validated_by_the_concern_modules_own_spec():
    verdict = concerns_node_state.check(HostModule(), registry.DOCKER, {'stae': 'present'})
    assert verdict['failed'] and not verdict['converged']
    assert verdict['result']['msg'].startswith('docker_runtime: ')
    assert 'stae' in verdict['result']['msg']
    both = concerns_node_state.check(HostModule(), registry.GPU_PERSISTENCE, {'mode': 'enabled', 'modes': []})
    assert both['failed'] and 'mutually exclusive' in both['result']['msg']
    neither = concerns_node_state.check(HostModule(), registry.GPU_PERSISTENCE, {})
    assert neither['failed'] and 'one of the following is required: mode, modes' in neither['result']['msg']


class Scripted(base.Concern):
    """A concern whose run is scripted: a result, a fail_json or an error."""

    def __init__(self, name, outcome):
        def run(module):
            assert module.check_mode
            if outcome == 'fail':
                module.fail_json(msg='%s cannot be done' % name)
            if outcome == 'crash':
                raise OSError(5, 'Input/output error')
            module.warn('%s says hello' % name)
            return {'changed': outcome == 'drift', 'actions': ['restart'] if outcome == 'drift' else []}
        base.Concern.__init__(self, name, name + '_module', {'x': dict(type='int', default=1)}, run)


def scripted(monkeypatch, outcomes):
    concerns = dict((name, Scripted(name, outcome)) for name, outcome in outcomes.items())
    monkeypatch.setattr(registry, 'CONCERNS', dict(registry.CONCERNS, **concerns))
    return dict((name, {}) for name in outcomes)


def test_a_converged_node(monkeypatch):
    options = scripted(monkeypatch, {'persistenced': 'ok', 'gpu_persistence': 'ok', 'docker': 'ok'})
    result, warnings, diffs = concerns_node_state.evaluate(HostModule(), dict(options, engines=[]))
    assert result['converged'] and result['drifted'] == [] and result['run'] == []
    assert result['evaluated'] == ['persistenced', 'gpu_persistence', 'docker']
    assert result['changed'] is False
    assert warnings == ['persistenced_module: persistenced says hello', 'gpu_persistence_module: gpu_persistence says hello',
                        'docker_module: docker says hello']
    assert result['msg'] == 'converged: persistenced, gpu_persistence, docker'


def test_the_gpus_run_again_after_the_daemon_drifted(monkeypatch):
    options = scripted(monkeypatch, {'persistenced': 'drift', 'gpu_persistence': 'ok', 'docker': 'ok'})
    result = concerns_node_state.evaluate(HostModule(), dict(options, engines=[]))[0]
    assert result['drifted'] == ['persistenced'] and result['run'] == ['persistenced', 'gpu_persistence']
    assert result['concerns']['persistenced']['changes'] == 'restart'
    assert result['msg'] == 'drifted: persistenced (restart)'


def test_a_failing_or_crashing_concern_is_drifted_and_hides_no_other(monkeypatch):
    options = scripted(monkeypatch, {'device_links': 'crash', 'persistenced': 'fail', 'docker': 'drift'})
    result = concerns_node_state.evaluate(HostModule(), dict(options, engines=[]))[0]
    assert result['drifted'] == ['device_links', 'persistenced', 'docker']
    assert result['concerns']['persistenced']['failed']
    assert result['concerns']['persistenced']['changes'] == 'fails: persistenced cannot be done'
    crash = result['concerns']['device_links']['result']
    assert crash['msg'] == 'device_links_module could not be evaluated: OSError: [Errno 5] Input/output error'
    assert 'Traceback' in crash['exception']


def test_engines_choose_which_registrations_are_evaluated(monkeypatch):
    options = scripted(monkeypatch, {'containerd': 'drift', 'crio': 'drift', 'docker': 'ok'})
    result = concerns_node_state.evaluate(HostModule(), dict(options, engines=['docker']))[0]
    assert result['evaluated'] == ['docker'] and result['engine_list'] == ['docker']
    assert result['engines_found'] is None
    found = {'engines': {'containerd': {'auto': True}, 'crio': {'auto': False}, 'docker': {'auto': True}},
             'auto': ['containerd', 'docker']}
    asked = []
    monkeypatch.setattr(concerns_node_state.concerns_engines, 'detect', lambda run, containerd_config, state=None: asked.append(
        containerd_config) or found)
    result = concerns_node_state.evaluate(HostModule(), dict(options, engines=['auto']))[0]
    assert result['evaluated'] == ['containerd', 'docker'] and result['run'] == ['containerd']
    assert result['engines_found'] == found['engines']
    assert asked == ['/etc/containerd/config.toml']


def test_the_module_reports_and_never_changes(monkeypatch, tmp_path, fake_dockerd):
    path = str(tmp_path / 'daemon.json')
    with open(path, 'w') as handle:
        handle.write(SCENARIOS['runtime_missing'])
    fake_dockerd.path = path

    def leave(failed):
        def method(self, **kwargs):
            raise ModuleExit(kwargs, failed)
        return method
    monkeypatch.setattr(node_state.AnsibleModule, 'exit_json', leave(False))
    monkeypatch.setattr(node_state.AnsibleModule, 'fail_json', leave(True))
    with patch_module_args({'docker': {'path': path}, 'engines': ['docker'], '_ansible_diff': True}):
        with pytest.raises(ModuleExit) as excinfo:
            node_state.main()
    result = excinfo.value.result
    assert not excinfo.value.failed and result['changed'] is False
    assert result['drifted'] == ['docker'] and result['concerns']['docker']['result']['action'] == 'reload'
    assert result['diff'][0]['before_header'] == path and '"nvidia"' in result['diff'][0]['after']
    assert json.loads(open(path).read()) == {'log-driver': 'local'}
    assert fake_dockerd.calls == []


def test_containerd_is_asked_once_per_file_in_node_state_only(tmp_path, monkeypatch):
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.run import RunState
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import facts
    config = tmp_path / 'config.toml'
    config.write_text('version = 2\n')
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, 'version = 2\n[plugins]\n', ''
    tools = facts.Tools(run, containerd='/usr/bin/containerd')
    tools.dump(str(config))
    tools.dump(str(config))
    assert len(calls) == 2  # a module that writes asks every time
    tools = facts.Tools(run, containerd='/usr/bin/containerd', state=RunState(dumps={}))  # node_state's run
    first = tools.dump(str(config))
    first[0]['version'] = 99  # a caller's change does not reach the next answer
    assert tools.dump(str(config)) == ({'version': 2, 'plugins': {}}, None)
    assert len(calls) == 3
    config.write_text('version = 2\n# changed\n')
    tools.dump(str(config))
    assert len(calls) == 4


class CountingModule(object):
    """node_state's AnsibleModule, as far as commands go: every command it was asked to run."""

    def __init__(self):
        self.ran = []

    def run_command(self, args, **kwargs):
        self.ran.append(list(args))
        return 0, 'answer %d' % len(self.ran), ''


def test_a_query_is_run_once_per_node_state_run_whichever_concern_asks():
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import module as concerns_module
    host, answers = CountingModule(), {}
    first = concerns_node_state.ConcernModule(host, registry.DOCKER, {}, answers=answers)
    second = concerns_node_state.ConcernModule(host, registry.DEVICE_LINKS, {}, answers=answers)
    run_first, run_second = concerns_module.runner(first), concerns_module.runner(second)
    show = ['systemctl', 'show', '-p', 'MainPID', 'docker']
    assert run_first(show) == run_first(show) == run_second(show) == (0, 'answer 1', '')
    # another question, or the same one with other input, is asked
    assert run_first(show + ['-p', 'ExecStart'])[1] == 'answer 2'
    assert run_first(['containerd', 'config', 'dump'], data='a')[1] == 'answer 3'
    assert run_first(['containerd', 'config', 'dump'], data='b')[1] == 'answer 4'
    assert run_second(['containerd', 'config', 'dump'], data='a')[1] == 'answer 3'
    assert len(host.ran) == 4
    # without a shared record (a concern module run on its own) every command runs
    alone = concerns_node_state.ConcernModule(host, registry.DOCKER, {})
    alone.run_command(show)
    assert len(host.ran) == 5


def run_probe(prefix, probe):
    """Run ``probe`` (Python source, with ``P`` set to ``prefix``) in a fresh interpreter, as a host runs a module:
    ``(its output, the JSON value of its last line)``."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, '-c', 'P = %r\n' % prefix + probe], check=False, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, universal_newlines=True,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))).stdout
    return out, json.loads(out.strip().splitlines()[-1])


def test_a_concern_is_imported_when_it_is_evaluated_and_tomli_only_without_tomllib():
    """A host compiles every module it imports, on every run: node_state imports a concern's code when it evaluates
    that concern (no CRI-O code on a host without CRI-O), and on Python 3.11+ reads TOML with the standard library's
    tomllib rather than compiling the vendored copy. node_state's zip still carries every concern
    (test_module_payloads.py)."""
    import sys
    prefix = 'ansible_collections.gpufleet.nvidia.plugins.module_utils.'
    probe = ('import json, sys\n'
             'from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import node_state\n'
             'from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import registry\n'
             'ours = tuple("concerns." + name for name in registry.ORDER) + ("crio.", "formats._tomli", "docker.")\n'
             'seen = lambda: sorted(m[len(P):] for m in sys.modules if m.startswith(P) and m[len(P):].startswith(ours))\n'
             'first = seen()\n'
             'docker = registry.CONCERNS["docker"]\n'
             'print(json.dumps([first, seen(), docker.module, registry.DOCKER is docker, len(registry.CONCERNS)]))\n')
    out, (first, after, module, same, count) = run_probe(prefix, probe)
    assert first == [], out  # concerns.node_state and concerns.registry alone: no concern's code yet
    assert 'concerns.docker' in after and 'docker.apply' in after and module == 'docker_runtime' and same and count == 10
    assert not [name for name in after if name.startswith(('concerns.crio', 'crio.'))]
    assert ('formats._tomli' in after) is (sys.version_info < (3, 11))


# What only a change needs: imported where the change is made (not in check mode), never by node_state's check path.
APPLY_ONLY = ('host.audit', 'host.rollback', 'host.locks', 'host.workload', 'persistenced.actions',
              'docker.apply_change', 'containerd.apply_change', 'crio.apply_change')


def test_the_check_path_compiles_no_apply_only_code():
    """A host compiles every module node_state imports on every run (zipimport keeps no bytecode): its check path,
    every concern evaluated in check mode, imports none of the code that only writes, restarts, rolls back or audits
    (APPLY_ONLY). Each concern module still carries that code (test_module_payloads.py), and a change imports it."""
    prefix = 'ansible_collections.gpufleet.nvidia.plugins.module_utils.'
    probe = ('import json, sys\n'
             'from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import node_state, registry\n'
             'class Host(object):\n'
             '    check_mode = True\n'
             '    def run_command(self, args, **kwargs):\n'
             '        return 127, "", "not found"\n'
             '    def get_bin_path(self, arg, required=False, opt_dirs=None):\n'
             '        return None\n'
             '    def selinux_enabled(self):\n'
             '        return False\n'
             'options = dict((name, {}) for name in registry.ORDER)\n'
             'options["engines"] = list(registry.ENGINES)\n'
             'result = node_state.evaluate(Host(), options)[0]\n'
             'print(json.dumps([result["evaluated"], sorted(m[len(P):] for m in sys.modules if m.startswith(P))]))\n')
    out, (evaluated, imported) = run_probe(prefix, probe)
    assert evaluated == list(registry.ORDER), out
    # every concern's own code, and what it uses to decide, was imported: the probe reached the concerns
    assert {'concerns.' + name for name in registry.ORDER} <= set(imported)
    assert {'docker.apply', 'containerd.apply', 'crio.apply', 'persistenced.deploy', 'host.files'} <= set(imported)
    assert sorted(set(APPLY_ONLY) & set(imported)) == []
    # the probe's host is no Slurm node (no Slurm client answers): the health check program's builder and rules,
    # which only a Slurm node needs, are not compiled either
    assert 'concerns.slurm_node' in imported and [name for name in imported if name.startswith('slurm.')] == []
    # and each is a module of the collection, so that the check above names something real
    import importlib
    for name in APPLY_ONLY:
        importlib.import_module(prefix + name)
