# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_state's memo (``host.memo``) holding a file it did not write as it writes them: it answers nothing.

The memo's promise is that it can make a run cheaper, never different. A memo file is root's (0600 in a 0700
directory of root's), but its content is still only data: a file a crash cut short, a file another version wrote,
or one made by hand. On the code before this fix a deeply nested memo (``[[[[...``) made ``json.loads`` raise
RecursionError, which ``host.memo.load`` did not catch: containerd's answers (``Tools.version``) failed with a
traceback on every run (the memo was never rewritten) and the systemd-units memo failed node_state itself; a
kept ``--version`` with more digits than ``int()`` takes raised ValueError the same way. Now any such file
answers nothing: containerd and systemd are asked as if there were no memo, and the run's own answers replace
the file, so the next run is answered from the memo again. Values of other types than those the memo's users
write are ignored one by one.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.run import RunState
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import base
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import module as concerns_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import registry
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import facts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import memo as host_memo
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import node_state as concerns_node_state
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import service

VERSION = 'containerd github.com/containerd/containerd 1.7.24 61f9fd88\n'
DUMP = 'version = 2\nroot = "/var/lib/containerd"\n[plugins]\n'
DUMPED = {'version': 2, 'root': '/var/lib/containerd', 'plugins': {}}


@pytest.fixture
def memo_dir(tmp_path, monkeypatch):
    """A memo directory of this test's own (in a root-only parent, as /run)."""
    parent = tmp_path / 'run'
    parent.mkdir(mode=0o755)
    path = str(parent / 'gpufleet-memo')
    monkeypatch.setenv(host_memo.MEMO_DIR_VARIABLE, path)
    return path


def spoil(memo_dir, name, data):
    """Put ``data`` (bytes) as the memo file ``name``, as root keeps its memo files (0600, root's)."""
    if not os.path.isdir(memo_dir):
        os.mkdir(memo_dir, 0o700)
    path = os.path.join(memo_dir, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.chmod(path, 0o600)
    return path


# ---------------------------------------------------------------- containerd's answers


class Containerd(object):
    """A containerd executable (a file of ours: its identity is real) and what each run asked it."""

    def __init__(self, tmp_path):
        self.binary = str(tmp_path / 'containerd')
        with open(self.binary, 'w') as handle:
            handle.write('#!/bin/sh\n')
        os.chmod(self.binary, 0o755)
        self.config = str(tmp_path / 'config.toml')
        with open(self.config, 'w') as handle:
            handle.write('version = 2\n')
        self.asked = []

    def command(self, argv, data=None):
        self.asked.append(argv[1:])
        return 0, (VERSION if argv[1:] == ['--version'] else DUMP), ''

    def memo_name(self):
        return facts.KeptAnswers(self.binary).name

    def run(self):
        """One node_state run: containerd's version and the config file's dump; what containerd was asked."""
        before = len(self.asked)
        tools = facts.Tools(self.command, containerd=self.binary, state=RunState(dumps={}, store=True))
        assert tools.version() == (1, 7, 24)
        assert tools.dump(self.config) == (DUMPED, None)
        return [argv[-1] for argv in self.asked[before:]]


def good_memo(host):
    """The memo a run keeps, as a dict."""
    host.run()
    with open(os.path.join(host_memo.directory(), host.memo_name())) as handle:
        return json.load(handle)


def deep(depth, opener='[', closer=']'):
    return opener * depth + closer * depth


HOSTILE = {
    '100000 arrays, unclosed': lambda kept: b'[' * 100000,
    '100000 objects, unclosed': lambda kept: b'{"a":' * 100000,
    '5000 arrays': lambda kept: deep(5000).encode(),
    'the memo 5000 arrays down': lambda kept: ('{"binary": %s, "dumps": {}}' % deep(5000)).encode(),
    'a dump 5000 objects down': lambda kept: json.dumps(dict(kept, dumps={'x': 0})).replace(
        '"x": 0', '"x": ' + '{"a": ' * 5000 + '0' + '}' * 5000).encode(),
    # as deep as json reads from here: then it must still be written back without it
    'a version 900 arrays down': lambda kept: json.dumps(dict(kept, version=json.loads(deep(900)))).encode(),
    'an extra key 900 objects down': lambda kept: json.dumps(kept)[:-1].encode() + b', "x": ' +
    b'{"a": ' * 900 + b'0' + b'}' * 901,
    'a version with 5000 digits': lambda kept: json.dumps(dict(kept, version=' 1%s.7.24' % ('0' * 5000))).encode(),
    'a version of 4 MiB': lambda kept: json.dumps(dict(kept, version=' 1.7.24' + ' ' * (host_memo.MAX_BYTES - 4096))
                                                  ).encode(),
    'a number with 5000 digits': lambda kept: json.dumps(kept)[:-1].encode() + b', "x": ' + b'9' * 5000 + b'}',
    'not UTF-8': lambda kept: json.dumps(kept).encode().replace(b'containerd', b'container\xff', 1),
    'over MAX_BYTES': lambda kept: json.dumps(dict(kept, pad='x' * host_memo.MAX_BYTES)).encode(),
    'wrong types everywhere': lambda kept: json.dumps(dict(kept, version=[1, 7, 24], dumps=dict(
        (path, dict(entry, out={'version': 2}, sha256=[entry.get('sha256')])) for path, entry in kept['dumps'].items()
    ))).encode(),
    'a dumps list': lambda kept: json.dumps(dict(kept, dumps=[kept['dumps']])).encode(),
}


@pytest.mark.parametrize('name', sorted(HOSTILE))
def test_a_containerd_memo_it_cannot_use_answers_nothing_and_is_replaced(tmp_path, memo_dir, name):
    host = Containerd(tmp_path)
    kept = good_memo(host)
    path = spoil(memo_dir, host.memo_name(), HOSTILE[name](kept))
    # containerd is asked what the memo cannot answer; the answers are containerd's (checked in run)
    if host.run():
        with open(path) as handle:  # the run's own answers replaced the file, and nothing else is in it
            assert json.load(handle) == kept
    # the next run is answered from the memo again
    assert host.run() == []


# ---------------------------------------------------------------- the systemd units memo


UNITS = ['nvidia-persistenced', 'containerd', 'docker']


class Systemctl(object):
    """``systemctl show -p ... UNIT...``: a block per unit, a blank line between two."""

    prefix = len(['systemctl', 'show']) + 2 * len(service.SYSTEMD_PROPERTIES)

    def __init__(self):
        self.calls = []

    def __call__(self, argv, **kwargs):
        if argv[1] != 'show':
            return 1, '', 'unexpected'
        units = argv[self.prefix:]
        self.calls.append(units)
        block = 'LoadState=loaded\nActiveState=inactive\nUnitFileState=disabled\nMainPID=0\nExecStart=\n'
        return 0, '\n'.join([block] * len(units)), ''


class Asking(base.Concern):
    """A concern whose run asks systemd about its units."""

    def __init__(self, name, units):
        def run(module):
            for unit in units:
                service.Service('systemd', unit, module.run_command, {'systemctl': 'systemctl'},
                                together=concerns_module.run_state(module).together).systemd_show()
            return {'changed': False}
        base.Concern.__init__(self, name, name + '_module', {}, run)


class SystemdHost(object):
    check_mode = False

    def __init__(self):
        self.systemctl = Systemctl()

    def run_command(self, argv, **kwargs):
        return self.systemctl(argv)

    def get_bin_path(self, arg, required=False, opt_dirs=None):
        return None


def evaluate(monkeypatch):
    """One node_state run whose concerns ask systemd about UNITS; the calls made."""
    monkeypatch.setattr(registry, 'CONCERNS', dict(registry.CONCERNS,
                                                   persistenced=Asking('persistenced', UNITS[:1]),
                                                   docker=Asking('docker', UNITS[1:])))
    host = SystemdHost()
    result = concerns_node_state.evaluate(host, {'persistenced': {}, 'docker': {}, 'engines': []})[0]
    assert result['converged'] and result['evaluated'] == ['persistenced', 'docker'], result
    return host.systemctl.calls


UNITS_HOSTILE = {
    '100000 arrays, unclosed': b'[' * 100000,
    '100000 objects, unclosed': b'{"units": ' * 100000,
    'units 5000 arrays down': ('{"units": %s}' % deep(5000)).encode(),
    'units 900 arrays down': ('{"units": %s}' % deep(900)).encode(),
    'units a string': b'{"units": "docker"}',
    'units a table': b'{"units": {"docker": 1}}',
    'units of numbers': b'{"units": [1, 2.5, 1e999, null, true]}',
    'a unit with 5000 digits': b'{"units": [' + b'9' * 5000 + b']}',
    'units not unit names': b'{"units": ["--all", "a b", "-docker", "x\\u0000y", "' + b'x' * 300 + b'"]}',
    'not UTF-8': b'{"units": ["dock\xffer"]}',
    'over MAX_BYTES': b'{"units": ["' + b'x' * host_memo.MAX_BYTES + b'"]}',
}


@pytest.mark.parametrize('name', sorted(UNITS_HOSTILE))
def test_a_units_memo_it_cannot_use_asks_each_unit_alone_and_is_replaced(memo_dir, monkeypatch, name):
    spoil(memo_dir, concerns_node_state.UNITS_MEMO, UNITS_HOSTILE[name])
    assert evaluate(monkeypatch) == [[unit] for unit in UNITS]
    assert host_memo.load(concerns_node_state.UNITS_MEMO) == {'units': UNITS}
    assert evaluate(monkeypatch) == [UNITS]


def test_the_unit_names_among_other_values_are_used():
    kept = {'units': [1, 'docker', None, ['containerd'], {'a': 'b'}, 'containerd']}
    assert concerns_node_state.kept_units(kept) == ['docker', 'containerd']
    assert concerns_node_state.kept_units({'units': 'docker'}) == []
    assert concerns_node_state.kept_units(None) == []
