# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""crio_runtime copies its template runtime's table whole, as ``nvidia-ctk runtime configure --runtime=crio`` does,
from CRI-O's merged configuration; only the keys docs/crio.md gives a reason for are not copied. On files and a fake
service: CRI-O is not installable here (docs/crio.md)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import time

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.crio import config as cr
from ansible_collections.gpufleet.nvidia.plugins.module_utils.crio import apply

from test_crio import FakeService, FakeTools, RUNTIME, planned, request, table

# A site's runc handler with the settings NVIDIA's tool carries over to nvidia.
SITE_RUNC = '''[crio.runtime.runtimes.runc]
runtime_path = "/usr/bin/runc"
runtime_type = "oci"
runtime_root = "/run/runc"
monitor_path = "/usr/bin/conmon"
monitor_cgroup = "system.slice"
privileged_without_host_devices = true
allowed_annotations = ["io.kubernetes.cri-o.Devices", "io.kubernetes.cri-o.ShmSize"]
runtime_config_path = "/etc/site/runc.json"
container_min_memory = "12MiB"
no_sync_log = true
stream_websockets = true
monitor_exec_cgroup = "container"
site_future_key = 7
platform_runtime_paths = {"linux/riscv64" = "/usr/bin/runc-riscv64"}
inherit_default_runtime = false

[crio.runtime.runtimes.runc.default_annotations]
"io.kubernetes.cri-o.userns-mode" = "auto"
"example.com/site" = "a \\"quoted\\" value"
'''
MAIN = '[crio.runtime]\ndefault_runtime = "runc"\ncgroup_manager = "systemd"\n\n' + SITE_RUNC
COPIED = {
    'privileged_without_host_devices': True,
    'allowed_annotations': ['io.kubernetes.cri-o.Devices', 'io.kubernetes.cri-o.ShmSize'],
    'runtime_config_path': '/etc/site/runc.json',
    'container_min_memory': '12MiB',
    'no_sync_log': True,
    'stream_websockets': True,
    'monitor_exec_cgroup': 'container',
    'site_future_key': 7,
    'default_annotations': {'io.kubernetes.cri-o.userns-mode': 'auto', 'example.com/site': 'a "quoted" value'},
}
WANTED = dict(COPIED, runtime_path=RUNTIME, runtime_type='oci', monitor_path='/usr/bin/conmon',
              monitor_cgroup='system.slice')


def test_the_template_table_is_copied_whole_but_the_documented_exceptions():
    plan = planned([cr.Source('/etc/crio/crio.conf', MAIN, main=True)])
    # The written drop-in, parsed back, and what CRI-O would merge from it.
    assert table(plan) == WANTED
    assert plan.after.runtimes['nvidia'] == WANTED
    # Not copied, with their reasons in docs/crio.md: runc's state root, another binary per platform (it would run
    # instead of nvidia-container-runtime), and CRI-O's inheritance of the default's path.
    assert not set(table(plan)) & {'runtime_root', 'platform_runtime_paths', 'inherit_default_runtime'}
    assert plan.after.runtimes['runc'] == plan.before.runtimes['runc']
    assert '"io.kubernetes.cri-o.userns-mode" = "auto"' in plan.text
    assert any('privileged_without_host_devices = true' in change for change in plan.changes)


def test_the_template_is_read_from_the_merged_configuration():
    # A later drop-in replaces runc's table whole (a Go map entry): only its keys are copied, none of crio.conf's.
    later = cr.Source('/etc/crio/crio.conf.d/50-runc.conf',
                      '[crio.runtime.runtimes.runc]\nruntime_path = "/opt/runc"\nallowed_annotations = ["x"]\n')
    plan = planned([cr.Source('/etc/crio/crio.conf', MAIN, main=True), later])
    assert table(plan) == {'runtime_path': RUNTIME, 'runtime_type': 'oci', 'monitor_cgroup': 'system.slice',
                           'allowed_annotations': ['x']}


def test_a_conmon_rs_template_is_copied_with_its_type():
    main = cr.Source('/etc/crio/crio.conf', '[crio.runtime]\ndefault_runtime = "crun"\n'
                     '[crio.runtime.runtimes.crun]\nruntime_type = "pod"\nmonitor_path = "/usr/libexec/crio/conmonrs"\n'
                     'privileged_without_host_devices = true\nstream_websockets = true\n', main=True)
    assert table(planned([main])) == {'runtime_path': RUNTIME, 'runtime_type': 'pod',
                                      'monitor_path': '/usr/libexec/crio/conmonrs',
                                      'privileged_without_host_devices': True, 'stream_websockets': True}


def test_a_vm_template_gives_nothing_but_an_oci_runtime():
    # A VM handler's settings are a VM's (CRI-O takes runtime_config_path on "vm" handlers only): nothing is copied.
    main = cr.Source('/etc/crio/crio.conf', '[crio.runtime]\ndefault_runtime = "kata"\n'
                     '[crio.runtime.runtimes.kata]\nruntime_type = "vm"\nruntime_path = "/usr/bin/containerd-shim-kata-v2"\n'
                     'runtime_config_path = "/etc/kata/configuration.toml"\nprivileged_without_host_devices = true\n',
                     main=True)
    plan = planned([main])
    assert table(plan) == {'runtime_path': RUNTIME, 'runtime_type': 'oci', 'monitor_cgroup': 'system.slice'}
    assert any('of type "vm"' in warning for warning in plan.warnings)


@pytest.fixture
def host(tmp_path):
    etc = tmp_path / 'etc' / 'crio'
    (etc / 'crio.conf.d').mkdir(parents=True)
    (etc / 'crio.conf').write_text(MAIN)
    return etc


def converge(host, service, **kwargs):
    req = request(path=str(host / 'crio.conf.d' / '99-nvidia.conf'), config_path=str(host / 'crio.conf'),
                  config_dir=str(host / 'crio.conf.d'), timeout=2, **kwargs)
    service.dropin = req.path
    return apply.Converge(req, service, FakeTools(), poll=0.01, find=lambda *a: (None, None, None),
                          runtime_exists=lambda path: True, settle=0.0, started=lambda pid: time.time() + 1).run()


def written(host):
    return cr.loads((host / 'crio.conf.d' / '99-nvidia.conf').read_text(), 'x')['crio']['runtime']['runtimes']['nvidia']


def tree(host):
    return dict((os.path.relpath(os.path.join(top, name), str(host)), open(os.path.join(top, name), 'rb').read())
                for top, _dirs, names in os.walk(str(host)) for name in names)


def test_present_twice_changes_nothing_and_absent_gives_back_the_original(host):
    before = tree(host)
    service = FakeService()
    first = converge(host, service)
    assert first['action'] == 'restart' and written(host) == WANTED
    text = (host / 'crio.conf.d' / '99-nvidia.conf').read_bytes()
    again = converge(host, service)
    assert again['action'] == 'none' and not again['changed'] and service.calls == ['restart']
    assert (host / 'crio.conf.d' / '99-nvidia.conf').read_bytes() == text
    gone = converge(host, service, state='absent')
    assert gone['changed'] and service.calls == ['restart', 'restart']
    assert tree(host) == before


def test_a_changed_template_setting_updates_nvidia_on_the_next_run(host):
    # Like NVIDIA's tool, which copies the template again each time it runs: nvidia follows its template. The run
    # after a template change rewrites the drop-in and restarts crio; the run after that changes nothing again.
    service = FakeService()
    converge(host, service)
    main = host / 'crio.conf'
    main.write_text(MAIN.replace('privileged_without_host_devices = true', 'privileged_without_host_devices = false')
                    .replace('no_sync_log = true\n', ''))
    changed = converge(host, service)
    assert changed['changed'] and changed['action'] == 'restart' and service.calls == ['restart', 'restart']
    now = written(host)
    assert now['privileged_without_host_devices'] is False and 'no_sync_log' not in now
    assert now == dict(dict((k, v) for k, v in WANTED.items() if k != 'no_sync_log'),
                       privileged_without_host_devices=False)
    assert now == dict(cr.Effective(apply.read_sources(request(
        path=str(host / 'crio.conf.d' / '99-nvidia.conf'), config_path=str(main),
        config_dir=str(host / 'crio.conf.d')))[0]).runtimes['nvidia'])
    again = converge(host, service)
    assert again['action'] == 'none' and not again['changed']
