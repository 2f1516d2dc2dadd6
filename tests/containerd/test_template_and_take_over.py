# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the nvidia runtime copies, the deprecated default_runtime table, taking over an existing nvidia entry.

Each case is judged by a real containerd: ``config dump`` and the configuration the CRI plugin logs when a
containerd starts on the written file (tests/containerd/crilog.py).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest


from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError

from .conftest import CONTAINERD2, RUNTIMES, settings
from .crilog import runtimes as cri_runtimes
from .test_containerd_runtime_real import RUNTIME, converge, cri_status, read, without

OLD = '/usr/local/nvidia/toolkit/nvidia-container-runtime'  # the path an older toolkit installer wrote


def start_with(lab, text):
    """``text`` (with ``@SETTINGS@`` for the lab's own paths) as the lab's config.toml, containerd restarted on it."""
    with open(lab.config, 'w') as handle:
        handle.write(text.replace('@SETTINGS@', settings(lab.base)))
    lab.restart()
    assert cri_status(lab) == 'ok', lab.log_tail()
    return read(lab.config)


def refused_as_version_1(lab, original, **kwargs):
    """containerd 2.x reads a version 1 file by migrating it on every start: the module edits versions 2 and 3
    only, and says how to go on; nothing changes."""
    pid = lab.pid()
    with pytest.raises(GpufleetError, match='drops its CRI runtime tables'):
        converge(lab, **kwargs)
    assert read(lab.config) == original and lab.pid() == pid


CUSTOM_DEFAULT = '''version = 2
@SETTINGS@
[plugins."io.containerd.grpc.v1.cri"]
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "custom"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.custom]
      runtime_type = "io.containerd.runc.v2"
      privileged_without_host_devices = true
      pod_annotations = ["example.com/*"]
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.custom.options]
        SystemdCgroup = true
        NoPivotRoot = true
        Root = "/run/custom-runc"
        ShimCgroup = "shims"
'''


def test_the_default_runtime_is_the_template_and_it_is_copied_whole(lab_containerd):
    # The kubelet's cgroup driver follows the default runtime (custom, systemd), not runc (cgroupfs here).
    lab = lab_containerd
    original = start_with(lab, CUSTOM_DEFAULT)
    before = lab.dump()
    result, _service = converge(lab)
    assert result['action'] == 'restart', result
    runtimes, default = cri_runtimes(lab.log_tail(65536))
    assert default == 'custom'
    nvidia, custom = runtimes['nvidia'], runtimes['custom']
    assert nvidia['Options'] == dict(custom['Options'], BinaryName=RUNTIME)
    assert nvidia['Options']['SystemdCgroup'] == 'true' and nvidia['Options']['NoPivotRoot'] == 'true'
    assert nvidia['PrivilegedWithoutHostDevices'] == 'true'
    assert nvidia['PodAnnotations'] == ['example.com/*']
    assert dict(nvidia, Options=None) == dict(custom, Options=None)
    after = lab.dump()
    assert without(after, RUNTIMES + ('nvidia',)) == without(before, RUNTIMES + ('nvidia',))
    assert read(lab.config).startswith(original)
    # Making nvidia the default does not change what it copies (the default before ours), nor does a re-run.
    block = read(lab.config)
    converge(lab, default_runtime=True)
    runtimes, default = cri_runtimes(lab.log_tail(65536))
    assert default == 'nvidia' and runtimes['nvidia']['Options']['SystemdCgroup'] == 'true'
    again, _service = converge(lab, default_runtime=True)
    assert not again['changed'], again
    converge(lab, default_runtime=False)
    assert read(lab.config) == block
    converge(lab, state='absent')
    assert read(lab.config) == original


LEGACY = {
    1: '''version = 1
@SETTINGS@
[plugins.cri.containerd]
  [plugins.cri.containerd.default_runtime]
    runtime_type = "io.containerd.runc.v2"
    [plugins.cri.containerd.default_runtime.options]
      SystemdCgroup = true
''',
    2: '''version = 2
@SETTINGS@
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"
  [plugins."io.containerd.grpc.v1.cri".containerd.default_runtime]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.default_runtime.options]
      SystemdCgroup = true
''',
}


@pytest.mark.parametrize('version', [1, 2])
def test_the_deprecated_default_runtime_table_is_what_the_cri_plugin_uses(lab_containerd, version):
    lab = lab_containerd
    original = start_with(lab, LEGACY[version])
    runtimes, default = cri_runtimes(lab.log_tail(65536))
    if CONTAINERD2:
        # containerd 2.x has no such table: it logs "Ignoring unknown key" and starts on runc, the default's default.
        assert default == 'runc' and 'default' not in runtimes and 'default_runtime' in lab.log_tail(65536)
        if version == 1:
            refused_as_version_1(lab, original, default_runtime=True)
            return
        result, _service = converge(lab, default_runtime=True)
        runtimes, default = cri_runtimes(lab.log_tail(65536))
        assert result['default_runtime'] == default == 'nvidia', result
        assert runtimes['nvidia']['Options'] == {'BinaryName': RUNTIME}  # a copy of runc, as the CRI plugin has it
        converge(lab, state='absent')
        assert read(lab.config) == original
        return
    assert default == 'default' and runtimes['default']['Options']['SystemdCgroup'] == 'true'
    pid = lab.pid()
    # Setting default_runtime_name would have no effect: refused, naming the table and the way out.
    with pytest.raises(GpufleetError) as caught:
        converge(lab, default_runtime=True)
    message = str(caught.value)
    line = [number for number, text in enumerate(original.decode().splitlines(), 1) if 'default_runtime]' in text][0]
    assert 'default_runtime]' in message and 'line %d ' % line in message and 'no effect' in message, message
    assert read(lab.config) == original and lab.pid() == pid
    # Registered beside it, nvidia copies the runtime the CRI plugin really defaults to.
    result, _service = converge(lab)
    assert result['default_runtime'] == 'default' and 'nvidia' in result['runtimes'], result
    runtimes, default = cri_runtimes(lab.log_tail(65536))
    assert default == 'default'
    assert runtimes['nvidia']['Options'] == {'BinaryName': RUNTIME, 'SystemdCgroup': 'true'}
    converge(lab, state='absent')
    assert read(lab.config) == original


STALE = {
    # An older toolkit installer's nvidia entry, made the default, beside runc with the systemd cgroup driver.
    2: '''version = 2
@SETTINGS@
[plugins."io.containerd.grpc.v1.cri"]
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "nvidia"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
        privileged_without_host_devices = false
        runtime_engine = ""
        runtime_root = ""
        runtime_type = "io.containerd.runc.v2"

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
          BinaryName = "%s"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = true
''' % OLD,
    1: '''@SETTINGS@
[plugins.cri.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  [plugins.cri.containerd.runtimes.runc.options]
    SystemdCgroup = true
[plugins.cri.containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
  options = { BinaryName = "%s", Runtime = "%s" }
''' % (OLD, OLD),
}


@pytest.mark.parametrize('version', [2, 1])
def test_an_existing_nvidia_entry_is_taken_over_only_on_request_and_given_back(lab_containerd, version):
    lab = lab_containerd
    original = start_with(lab, STALE[version])
    runtimes, default = cri_runtimes(lab.log_tail(65536))
    if CONTAINERD2 and version == 1:
        # containerd 2.x drops a version 1 file's runtimes when it migrates the file: the CRI plugin has runc alone.
        assert sorted(runtimes) == ['runc'] and 'containerd runtimes nvidia' in lab.log_tail(65536)
        refused_as_version_1(lab, original, take_over=True)
        return
    assert runtimes['nvidia']['Options']['BinaryName'] == OLD
    pid = lab.pid()
    with pytest.raises(GpufleetError, match='take_over: true') as caught:
        converge(lab)
    assert OLD in str(caught.value)
    assert read(lab.config) == original and lab.pid() == pid
    before = lab.dump()
    result, _service = converge(lab, take_over=True)
    assert result['action'] == 'restart' and any('commented out' in change for change in result['changes']), result
    runtimes, default = cri_runtimes(lab.log_tail(65536))
    assert runtimes['nvidia']['Options'] == {'BinaryName': RUNTIME, 'SystemdCgroup': 'true'}
    assert default == ('nvidia' if version == 2 else 'runc')
    after = lab.dump()
    assert without(after, RUNTIMES + ('nvidia',)) == without(before, RUNTIMES + ('nvidia',))
    assert OLD in read(lab.config).decode()  # kept, commented out
    again, _service = converge(lab, take_over=True)
    assert not again['changed'], again
    # absent gives the old entry back: the file byte for byte, the CRI plugin on the old path again.
    result, _service = converge(lab, state='absent')
    assert read(lab.config) == original, read(lab.config).decode()
    runtimes, default = cri_runtimes(lab.log_tail(65536))
    assert runtimes['nvidia']['Options']['BinaryName'] == OLD
    assert cri_status(lab) == 'ok'
