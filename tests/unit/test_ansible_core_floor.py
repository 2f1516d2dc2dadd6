# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One ansible-core floor and one newest release, said the same way everywhere a user or a tool reads them.

requirements/ansible-core.txt lists the releases the `versions` layer runs (floor first, newest last); the
floor is what meta/runtime.yml, every role's meta, the execution environment and the README promise, and the
newest is the development pin.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os
import re

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))


def read(*parts):
    with open(os.path.join(ROOT, *parts)) as handle:
        return handle.read()


def releases():
    return re.findall(r'^ansible-core==(\d+\.\d+\.\d+)\s*$', read('requirements', 'ansible-core.txt'), re.M)


def minor(version):
    return '.'.join(version.split('.')[:2])


@pytest.fixture(scope='module')
def floor():
    return minor(releases()[0])


def test_the_releases_are_every_minor_from_the_floor_to_the_newest_in_order():
    found = [tuple(int(p) for p in v.split('.')) for v in releases()]
    assert found == sorted(found) and len(found) >= 2
    minors = [v[1] for v in found]
    assert minors == list(range(minors[0], minors[-1] + 1)), 'a supported minor release is missing from the list'


def test_the_newest_is_the_development_pin():
    assert 'ansible-core==%s' % releases()[-1] in read('requirements', 'dev.txt').splitlines()


def test_runtime_yml_requires_the_floor(floor):
    runtime = yaml.safe_load(read('meta', 'runtime.yml'))
    assert runtime['requires_ansible'] == '>=%s.0' % floor


@pytest.mark.parametrize('meta', sorted(glob.glob(os.path.join(ROOT, 'roles', '*', 'meta', 'main.yml'))))
def test_each_role_names_the_floor(meta, floor):
    with open(meta) as handle:
        assert yaml.safe_load(handle)['galaxy_info']['min_ansible_version'] == floor


def test_the_execution_environment_installs_the_supported_range(floor):
    ee = yaml.safe_load(read('docs', 'execution-environment.yml'))
    assert ee['dependencies']['ansible_core']['package_pip'] == 'ansible-core>=%s.0' % floor


def test_the_readme_promises_the_floor_and_names_every_tested_release(floor):
    readme = read('README.md')
    [requirement] = re.findall(r'^\| controller \| ansible-core >= (\d+\.\d+)', readme, re.M)
    assert requirement == floor
    for version in releases():
        assert version in readme, 'the README does not name %s, which the versions layer tests' % version
