# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""containerd_runtime ``cdi`` against a real containerd (1.6.20, 1.7.24 or 2.1.9: tests/engines).

Measured (docs/containerd.md): 1.6 has no CDI (its dump has no ``enable_cdi``); 1.7 has it off by default and
``containerd config default`` writes ``enable_cdi = false`` and ``cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]`` in
``plugins."io.containerd.grpc.v1.cri"``; 2.x has it on by default, in ``plugins."io.containerd.cri.v1.runtime"``.
Every verdict is containerd's own: ``config dump`` and the CRI plugin loaded after the restart.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import config as cd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import facts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError

from .conftest import CONTAINERD, CONTAINERD2, CRI_RUNTIME
from .test_containerd_runtime_real import KUBE, converge, cri_status, read

ENABLE = CRI_RUNTIME + ('enable_cdi',)
DIRS = CRI_RUNTIME + ('cdi_spec_dirs',)
DEFAULT_DIRS = ['/etc/cdi', '/var/run/cdi']


def version(lab):
    return facts.Tools(lab.run).version()


def refused_without_cdi(lab):
    """On containerd 1.6 (no CDI): ``cdi: true`` is refused with the file and containerd untouched (asserted), True;
    else False, and the test goes on."""
    if version(lab) >= (1, 7):
        return False
    assert_refused_on_16(lab)
    return True


def write(lab, data):
    with open(lab.config, 'wb') as handle:
        handle.write(data)
    lab.restart()


def default_file(lab):
    """``containerd config default`` of this containerd, with the lab's own root, state and socket."""
    rc, out, err = lab.run([CONTAINERD, 'config', 'default'])
    assert rc == 0, err
    out = re.sub(r'(?m)^root = .*$', 'root = "%s/root"' % lab.base, out, count=1)
    out = re.sub(r'(?m)^state = .*$', 'state = "%s/state"' % lab.base, out, count=1)
    out, count = re.subn(r'''(?m)^(\s*)address = ["']/run/containerd/containerd.sock["']''',
                         r'\1address = "%s"' % lab.socket, out)
    assert count == 1
    return out.encode('utf-8')


def assert_cdi_on(lab, dirs):
    after = lab.dump()
    assert cd.get(after, ENABLE) is True
    assert cd.get(after, DIRS) == dirs
    assert cri_status(lab) == 'ok'   # containerd started with the file, CRI plugin loaded


def assert_refused_on_16(lab):
    original, pid = read(lab.config), lab.pid()
    assert cd.get(lab.dump(), ENABLE) is None  # 1.6.20's dump: no enable_cdi at all
    with pytest.raises(GpufleetError) as raised:
        converge(lab, cdi=True)
    assert 'has no CDI' in str(raised.value) and lab.config in str(raised.value)
    assert '1.6.20' in str(raised.value)
    assert read(lab.config) == original and lab.pid() == pid


def test_the_config_default_file_gets_enable_cdi_in_place_and_cdi_false_gives_its_bytes_back(lab_containerd):
    lab = lab_containerd
    write(lab, default_file(lab))
    if refused_without_cdi(lab):
        return
    converge(lab)  # the runtime alone first: what follows is CDI only
    registered = read(lab.config)
    before = lab.dump()
    if CONTAINERD2:
        # 2.x: CDI on by default, the default directories read: nothing to write, nothing to restart.
        assert cd.get(before, ENABLE) is True and cd.get(before, DIRS) == DEFAULT_DIRS
        pid = lab.pid()
        result, service = converge(lab, cdi=True)
        assert not result['changed'] and result['action'] == 'none' and service.restarts == 0, result
        assert result['cdi'] == {'enabled': True, 'spec_dirs': DEFAULT_DIRS}
        assert read(lab.config) == registered and lab.pid() == pid
        return
    assert cd.get(before, ENABLE) is False and cd.get(before, DIRS) == DEFAULT_DIRS
    assert b'    enable_cdi = false\n' in registered
    # Check mode: predicted, nothing written, nothing restarted.
    pid = lab.pid()
    predicted, service = converge(lab, cdi=True, check_mode=True)
    assert predicted['changed'] and predicted['action'] == 'restart' and service.restarts == 0, predicted
    assert predicted['cdi'] == {'enabled': True, 'spec_dirs': DEFAULT_DIRS}
    assert read(lab.config) == registered and lab.pid() == pid
    result, service = converge(lab, cdi=True)
    assert result['action'] == 'restart' and service.restarts == 1 and lab.pid() != pid, result
    assert result['changes'] == ['enable_cdi set to true (was false)']
    assert result['cdi'] == {'enabled': True, 'spec_dirs': DEFAULT_DIRS}
    text = read(lab.config)
    assert ('    %sfalse\n    enable_cdi = true\n' % cd.key_mark('enable_cdi')).encode() in text
    assert text.replace(('    %sfalse\n' % cd.key_mark('enable_cdi')).encode(), b'').replace(
        b'enable_cdi = true', b'enable_cdi = false') == registered  # the one value changed, in place
    assert_cdi_on(lab, DEFAULT_DIRS)
    # Only CDI changed in the effective configuration.
    after = lab.dump()
    cd.get(after, CRI_RUNTIME)['enable_cdi'] = False
    after.pop('imports', None)
    before.pop('imports', None)
    assert after == before
    # A second run: nothing.
    pid, mtime = lab.pid(), os.stat(lab.config).st_mtime_ns
    again, service = converge(lab, cdi=True)
    assert not again['changed'] and again['action'] == 'none' and service.restarts == 0, again
    assert lab.pid() == pid and os.stat(lab.config).st_mtime_ns == mtime
    # cdi=false puts the previous value back: the exact bytes.
    off, service = converge(lab, cdi=False)
    assert off['changes'] == ['enable_cdi restored'] and service.restarts == 1, off
    assert read(lab.config) == registered and cd.get(lab.dump(), ENABLE) is False and cri_status(lab) == 'ok'


def test_a_minimal_file_gets_the_cri_table_in_the_block_and_absent_gives_the_original_back(lab_containerd):
    lab = lab_containerd
    if refused_without_cdi(lab):
        return
    original = read(lab.config)
    dirs = ['/etc/cdi', '/run/cdi', '/opt/cdi']  # /run/cdi is /var/run/cdi: read already
    result, service = converge(lab, cdi=True, cdi_spec_dirs=dirs)
    assert result['action'] == 'restart' and service.restarts == 1, result
    assert_cdi_on(lab, DEFAULT_DIRS + ['/opt/cdi'])
    assert result['cdi'] == {'enabled': True, 'spec_dirs': DEFAULT_DIRS + ['/opt/cdi']}
    text = read(lab.config)
    assert text.startswith(original) and text.count(cd.BEGIN.encode()) == 1
    table = '[plugins."io.containerd.grpc.v1.cri"]\n'
    if CONTAINERD2:  # on by default: only the directory is added
        assert (table + '  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi", "/opt/cdi"]\n' + cd.END).encode() in text
    else:
        assert (table + '  enable_cdi = true\n  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi", "/opt/cdi"]\n' +
                cd.END).encode() in text
    pid = lab.pid()
    again, service = converge(lab, cdi=True, cdi_spec_dirs=dirs)
    assert not again['changed'] and service.restarts == 0 and lab.pid() == pid, again
    gone, service = converge(lab, state='absent')
    assert read(lab.config) == original and service.restarts == 1, gone
    assert cd.get(lab.dump(), ENABLE) is CONTAINERD2 and cd.get(lab.dump(), DIRS) == DEFAULT_DIRS
    assert cri_status(lab) == 'ok'


@pytest.mark.config_toml(KUBE, newline='\r\n', final_newline=False)
def test_a_crlf_file_without_final_newline_gets_enable_cdi_added_to_its_cri_table(lab_containerd):
    lab = lab_containerd
    if refused_without_cdi(lab):
        return
    original = read(lab.config)
    result, service = converge(lab, cdi=True)
    assert service.restarts == 1, result
    assert_cdi_on(lab, DEFAULT_DIRS)
    text = read(lab.config)
    assert b'\n' not in text.replace(b'\r\n', b'')
    if CONTAINERD2:  # CDI was on already: the runtime's block only
        assert cd.key_added('enable_cdi').encode() not in text
    else:
        assert ('  %s\r\n  enable_cdi = true\r\n  [plugins."io.containerd.grpc.v1.cri".registry]'
                % cd.key_added('enable_cdi')).encode() in text
    again, service = converge(lab, cdi=True)
    assert not again['changed'] and service.restarts == 0, again
    converge(lab, state='absent')
    assert read(lab.config) == original and cri_status(lab) == 'ok'


@pytest.mark.config_toml(KUBE.replace('"registry.k8s.io/pause:3.9"', '"registry.k8s.io/pause:3.9"\n'
                                      '  cdi_spec_dirs = ["/etc/cdi"]  # site list'))
def test_a_list_that_lacks_a_directory_is_extended_in_place_and_put_back(lab_containerd):
    lab = lab_containerd
    if refused_without_cdi(lab):
        return
    converge(lab)
    registered = read(lab.config)
    assert cd.get(lab.dump(), DIRS) == ['/etc/cdi']
    result, service = converge(lab, cdi=True)
    assert service.restarts == 1 and 'cdi_spec_dirs set to ["/etc/cdi", "/var/run/cdi"] (was ["/etc/cdi"])' in \
        result['changes'], result
    assert ('  %s["/etc/cdi"]\n  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]  # site list   # the kubelet'
            % cd.key_mark('cdi_spec_dirs')).encode() in read(lab.config)
    assert_cdi_on(lab, DEFAULT_DIRS)
    off, service = converge(lab, cdi=False)
    assert read(lab.config) == registered and cd.get(lab.dump(), DIRS) == ['/etc/cdi'], off


@pytest.mark.config_toml(KUBE, head='imports = ["cdi.toml"]\n', files={'cdi.toml': (
    'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = false\n')})
def test_an_imported_file_that_turns_cdi_off_is_refused_by_name_and_by_the_dump_check(lab_containerd, monkeypatch):
    lab = lab_containerd
    original, pid = read(lab.config), lab.pid()
    imported = os.path.join(lab.base, 'cdi.toml')
    with pytest.raises(GpufleetError) as raised:
        converge(lab, cdi=True)
    if not CONTAINERD2:  # 1.x replaces the CRI table with an imported one: refused for the runtime already
        assert 'replaces the whole CRI table' in str(raised.value)
        assert read(lab.config) == original and lab.pid() == pid
        return
    assert 'imports %s, which sets enable_cdi' % imported in str(raised.value)
    assert read(lab.config) == original and lab.pid() == pid
    # Without that check, containerd's dump of the planned text still catches it: nothing is written.
    monkeypatch.setattr(apply.Converge, 'check_cdi_imports', lambda *args: None)
    with pytest.raises(GpufleetError, match='enable_cdi is false, not true. Nothing was written'):
        converge(lab, cdi=True)
    assert read(lab.config) == original and lab.pid() == pid
