# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""crio_runtime over an nvidia runtime an earlier file defines (an old toolkit path in crio.conf), on files and a
fake service: the drop-in, read later, replaces that table whole, as CRI-O's drop-ins are meant to; absent brings it
back. CRI-O is not installable here (docs/crio.md)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import time

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.crio import config as cr
from ansible_collections.gpufleet.nvidia.plugins.module_utils.crio import apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import DocumentError

from test_crio import FIXTURES, FakeService, FakeTools, RUNTIME, request

OLD = '/usr/local/nvidia/toolkit/nvidia-container-runtime'
# crio.conf as an old toolkit install left it: nvidia defined in the main file, made the default.
MAIN = '''[crio.runtime]
default_runtime = "nvidia"
cgroup_manager = "systemd"
conmon = "/usr/bin/conmon"

[crio.runtime.runtimes.runc]
runtime_path = "/usr/bin/runc"
runtime_type = "oci"

[crio.runtime.runtimes.nvidia]
runtime_path = "%s"
runtime_type = "oci"
''' % OLD


@pytest.fixture
def host(tmp_path):
    etc = tmp_path / 'etc' / 'crio'
    (etc / 'crio.conf.d').mkdir(parents=True)
    (etc / 'crio.conf').write_text(MAIN)
    return etc


def converge(host, service, exists, **kwargs):
    req = request(path=str(host / 'crio.conf.d' / '99-nvidia.conf'), config_path=str(host / 'crio.conf'),
                  config_dir=str(host / 'crio.conf.d'), timeout=2, **kwargs)
    service.dropin = req.path
    return apply.Converge(req, service, FakeTools(), poll=0.01, find=lambda *a: (None, None, None),
                          runtime_exists=exists, settle=0.0, started=lambda pid: time.time() + 1).run()


def test_a_main_file_nvidia_with_an_old_path_is_overridden_and_absent_brings_it_back(host):
    # The old path is gone and nvidia is the default: CRI-O would not start. A later drop-in is CRI-O's own way to fix it.
    main_before = (host / 'crio.conf').read_bytes()
    service = FakeService(fail_on=lambda dropin: RUNTIME not in dropin)

    def exists(path):
        return path != OLD
    result = converge(host, service, exists)
    assert result['action'] == 'restart' and service.calls == ['restart'], result
    assert (host / 'crio.conf').read_bytes() == main_before
    dropin = cr.loads((host / 'crio.conf.d' / '99-nvidia.conf').read_text(), 'x')
    assert dropin['crio']['runtime']['runtimes']['nvidia']['runtime_path'] == RUNTIME
    assert result['default_runtime'] == 'nvidia'
    assert any('crio.conf defines the runtime "nvidia" at line 10 with runtime_path %r' % OLD in warning
               and 'replaces that table whole' in warning for warning in result['warnings']), result['warnings']
    sources, _ours = apply.read_sources(request(path=str(host / 'crio.conf.d' / '99-nvidia.conf'),
                                                config_path=str(host / 'crio.conf'),
                                                config_dir=str(host / 'crio.conf.d')))
    assert cr.Effective(sources).runtimes['nvidia']['runtime_path'] == RUNTIME
    again = converge(host, service, exists)
    assert again['action'] == 'none' and not again['changed']
    # absent: the drop-in goes, the main file's table is back as it was (the rollback guards a missing old path).
    gone = converge(host, FakeService(), exists, state='absent')
    assert not (host / 'crio.conf.d' / '99-nvidia.conf').exists()
    assert (host / 'crio.conf').read_bytes() == main_before
    assert any('is back as %s defines it' % (host / 'crio.conf') in warning for warning in gone['warnings'])


def test_an_earlier_drop_in_is_overridden_a_later_one_refused():
    main = cr.Source('/etc/crio/crio.conf', open(os.path.join(FIXTURES, 'typical.crio.conf')).read(), main=True)
    old = '[crio.runtime.runtimes.nvidia]\nruntime_path = "%s"\nruntime_type = "oci"\n' % OLD
    earlier = cr.plan([main, cr.Source('/etc/crio/crio.conf.d/50-nvidia.conf', old)], request())
    assert cr.loads(earlier.text, 'x')['crio']['runtime']['runtimes']['nvidia']['runtime_path'] == RUNTIME
    assert earlier.after.runtimes['nvidia']['runtime_path'] == RUNTIME
    with pytest.raises(DocumentError) as caught:
        cr.plan([main, cr.Source('/etc/crio/crio.conf.d/99-zz.conf', old)], request())
    message = str(caught.value)
    assert 'reads after /etc/crio/crio.conf.d/99-nvidia.conf' in message and 'name that sorts after it' in message
