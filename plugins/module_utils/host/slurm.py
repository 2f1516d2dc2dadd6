# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""This host as a Slurm node: its state and drain reason, its jobs, and drains and resumes by our rules.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time.

Slurm's own clients do the talking (``scontrol``, ``squeue``: munge authenticates root on the node, which Slurm
always treats as an administrator), each as an argument vector, never through a shell. The node's state is read as
JSON where the site's ``scontrol`` prints it (``--json``, Slurm 23.02 and later: ``state`` a string with
``state_flags``, or a list of words), else from its text output (``scontrol -o show node``, whose ``Reason=`` is its
last field: Slurm 22.05's); the jobs from ``squeue``'s text output, filtered by squeue (its ``--json`` ignores every
filter).

The rules, as LBNL NHC keeps them: a drain of ours carries a reason that starts with ``gpufleet:``
(``gpufleet: rollout <run>`` while a rollout changes the node, ``gpufleet: health <check>: <detail>`` while its
health fails); we resume only a node whose reason is ours (and, for the callers, whose health verdict is PASS);
a node drained or down for a reason a person gave ("fan replaced Tuesday") is never resumed, and its reason is
never replaced (a rollout still waits for its jobs to end).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import socket
import subprocess
import time

PREFIX = 'gpufleet:'
ROLLOUT = PREFIX + ' rollout'
HEALTH = PREFIX + ' health'
# A reason is one line of printable text for slurmctld; ours are cut to this length.
MAX_REASON = 200
# The base states (scontrol's words) and the flags that take a node out of scheduling.
DRAIN_FLAGS = ('DRAIN', 'DRAINED', 'DRAINING')
DOWN_STATES = ('DOWN',)
# Job states that hold a node (squeue's long names).
RUNNING_JOBS = ('RUNNING', 'COMPLETING', 'SUSPENDED', 'CONFIGURING', 'STAGE_OUT', 'SIGNALING', 'RESIZING')
# scontrol appends "[user@time]" to a reason in its text output.
REASON_STAMP = re.compile(r'\s*\[([^\]@\s]*)@([^\]\s]*)\]\s*$')
MAX_JOBS = 50


class SlurmError(Exception):
    """Slurm did not answer, or answered what we cannot read: the message says which command and what it said."""


def _text(value):
    if value is None:
        return None
    return value if isinstance(value, str) else str(value)


def clean_reason(text):
    """A reason fit for ``scontrol update Reason=``: one line of printable text, at most MAX_REASON characters."""
    text = ''.join(ch if ch.isprintable() else ' ' for ch in str(text))
    return ' '.join(text.split())[:MAX_REASON]


def ours(reason):
    """Whether a drain reason is one of ours (``gpufleet:``)."""
    return isinstance(reason, str) and reason.startswith(PREFIX)


def _words(value):
    """A state as a list of upper-case words: ``"IDLE+DRAIN"``, ``["IDLE", "DRAIN"]``, ``"DOWN*"``."""
    if isinstance(value, list):
        items = value
    else:
        items = re.split(r'[+,]', _text(value) or '')
    return [str(item).strip().rstrip('*~#!%$@^-').upper() for item in items if str(item).strip()]


def node_from_json(data, name):
    """The node ``name`` of ``scontrol --json show node`` (any data_parser version), normalised (``describe``)."""
    nodes = data.get('nodes') if isinstance(data, dict) else None
    if not isinstance(nodes, list):
        raise SlurmError('scontrol --json show node %s gave no list of nodes' % name)
    for node in nodes:
        if isinstance(node, dict) and node.get('name') == name:
            words = _words(node.get('state'))
            words += [w for w in _words(node.get('state_flags') or []) if w not in words]
            reason_time = node.get('reason_changed_at')
            if isinstance(reason_time, dict):  # data_parser v0.0.40+: {"set": true, "number": N}
                reason_time = reason_time.get('number') if reason_time.get('set') else None
            return describe(name, words, node.get('reason') or None, node.get('reason_set_by_user') or None,
                            reason_time)
    return None


def node_from_text(text, name):
    """The node ``name`` of ``scontrol -o show node NAME`` (one line, ``Key=Value`` words, ``Reason=`` last)."""
    for line in text.splitlines():
        if not line.startswith('NodeName=%s ' % name):
            continue
        state = re.search(r'(?:^| )State=(\S+)', line)
        if state is None:
            raise SlurmError('scontrol -o show node %s gave no State' % name)
        reason, user, when = None, None, None
        found = re.search(r' Reason=(.*)$', line)
        if found:
            reason = found.group(1)
            stamp = REASON_STAMP.search(reason)
            if stamp:
                user, when = stamp.group(1) or None, stamp.group(2) or None
                reason = reason[:stamp.start()]
            reason = reason.strip() or None
        return describe(name, _words(state.group(1)), reason, user, when)
    return None


def describe(name, words, reason, user, when):
    """The node's state as node_state, the drift report and the modules report it."""
    base = words[0] if words else 'UNKNOWN'
    drained = any(w in DRAIN_FLAGS for w in words)
    down = base in DOWN_STATES
    return {
        'name': name,
        'state': '+'.join(words) or 'UNKNOWN',
        'base_state': base,
        'drain': drained,
        'down': down,
        # scheduling: no new job lands on it
        'available': not (drained or down),
        'reason': _text(reason),
        'reason_user': _text(user),
        'reason_time': _text(when),
        'ours': ours(reason) and (drained or down),
        # a person's drain or down: never resumed, its reason never replaced
        'held': bool((drained or down) and not ours(reason)),
    }


def jobs_from_text(text):
    """``squeue -h -o %A|%u|%T|%j`` lines (the name last: it may hold the separator)."""
    jobs = []
    for line in text.splitlines():
        parts = line.split('|', 3)
        if len(parts) == 4 and parts[0].strip():
            jobs.append({'id': parts[0].strip(), 'user': parts[1], 'state': parts[2].strip().upper(),
                         'name': parts[3]})
    return [job for job in jobs if job['state'] in RUNNING_JOBS]


class SlurmNode(object):
    """This host as the Slurm node ``name``; ``run(argv) -> (rc, out, err)``; ``binaries``: scontrol and squeue's
    paths (``None`` where the host has none: then it is no Slurm node, ``present`` is False)."""

    def __init__(self, name, run, scontrol, squeue, sleep=time.sleep, clock=time.monotonic):
        self.name = name
        self.run = run
        self.scontrol = scontrol
        self.squeue = squeue
        self.sleep = sleep
        self.clock = clock
        self._json = {}  # binary -> whether it speaks JSON (found out once: 22.05's squeue does, its scontrol not)

    @property
    def present(self):
        return bool(self.scontrol and self.squeue)

    def _call(self, argv, what):
        rc, out, err = self.run(argv)
        if rc != 0:
            message = ' '.join((err or out or '').split())[:300]
            raise SlurmError('%s failed (rc %s): %s' % (what, rc, message or 'no message'))
        return out or ''

    def _json_call(self, argv, what):
        """``argv`` with ``--json`` parsed, or None when this Slurm has no JSON output (remembered)."""
        known = self._json.get(argv[0])
        if known is False:
            return None
        rc, out, err = self.run(argv[:1] + ['--json'] + argv[1:])
        if rc == 0:
            try:
                data = json.loads(out)
            except ValueError:
                data = None
            if isinstance(data, dict):
                self._json[argv[0]] = True
                return data
        if known is True:
            raise SlurmError('%s --json failed (rc %s): %s' % (what, rc, ' '.join((err or '').split())[:300]))
        self._json[argv[0]] = False
        return None

    def state(self):
        """The node's state (``describe``), or None where slurmctld does not know it."""
        argv = [self.scontrol, 'show', 'node', self.name]
        data = self._json_call(argv, 'scontrol show node %s' % self.name)
        if data is not None:
            return node_from_json(data, self.name)
        rc, out, err = self.run([self.scontrol, '-o', 'show', 'node', self.name])
        if rc != 0:
            if 'not found' in (err or '') + (out or ''):
                return None
            raise SlurmError('scontrol show node %s failed (rc %s): %s'
                             % (self.name, rc, ' '.join((err or out or '').split())[:300]))
        return node_from_text(out, self.name)

    def jobs(self):
        """The jobs that hold the node now (running, completing, suspended...), at most MAX_JOBS. From squeue's text
        output: its --json ignores every filter (Slurm 22.05 to 23.02 say so) and would list the whole cluster."""
        out = self._call([self.squeue, '--noheader', '--nodelist', self.name, '--format', '%A|%u|%T|%j'],
                         'squeue --nodelist %s' % self.name)
        return jobs_from_text(out)[:MAX_JOBS]

    def update(self, state, reason=None):
        argv = [self.scontrol, 'update', 'NodeName=%s' % self.name, 'State=%s' % state]
        if reason is not None:
            argv.append('Reason=%s' % clean_reason(reason))
        self._call(argv, 'scontrol update NodeName=%s State=%s' % (self.name, state))

    def drain(self, reason, before=None, check_mode=False):
        """Drain the node with our ``reason`` (``gpufleet: ...``), unless it is out of scheduling already: a person's
        drain or down keeps its reason, one of ours keeps its own. ``before``: its state, read already (else read
        here); ``check_mode``: decide, change nothing. Returns ``(changed, state_before)``."""
        before = self.state() if before is None else before
        if before is None:
            raise SlurmError('slurmctld does not know the node %s' % self.name)
        if not before['available']:
            return False, before
        if not check_mode:
            self.update('DRAIN', reason)
        return True, before

    def resume(self, allowed=True, before=None, check_mode=False):
        """Resume the node when its drain (or down) is ours and ``allowed`` (the health verdict is PASS); ``before``
        and ``check_mode`` as ``drain``'s. Returns ``(changed, state_before, why_not)``."""
        before = self.state() if before is None else before
        if before is None:
            raise SlurmError('slurmctld does not know the node %s' % self.name)
        if before['available']:
            return False, before, None
        if not before['ours']:
            return False, before, 'drained or down by %s for a reason of theirs (%s): never resumed by us' % (
                before['reason_user'] or 'someone', before['reason'] or 'no reason')
        if not allowed:
            return False, before, 'the health verdict is not PASS'
        if not check_mode:
            self.update('RESUME')
        return True, before, None

    def wait_jobs(self, timeout, interval=2.0):
        """Wait up to ``timeout`` seconds for the node's jobs to end; the jobs left (empty once it is free)."""
        deadline = self.clock() + max(0, timeout)
        while True:
            jobs = self.jobs()
            if not jobs or self.clock() >= deadline:
                return jobs
            self.sleep(min(interval, max(0.1, deadline - self.clock())))


# Where Slurm's clients live on the distributions' packages and the usual site prefixes, searched in this order.
BIN_DIRS = ('/usr/bin', '/usr/local/bin', '/opt/slurm/bin', '/usr/local/slurm/bin')


def find_binary(name, dirs=BIN_DIRS):
    """``name``'s path in ``dirs``: a root-owned executable file no other user can write, or None."""
    for directory in dirs:
        path = os.path.join(directory, name)
        try:
            st = os.stat(path)
        except OSError:
            continue
        if st.st_uid == 0 and not st.st_mode & 0o022 and st.st_mode & 0o111 and os.path.isfile(path):
            return path
    return None


def default_name():
    """The node's name as slurmd takes it by default: the host name's first label."""
    return socket.gethostname().split('.')[0]


def subprocess_run(argv, timeout=30):
    """``run`` for code without an AnsibleModule (the health check program, ``host.workload``): C locale, no shell,
    a time limit (a Slurm controller that does not answer fails the call, it does not hang the run)."""
    env = dict(os.environ, LANG='C', LC_ALL='C')
    try:
        # slurmd's HealthCheckProgram has no AnsibleModule whose run_command it could call
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,  # pylint: disable=ansible-bad-function
                                universal_newlines=True)
    except OSError as exc:
        return 127, '', str(exc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return 124, '', '%s did not answer within %d s' % (argv[0], timeout)
    return proc.returncode, out, err


def local_node(name=None, run=None):
    """This host's SlurmNode (``present`` False where it has no Slurm clients)."""
    return SlurmNode(name or default_name(), run or subprocess_run, find_binary('scontrol'), find_binary('squeue'))


# A Slurm node's configuration (Debian's, older Debian's, the default of a source build); SLURM_CONF names another.
CONFIGS = ('/etc/slurm/slurm.conf', '/etc/slurm-llnl/slurm.conf', '/usr/local/etc/slurm.conf')


def configured():
    """Whether this host has a Slurm configuration (``CONFIGS``, or the file ``$SLURM_CONF`` names)."""
    return any(conf and os.path.isfile(conf) for conf in (os.environ.get('SLURM_CONF'),) + CONFIGS)


def local(name=None, run=None):
    """This host's SlurmNode where it is a Slurm node (a configuration and Slurm's clients), else None."""
    if not configured():
        return None
    node = local_node(name, run)
    return node if node.present else None
