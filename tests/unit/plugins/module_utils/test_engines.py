# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which engines ``auto`` takes: installed daemons, and containerd only with its CRI plugin on.

containerd's answers are what ``containerd config dump`` prints (the real
containerd's answers are checked in the ``containerd`` test layer).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import config as cd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import engines as concerns_engines

FIXTURES = os.path.join(os.path.dirname(__file__), '..', '..', 'fixtures', 'containerd')


def default_dump():
    with open(os.path.join(FIXTURES, 'config-default-1.6.dump-1.6.20')) as handle:
        return handle.read()


def installed(*names):
    table = {'dockerd': '/usr/sbin/dockerd', 'containerd': '/usr/bin/containerd', 'crio': '/usr/bin/crio'}
    return lambda name: table[name] if name in names else None


class Containerd(object):
    """``containerd config dump``/``config default`` answers, and the argv it was asked with."""

    def __init__(self, out='', rc=0, err=''):
        self.answer = (rc, out, err)
        self.calls = []

    def __call__(self, argv):
        self.calls.append(argv)
        return self.answer


def test_nothing_installed_takes_nothing():
    found = concerns_engines.detect(Containerd(), which=installed())
    assert found['auto'] == []
    assert sorted(found['engines']) == ['containerd', 'crio', 'docker']
    for engine, facts in found['engines'].items():
        assert facts['installed'] is False and facts['binary'] is None and facts['auto'] is False
        assert 'not installed' in facts['reason']


def test_every_engine_installed_is_taken_in_the_role_order(tmp_path):
    config = tmp_path / 'config.toml'
    config.write_text('version = 2\n')
    run = Containerd(default_dump())
    found = concerns_engines.detect(run, containerd_config=str(config), which=installed('dockerd', 'containerd', 'crio'))
    assert found['auto'] == ['containerd', 'crio', 'docker']
    assert found['engines']['docker']['binary'] == '/usr/sbin/dockerd'
    assert found['engines']['containerd']['cri_disabled'] is None
    # containerd was asked about the file it is started with.
    assert run.calls == [['/usr/bin/containerd', '--config', str(config), 'config', 'dump']]


def test_without_a_config_file_containerd_defaults_are_asked(tmp_path):
    run = Containerd(default_dump())
    found = concerns_engines.detect(run, containerd_config=str(tmp_path / 'missing.toml'), which=installed('containerd'))
    assert found['auto'] == ['containerd']
    assert run.calls == [['/usr/bin/containerd', 'config', 'default']]
    assert "containerd's defaults" in found['engines']['containerd']['reason']


@pytest.mark.parametrize('entry', ['cri', 'io.containerd.grpc.v1.cri', 'io.containerd.cri.v1.runtime'])
def test_a_containerd_with_the_cri_plugin_disabled_is_left_out(tmp_path, entry):
    config = tmp_path / 'config.toml'
    config.write_text('disabled_plugins = ["%s"]\n' % entry)
    dump = default_dump().replace('disabled_plugins = []', 'disabled_plugins = ["%s"]' % entry)
    assert dump != default_dump()
    found = concerns_engines.detect(Containerd(dump), containerd_config=str(config), which=installed('dockerd', 'containerd'))
    assert found['auto'] == ['docker']
    facts = found['engines']['containerd']
    assert facts['installed'] is True and facts['auto'] is False and facts['cri_disabled'] == entry
    assert str(config) in facts['reason'] and 'CRI plugin' in facts['reason']


def test_other_disabled_plugins_do_not_count():
    values = cd.loads('disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.internal.v1.tracing"]',
                      'x')
    assert cd.cri_disabled(values) is None
    assert cd.cri_disabled({}) is None


@pytest.mark.parametrize('answer', [(1, '', 'containerd: failed to load TOML: (3, 1): unexpected token'),
                                    (0, 'this is = = not toml', '')])
def test_a_containerd_that_cannot_read_its_file_is_taken_so_the_module_reports_it(tmp_path, answer):
    config = tmp_path / 'config.toml'
    config.write_text('[broken\n')
    rc, out, err = answer
    found = concerns_engines.detect(Containerd(out, rc, err), containerd_config=str(config), which=installed('containerd'))
    assert found['auto'] == ['containerd']
    assert 'cannot read' in found['engines']['containerd']['reason']
