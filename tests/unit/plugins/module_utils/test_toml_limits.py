# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""TOML input limits: any depth gives an error naming the file (never a RecursionError), any size within the
1 MiB bound is planned in linear time, a larger file is refused naming it.

Linear time is checked by counting the lines Python runs (``sys.settrace``), which no machine load changes:
twice the input may cost about twice the steps, not four times. The largest input is also planned once and its
time printed, with no assertion on it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import sys
import time

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import config as cd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import plan
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils.crio import config as cr
from ansible_collections.gpufleet.nvidia.plugins.module_utils.formats import toml_splice as ts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import DocumentError, GpufleetError

V16 = (1, 6, 20)
NAME = '/etc/containerd/config.toml'
DEEP = [
    'x = ' + '[' * 600 + ']' * 600 + '\n',                         # arrays past Python's recursion limit
    'x = ' + '{a = ' * 300 + '1' + '}' * 300 + '\n',               # inline tables
    '[' + '.'.join('t%d' % i for i in range(700)) + ']\nk = 1\n',  # a 700-level table
    '.'.join('k%d' % i for i in range(700)) + ' = 1\n',            # a 700-part dotted key
    'x = ' + '[' * 65 + ']' * 65 + '\n',                           # just past the bound
]


@pytest.mark.parametrize('body', DEEP, ids=['arrays', 'inline-tables', 'table', 'dotted-key', 'depth-65'])
@pytest.mark.parametrize('reader', ['containerd', 'crio', 'scan'])
def test_any_depth_is_an_error_naming_the_file(body, reader):
    text = 'version = 2\n' + body
    with pytest.raises(DocumentError) as exc:
        if reader == 'containerd':
            cd.Config(text, NAME)
        elif reader == 'crio':
            cr.Source('/etc/crio/crio.conf.d/10-deep.conf', text)
        else:
            ts.scan(text, NAME)
    message = str(exc.value)
    assert message.startswith(NAME if reader != 'crio' else '/etc/crio/crio.conf.d/10-deep.conf'), message
    assert 'nested' in message and '64' in message, message


def test_the_bound_leaves_real_depths_alone():
    text = 'version = 2\nx = ' + '[' * 30 + ']' * 30 + '\n[' + '.'.join('t%d' % i for i in range(40)) + ']\nk = 1\n'
    config = cd.Config(text, NAME)
    assert config.doc.headers[0].path[-1] == 't39'


def big_config(keys):
    """A config.toml with ``keys`` keys in the containerd table and as many tables after it."""
    lines = ['version = 2', '[plugins."io.containerd.grpc.v1.cri".containerd]']
    lines += ['  key%d = "value %d"' % (index, index) for index in range(keys)]
    for index in range(keys):
        lines += ['[plugins."example.%d"]' % index, '  setting = %d' % index]
    return '\n'.join(lines) + '\n'


def plan_default(config):
    schema = cd.choose_schema(V16, config.version, NAME)
    return plan.plan(config, apply.Request(path=NAME, default_runtime=True), schema, {}, cd.dump_schema(V16))


def steps(text):
    """How many lines of our TOML modules planning ``default_runtime: true`` runs (parsing, tomli's, aside)."""
    count = [0]
    ours = (ts.__file__, cd.__file__, plan.__file__)
    config = cd.Config(text, NAME)

    def tracer(frame, event, arg):
        if frame.f_code.co_filename not in ours:
            return None
        if event == 'line':
            count[0] += 1
        return tracer
    sys.settrace(tracer)
    try:
        plan_default(config)
    finally:
        sys.settrace(None)
    return count[0]


def test_setting_default_runtime_is_linear_in_the_file():
    small, large = steps(big_config(300)), steps(big_config(600))
    print('steps for 300 and 600 keys: %d, %d (x%.2f)' % (small, large, large / float(small)))
    assert large < 2.5 * small, (small, large)


def test_a_file_near_the_size_bound_is_planned():
    text = big_config(12000)
    assert 0.7 * 1024 * 1024 < len(text) < cd.MAX_CONFIG_BYTES
    started = time.time()
    planned = plan_default(cd.Config(text, NAME))
    print('%d bytes planned in %.1f s' % (len(text), time.time() - started))
    assert 'default_runtime_name = "nvidia"' in planned.text


class VersionOnly(object):
    def version(self):
        return V16


def test_a_file_over_the_size_bound_is_refused_naming_it(tmp_path):
    path = tmp_path / 'config.toml'
    path.write_text('version = 2\n' + '# padding\n' * (cd.MAX_CONFIG_BYTES // 10))
    original = path.read_bytes()
    run = apply.Converge(apply.Request(path=str(path)), None, VersionOnly())
    with pytest.raises(GpufleetError) as exc:
        run.run(check_mode=True)
    assert str(exc.value).startswith(str(path)) and 'larger than %d bytes' % cd.MAX_CONFIG_BYTES in str(exc.value)
    assert path.read_bytes() == original
