# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One per-init-system table (init_paths.INIT_SYSTEMS): every concern's unit paths, modes and log files come from it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import facts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.device_links import boot
from ansible_collections.gpufleet.nvidia.plugins.module_utils.device_links import links
from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker import dockerd as docker_dockerd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.persistenced import rules
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import paths as init_paths

EXPECTED = {
    'systemd': ('/etc/systemd/system/%s.service', 0o644),
    'sysvinit': ('/etc/init.d/%s', 0o755),
    'upstart': ('/etc/init/%s.conf', 0o644),
}


@pytest.mark.parametrize('init', sorted(EXPECTED))
def test_each_concern_puts_its_init_files_where_the_init_system_reads_it(init):
    pattern, mode = EXPECTED[init]
    assert init_paths.unit_path(init, 'x') == pattern % 'x' and init_paths.unit_mode(init) == mode
    assert rules.unit_path(init, 'nvidia-persistenced') == pattern % 'nvidia-persistenced'
    path, unused_text, boot_mode = boot.boot_files(init)['unit']
    assert (path, boot_mode) == (pattern % links.SERVICE, mode)


def test_the_engines_logs_outside_the_journal():
    assert init_paths.log_files('docker') == ('/var/log/docker.log', '/var/log/upstart/docker.log')
    assert facts.log_files('containerd') == init_paths.log_files('containerd')
    dockerd = docker_dockerd.Dockerd(lambda argv: (0, '', ''), 'sysvinit', {}, service='docker')
    assert tuple(dockerd.log_files) == init_paths.log_files('docker')


def test_an_unknown_init_system_has_no_unit():
    with pytest.raises(KeyError):
        init_paths.unit_path('openrc', 'x')
    assert 'unit' not in boot.boot_files('openrc')
