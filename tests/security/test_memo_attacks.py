# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_state's memo (``host.memo``) against another local user, in loops until a deadline.

Root keeps and reads its memo again and again while the stranger attacks it:

1. in a parent only root can write (as /run): the stranger tries to list the memo directory, read and append to
   its files, add a file, and put something at the memo's name (``conftest.DIRECTORY_PRY``); every try is refused
   by the kernel, and every read of root's gives back what root kept;
2. in a parent anyone can write (sticky, as /tmp): the stranger takes the memo's name first, by turns a directory of
   its own (open to all) and a link to one; root never keeps anything there nor reads anything from there.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import time

import fakehost
from conftest import DIRECTORY_PRY
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import memo as host_memo

RACE = min(float(os.environ.get("GPUFLEET_SECURITY_SECONDS", "4")), 2.0)

# Runs as the stranger until argv[3]: take the memo's name argv[1] first, by turns as a directory of its own open to
# everyone and as a link to its directory argv[2].
SQUAT = r'''
import json, os, shutil, sys, time
name, own, deadline = sys.argv[1], sys.argv[2], float(sys.argv[3])
rounds = 0
while time.time() < deadline:
    rounds += 1
    try:
        if rounds % 2:
            os.mkdir(name)
            os.chmod(name, 0o777)
        else:
            os.symlink(own, name)
    except OSError:
        pass
    time.sleep(0.001)
    try:
        if os.path.islink(name):
            os.unlink(name)
        else:
            shutil.rmtree(name)
    except OSError:
        pass
print(json.dumps({'rounds': rounds}))
'''

KEPT = {'binary': '/usr/bin/containerd', 'version': 'containerd 1.6.20', 'dumps': {}}


def test_a_stranger_gets_nothing_into_or_out_of_roots_memo(sandbox, stranger, monkeypatch):
    parent = os.path.join(sandbox, 'run')
    os.mkdir(parent, 0o755)
    memo = os.path.join(parent, 'gpufleet-memo')
    monkeypatch.setenv(host_memo.MEMO_DIR_VARIABLE, memo)
    assert host_memo.store('containerd-x.json', KEPT)
    deadline = time.time() + RACE
    attacker = stranger.popen([fakehost.SYSTEM_PYTHON, '-c', DIRECTORY_PRY, memo, str(deadline), 'read:containerd-x.json',
                               'read:systemd-units.json', 'plant:planted.json'], stdout=subprocess.PIPE,
                              universal_newlines=True)
    rounds = 0
    while time.time() < deadline:
        rounds += 1
        kept = dict(KEPT, round=rounds)
        assert host_memo.store('containerd-x.json', kept)
        assert host_memo.load('containerd-x.json') == kept
    seen = json.loads(attacker.communicate(timeout=60)[0])
    assert seen['tries'] > 60 and seen['through'] == 0, seen
    assert rounds > 10
    assert sorted(os.listdir(parent)) == ['gpufleet-memo']
    assert sorted(os.listdir(memo)) == ['containerd-x.json']


def test_a_stranger_who_takes_the_memos_name_first_gets_nothing_from_root(sandbox, stranger, monkeypatch):
    shared = os.path.join(sandbox, 'shared')
    os.mkdir(shared)
    os.chmod(shared, 0o1777)
    own = os.path.join(sandbox, 'strangers')
    os.mkdir(own)
    os.chown(own, stranger.uid, stranger.gid)
    os.chmod(own, 0o777)
    name = os.path.join(shared, 'gpufleet-memo')
    monkeypatch.setenv(host_memo.MEMO_DIR_VARIABLE, name)
    deadline = time.time() + RACE
    attacker = stranger.popen([fakehost.SYSTEM_PYTHON, '-c', SQUAT, name, own, str(deadline)],
                              stdout=subprocess.PIPE, universal_newlines=True)
    stored = loaded = 0
    while time.time() < deadline:
        stored += host_memo.store('containerd-x.json', KEPT)
        loaded += host_memo.load('containerd-x.json') is not None
    seen = json.loads(attacker.communicate(timeout=60)[0])
    assert seen['rounds'] > 10, seen
    assert (stored, loaded) == (0, 0)
    assert os.listdir(own) == []
    for entry in os.listdir(shared):
        assert os.lstat(os.path.join(shared, entry)).st_uid != 0, entry  # root made nothing in the shared directory
