# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Concurrent containerd_runtime runs against one real containerd 1.6 and one config.toml lose nothing.

What is real: containerd 1.6 in a private mount namespace (tests/containerd/conftest.py), its
config.toml, ``containerd config dump`` and ``ctr`` run in that namespace, and one OS process per
run (multiprocessing, ``fork``), each a whole ``Converge`` with its own runtime name, all let go at
the same instant so that they race for the file, its directory lock and containerd's restarts.

What is played: the init system. The test process owns containerd (as systemd would) and answers
the runs' ``pid``/``restart``/``logs`` calls over a pipe, one call at a time, as an init system
queues jobs. A forked run does not use the lab's own ``run``: its copy of the namespace holder's
Popen cannot wait on a process that is not its child and would start a second namespace, so it
enters the holder's namespace by PID.

Every check of what containerd runs goes through containerd itself (``containerd config dump``,
``ctr plugins ls``), never by reading the file back; the file is read only for the user's bytes.
The race repeats for a bounded number of rounds, each adding new names on top of the last.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import multiprocessing
import os
import subprocess
import time
import traceback
from multiprocessing.connection import wait

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import config as cd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import facts

from .conftest import RUNTIMES, SANDBOX_IMAGE, LabService

RUNTIME = '/usr/bin/nvidia-container-runtime'
PAUSE = 'registry.k8s.io/pause:3.9'
NAMES = ('nvidia', 'nvidia-cdi', 'nvidia-legacy')
ROUNDS = 5
BUDGET = 25.0       # seconds of races per test: no new round starts that would not end before it
ROUND_LIMIT = 60.0  # one round that takes longer has hung: its runs are killed and the test fails

# A kubelet's file: the pause image, a registry setting and runc with the systemd cgroup driver.
RUNC_DEFINED = '''
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "%s"   # the kubelet's pause image
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "/etc/containerd/certs.d"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = true
''' % PAUSE
# The same settings without a runtime table: the block then carries containerd's default runtimes.
NO_RUNTIMES = '''
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "%s"   # the kubelet's pause image
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "/etc/containerd/certs.d"
''' % PAUSE


def read(path):
    with open(path, 'rb') as handle:
        return handle.read()


def without(values, names):
    """The dump without the runtimes ``names`` and the imports list (which names the files loaded)."""
    values = copy.deepcopy(values)
    values.pop('imports', None)
    runtimes = cd.get(values, RUNTIMES) or {}
    for name in names:
        runtimes.pop(name, None)
    return values


def differences(before, after, path=()):
    """The dotted keys whose values differ between two dumps.

    A runtime's option that is absent equals its zero value: containerd's dump shows every option of a
    runtime it defaults (runc: BinaryName "", IoUid 0, ...) and only the set ones of a runtime the file defines.
    """
    if isinstance(before, dict) and isinstance(after, dict):
        found = []
        for key in sorted(set(before) | set(after)):
            found += differences(before.get(key), after.get(key), path + (key,))
        return found
    if path[:len(RUNTIMES)] == RUNTIMES and path[len(RUNTIMES) + 1:len(RUNTIMES) + 2] == ('options',) \
            and None in (before, after) and not (before or after):
        return []
    return [] if before == after else ['%s: %r -> %r' % ('.'.join(path), before, after)]


class RemoteService(object):
    """The init system's side, asked over a pipe of the test process, which owns containerd."""

    def __init__(self, conn):
        self.conn = conn

    def call(self, *message):
        self.conn.send(message)
        return self.conn.recv()

    def pid(self):
        return self.call('pid')

    def restart(self):
        self.call('restart')

    def logs(self, since=None, lines=200):
        return self.call('logs')


def one_run(conn, go, holder, config, name):
    """One containerd_runtime run in its own process; its outcome goes back over ``conn``."""
    def run(argv, data=None):
        proc = subprocess.run(['nsenter', '--target', str(holder), '--mount', '--'] + list(argv),
                              capture_output=True, text=True, timeout=60, input=data)
        return proc.returncode, proc.stdout, proc.stderr
    try:
        go.wait(30)
        started = time.time()
        request = apply.Request(path=config, name=name, runtime_path=RUNTIME)
        result = apply.Converge(request, RemoteService(conn), facts.Tools(run)).run()
        conn.send(('done', name, started, time.time(),
                   {key: result[key] for key in ('action', 'file_changed', 'changes', 'msg')}))
    except BaseException:  # the parent reports it: a run that failed is a finding, not a crash of the test
        conn.send(('error', name, None, time.time(), traceback.format_exc()))
    finally:
        conn.close()


def race(lab, service, names):
    """Start one run per name at the same instant; serve their init-system calls; ``{name: outcome}``."""
    context = multiprocessing.get_context('fork')
    go = context.Event()
    holder = lab.namespace()
    runs = {}
    for name in names:
        ours, theirs = context.Pipe()
        proc = context.Process(target=one_run, args=(theirs, go, holder, lab.config, name), daemon=True)
        proc.start()
        theirs.close()
        runs[ours] = proc
    outcomes = {}
    deadline = time.time() + ROUND_LIMIT
    go.set()
    try:
        while runs and time.time() < deadline:
            for conn in wait(list(runs), timeout=max(0.0, deadline - time.time())):
                try:
                    message = conn.recv()
                except EOFError:
                    runs.pop(conn).join(10)
                    conn.close()
                    continue
                if message[0] == 'pid':
                    conn.send(service.pid())
                elif message[0] == 'restart':
                    service.restart()
                    conn.send(None)
                elif message[0] == 'logs':
                    conn.send(lab.log_tail())
                else:
                    outcomes[message[1]] = message
    finally:
        for conn, proc in runs.items():  # only a round that hung leaves any: end them by PID
            proc.kill()
            proc.join(10)
            conn.close()
    assert not runs, 'runs still going after %ss: %s' % (ROUND_LIMIT, sorted(set(names) - set(outcomes)))
    return outcomes


@pytest.mark.parametrize('body', [
    pytest.param(NO_RUNTIMES, id='no-runtimes', marks=pytest.mark.config_toml(NO_RUNTIMES)),
    pytest.param(RUNC_DEFINED, id='runc-defined', marks=pytest.mark.config_toml(RUNC_DEFINED)),
])
def test_concurrent_runs_with_different_names_lose_nothing(lab_containerd, body):
    lab = lab_containerd
    original = read(lab.config)
    before = lab.dump()
    entries = sorted(os.listdir(lab.base))  # what containerd itself keeps there; a run leaves nothing else
    registered = []
    started = time.time()
    last = 0.0
    rounds = 0
    while rounds < ROUNDS and (rounds == 0 or time.time() + last < started + BUDGET):
        names = [name if rounds == 0 else '%s-%d' % (name, rounds + 1) for name in NAMES]
        service = LabService(lab)
        began = time.time()
        outcomes = race(lab, service, names)
        last = time.time() - began
        rounds += 1
        failed = ['%s: %s' % (name, outcome[4]) for name, outcome in sorted(outcomes.items())
                  if outcome[0] != 'done']
        assert not failed, 'round %d: %d of %d runs failed:\n%s' % (rounds, len(failed), len(names),
                                                                    '\n'.join(failed))
        # They raced: every run was under way before the first one ended (the lock made them queue).
        assert max(o[2] for o in outcomes.values()) < min(o[3] for o in outcomes.values()), outcomes
        # Each one changed the file and restarted containerd once, one after the other.
        for name, outcome in outcomes.items():
            assert outcome[4]['file_changed'] and outcome[4]['action'] == 'restart', (name, outcome)
        assert service.restarts == len(names)
        registered += names
        # containerd runs every runtime of every round so far, each as asked.
        after = lab.dump()
        runtimes = cd.get(after, RUNTIMES)
        for name in registered:
            assert runtimes.get(name, {}).get('runtime_type') == cd.RUNC_V2, (rounds, name, sorted(runtimes))
            assert runtimes[name]['options']['BinaryName'] == RUNTIME, (rounds, name, runtimes[name])
        # Nothing else changed in the effective configuration: pause image, registry, runc and its cgroup driver.
        assert not differences(without(before, registered), without(after, registered)), rounds
        assert cd.get(after, SANDBOX_IMAGE) == PAUSE
        if 'SystemdCgroup' in body:
            assert cd.get(after, RUNTIMES + ('runc', 'options', 'SystemdCgroup')) is True
        # Every byte of the user's file is still there, in front; only the block follows it.
        assert read(lab.config).startswith(original)
        # containerd answers with its CRI plugin, and nothing is left behind: no temp, probe or backup file
        # beside config.toml (the lock is a flock on the directory, no file), no process but containerd.
        assert facts.Tools(lab.run).plugins(lab.socket).get('cri') == 'ok'
        assert sorted(os.listdir(lab.base)) == entries
        assert lab.leftovers() == [lab.pid()]
    assert rounds >= 2, 'only %d round in %ss (one took %.1fs)' % (rounds, BUDGET, last)
