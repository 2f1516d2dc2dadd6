# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One per-init-system table (_init_files.INIT_SYSTEMS): every concern's unit paths, modes and log files come from it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils import _containerd_apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _dev_char
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _dockerd
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _persistenced
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _init_files

EXPECTED = {
    'systemd': ('/etc/systemd/system/%s.service', 0o644),
    'sysvinit': ('/etc/init.d/%s', 0o755),
    'upstart': ('/etc/init/%s.conf', 0o644),
}


@pytest.mark.parametrize('init', sorted(EXPECTED))
def test_each_concern_puts_its_init_files_where_the_init_system_reads_it(init):
    pattern, mode = EXPECTED[init]
    assert _init_files.unit_path(init, 'x') == pattern % 'x' and _init_files.unit_mode(init) == mode
    assert _persistenced.unit_path(init, 'nvidia-persistenced') == pattern % 'nvidia-persistenced'
    path, unused_text, boot_mode = _dev_char.boot_files(init)['unit']
    assert (path, boot_mode) == (pattern % _dev_char.SERVICE, mode)


def test_the_engines_logs_outside_the_journal():
    assert _init_files.log_files('docker') == ('/var/log/docker.log', '/var/log/upstart/docker.log')
    assert _containerd_apply.log_files('containerd') == _init_files.log_files('containerd')
    dockerd = _dockerd.Dockerd(lambda argv: (0, '', ''), 'sysvinit', {}, service='docker')
    assert tuple(dockerd.log_files) == _init_files.log_files('docker')


def test_an_unknown_init_system_has_no_unit():
    with pytest.raises(KeyError):
        _init_files.unit_path('openrc', 'x')
    assert 'unit' not in _dev_char.boot_files('openrc')
