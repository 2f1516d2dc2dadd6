# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every unit test shares: the unit tests' own helpers (core_compat, role_templates) importable from every
test directory below, and the modules' lock files and node_state's memo in private directories, never the machine's
/run (the memo a new one for each test, so that no test is answered from another's)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import itertools
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
    """``host.locks.LOCK_DIR`` (/run/gpufleet-locks) for this session: a private 0700 directory, for every module
    run in-process or as a child process."""
    path = str(tmp_path_factory.mktemp('gpufleet-locks'))
    os.chmod(path, 0o700)
    os.environ['GPUFLEET_LOCK_DIR'] = path
    yield path
    os.environ.pop('GPUFLEET_LOCK_DIR', None)


_MEMOS = itertools.count()


@pytest.fixture(scope='session')
def private_memo_root(tmp_path_factory):
    path = str(tmp_path_factory.mktemp('gpufleet-memo'))
    os.chmod(path, 0o700)
    return path


@pytest.fixture(autouse=True)
def private_memo_dir(private_memo_root, monkeypatch):
    """``host.memo.MEMO_DIR`` (/run/gpufleet-memo) for this test: a directory of its own (not created: node_state
    creates it when it keeps an answer), for every module run in-process or as a child process; and so for the
    modules' kept bytecode (``common.compile_once.BYTECODE_DIR``, /run/gpufleet-bytecode), beside it."""
    path = os.path.join(private_memo_root, str(next(_MEMOS)))
    monkeypatch.setenv('GPUFLEET_MEMO_DIR', path)
    monkeypatch.setenv('GPUFLEET_BYTECODE_DIR', path + '-bytecode')
    return path
