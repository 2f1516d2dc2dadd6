# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every unit test shares: the unit tests' own helpers (core_compat, role_templates) importable from every
test directory below, and the modules' lock files in a private directory, never the machine's /run."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)


def _collection_loader():
    """Ansible's collection loader, installed before anything imports the collection, as ansible-playbook (and
    ansible-test's unit tests) install it: every ``ansible_collections`` import goes through it, and the roles'
    templates find this collection's filters (``gpufleet.nvidia.*``) in the built tree (.build/collections)."""
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
    if not any(isinstance(finder, _AnsibleCollectionFinder) for finder in sys.meta_path):
        root = os.path.dirname(os.path.dirname(HERE))
        _AnsibleCollectionFinder(paths=[os.path.join(root, '.build', 'collections')])._install()


_collection_loader()


@pytest.fixture(scope='session', autouse=True)
def private_lock_dir(tmp_path_factory):
    """``_host.LOCK_DIR`` (/run/gpufleet-locks) for this session: a private 0700 directory, for every module
    run in-process or as a child process."""
    path = str(tmp_path_factory.mktemp('gpufleet-locks'))
    os.chmod(path, 0o700)
    os.environ['GPUFLEET_LOCK_DIR'] = path
    yield path
    os.environ.pop('GPUFLEET_LOCK_DIR', None)
