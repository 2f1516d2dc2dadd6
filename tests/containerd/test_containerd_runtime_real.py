# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""containerd_runtime against a real containerd (1.6, 1.7 or 2.x: tests/engines), each in a private mount namespace.

Every check of what containerd runs goes through containerd itself
(``containerd config dump``, ``ctr plugins ls``, ``ctr tasks ls``), never by
reading the file back.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import config as cd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import facts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError

from .conftest import CONTAINERD2, DEFAULT, RUNTIMES, SANDBOX_IMAGE, LabService

RUNTIME = '/usr/bin/nvidia-container-runtime'
KUBE = '''
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"   # the kubelet's pause image
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "/etc/containerd/certs.d"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = true
'''


def converge(lab, service=None, check_mode=False, **kwargs):
    kwargs.setdefault('runtime_path', RUNTIME)
    request = apply.Request(path=lab.config, **kwargs)
    service = service or LabService(lab)
    tools = facts.Tools(lab.run)
    return apply.Converge(request, service, tools).run(check_mode=check_mode), service


def read(path):
    with open(path, 'rb') as handle:
        return handle.read()


def without(values, path):
    """The dump without one runtime and the imports list (which names the files loaded)."""
    import copy
    values = copy.deepcopy(values)
    values.pop('imports', None)
    cd.get(values, path[:-1]).pop(path[-1], None)
    return values


def cri_status(lab):
    return facts.Tools(lab.run).plugins(lab.socket).get('cri')


@pytest.mark.config_toml(KUBE)
def test_first_registration_keeps_every_cri_setting_and_rerun_does_nothing(lab_containerd):
    lab = lab_containerd
    original = read(lab.config)
    before = lab.dump()
    pid = lab.pid()
    result, service = converge(lab)
    assert result['action'] == 'restart' and result['file_changed'], result
    assert service.restarts == 1 and lab.pid() != pid
    after = lab.dump()
    nvidia = cd.get(after, RUNTIMES + ('nvidia',))
    assert nvidia['runtime_type'] == 'io.containerd.runc.v2'
    assert nvidia['options'] == {'BinaryName': RUNTIME, 'SystemdCgroup': True}  # inherited from runc
    # Nothing else changed in the effective configuration: pause image, registry, runc's cgroup driver.
    assert without(after, RUNTIMES + ('nvidia',)) == without(before, RUNTIMES + ('nvidia',))
    assert cd.get(after, SANDBOX_IMAGE) == 'registry.k8s.io/pause:3.9'
    assert cd.get(after, RUNTIMES + ('runc', 'options', 'SystemdCgroup')) is True
    # The file: every original byte is still there, in front; only the block was appended.
    assert read(lab.config).startswith(original)
    assert cri_status(lab) == 'ok'
    # The result names the runtimes the restarted containerd has (what the summary line shows).
    assert result['runtimes'] == sorted(cd.get(after, RUNTIMES)) == ['nvidia', 'runc']
    assert result['default_runtime'] == 'runc'
    # A re-run: no write, no restart, same PID.
    pid = lab.pid()
    mtime = os.stat(lab.config).st_mtime_ns
    again, service = converge(lab)
    assert again['action'] == 'none' and not again['changed'], again
    assert again['runtimes'] == ['nvidia', 'runc'] and again['default_runtime'] == 'runc'
    assert service.restarts == 0 and lab.pid() == pid
    assert os.stat(lab.config).st_mtime_ns == mtime


@pytest.mark.config_toml('')
def test_a_file_without_runtimes_keeps_runc_and_the_cri_plugin_loads(lab_containerd):
    # Defining only nvidia would replace containerd's default runtimes: runc gone, the CRI plugin fails.
    lab = lab_containerd
    before = lab.dump()
    result, _service = converge(lab)
    assert result['action'] == 'restart'
    after = lab.dump()
    assert cd.get(after, RUNTIMES + ('runc', 'runtime_type')) == 'io.containerd.runc.v2'
    assert cd.get(without(after, RUNTIMES + ('nvidia',)), RUNTIMES).keys() == cd.get(before, RUNTIMES).keys()
    assert cri_status(lab) == 'ok'


@pytest.mark.config_toml(KUBE)
def test_a_running_container_survives_the_restart(lab_containerd, busybox_rootfs):
    lab = lab_containerd
    lab.ctr('run', '-d', '--rootfs', busybox_rootfs, 'keeper', '/bin/sleep', '600')
    tasks = lab.ctr('tasks', 'ls')
    assert 'keeper' in tasks and 'RUNNING' in tasks
    task_pid = [line.split()[1] for line in tasks.splitlines() if line.startswith('keeper')][0]
    pid = lab.pid()
    result, _service = converge(lab)
    assert result['action'] == 'restart' and lab.pid() != pid
    tasks = lab.ctr('tasks', 'ls')
    line = [line for line in tasks.splitlines() if line.startswith('keeper')][0]
    assert line.split()[1] == task_pid and 'RUNNING' in line, tasks


@pytest.mark.config_toml(KUBE, head='imports = ["extra.toml"]  # site settings\n',
                         files={'extra.toml': 'version = 2\n[debug]\n  level = "debug"\n'})
def test_imports_and_custom_settings_are_kept(lab_containerd):
    lab = lab_containerd
    before = lab.dump()
    assert cd.get(before, ('debug', 'level')) == 'debug'
    original = read(lab.config)
    result, _service = converge(lab)
    assert result['action'] == 'restart'
    after = lab.dump()
    assert sorted(after['imports']) == sorted(before['imports'])  # the import still loads
    assert cd.get(after, ('debug', 'level')) == 'debug'
    assert without(after, RUNTIMES + ('nvidia',)) == without(before, RUNTIMES + ('nvidia',))
    assert read(lab.config).startswith(original)


@pytest.mark.config_toml(KUBE, head='imports = ["cri.toml"]\n',
                         files={'cri.toml': 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n'
                                            '  sandbox_image = "x/pause:1"\n'})
def test_an_import_that_carries_the_cri_table_is_refused_on_1x_and_merged_on_2x(lab_containerd):
    lab = lab_containerd
    original = read(lab.config)
    pid = lab.pid()
    systemd_cgroup = cd.get(lab.dump(), RUNTIMES + ('runc', 'options', 'SystemdCgroup'))
    if not CONTAINERD2:
        # containerd 1.x replaces the whole CRI table with the imported one (the main file's runc settings are
        # gone from the effective configuration): an insertion here would not count.
        assert systemd_cgroup is not True
        with pytest.raises(GpufleetError, match='replaces the whole CRI table'):
            converge(lab)
        assert read(lab.config) == original and lab.pid() == pid
        return
    # containerd 2.x merges the imported table key by key: the import's pause image and the main file's runc
    # settings both stay in effect, and the runtime appended to the main file counts.
    assert cd.get(lab.dump(), SANDBOX_IMAGE) == 'x/pause:1' and systemd_cgroup is True
    result, _service = converge(lab)
    assert result['action'] == 'restart' and lab.pid() != pid, result
    after = lab.dump()
    assert cd.get(after, SANDBOX_IMAGE) == 'x/pause:1'
    assert cd.get(after, RUNTIMES + ('nvidia', 'options')) == {'BinaryName': RUNTIME, 'SystemdCgroup': True}
    assert read(lab.config).startswith(original) and cri_status(lab) == 'ok'


@pytest.mark.config_toml(KUBE, newline='\r\n')
def test_crlf_and_comments_are_kept(lab_containerd):
    lab = lab_containerd
    original = read(lab.config)
    result, _service = converge(lab)
    assert result['file_changed']
    text = read(lab.config)
    assert text.startswith(original)
    assert b'\n' not in text.replace(b'\r\n', b'')  # every new line ends in CRLF too
    assert cd.get(lab.dump(), RUNTIMES + ('nvidia', 'options', 'BinaryName')) == RUNTIME


@pytest.mark.config_toml(KUBE)
def test_bad_toml_is_refused_untouched(lab_containerd):
    lab = lab_containerd
    with open(lab.config, 'ab') as handle:
        handle.write(b'[plugins."io.containerd.grpc.v1.cri"\n')
    original = read(lab.config)
    pid = lab.pid()
    with pytest.raises(GpufleetError, match='not valid TOML'):
        converge(lab)
    assert read(lab.config) == original and lab.pid() == pid


@pytest.mark.config_toml(KUBE)
def test_absent_takes_back_exactly_what_was_added(lab_containerd):
    lab = lab_containerd
    original = read(lab.config)
    before = lab.dump()
    made, _service = converge(lab, default_runtime=True)
    assert cd.get(lab.dump(), DEFAULT) == 'nvidia'
    assert made['default_runtime'] == 'nvidia'
    result, _service = converge(lab, state='absent')
    assert result['action'] == 'restart'
    assert result['runtimes'] == ['runc'] and result['default_runtime'] == 'runc'
    assert read(lab.config) == original
    after = lab.dump()
    after.pop('imports'), before.pop('imports')
    assert after == before
    assert cri_status(lab) == 'ok'


@pytest.mark.config_toml(KUBE)
def test_several_names_stay_side_by_side_and_absent_takes_back_one_at_a_time(lab_containerd):
    # NVIDIA's toolkit registers nvidia, nvidia-cdi and nvidia-legacy; each is one run of the module.
    lab = lab_containerd
    original = read(lab.config)
    converge(lab, default_runtime=True)
    with_nvidia = read(lab.config)
    first = lab.dump()
    result, _service = converge(lab, name='nvidia-cdi')
    assert result['action'] == 'restart' and result['runtimes'] == ['nvidia', 'nvidia-cdi', 'runc'], result
    both = lab.dump()
    assert cd.get(both, RUNTIMES + ('nvidia-cdi', 'options', 'SystemdCgroup')) is True
    assert without(both, RUNTIMES + ('nvidia-cdi',)) == without(first, RUNTIMES + ('nvidia-cdi',))
    assert read(lab.config).startswith(original)
    # Taking nvidia-cdi back leaves nvidia, the default it set, and the file as it was with nvidia alone.
    result, _service = converge(lab, name='nvidia-cdi', state='absent')
    assert result['runtimes'] == ['nvidia', 'runc'] and result['default_runtime'] == 'nvidia', result
    assert read(lab.config) == with_nvidia
    # Then nvidia: the original file, byte for byte, and its effective configuration.
    result, _service = converge(lab, state='absent')
    assert read(lab.config) == original and result['default_runtime'] == 'runc'
    assert cri_status(lab) == 'ok'


@pytest.mark.config_toml('''
[plugins."io.containerd.grpc.v1.cri"]
  systemd_cgroup = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runtime.v1.linux"
''')
def test_a_config_the_cri_plugin_refuses_is_rolled_back_with_its_error(lab_containerd):
    # An old node: the deprecated systemd_cgroup with the v1 runtime. Making nvidia (runc v2) the default is
    # accepted by `config dump` but the CRI plugin of 1.x refuses it at start; containerd keeps running without CRI.
    lab = lab_containerd
    assert cri_status(lab) == 'ok'
    original = read(lab.config)
    if CONTAINERD2:
        # containerd 2.x ignores systemd_cgroup ("Ignoring unknown key in TOML for plugin") and takes the runtime:
        # nothing to roll back, nvidia is the default the CRI plugin starts with.
        result, _service = converge(lab, default_runtime=True)
        assert result['action'] == 'restart' and result['default_runtime'] == 'nvidia', result
        assert 'systemd_cgroup' in lab.log_tail() and cri_status(lab) == 'ok'
        assert cd.get(lab.dump(), DEFAULT) == 'nvidia'
        return
    with pytest.raises(GpufleetError) as caught:
        converge(lab, default_runtime=True)
    message = str(caught.value)
    assert 'systemd_cgroup' in message and 'previous file was restored' in message, message
    assert read(lab.config) == original
    assert cri_status(lab) == 'ok'
    assert cd.get(lab.dump(), RUNTIMES + ('nvidia',)) is None


@pytest.mark.config_toml(KUBE)
def test_apply_none_writes_and_a_later_auto_run_restarts_once(lab_containerd):
    lab = lab_containerd
    pid = lab.pid()
    result, service = converge(lab, apply='none')
    assert result['action'] == 'deferred' and service.restarts == 0 and lab.pid() == pid
    # containerd started before the file changed: the next run applies it, once.
    result, service = converge(lab)
    assert result['action'] == 'restart' and not result['file_changed'] and lab.pid() != pid
    result, service = converge(lab)
    assert result['action'] == 'none' and service.restarts == 0


@pytest.mark.config_toml(KUBE)
def test_check_mode_changes_nothing(lab_containerd):
    lab = lab_containerd
    original = read(lab.config)
    pid = lab.pid()
    result, service = converge(lab, check_mode=True)
    assert result['file_changed'] and result['action'] == 'restart'
    assert read(lab.config) == original and lab.pid() == pid and service.restarts == 0


WORK = {'holders': [{'pid': 7, 'name': 'train', 'uid': 1000, 'paths': ['/dev/nvidia0']}], 'containers': []}


def test_a_restart_under_gpu_work_waits_with_defer_and_runs_with_force(lab_containerd, monkeypatch):
    # The work is given (host.workload.find reads this machine's /proc, where other suites' GPU work may run): the
    # policy's decision is what is tested here; molecule scenario upgrade finds real work in lab hosts.
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import workload
    monkeypatch.setattr(workload, 'find', lambda exclude=(), proc='/proc': WORK)
    lab = lab_containerd
    original, pid = read(lab.config), lab.pid()
    result, service = converge(lab, disruption='defer')
    assert result['action'] == 'deferred' and not result['changed'] and result['deferred']['work'] == WORK
    assert 'Restarting containerd deferred (disruption: defer)' in result['msg'] and 'pid 7 (train' in result['msg']
    assert service.restarts == 0 and lab.pid() == pid and read(lab.config) == original
    result, service = converge(lab, disruption='force')
    assert result['action'] == 'restart' and service.restarts == 1 and lab.pid() != pid
