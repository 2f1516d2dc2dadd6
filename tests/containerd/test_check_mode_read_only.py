# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check mode writes nothing, anywhere: the modules run on a host whose every file system is read-only.

The module runs for real (``python -m ...``) inside a private mount namespace
where every mount but /proc, /sys and /dev is remounted read-only (the host's
mounts are not touched), next to a real containerd 1.6 (the lab's, which keeps
running in its own namespace). Any write, a probe file or a temp file, fails
there with EROFS. containerd_runtime in check mode predicts the change and
the restart; node_state evaluates containerd, CRI-O (a stand-in ``crio`` that
only answers ``--version``: CRI-O is not installable here), docker and the
/dev/char links, and none of them fails. On the code before this change,
containerd_runtime's check mode wrote its probe file beside config.toml and
failed with "Read-only file system", and node_state reported containerd as
failed for the same reason.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys
import tempfile

import pytest

from .test_containerd_runtime_real import KUBE, read

READ_ONLY = ('awk \'{print $2}\' /proc/self/mounts | grep -v -E "^/(proc|sys|dev)(/|$)" | '
             'while read -r mount; do mount -o remount,bind,ro "$mount" || exit 90; done; '
             '[ -w /tmp ] && exit 91; exec "$@"')


def run_read_only(lab, module, args, check_mode=True):
    """``python -m module`` with ``args`` in a private mount namespace where every file system is read-only."""
    args = dict(args, _ansible_check_mode=check_mode)
    with tempfile.NamedTemporaryFile('w', prefix='gfro-args-', suffix='.json') as handle:
        json.dump({'ANSIBLE_MODULE_ARGS': args}, handle)
        handle.flush()
        return run_module(lab, module, handle.name)


def run_module(lab, module, args_file):
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE='1',
               PATH=os.path.join(lab.base, 'bin') + os.pathsep + os.environ.get('PATH', ''))
    # A namespace of its own inside the lab's (which has the engine's /usr): the module sees the installed containerd.
    proc = subprocess.run(lab.inside(['unshare', '--mount', '--propagation', 'private', 'sh', '-c', READ_ONLY, 'sh',
                                      sys.executable, '-m',
                                      'ansible_collections.gpufleet.nvidia.plugins.modules.' + module, args_file]),
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode not in (90, 91), 'the namespace is not read-only: %s' % proc.stderr
    assert 'Traceback' not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def tree(base):
    """Every path under ``base`` and its bytes (files) or None (directories), but the running containerd's own."""
    found = {}
    for root, dirs, files in os.walk(base):
        if root == base:
            dirs[:] = [name for name in dirs if name not in ('root', 'state')]
        for name in dirs:
            found[os.path.join(root, name)] = None
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path) and os.path.isfile(path) and not name.endswith('.log'):
                found[path] = read(path)
    return found


@pytest.mark.config_toml(KUBE)
def test_containerd_runtime_check_mode_on_a_read_only_host(lab_containerd):
    lab = lab_containerd
    before = tree(lab.base)
    result = run_read_only(lab, 'containerd_runtime', {'path': lab.config, 'default_runtime': True})
    assert not result.get('failed'), result['msg']
    assert result['changed'] and result['file_changed'] and result['action'] == 'restart', result
    assert result['default_runtime'] == 'nvidia' and 'nvidia' in result['runtimes'], result
    assert tree(lab.base) == before


@pytest.mark.config_toml(KUBE)
def test_node_state_on_a_read_only_host(lab_containerd):
    lab = lab_containerd
    crio_dir = os.path.join(lab.base, 'crio')
    os.makedirs(os.path.join(crio_dir, 'crio.conf.d'))
    os.mkdir(os.path.join(lab.base, 'bin'))
    with open(os.path.join(lab.base, 'bin', 'crio'), 'w') as handle:
        handle.write('#!/bin/sh\necho "crio version 1.29.1"\n')
    os.chmod(os.path.join(lab.base, 'bin', 'crio'), 0o755)
    os.mkdir(os.path.join(lab.base, 'docker'))
    before = tree(lab.base)
    result = run_read_only(lab, 'node_state', {
        'engines': ['containerd', 'crio', 'docker'],
        'containerd': {'path': lab.config},
        'crio': {'path': os.path.join(crio_dir, 'crio.conf.d', '99-nvidia.conf'),
                 'config_path': os.path.join(crio_dir, 'crio.conf'),
                 'config_dir': os.path.join(crio_dir, 'crio.conf.d')},
        # apply: none: a dockerd another test runs on this machine must not decide this test's verdict.
        'docker': {'path': os.path.join(lab.base, 'docker', 'daemon.json'), 'apply': 'none'},
        'device_links': {},
    }, check_mode=False)
    assert not result.get('failed'), result['msg']
    assert result['evaluated'] == ['device_links', 'containerd', 'crio', 'docker'], result
    for name, verdict in result['concerns'].items():
        assert not verdict['failed'], (name, verdict['result'].get('msg'))
    assert result['concerns']['containerd']['result']['action'] == 'restart'
    assert tree(lab.base) == before
