# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fuzzing node_state's memo reader (``host.memo.load``) and its two users, with hypothesis.

Each example writes one memo file's bytes, as root keeps them (0600, in a 0700 directory of root's), under the
names of containerd's answers and of the systemd units, then runs what node_state runs on them:

* ``host.memo.load`` answers None or a JSON object;
* containerd's ``Tools`` (``KeptAnswers``) answers ``version()`` with the version containerd prints and
  ``dump()`` with a table of values: from the memo where it holds a usable answer, else by asking containerd,
  whose answers are kept again (``host.memo.store`` never raises either);
* node_state's unit list (``kept_units``, then ``service.Together``) is a list of unit names, at most
  ``MAX_TOGETHER``.

Nothing may raise. The contents: random bytes; random JSON; the memo containerd's answers make with any of its
fields (``binary``, ``identity``, ``version``, ``dumps``, each dump's ``out``, ``sha256`` and ``boot_id``)
replaced by another JSON value, a value nested up to 5000 levels (lists or objects), a number of up to 6000
digits or a string of up to 100 KiB; the same for the units list and its items; unclosed nesting up to 200000
levels; any of these cut short, with a byte that is not UTF-8, or padded to a size around ``MAX_BYTES``.
The examples are the same on every run (``derandomize``), and the file takes well under a minute.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.run import RunState
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import facts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import memo as host_memo
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import node_state as concerns_node_state
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import service

from test_memo_hostile import spoil  # noqa: E402 (the security layer's directory is on the path)

VERSION = 'containerd github.com/containerd/containerd 1.7.24 61f9fd88\n'
DUMP = 'version = 2\nroot = "/var/lib/containerd"\n[plugins]\n'
UNITS = ['nvidia-persistenced', 'containerd', 'docker']
FUZZ = settings(max_examples=250, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))


class Containerd(object):
    """A containerd executable (a file of ours: its identity is real) that answers as 1.7.24."""

    def __init__(self, directory):
        self.binary = os.path.join(directory, 'containerd')
        with open(self.binary, 'w') as handle:
            handle.write('#!/bin/sh\n')
        os.chmod(self.binary, 0o755)
        self.config = os.path.join(directory, 'config.toml')
        with open(self.config, 'w') as handle:
            handle.write('version = 2\n')

    @staticmethod
    def command(argv, data=None):
        return 0, (VERSION if argv[1:] == ['--version'] else DUMP), ''

    def run(self):
        """One node_state run's questions to containerd: ``(version, dump)``."""
        tools = facts.Tools(self.command, containerd=self.binary, state=RunState(dumps={}, store=True))
        return tools.version(), tools.dump(self.config)


@pytest.fixture(scope='module')
def host(tmp_path_factory):
    """containerd, its good memo (as a dict) and the memo's name, in a memo directory of this file's own."""
    root = str(tmp_path_factory.mktemp('memo-fuzz'))
    os.chmod(root, 0o755)
    memo = os.path.join(root, 'gpufleet-memo')
    saved = os.environ.get(host_memo.MEMO_DIR_VARIABLE)
    os.environ[host_memo.MEMO_DIR_VARIABLE] = memo
    containerd = Containerd(root)
    try:
        containerd.run()
        name = facts.KeptAnswers(containerd.binary).name
        with open(os.path.join(memo, name)) as handle:
            good = json.load(handle)
        assert set(good) == {'binary', 'identity', 'version', 'dumps'} and good['dumps'], good
        yield containerd, good, name
    finally:
        if saved is None:
            os.environ.pop(host_memo.MEMO_DIR_VARIABLE, None)
        else:
            os.environ[host_memo.MEMO_DIR_VARIABLE] = saved


# ---------------------------------------------------------------- contents

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20))
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                            st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                           max_leaves=12)


@st.composite
def raw_values(draw):
    """The JSON text of a value: random, nested up to 5000 levels, a long number, a float past double, a long
    string."""
    kind = draw(st.sampled_from(['json', 'deep', 'digits', 'float', 'string']))
    if kind == 'json':
        return json.dumps(draw(json_values))
    if kind == 'deep':
        depth = draw(st.integers(1, 5000))
        opener, closer = draw(st.sampled_from([('[', ']'), ('{"a": ', '}'), ('[{"out": ', '}]')]))
        return opener * depth + draw(st.sampled_from(['0', '"x"', '[]', '{}'])) + closer * depth
    if kind == 'digits':
        return draw(st.sampled_from(['', '-'])) + '9' * draw(st.integers(1, 6000))
    if kind == 'float':
        return draw(st.sampled_from(['1e999', '-1e999', '1e-999', '0.' + '3' * 5000, 'NaN', 'Infinity']))
    return json.dumps(draw(st.sampled_from(['x', ' 1.7.24', '\ud800'])) * draw(st.integers(1, 100000)))


def render(fields):
    return '{' + ', '.join('%s: %s' % (json.dumps(key), value) for key, value in fields) + '}'


@st.composite
def containerd_memos(draw, good):
    """The text of containerd's memo with some of its fields (or its dumps' fields) replaced, dropped or added."""
    fields = []
    for key, value in sorted(good.items()):
        if key == 'dumps' and draw(st.booleans()):
            entries = []
            for path, entry in sorted(value.items()):
                entry_fields = []
                for entry_key, entry_value in sorted(entry.items()):
                    change = draw(st.sampled_from(['keep', 'keep', 'replace', 'drop']))
                    if change != 'drop':
                        entry_fields.append((entry_key, json.dumps(entry_value) if change == 'keep'
                                             else draw(raw_values())))
                entries.append((path, render(entry_fields) if draw(st.booleans()) else draw(raw_values())))
            if draw(st.booleans()):
                entries.append((draw(st.text(max_size=8)), draw(raw_values())))
            fields.append((key, render(entries)))
            continue
        change = draw(st.sampled_from(['keep', 'keep', 'replace', 'drop']))
        if change != 'drop':
            fields.append((key, json.dumps(value) if change == 'keep' else draw(raw_values())))
    if draw(st.booleans()):
        fields.append((draw(st.text(max_size=8)), draw(raw_values())))
    return render(fields)


@st.composite
def units_memos(draw):
    """The text of the units memo: a list of unit names, other strings and other values, or another value."""
    names = st.one_of(st.sampled_from(UNITS + ['--all', '-docker', 'a b', '../etc', 'x' * 300, 'docker\n']),
                      st.text(max_size=20))
    items = draw(st.lists(st.one_of(names.map(json.dumps), raw_values()), max_size=20))
    units = '[' + ', '.join(items) + ']' if draw(st.booleans()) else draw(raw_values())
    return render([('units', units)] + ([(draw(st.text(max_size=8)), draw(raw_values()))]
                                        if draw(st.booleans()) else []))


@st.composite
def contents(draw, good):
    """A memo file's bytes."""
    kind = draw(st.sampled_from(['bytes', 'json', 'containerd', 'containerd', 'units', 'units', 'unclosed']))
    if kind == 'bytes':
        return draw(st.binary(max_size=512))
    if kind == 'unclosed':
        return draw(st.sampled_from([b'[', b'{"a": ', b'{"units": ', b'{"dumps": '])) * draw(st.integers(1, 200000))
    text = {'json': lambda: json.dumps(draw(json_values)), 'containerd': lambda: draw(containerd_memos(good)),
            'units': lambda: draw(units_memos())}[kind]()
    data = text.encode('utf-8', 'surrogatepass')
    change = draw(st.sampled_from(['none', 'none', 'cut', 'not utf-8', 'size']))
    if change == 'cut':
        data = data[:draw(st.integers(0, len(data)))]
    elif change == 'not utf-8':
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.sampled_from([b'\xff', b'\xc3', b'\xed\xa0\x80'])) + data[at:]
    elif change == 'size':  # white space up to a size around the limit: still the same JSON where it is read
        size = host_memo.MAX_BYTES + draw(st.integers(-64, 64))
        data += b' ' * max(0, size - len(data))
    return data


def put(name, data):
    """``data`` as the memo file ``name``, as root keeps it."""
    spoil(host_memo.directory(), name, data)


# ---------------------------------------------------------------- the reader and its users


def test_memo_reader_and_its_users_never_raise(host):
    containerd, good, name = host
    seen = {'loaded': 0}

    @FUZZ
    @given(st.data())
    def check(data):
        content = data.draw(contents(good))
        put(name, content)
        put(concerns_node_state.UNITS_MEMO, content)
        loaded = host_memo.load(name)
        assert loaded is None or isinstance(loaded, dict)
        seen['loaded'] += loaded is not None
        # containerd's answers: the memo's where usable, else containerd's, kept again
        version, dump = containerd.run()
        assert version == (1, 7, 24)
        values, error = dump
        assert isinstance(values, dict) and error is None
        again = host_memo.load(name)
        assert again is None or isinstance(again, dict)
        # node_state's unit list
        units = concerns_node_state.kept_units(host_memo.load(concerns_node_state.UNITS_MEMO))
        assert isinstance(units, list) and all(isinstance(unit, str) for unit in units)
        together = service.Together(units)
        assert len(together.units) <= service.MAX_TOGETHER
        assert all(service.UNIT_NAME.match(unit) and not unit.startswith('-') for unit in together.units)

    check()
    assert seen['loaded'] > 20, seen  # the examples reach the users, not only the reader's refusals


def test_the_memo_keeps_nothing_it_cannot_write(host):
    """A value nested deeper than json writes (built without recursion) is not kept, and nothing raises."""
    value = []
    for _level in range(100000):
        value = [value]
    assert host_memo.store('deep.json', {'x': value}) is False
    assert host_memo.load('deep.json') is None
