# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""containerd's own keys in another case: read as containerd reads them, so neither the imports check nor the memo
can be walked around (issue 45, defects 1 and 2).

containerd's TOML decoders find a struct field under more spellings than the documented one (1.6 and 1.7: the key in
upper case too; 2.x: any case; tests/containerd/test_key_case_real.py measures it on each). On the code before this
check ``IMPORTS = ["<a stranger's directory>/*.toml"]`` passed the imports trust check, which looked up ``imports``
only (the config was accepted and written: root's containerd would then load the stranger's drop-in), and node_state's
memo kept the dump of a file with ``IMPORTS`` as if it imported nothing, so a drop-in added later did not count: the
memo answered with the old dump.

Here every spelling is refused, naming the file and the line, with the file byte-identical; the memo keeps nothing for
such a file; the real containerd of this machine (1.6.20) shows that the upper-case spelling is a real import.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import subprocess

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.run import RunState
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import config as cd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import facts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import DocumentError, GpufleetError

from test_containerd_imports import V16, V21, converge  # noqa: E402 (the security layer's directory is on the path)

CONTAINERD = shutil.which('containerd') or '/usr/bin/containerd'
# Spellings of `imports` another case gives; the last two only containerd 2.x reads (Go's lower case of U+0130 is i).
SPELLINGS = ['IMPORTS', 'Imports', 'iMPORTS', '"\\u0130mports"', '"IMPORTS"']


def config_with_key(sandbox, key, pattern, extra=''):
    directory = os.path.join(sandbox, 'containerd')
    os.mkdir(directory, 0o755)
    path = os.path.join(directory, 'config.toml')
    with open(path, 'w') as handle:
        handle.write('version = 2\n%s = ["%s"]\n%s' % (key, pattern, extra))
    with open(path, 'rb') as handle:
        return path, handle.read()


@pytest.mark.parametrize('version', [V16, V21])
@pytest.mark.parametrize('key', SPELLINGS)
def test_imports_in_another_case_into_a_strangers_directory_is_refused(sandbox, stranger, key, version, monkeypatch):
    # the fake dump has no CRI table: the effective-configuration check is not what this test is about (without the
    # key check the file is accepted and written, as test_containerd_imports' root-only case is)
    monkeypatch.setattr(apply.Converge, 'check_effective', lambda self, real, text, before, dschema: before)
    dropins = stranger.owned_dir(sandbox, 'conf.d')
    path, original = config_with_key(sandbox, key, '%s/*.toml' % dropins)
    for check_mode in (True, False):
        with pytest.raises(GpufleetError) as exc:
            converge(path, version, check_mode=check_mode)
        message = str(exc.value)
        assert '%s line 2: the key ' % path in message and 'containerd\'s "imports" written in another case' in message
        with open(path, 'rb') as handle:
            assert handle.read() == original


def test_the_real_containerd_imports_through_the_upper_case_key(sandbox):
    """What the refusal prevents, on this machine's containerd: ``IMPORTS`` loads the file it names."""
    dropin = os.path.join(sandbox, 'dropin.toml')
    with open(dropin, 'w') as handle:
        handle.write('version = 2\noom_score = -777\n')
    path, original = config_with_key(sandbox, 'IMPORTS', dropin)
    dump = subprocess.run([CONTAINERD, '--config', path, 'config', 'dump'], capture_output=True, text=True,
                          timeout=60, check=False)
    assert dump.returncode == 0, dump.stderr
    assert 'oom_score = -777' in dump.stdout


class CountingRun(object):
    """``run(argv)`` of this machine's containerd, counting the dumps asked."""

    def __init__(self):
        self.dumps = 0

    def __call__(self, argv, data=None):
        if argv[-2:] == ['config', 'dump']:
            self.dumps += 1
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, input=data, check=False)
        return proc.returncode, proc.stdout, proc.stderr


def test_the_memo_never_answers_for_a_file_with_imports_in_another_case(sandbox, monkeypatch):
    """An ``IMPORTS`` glob into root's own conf.d: the first dump is not kept, so a drop-in added later is seen by
    the next run."""
    monkeypatch.setenv('GPUFLEET_MEMO_DIR', os.path.join(sandbox, 'memo'))  # its parent is root's alone
    path, original = config_with_key(sandbox, 'IMPORTS', os.path.join(sandbox, 'containerd', 'conf.d', '*.toml'),
                                     extra='[plugins."io.containerd.grpc.v1.cri".containerd]\n'
                                           '  default_runtime_name = "runc"\n')
    os.mkdir(os.path.join(os.path.dirname(path), 'conf.d'), 0o755)

    def node_state_dump():
        run = CountingRun()  # a node_state run (its RunState): the memo read and written
        values, error = facts.Tools(run, containerd=CONTAINERD, state=RunState(dumps={}, store=True)).dump(path)
        return run.dumps, values, error

    asked, values, error = node_state_dump()
    assert (asked, error) == (1, None)
    memo = os.path.join(sandbox, 'memo')
    kept = [open(os.path.join(memo, name)).read() for name in os.listdir(memo)] if os.path.isdir(memo) else []
    assert not [text for text in kept if path in text], 'the memo kept a dump of a file that imports'
    with open(os.path.join(os.path.dirname(path), 'conf.d', 'later.toml'), 'w') as handle:
        handle.write('version = 2\noom_score = -555\n')
    asked, values, error = node_state_dump()
    assert asked == 1, 'the second run was answered from the memo: the drop-in added since did not count'
    assert values.get('oom_score') == -555  # containerd (1.6) reads IMPORTS: the drop-in is in its dump
    with pytest.raises(DocumentError) as exc:  # and the concern refuses the file itself, naming the line
        cd.Config(original.decode('utf-8'), path)
    assert '%s line 2: the key IMPORTS' % path in str(exc.value)
