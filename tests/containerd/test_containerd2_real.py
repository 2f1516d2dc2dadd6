# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What containerd 2.x changes for the registration, measured on real binaries (docs/containerd.md).

* A version 3 file: the block in the file, with the version 3 ids, on 2.x; refused on 1.x (which ignores them).
* A drop-in as NVIDIA's toolkit 1.18+ writes it (``imports`` of ``conf.d/*.toml`` with the runtime alone): 1.x
  replaces the whole CRI table with it, 2.x merges it key by key.
* A host upgraded from this engine's containerd to 2.x (Debian forky's, ``tests/engines``) with our block in its
  version 2 file, then ``containerd config migrate``: the first is the same containerd under another binary, the
  second a file with no markers left.

Every verdict is containerd's own: ``config dump`` and the configuration the CRI plugin logs at start.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import tempfile
import time

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import config as cd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import facts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError

from .conftest import CONTAINERD, CONTAINERD2, RUNTIMES, SANDBOX_IMAGE, LabContainerd, engines, settings
from .crilog import runtimes as cri_runtimes
from .test_containerd_runtime_real import KUBE, RUNTIME, converge, cri_status, read

V3 = '''
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "registry.k8s.io/pause:3.9"   # the kubelet's pause image (2.1's default: 3.10)
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
    SystemdCgroup = true
'''
# What `nvidia-ctk runtime configure --runtime=containerd` (toolkit 1.18+) writes beside an `imports` line.
DROP_IN = '''version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
    BinaryName = "%s"
    SystemdCgroup = true
'''


@pytest.mark.config_toml(V3)
def test_a_version_3_file(lab_containerd):
    lab = lab_containerd
    text = read(lab.config).replace(b'version = 2\n', b'version = 3\n', 1)
    with open(lab.config, 'wb') as handle:
        handle.write(text)
    lab.restart()
    original, pid = read(lab.config), lab.pid()
    if not CONTAINERD2:
        with pytest.raises(GpufleetError, match='ignores the io.containerd.cri.v1.. tables of a version 3 file'):
            converge(lab)
        assert read(lab.config) == original and lab.pid() == pid
        return
    result, service = converge(lab)
    assert result['action'] == 'restart' and result['schema'] == 3 and service.restarts == 1, result
    assert b'[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia]' in read(lab.config)
    after = lab.dump()
    assert cd.get(after, RUNTIMES + ('nvidia', 'options')) == {'BinaryName': RUNTIME, 'SystemdCgroup': True}
    assert cd.get(after, SANDBOX_IMAGE) == 'registry.k8s.io/pause:3.9'
    runtimes, default = cri_runtimes(lab.log_tail(1 << 20))
    assert default == 'runc' and runtimes['nvidia']['Options'] == {'BinaryName': RUNTIME, 'SystemdCgroup': 'true'}
    assert read(lab.config).startswith(original) and cri_status(lab) == 'ok'
    again, service = converge(lab)
    assert again['action'] == 'none' and not again['changed'] and service.restarts == 0, again
    converge(lab, state='absent')
    assert read(lab.config) == original and cri_status(lab) == 'ok'


def test_a_drop_in_as_nvidia_ctk_writes_it(lab_containerd):
    lab = lab_containerd
    os.mkdir(os.path.join(lab.base, 'conf.d'))
    with open(lab.config, 'w') as handle:  # absolute: 1.x takes a relative glob from its working directory
        handle.write('version = 2\nimports = ["%s/conf.d/*.toml"]\n' % lab.base + settings(lab.base) + KUBE)
    with open(os.path.join(lab.base, 'conf.d', '99-nvidia.toml'), 'w') as handle:
        handle.write(DROP_IN % RUNTIME)
    lab.restart()
    dump = lab.dump()
    runtimes = cd.get(dump, RUNTIMES)
    assert runtimes['nvidia']['options']['BinaryName'] == RUNTIME
    original, pid = read(lab.config), lab.pid()
    if not CONTAINERD2:
        # 1.x: the drop-in's CRI table replaces the main file's whole: runc and the pause image are gone.
        assert sorted(runtimes) == ['nvidia'] and cd.get(dump, SANDBOX_IMAGE) != 'registry.k8s.io/pause:3.9'
        with pytest.raises(GpufleetError, match='replaces the whole CRI table'):
            converge(lab)
        assert read(lab.config) == original and lab.pid() == pid
        return
    # 2.x: merged key by key; the main file's runc, its cgroup driver and the pause image stay.
    assert runtimes['runc']['options']['SystemdCgroup'] is True
    assert cd.get(dump, SANDBOX_IMAGE) == 'registry.k8s.io/pause:3.9'
    # The module finds the runtime in the drop-in (2.x's dump lists the pattern, not the files it loaded) and,
    # as it would register it the same, writes nothing.
    result, service = converge(lab)
    assert result['action'] == 'none' and not result['changed'] and service.restarts == 0, result
    assert any('99-nvidia.toml' in warning for warning in result['warnings']), result['warnings']
    assert read(lab.config) == original and lab.pid() == pid
    # The drop-in written again after containerd started (a toolkit upgrade): the running process may lack it, so
    # one restart, and none on the next run. (The sleep puts the write clearly after the start: two clock ticks.)
    time.sleep(0.2)
    with open(os.path.join(lab.base, 'conf.d', '99-nvidia.toml'), 'w') as handle:
        handle.write('# written again\n' + DROP_IN % RUNTIME)
    result, service = converge(lab)
    assert result['action'] == 'restart' and not result['file_changed'] and service.restarts == 1, result
    pid = lab.pid()
    result, service = converge(lab)
    assert result['action'] == 'none' and service.restarts == 0 and lab.pid() == pid, result
    # A drop-in that registers the runtime otherwise than this module would: refused, naming the file.
    with open(os.path.join(lab.base, 'conf.d', '99-nvidia.toml'), 'a') as handle:
        handle.write('    NoNewKeyring = true\n')
    with pytest.raises(GpufleetError, match='99-nvidia.toml, which defines the runtime "nvidia" differently'):
        converge(lab)
    assert read(lab.config) == original and lab.pid() == pid


def test_a_host_upgraded_to_containerd_2_keeps_the_block_then_config_migrate(lab_containerd):
    """Our block, written by this engine's containerd (1.6, 1.7 or 2.x), read by Debian forky's 2.x."""
    old = lab_containerd
    with open(old.config, 'w') as handle:
        handle.write('version = 2\n' + settings(old.base) + KUBE)
    old.restart()
    converge(old)
    written = read(old.config).decode()
    base = tempfile.mkdtemp(prefix='gfcu-', dir='/tmp')
    os.chmod(base, 0o755)
    new = LabContainerd(base)
    new.engine_root = engines.root('forky')
    try:
        with open(new.config, 'w') as handle:
            handle.write(written.replace(old.base, base))
        new.start()
        runtimes, default = cri_runtimes(new.log_tail(1 << 20))
        assert runtimes['nvidia']['Options'] == {'BinaryName': RUNTIME, 'SystemdCgroup': 'true'}
        upgraded, pid = read(new.config), new.pid()
        # The same registration under 2.x: nothing to write, nothing to restart.
        result, service = converge(new)
        assert result['action'] == 'none' and not result['changed'] and service.restarts == 0, result
        assert read(new.config) == upgraded and new.pid() == pid
        # `containerd config migrate`: version 3, every setting spelled out, comments (our markers) gone.
        rc, migrated, err = new.run([CONTAINERD, '--config', new.config, 'config', 'migrate'])
        assert rc == 0 and migrated.startswith('version = 3'), err
        assert cd.BEGIN not in migrated
        with open(new.config, 'w') as handle:
            handle.write(migrated)
        new.restart()
        # The nvidia table is the site's own now, equal to what the module writes: left as it is, no block.
        result, service = converge(new)
        assert result['action'] == 'none' and not result['changed'] and service.restarts == 0, result
        assert read(new.config) == migrated.encode()
        assert cd.get(new.dump(), ('plugins', 'io.containerd.cri.v1.runtime', 'containerd', 'runtimes', 'nvidia',
                                   'options', 'BinaryName')) == RUNTIME
        # Nothing of ours to take back: absent leaves the file alone and says nothing was ours.
        result, service = converge(new, state='absent')
        assert not result['file_changed'] and read(new.config) == migrated.encode(), result
    finally:
        new.cleanup()
        shutil.rmtree(base, ignore_errors=True)


# A drop-in in version 3's names, as a containerd 2.x's `config dump` gives it (NVIDIA's installer writes one so).
DROP_IN_OTHER_VERSION = '''version = %d
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]
  runtime_type = 'io.containerd.runc.v2'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia.options]
    BinaryName = '%s'
    SystemdCgroup = true
'''


def test_a_drop_in_of_another_config_version_is_reported_before_any_restart(lab_containerd):
    # measured with `config dump`: 1.6 reads an imported file whatever its version (version 3's tables silently
    # ignored), 1.7 refuses one above 2 without naming it, 2.1 refuses one above 3 and migrates the others
    lab = lab_containerd
    version = facts.Tools(lab.run).version()
    os.mkdir(os.path.join(lab.base, 'conf.d'))
    with open(lab.config, 'w') as handle:
        handle.write('version = 2\nimports = ["%s/conf.d/*.toml"]\n' % lab.base + settings(lab.base) + KUBE)
    lab.restart()
    drop_in = os.path.join(lab.base, 'conf.d', '99-nvidia.toml')
    original, pid = read(lab.config), lab.pid()
    refused = 4 if CONTAINERD2 else 3
    with open(drop_in, 'w') as handle:  # after containerd started: a restart now would not come back
        handle.write(DROP_IN_OTHER_VERSION % (refused, RUNTIME))
    if version[:2] == (1, 6):
        result, service = converge(lab)
        warned = [w for w in result['warnings'] if '99-nvidia.toml declares config version 3, the main file 2' in w]
        assert warned and 'silently ignored' in warned[0], result['warnings']
        assert result['action'] == 'restart' and service.restarts == 1  # our registration: 1.6 ignores the drop-in's
        assert cri_status(lab) == 'ok'
        return
    with pytest.raises(GpufleetError, match=r'99-nvidia.toml declares config version %d, the main file 2: containerd '
                                            r'[0-9.]+ refuses it' % refused):
        converge(lab)
    assert read(lab.config) == original and lab.pid() == pid  # nothing written, containerd never restarted
    if CONTAINERD2:
        # version 3 beside the version 2 main file: 2.1 would drop the main file's runc settings (measured below)
        with open(drop_in, 'w') as handle:
            handle.write(DROP_IN_OTHER_VERSION % (3, RUNTIME))
        rc, dumped, err = lab.run([CONTAINERD, '--config', lab.config, 'config', 'dump'])
        assert rc == 0 and "SystemdCgroup = false" in dumped.split("runtimes.runc.options]")[1][:600], err
        with pytest.raises(GpufleetError, match=r'99-nvidia.toml declares config version 3, the main file 2: '
                                                r'containerd [0-9.]+ then drops settings of the main file'):
            converge(lab)
        assert read(lab.config) == original and lab.pid() == pid
