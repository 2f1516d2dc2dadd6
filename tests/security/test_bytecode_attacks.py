# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The modules' kept bytecode (``common.compile_once.Store``: code root runs) against another local user, in loops
until a deadline.

Root keeps and loads compiled code again and again while the stranger attacks it:

1. in a parent only root can write (as /run): the stranger tries to list the directory, read a file and append to it,
   plant a file, and put something at the directory's name (``conftest.DIRECTORY_PRY``); every try is refused by the kernel, and every load of root's gives back
   the code root kept;
2. in a parent anyone can write (sticky, as /tmp): the stranger takes the directory's name first, by turns a
   directory of its own (open to all, with code planted under the right name) and a link to one; root never keeps
   anything there nor loads anything from there.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import marshal
import os
import subprocess
import time

import fakehost
from conftest import DIRECTORY_PRY
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common import compile_once

RACE = min(float(os.environ.get("GPUFLEET_SECURITY_SECONDS", "4")), 2.0)
KEY = compile_once.key('/tmp/ansible_x/ansible_node_state_payload.zip/pkg/mod.py', b'VALUE = 1\n',
                       compile_once._interpreter())
NAME = KEY + compile_once.SUFFIX

# Runs as the stranger until argv[4]: take the name argv[1] first, by turns as a directory of its own open to
# everyone holding code under root's entry name argv[3], and as a link to its directory argv[2].
SQUAT = r'''
import json, marshal, os, shutil, sys, time
name, own, entry, deadline = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
code = marshal.dumps(compile('VALUE = 666\n', 'planted', 'exec'))
rounds = 0
while time.time() < deadline:
    rounds += 1
    try:
        if rounds % 2:
            os.mkdir(name)
            os.chmod(name, 0o777)
            with open(os.path.join(name, entry), 'wb') as out:
                out.write(code)
        else:
            with open(os.path.join(own, entry), 'wb') as out:
                out.write(code)
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


def value_of(code):
    scope = {}
    exec(code, scope)  # pylint: disable=exec-used  # the test's own code, or what a stranger planted: that is the test
    return scope['VALUE']


def test_a_stranger_gets_nothing_into_or_out_of_roots_bytecode(sandbox, stranger):
    parent = os.path.join(sandbox, 'run')
    os.mkdir(parent, 0o755)
    kept = os.path.join(parent, 'gpufleet-bytecode')
    assert compile_once.Store(kept, writable=True).keep(KEY, compile('VALUE = 0\n', 'mod.py', 'exec'))
    deadline = time.time() + RACE
    attacker = stranger.popen([fakehost.SYSTEM_PYTHON, '-c', DIRECTORY_PRY, kept, str(deadline), 'read:' + NAME,
                               'plant:.%s.1.tmp' % KEY], stdout=subprocess.PIPE, universal_newlines=True)
    rounds = 0
    while time.time() < deadline:
        rounds += 1
        store = compile_once.Store(kept, writable=True)
        assert store.keep(KEY, compile('VALUE = %d\n' % rounds, 'mod.py', 'exec'))
        assert value_of(compile_once.Store(kept, writable=False).load(KEY)) == rounds
        store.close()
    seen = json.loads(attacker.communicate(timeout=60)[0])
    assert seen['tries'] > 60 and seen['through'] == 0, seen
    assert rounds > 10
    assert sorted(os.listdir(parent)) == ['gpufleet-bytecode']
    assert sorted(os.listdir(kept)) == [NAME]


def test_a_stranger_who_takes_the_name_first_gets_no_code_run_by_root(sandbox, stranger):
    shared = os.path.join(sandbox, 'shared')
    os.mkdir(shared)
    os.chmod(shared, 0o1777)
    own = os.path.join(sandbox, 'strangers')
    os.mkdir(own)
    os.chown(own, stranger.uid, stranger.gid)
    os.chmod(own, 0o777)
    name = os.path.join(shared, 'gpufleet-bytecode')
    deadline = time.time() + RACE
    attacker = stranger.popen([fakehost.SYSTEM_PYTHON, '-c', SQUAT, name, own, NAME, str(deadline)],
                              stdout=subprocess.PIPE, universal_newlines=True)
    kept = loaded = 0
    while time.time() < deadline:
        store = compile_once.Store(name, writable=True)
        loaded += store.load(KEY) is not None
        kept += store.keep(KEY, compile('VALUE = 1\n', 'mod.py', 'exec'))
        store.close()
    seen = json.loads(attacker.communicate(timeout=60)[0])
    assert seen['rounds'] > 10, seen
    assert (kept, loaded) == (0, 0)
    for entry in os.listdir(own):
        assert os.lstat(os.path.join(own, entry)).st_uid != 0, entry
    for entry in os.listdir(shared):
        assert os.lstat(os.path.join(shared, entry)).st_uid != 0, entry  # root made nothing in the shared directory
