# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""containerd's own keys in another case, against the real containerd (each version the layer runs).

containerd 1.x decodes its configuration with go-toml v1 and 2.x with go-toml v2, whose rules for a key that differs
from a struct field's documented spelling are not the same. Measured here, not assumed: for each spelling of
``imports`` and ``default_runtime_name``, ``config dump`` says whether this containerd reads it; every spelling it
reads, other than the documented one, must be refused by the collection's reader (``containerd.config.loads``, which every
file containerd_runtime and node_state read goes through), naming the file and line. The documented spelling must be
read by both. And node_state on such a file reports the refusal instead of a verdict (issue 45: with the memo it had
answered "converged" for a file whose ``IMPORTS`` it did not see).

What the layer measured (1.6.20, 1.7.24: the documented key and its upper case; 2.1.9: any case, U+0130 as i) is in
docs/security.md.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import config as cd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.formats import toml_splice as ts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import DocumentError

from .conftest import CONTAINERD, CONTAINERD2, CRI_RUNTIME, settings

# Spellings in TOML (quoted where TOML needs it); U+017F (long s) lower-cases to itself, so no decoder takes it as s.
IMPORTS = ['imports', 'IMPORTS', 'Imports', 'iMPORTS', '"\\u0130mports"', '"IMPORT\\u017f"']
DEFAULT_RUNTIME_NAME = ['default_runtime_name', 'DEFAULT_RUNTIME_NAME', 'Default_Runtime_Name',
                        'default_RUNTIME_name']


def dump(lab, text):
    path = os.path.join(lab.base, 'probe.toml')
    with open(path, 'w') as handle:
        handle.write(text)
    rc, out, err = lab.run([CONTAINERD, '--config', path, 'config', 'dump'])
    assert rc == 0, err
    return cd.loads_dump(out, 'dump'), path


def ours(text, path):
    """What the collection's reader does with the file: 'read' or 'refused' (naming the file and line)."""
    try:
        cd.loads(text, path)
    except DocumentError as exc:
        assert str(exc).startswith('%s line ' % path) and 'written in another case' in str(exc), str(exc)
        return 'refused'
    return 'read'


def test_every_spelling_of_imports_containerd_reads_is_refused_but_its_own(lab_containerd):
    lab = lab_containerd
    dropin = os.path.join(lab.base, 'dropin.toml')
    with open(dropin, 'w') as handle:
        handle.write('version = %d\noom_score = -777\n' % (3 if CONTAINERD2 else 2))
    seen = {}
    for key in IMPORTS:
        text = 'version = %d\n%s = ["%s"]\n' % (3 if CONTAINERD2 else 2, key, dropin)
        values, path = dump(lab, text)
        seen[key] = (values.get('oom_score') == -777, ours(text, path))
    assert seen['imports'] == (True, 'read'), seen
    for key, (containerd_reads, collection) in seen.items():
        if key != 'imports' and containerd_reads:
            assert collection == 'refused', (key, seen)
    assert seen['IMPORTS'][0], 'this containerd does not read IMPORTS: %s' % seen  # the hole, on every version
    # U+017F: EqualFold's s (CRI-O's decoder reads it so; the collection refuses it everywhere), no containerd's
    assert not seen['"IMPORT\\u017f"'][0], seen
    print('imports spellings read by this containerd: %s' % sorted(key for key, found in seen.items() if found[0]))


def test_every_spelling_of_default_runtime_name_containerd_reads_is_refused_but_its_own(lab_containerd):
    lab = lab_containerd
    seen = {}
    for key in DEFAULT_RUNTIME_NAME:
        text = 'version = %d\n[%s.containerd]\n  %s = "zz"\n' % (
            3 if CONTAINERD2 else 2, ts.dotted(CRI_RUNTIME), key)
        values, path = dump(lab, text)
        seen[key] = (cd.get(values, CRI_RUNTIME + ('containerd', 'default_runtime_name')) == 'zz', ours(text, path))
    assert seen['default_runtime_name'] == (True, 'read'), seen
    for key, (containerd_reads, collection) in seen.items():
        if key != 'default_runtime_name' and containerd_reads:
            assert collection == 'refused', (key, seen)
    assert seen['DEFAULT_RUNTIME_NAME'][0], seen


def test_node_state_reports_the_refusal_for_imports_in_another_case(lab_containerd, tmp_path, monkeypatch):
    """Twice (the second run may use the memo): the file is refused, never found converged."""
    lab = lab_containerd
    monkeypatch.setenv('GPUFLEET_MEMO_DIR', os.path.join(lab.base, 'memo'))
    conf_d = os.path.join(lab.base, 'conf.d')
    os.mkdir(conf_d, 0o755)
    with open(lab.config, 'w') as handle:
        handle.write('version = 2\nIMPORTS = ["%s/*.toml"]\n%s' % (conf_d, settings(lab.base)))
    args = tmp_path / 'args.json'
    args.write_text(json.dumps({'ANSIBLE_MODULE_ARGS': {'engines': ['containerd'],
                                                        'containerd': {'path': lab.config}}}))
    for _ in range(2):
        proc = subprocess.run(lab.inside([sys.executable, '-m',
                                          'ansible_collections.gpufleet.nvidia.plugins.modules.node_state', str(args)]),
                              capture_output=True, text=True, timeout=120, check=False,
                              env=dict(os.environ, PYTHONDONTWRITEBYTECODE='1'))
        assert 'Traceback' not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
        verdict = json.loads(proc.stdout)['concerns']['containerd']
        assert verdict['failed'] and not verdict['converged'], verdict
        assert '%s line 2: the key IMPORTS' % lab.config in verdict['result']['msg'], verdict
