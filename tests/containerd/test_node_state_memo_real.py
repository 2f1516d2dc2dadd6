# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_state's memo of containerd's answers, against the real containerd (each version the layer runs).

node_state runs for real (``python -m``) next to a real containerd, three times, with a memo directory of the test's
own. The memo must hold exactly what this containerd prints for ``--version`` and ``config dump``; the second run must
be answered from it (the memo file is not replaced: a run that asked containerd would have stored its answer again)
and give the same verdict; after the config file's bytes change, the third run dumps again (the memo holds the new
bytes' hash) and still finds what the first found.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import subprocess
import sys

import pytest

from .test_containerd_runtime_real import KUBE


def node_state(lab, tmp_path):
    """node_state (``python -m``) in the containerd's mount namespace, where it sees the installed containerd."""
    args = tmp_path / 'args.json'
    args.write_text(json.dumps({'ANSIBLE_MODULE_ARGS': {'engines': ['containerd'],
                                                        'containerd': {'path': lab.config}}}))
    proc = subprocess.run(lab.inside([sys.executable, '-m', 'ansible_collections.gpufleet.nvidia.plugins.modules.node_state',
                                      str(args)]), capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONDONTWRITEBYTECODE='1'))
    assert 'Traceback' not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert not result.get('failed'), result.get('msg')
    verdict = result['concerns']['containerd']
    assert not verdict['failed'], verdict['result'].get('msg')
    return verdict['converged'], verdict['result']


def containerd_says(lab, *argv):
    proc = subprocess.run(lab.inside(['containerd'] + list(argv)), capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, LANG='C', LC_ALL='C'))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.config_toml(KUBE)
def test_node_state_is_answered_from_its_memo_only_what_the_real_containerd_said(lab_containerd, tmp_path,
                                                                                  monkeypatch):
    lab = lab_containerd
    memo = os.path.join(lab.base, 'memo')  # its parent is root's alone, as /run is
    monkeypatch.setenv('GPUFLEET_MEMO_DIR', memo)
    first = node_state(lab, tmp_path)
    names = os.listdir(memo)
    kept_file = os.path.join(memo, [name for name in names if name.startswith('containerd-')][0])
    assert (os.stat(memo).st_mode & 0o777, os.stat(kept_file).st_mode & 0o777) == (0o700, 0o600)
    kept = json.load(open(kept_file))
    assert kept['version'] == containerd_says(lab, '--version')
    config = os.path.realpath(lab.config)
    with open(config, 'rb') as handle:
        data = handle.read()
    assert kept['dumps'][config]['out'] == containerd_says(lab, '--config', config, 'config', 'dump')
    assert kept['dumps'][config]['sha256'] == hashlib.sha256(data).hexdigest()

    inode = os.stat(kept_file).st_ino
    second = node_state(lab, tmp_path)
    assert os.stat(kept_file).st_ino == inode  # answered from the memo: nothing was asked, nothing stored
    assert second == first

    with open(config, 'ab') as handle:
        handle.write(b'# new bytes, the same values\n')
    third = node_state(lab, tmp_path)
    kept = json.load(open(kept_file))
    with open(config, 'rb') as handle:
        assert kept['dumps'][config]['sha256'] == hashlib.sha256(handle.read()).hexdigest()
    assert third[0] == first[0]
    assert third[1]['runtimes'] == first[1]['runtimes'] and third[1]['action'] == first[1]['action']
