# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One class per init system (init.systems): every concern's unit paths, modes and log files come from it, and no code
outside init/ compares an init system's name."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import facts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.device_links import boot
from ansible_collections.gpufleet.nvidia.plugins.module_utils.device_links import links
from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker import dockerd as docker_dockerd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.persistenced import rules
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import ServiceError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import service
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import systems as init_paths

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
    with pytest.raises(ServiceError, match='no init system we know defines x here .init system: openrc'):
        init_paths.unit_path('openrc', 'x')
    assert 'unit' not in boot.boot_files('openrc')


def test_an_unknown_init_system_starts_nothing_and_says_so():
    ran = []
    unknown = service.Service('unknown', 'docker', lambda argv: ran.append(argv) or (0, '', ''), {})
    for verb in ('start', 'stop', 'restart'):
        with pytest.raises(ServiceError, match='cannot %s docker: no init system manages it here' % verb):
            getattr(unknown, verb)()
    unknown.enable()
    unknown.reload_init()
    assert ran == [] and unknown.is_enabled() and unknown.init is init_paths.UNKNOWN


PLUGINS = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', 'plugins')
NAME_TEST = re.compile(r"""[=!]= *['"](systemd|upstart|sysvinit)['"]|['"](systemd|upstart|sysvinit)['"] *[=!]=|"""
                       r"""(not )?in \((['"](systemd|upstart|sysvinit)['"],? *)+\)""")


def test_no_code_outside_init_compares_an_init_systems_name():
    # Adding an init system is one class in init/systems.py: nothing else may decide by the name. (A cgroup driver
    # called "systemd" is not an init system: cgroup_driver is allowed.)
    found = []
    for directory, unused_dirs, names in os.walk(os.path.abspath(PLUGINS)):
        if os.path.basename(directory) == 'init' and os.path.basename(os.path.dirname(directory)) == 'module_utils':
            continue
        for name in names:
            if not name.endswith('.py'):
                continue
            path = os.path.join(directory, name)
            with open(path) as handle:
                for number, line in enumerate(handle, 1):
                    if NAME_TEST.search(line) and 'cgroup_driver' not in line and 'driver !=' not in line:
                        found.append('%s:%d: %s' % (os.path.relpath(path, PLUGINS), number, line.strip()))
    assert found == []


def test_the_name_check_finds_a_comparison():
    assert NAME_TEST.search("if init == 'upstart':") and NAME_TEST.search('if init not in ("systemd", "sysvinit"):')
    assert not NAME_TEST.search("INIT = 'upstart'")
