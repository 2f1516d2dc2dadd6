# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_state's memo of containerd's answers (``host.memo``, ``facts.KeptAnswers``).

A later run is answered from the memo only where the executable, the file's bytes and the boot are the same; a
file with ``imports`` is dumped every time; a check-mode play writes nothing; a memo directory or file that is not
root's alone, a link, or not JSON makes the memo answer nothing. Each test is one or more node_state runs: a run
is a new ``RunState`` and a new ``Tools``, as in a new process. The fixture ``private_memo_dir`` (conftest) gives
each test a memo directory of its own. The memo is root's alone: these tests run as root, as the suite does.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import pwd

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.run import RunState
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import facts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import memo as host_memo

VERSION = 'containerd github.com/containerd/containerd 1.7.24 61f9fd88\n'
DUMP = 'version = 2\nroot = "/var/lib/containerd"\n[plugins]\n'


class Host(object):
    """A containerd executable (a file of ours: its identity is real) and the commands each run asked."""

    def __init__(self, tmp_path, config_text='version = 2\n'):
        self.binary = str(tmp_path / 'containerd')
        with open(self.binary, 'w') as handle:
            handle.write('#!/bin/sh\n')
        os.chmod(self.binary, 0o755)
        self.config = tmp_path / 'config.toml'
        self.config.write_text(config_text)
        self.asked = []
        self.during = None  # called while containerd "runs"

    def command(self, argv, data=None):
        self.asked.append(argv[1:])
        if self.during:
            self.during()
        if argv[1:] == ['--version']:
            return 0, VERSION, ''
        return 0, DUMP, ''

    def run(self, store=True):
        """One node_state run: the version and the config file's dump; returns what containerd was asked."""
        before = len(self.asked)
        tools = facts.Tools(self.command, containerd=self.binary, state=RunState(dumps={}, store=store))
        assert tools.version() == (1, 7, 24)
        assert tools.dump(str(self.config)) == ({'version': 2, 'root': '/var/lib/containerd', 'plugins': {}}, None)
        return [' '.join(argv) for argv in self.asked[before:]]


ASKED_BOTH = ['--version', '--config %s config dump']


def both(host):
    return [question.replace('%s', str(host.config)) for question in ASKED_BOTH]


def test_a_converged_host_asks_containerd_nothing_the_second_time(tmp_path, private_memo_dir):
    host = Host(tmp_path)
    assert host.run() == both(host)
    assert host.run() == []
    assert host.run() == []
    st = os.stat(private_memo_dir)
    assert (st.st_uid, st.st_mode & 0o777) == (0, 0o700)
    names = os.listdir(private_memo_dir)
    assert len(names) == 1 and os.stat(os.path.join(private_memo_dir, names[0])).st_mode & 0o777 == 0o600


def test_new_file_bytes_are_dumped_again_and_the_version_is_kept(tmp_path):
    host = Host(tmp_path)
    host.run()
    host.config.write_text('version = 2\n# a comment changes no value, but the bytes\n')
    assert host.run() == both(host)[1:]
    assert host.run() == []


def test_a_new_binary_is_asked_again(tmp_path):
    host = Host(tmp_path)
    host.run()
    replacement = tmp_path / 'containerd.new'
    replacement.write_text('#!/bin/sh\n# 1.7.25\n')
    os.chmod(str(replacement), 0o755)
    os.rename(str(replacement), host.binary)  # as a package upgrade replaces it: a new inode
    assert host.run() == both(host)


def test_the_same_binary_changed_in_place_is_asked_again(tmp_path):
    host = Host(tmp_path)
    host.run()
    with open(host.binary, 'a') as handle:
        handle.write('#\n')
    assert host.run() == both(host)


def test_a_new_boot_dumps_again(tmp_path, monkeypatch):
    boot = tmp_path / 'boot_id'
    boot.write_text('11111111-2222-3333-4444-555555555555\n')
    monkeypatch.setattr(host_memo, 'BOOT_ID', str(boot))
    host = Host(tmp_path)
    host.run()
    assert host.run() == []
    boot.write_text('66666666-2222-3333-4444-555555555555\n')
    assert host.run() == both(host)[1:]


@pytest.mark.parametrize('imports', ['imports = ["/etc/containerd/conf.d/*.toml"]\n',
                                     '"imports" = ["other.toml"]\n'])
def test_a_file_that_imports_is_dumped_every_time(tmp_path, imports):
    host = Host(tmp_path, config_text=imports + 'version = 2\n')
    host.run()
    assert host.run() == both(host)[1:]
    assert host.run() == both(host)[1:]


def test_a_file_that_changes_while_containerd_reads_it_is_not_kept(tmp_path):
    host = Host(tmp_path)

    def edit():
        host.config.write_text('version = 2\n# edited meanwhile\n')
        host.during = None
    host.during = edit
    host.run()
    host.config.write_text('version = 2\n')  # the bytes the first run read
    assert host.run() == both(host)[1:]


def test_a_check_mode_play_uses_the_memo_and_writes_nothing(tmp_path, private_memo_dir):
    host = Host(tmp_path)
    assert host.run(store=False) == both(host)
    assert not os.path.exists(private_memo_dir)
    assert host.run(store=False) == both(host)
    host.run()
    assert host.run(store=False) == []


def test_no_memo_without_root(tmp_path, private_memo_dir, monkeypatch):
    monkeypatch.setattr(host_memo.os, 'geteuid', lambda: 1000)
    host = Host(tmp_path)
    host.run()
    assert host.run() == both(host)
    assert not os.path.exists(private_memo_dir)


def nobody():
    return pwd.getpwnam('nobody').pw_uid


@pytest.mark.parametrize('spoil', ['open mode', 'another owner'])
def test_a_memo_directory_other_users_can_change_is_not_used(tmp_path, private_memo_dir, spoil):
    host = Host(tmp_path)
    host.run()
    if spoil == 'open mode':
        os.chmod(private_memo_dir, 0o777)
    else:
        os.chown(private_memo_dir, nobody(), -1)
    before = sorted(os.listdir(private_memo_dir))
    assert host.run() == both(host)
    assert host.run() == both(host)
    assert sorted(os.listdir(private_memo_dir)) == before  # nothing written there either


def test_a_link_in_place_of_the_directory_is_not_followed(tmp_path, private_memo_dir):
    elsewhere = tmp_path / 'elsewhere'
    elsewhere.mkdir(mode=0o700)
    os.symlink(str(elsewhere), private_memo_dir)
    host = Host(tmp_path)
    host.run()
    assert host.run() == both(host)
    assert os.listdir(str(elsewhere)) == []


def kept_file(directory):
    names = os.listdir(directory)
    assert len(names) == 1
    return os.path.join(directory, names[0])


@pytest.mark.parametrize('spoil', ['not json', 'a list', 'wrong types', 'a link', 'another owner', 'readable'])
def test_a_memo_file_that_is_not_ours_or_not_ours_in_shape_is_not_used(tmp_path, private_memo_dir, spoil):
    host = Host(tmp_path)
    host.run()
    path = kept_file(private_memo_dir)
    if spoil == 'not json':
        with open(path, 'w') as handle:
            handle.write('{"version": ')
    elif spoil == 'a list':
        with open(path, 'w') as handle:
            handle.write('[]')
    elif spoil == 'wrong types':
        kept = json.load(open(path))
        kept['version'] = 42
        kept['dumps'] = {str(host.config): dict(kept['dumps'][str(host.config)], out=['not', 'text'])}
        with open(path, 'w') as handle:
            json.dump(kept, handle)
    elif spoil == 'a link':
        target = tmp_path / 'planted.json'
        os.rename(path, str(target))
        os.symlink(str(target), path)
    elif spoil == 'another owner':
        os.chown(path, nobody(), -1)
    else:
        os.chmod(path, 0o644)
    assert host.run() == both(host)
    if spoil in ('not json', 'a list', 'wrong types'):
        assert host.run() == []  # replaced by a good one


def test_a_kept_dump_that_is_not_toml_is_asked_again(tmp_path, private_memo_dir):
    host = Host(tmp_path)
    host.run()
    path = kept_file(private_memo_dir)
    kept = json.load(open(path))
    kept['dumps'][str(host.config)]['out'] = 'version = = 2'
    with open(path, 'w') as handle:
        json.dump(kept, handle)
    assert host.run() == both(host)[1:]


def test_a_module_that_writes_never_uses_the_memo(tmp_path, private_memo_dir):
    host = Host(tmp_path)
    host.run()
    tools = facts.Tools(host.command, containerd=host.binary)  # a module's run: a RunState that keeps nothing
    before = len(host.asked)
    tools.version()
    tools.dump(str(host.config))
    assert len(host.asked) - before == 2


def test_no_memo_in_a_directory_other_users_can_write(tmp_path, monkeypatch):
    shared = tmp_path / 'shared'
    shared.mkdir()
    os.chmod(str(shared), 0o1777)  # as /tmp: anyone could take the memo's name first
    monkeypatch.setenv(host_memo.MEMO_DIR_VARIABLE, str(shared / 'memo'))
    host = Host(tmp_path)
    host.run()
    assert host.run() == both(host)
    assert os.listdir(str(shared)) == []
