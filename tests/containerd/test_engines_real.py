# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``auto`` and a real containerd: a containerd with its CRI plugin disabled runs no CRI, and is left out.

The containerd.io package of Docker's repositories writes
``disabled_plugins = ["cri"]``; that containerd loads no CRI plugin at all
(``ctr plugins ls``), so nothing there would read a registered runtime.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import facts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import engines

from .conftest import CONTAINERD2


# A version 2 file must name the plugin's full id: containerd 1.6 refuses "cri" there
# ("invalid disabled plugin URI "cri" expect io.containerd.x.vx").
@pytest.mark.config_toml('', head='disabled_plugins = ["io.containerd.grpc.v1.cri"]\n')
def test_a_containerd_without_cri_is_left_out_of_auto(lab_containerd):
    lab = lab_containerd
    plugins = facts.Tools(lab.run).plugins(lab.socket)
    assert plugins and 'cri' not in plugins  # the running containerd has no CRI plugin
    found = engines.containerd_cri(facts.Tools(lab.run), lab.config)
    assert found['auto'] is False and found['cri_disabled'] == 'io.containerd.grpc.v1.cri', found
    assert lab.config in found['reason']


@pytest.mark.config_toml('')
def test_the_docker_packages_version_1_file_is_left_out_of_auto(lab_containerd):
    # containerd.io's own config.toml: no version line (version 1), where the short id "cri" is valid. containerd 2.x
    # migrates the file first: its dump names the plugin by its full id.
    lab = lab_containerd
    docker_file = os.path.join(lab.base, 'containerd-io.toml')
    with open(docker_file, 'w') as handle:
        handle.write('disabled_plugins = ["cri"]\n')
    found = engines.containerd_cri(facts.Tools(lab.run), docker_file)
    assert found['auto'] is False, found
    assert found['cri_disabled'] == ('io.containerd.grpc.v1.cri' if CONTAINERD2 else 'cri'), found


@pytest.mark.config_toml('')
def test_a_containerd_with_cri_is_taken(lab_containerd):
    lab = lab_containerd
    assert facts.Tools(lab.run).plugins(lab.socket).get('cri') == 'ok'
    found = engines.containerd_cri(facts.Tools(lab.run), lab.config)
    assert found['auto'] is True and found['cri_disabled'] is None, found
