# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""containerd_runtime's edge cases against a real containerd (conftest.CONTAINERD), judged by containerd itself.

``containerd config dump`` for the effective configuration, and the CRI plugin's own configuration as the started
containerd logs it ("Start cri plugin with config {...}"): installer layouts run three times, a file without a final
newline, blank lines at the end of a CRLF file whose last line ends in LF, the way forward when absent would leave
a default that names no runtime.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import config as cd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import facts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError

from .conftest import DEFAULT, RUNTIMES, LabService
from .crilog import runtimes as cri_runtimes

RUNTIME = '/usr/bin/nvidia-container-runtime'
# What installers write: every table indented by its depth, the tables above the runtimes without keys of their own.
INSTALLER = '''[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".containerd]
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
          runtime_type = "io.containerd.runc.v2"
          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
            SystemdCgroup = true
'''


def converge(lab, **kwargs):
    kwargs.setdefault('runtime_path', RUNTIME)
    service = LabService(lab)
    result = apply.Converge(apply.Request(path=lab.config, **kwargs), service, facts.Tools(lab.run)).run()
    return result, service


def read(path):
    with open(path, 'rb') as handle:
        return handle.read()


def cri_started_with(lab):
    """The CRI plugin's configuration as the last start logged it: ``(default runtime, runtime names)``."""
    runtimes, default = cri_runtimes(lab.log_tail(1 << 20))
    return default, sorted(runtimes)


def cri_status(lab):
    plugins = facts.Tools(lab.run).plugins(lab.socket)
    assert plugins is not None, 'containerd does not answer: %s' % lab.log_tail()
    return plugins.get('cri')


@pytest.mark.parametrize('newline', ['\n', '\r\n'])
@pytest.mark.config_toml(INSTALLER, grpc_last=True)
def test_an_installer_layout_converges_in_one_run_and_restarts_once(lab_containerd, newline):
    lab = lab_containerd
    if newline != '\n':
        text = read(lab.config)
        with open(lab.config, 'wb') as handle:
            handle.write(text.replace(b'\n', newline.encode()))
        lab.restart()
    original = read(lab.config)
    result, service = converge(lab, default_runtime=True)
    assert result['action'] == 'restart' and service.restarts == 1
    assert cd.get(lab.dump(), DEFAULT) == 'nvidia'
    assert cri_started_with(lab) == ('nvidia', ['nvidia', 'runc']) and cri_status(lab) == 'ok'
    written, pid = read(lab.config), lab.pid()
    for _run in (2, 3):
        again, service = converge(lab, default_runtime=True)
        assert not again['changed'] and not again['file_changed'] and again['action'] == 'none', again['changes']
        assert service.restarts == 0 and lab.pid() == pid and read(lab.config) == written
    result, _service = converge(lab, state='absent')
    assert read(lab.config) == original and cri_started_with(lab) == ('runc', ['runc'])


@pytest.mark.config_toml('''
[plugins."io.containerd.grpc.v1.cri"]
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"''', final_newline=False)
def test_absent_gives_back_a_file_without_a_final_newline(lab_containerd):
    lab = lab_containerd
    original = read(lab.config)
    assert not original.endswith(b'\n')
    before = lab.dump()
    converge(lab, default_runtime=True)
    assert cd.get(lab.dump(), DEFAULT) == 'nvidia' and cri_started_with(lab)[0] == 'nvidia'
    again, _service = converge(lab, default_runtime=True)
    assert not again['changed']
    result, _service = converge(lab, state='absent')
    assert result['action'] == 'restart' and read(lab.config) == original
    after = lab.dump()
    after.pop('imports'), before.pop('imports')
    assert after == before and cri_started_with(lab) == ('runc', ['runc']) and cri_status(lab) == 'ok'


@pytest.mark.config_toml('# blank lines at the end\n\n\n', newline='\r\n')
def test_absent_gives_back_blank_lines_at_the_end_of_a_crlf_file_whose_last_line_ends_in_lf(lab_containerd):
    lab = lab_containerd
    text = read(lab.config)
    assert text.endswith(b'end\r\n\r\n\r\n')
    with open(lab.config, 'wb') as handle:
        handle.write(text[:-2] + b'\n')
    lab.restart()
    original = read(lab.config)
    result, _service = converge(lab, default_runtime=True)
    assert result['action'] == 'restart' and cri_started_with(lab) == ('nvidia', ['nvidia', 'runc'])
    again, _service = converge(lab, default_runtime=True)
    assert not again['changed'] and not again['file_changed'], again['changes']
    result, _service = converge(lab, state='absent')
    assert result['action'] == 'restart' and read(lab.config) == original
    assert cri_started_with(lab) == ('runc', ['runc']) and cri_status(lab) == 'ok'


@pytest.mark.config_toml('''
[plugins."io.containerd.grpc.v1.cri"]
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "nvidia"
''')
def test_absent_that_would_leave_a_dead_default_says_how_to_go_on(lab_containerd):
    # The site set default_runtime_name = "nvidia" by hand; this module brought the runtime. Taking it out would
    # leave a default that names no runtime: the CRI plugin would not start.
    lab = lab_containerd
    converge(lab)
    assert cri_started_with(lab) == ('nvidia', ['nvidia', 'runc']) and cri_status(lab) == 'ok'
    kept, pid = read(lab.config), lab.pid()
    with pytest.raises(GpufleetError) as caught:
        converge(lab, state='absent')
    message = str(caught.value)
    assert 'would leave default_runtime_name = "nvidia" (line 10 of %s)' % lab.config in message, message
    assert 'set default_runtime_name at line 10 to a runtime that stays (runc) or remove it' in message
    assert 'run state=absent again' in message
    assert read(lab.config) == kept and lab.pid() == pid
    # The way forward, as the message says: the default set to runc by hand, absent again.
    with open(lab.config, 'wb') as handle:
        handle.write(kept.replace(b'default_runtime_name = "nvidia"', b'default_runtime_name = "runc"'))
    result, _service = converge(lab, state='absent')
    assert result['action'] == 'restart' and cd.BEGIN.encode() not in read(lab.config)
    assert cri_started_with(lab) == ('runc', ['runc']) and cri_status(lab) == 'ok'


# runc with an empty runtime_type (containerd runs the runc v2 shim for it), as some installers write it
EMPTY_TYPE = '''[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = ""
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    SystemdCgroup = true
'''


@pytest.mark.config_toml(EMPTY_TYPE, grpc_last=True)
def test_a_runc_template_with_an_empty_runtime_type_gives_nvidia_its_systemd_cgroup(lab_containerd):
    # NVIDIA's nvidia-ctk copies such a runc (SystemdCgroup included) and sets runtime_type to runc v2; so do we
    lab = lab_containerd
    result, service = converge(lab)
    assert result['action'] == 'restart' and service.restarts == 1, result
    nvidia = cd.get(lab.dump(), RUNTIMES + ('nvidia',))
    assert nvidia['runtime_type'] == 'io.containerd.runc.v2'
    assert nvidia['options'] == {'BinaryName': RUNTIME, 'SystemdCgroup': True}
    assert cri_started_with(lab)[1] == ['nvidia', 'runc'] and cri_status(lab) == 'ok'
    again, service = converge(lab)
    assert again['action'] == 'none' and not again['file_changed'] and service.restarts == 0
