# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A program's own keys in another case are refused, naming the file and line (``formats.toml_splice.check_key_case``, as
containerd's and CRI-O's readers call it); names (plugin ids, runtime names) keep their case."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import mode
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import config as cd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.crio import config as cr
from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker import daemon_json
from ansible_collections.gpufleet.nvidia.plugins.module_utils.formats import toml_splice as ts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError

PATH = '/etc/containerd/config.toml'
CRI = '[plugins."io.containerd.grpc.v1.cri".containerd]\n'


def refusal(text, loads=cd.loads, path=PATH):
    with pytest.raises(GpufleetError) as exc:  # DocumentError for the TOML readers, DaemonJsonError for daemon.json
        loads(text, path)
    return str(exc.value)


@pytest.mark.parametrize('text, line, key', [
    ('version = 2\nIMPORTS = ["/x/*.toml"]\n', 2, 'IMPORTS'),
    ('Version = 2\n', 1, 'Version'),
    ('version = 2\n' + CRI + '  DEFAULT_RUNTIME_NAME = "nvidia"\n', 3, 'DEFAULT_RUNTIME_NAME'),
    ('version = 2\n[Plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = true\n', 2, 'Plugins'),
    ('version = 2\n' + CRI + '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.x]\n'
     '  runtime_type = "io.containerd.runc.v2"\n  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.x.options]'
     '\n    binaryname = "/home/u/runc"\n', 6, 'binaryname'),
    # inside an inline table: the line of the key that holds it
    ('version = 2\n\nplugins = { "io.containerd.grpc.v1.cri" = { containerd = { Runtimes = {} } } }\n', 3,
     'Runtimes'),
    # a dotted key
    ('version = 2\nplugins."io.containerd.grpc.v1.cri".Enable_CDI = true\n', 2, 'Enable_CDI'),
    # U+0130 lowers to i in Go (containerd 2.x reads it as imports); the Kelvin sign folds to k
    ('version = 2\n"\\u0130mports" = []\n', 2, '"\\u0130mports"'),
])
def test_containerds_own_key_in_another_case_is_refused_naming_the_line(text, line, key):
    message = refusal(text)
    assert message.startswith('%s line %d: the key ' % (PATH, line)), message
    assert ts.fold(key.strip('"').encode().decode('unicode_escape')) in ts.fold(message)
    assert 'written in another case' in message and 'the file was left untouched' in message


def test_names_keep_their_case_and_the_documented_spelling_is_read():
    text = ('version = 2\nimports = []\n' + CRI + '  default_runtime_name = "Options"\n'
            '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.Options]\n'
            '  runtime_type = "io.containerd.runc.v2"\n'
            '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.IMPORTS.options]\n  BinaryName = "/usr/bin/x"\n'
            '[plugins.Runtimes]\n')  # a plugin id and runtime names that look like keys: names, read as written
    values = cd.loads(text, PATH)
    assert sorted(cd.get(values, ('plugins', 'io.containerd.grpc.v1.cri', 'containerd', 'runtimes'))) == [
        'IMPORTS', 'Options']


def test_a_key_that_folds_to_no_key_of_ours_is_left_alone():
    assert cd.loads('version = 2\nimportz = []\n"\\u0131mports" = 1\n', PATH)['importz'] == []


def test_a_kelvin_sign_or_long_s_folds_as_go_equal_fold_does():
    assert ts.fold(u'\u212a') == 'k' and ts.fold(u'\u017f') == 's' and ts.fold(u'\u0130') == 'i'


def test_dumps_are_read_as_containerd_wrote_them():
    """containerd's own output is not checked (loads_dump): it writes every key in its own spelling."""
    assert cd.loads_dump('version = 2\nIMPORTS = []\n', 'dump')['IMPORTS'] == []


CRIO = (cr.loads, '/etc/crio/crio.conf.d/10-site.conf', 'CRI-O')
NVIDIA = (mode.loads, '/etc/nvidia-container-runtime/config.toml', 'NVIDIA\'s runtime')


@pytest.mark.parametrize('reader, text, line', [
    (CRIO, '[CRIO.runtime]\ndefault_runtime = "nvidia"\n', 1),
    (CRIO, '[crio.runtime]\nCDI_Spec_Dirs = ["/home/u/cdi"]\n', 2),
    (CRIO, '[crio.runtime.runtimes.nvidia]\nRuntime_Path = "/home/u/runc"\n', 2),
    # BurntSushi's toml compares with EqualFold: U+017F is s
    (CRIO, '[crio.runtime]\n"cdi_\\u017fpec_dirs" = []\n', 2),
    (NVIDIA, '[nvidia-container-runtime]\nMODE = "cdi"\n', 2),
    (NVIDIA, '[NVIDIA-CONTAINER-RUNTIME]\nmode = "cdi"\n', 1),
    (NVIDIA, '[nvidia-container-runtime.modes.CDI]\nspec-dirs = ["/home/u/cdi"]\n', 1),
], ids=lambda value: value[2] if isinstance(value, tuple) else None)
def test_crios_and_nvidia_runtimes_own_key_in_another_case_is_refused(reader, text, line):
    loads, path, program = reader
    message = refusal(text, loads, path)
    assert message.startswith('%s line %d: the key ' % (path, line)) and program in message, message


def test_crio_runtime_names_keep_their_case():
    values = cr.loads('[crio.runtime.runtimes.Runtime_Path]\nruntime_path = "/usr/bin/runc"\n', 'x.conf')
    assert 'Runtime_Path' in values['crio']['runtime']['runtimes']


@pytest.mark.parametrize('text, line, key', [
    ('{"Runtimes": {}}', 1, '"Runtimes"'),
    ('{\n  "DEFAULT-RUNTIME": "nvidia"\n}', 2, '"DEFAULT-RUNTIME"'),
    ('{"runtimes": {\n  "nvidia": {"path": "nvidia-container-runtime",\n    "Path": "/home/u/runc"}}}', 3,
     'runtimes."nvidia"."Path"'),
    ('{"runtimes": {"x": {"path": "/bin/runc", "RuntimeArgs": ["--debug"]}}}', 1, 'runtimes."x"."RuntimeArgs"'),
])
def test_dockerds_own_key_in_another_case_is_refused(text, line, key):
    path = '/etc/docker/daemon.json'
    message = refusal(text, daemon_json.parse, path)
    assert message.startswith('%s line %d: the key %s is dockerd\'s ' % (path, line, key)), message


def test_dockerd_names_and_maps_keep_their_case():
    """Runtime names and ``features`` (a map of feature names) are names: ``CDI`` is not ``cdi`` to dockerd."""
    node = daemon_json.parse('{"runtimes": {"Path": {"path": "/bin/runc"}}, "features": {"CDI": true}}', 'd.json')
    assert sorted(node.value) == ['features', 'runtimes']
