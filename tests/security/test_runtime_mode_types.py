# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""cdi_spec's ``runtime_mode`` on a valid TOML file whose values have other types than NVIDIA's runtime reads.

``cdi_mode`` reads ``nvidia-container-runtime`` (a table), its ``mode`` (a string) and
``modes.cdi.spec-dirs`` (an array of strings, through the tables ``modes`` and ``cdi``). Any other type on the
way is a file NVIDIA's runtime refuses to load, and must be refused here, with a DocumentError naming the file,
the key and its line, and the file left as it was. On the code before this fix ``[[nvidia-container-runtime]]``
(an array of tables) with a ``mode`` crashed ``set_mode`` with ``TypeError: list indices must be integers or
slices, not str`` (a traceback, not a failed task); ``mode = 1``, an array of tables at ``modes`` or ``cdi`` and
a string ``spec-dirs`` were passed over and the mode written into a file the runtime cannot load.

TOML nested past any reader's recursion limit (``a = [[[[...`` 5000 deep, inline tables the same) is a
DocumentError naming the file too, never a RecursionError: for this reader and for the containerd and CRI-O
readers, which share ``formats.toml_splice.parse``.

cdi_spec runs in-process on a host tree under a temp directory (test_cdi_apply's ``Host``, with a stand-in
``nvidia-ctk`` that answers ``config default`` with NVIDIA's 1.20.0 file).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import mode as cdi_mode
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import config as containerd_config
from ansible_collections.gpufleet.nvidia.plugins.module_utils.crio import config as crio_config
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import DocumentError, GpufleetError

from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.test_cdi_apply import Host
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.test_cdi_mode import (
    CONFIG, ConfigCtk, write_config)

# (the file's text, the key named, its line, the type found)
ODD = {
    'array of tables with a mode': ('[[nvidia-container-runtime]]\nmode = "auto"\n',
                                    'nvidia-container-runtime', 1, 'an array of tables'),
    'array of tables': ('log-level = "info"\n\n[[nvidia-container-runtime]]\n[[nvidia-container-runtime]]\n',
                        'nvidia-container-runtime', 3, 'an array of tables'),
    'an inline array of tables': ('nvidia-container-runtime = [{mode = "auto"}]\n',
                                  'nvidia-container-runtime', 1, 'an array of tables'),
    'a string table': ('nvidia-container-runtime = "auto"\n', 'nvidia-container-runtime', 1, 'a string'),
    'an integer table': ('nvidia-container-runtime = 7\n', 'nvidia-container-runtime', 1, 'an integer'),
    'an integer mode': ('[nvidia-container-runtime]\nmode = 1\n', 'nvidia-container-runtime.mode', 2,
                        'an integer'),
    'a boolean mode': ('[nvidia-container-runtime]\nlog-level = "info"\nmode = true\n',
                       'nvidia-container-runtime.mode', 3, 'a boolean'),
    'an array mode': ('[nvidia-container-runtime]\nmode = ["cdi"]\n', 'nvidia-container-runtime.mode', 2,
                      'an array'),
    'a table mode': ('[nvidia-container-runtime.mode]\nx = 1\n', 'nvidia-container-runtime.mode', 1, 'a table'),
    'a date mode': ('nvidia-container-runtime.mode = 2024-01-01\n', 'nvidia-container-runtime.mode', 1,
                    'a date or time'),
    'an inline table with an integer mode': ('nvidia-container-runtime = {mode = 1}\n',
                                             'nvidia-container-runtime.mode', 1, 'an integer'),
    'an array of tables at modes': ('[nvidia-container-runtime]\nmode = "auto"\n\n[[nvidia-container-runtime.modes]]\n'
                                    'x = 1\n', 'nvidia-container-runtime.modes', 4, 'an array of tables'),
    'an array of tables at cdi': ('[nvidia-container-runtime]\nmode = "auto"\n\n'
                                  '[[nvidia-container-runtime.modes.cdi]]\nspec-dirs = ["/var/run/cdi"]\n',
                                  'nvidia-container-runtime.modes.cdi', 4, 'an array of tables'),
    'a string spec-dirs': ('[nvidia-container-runtime]\nmode = "auto"\n[nvidia-container-runtime.modes.cdi]\n'
                           'spec-dirs = "/var/run/cdi"\n', 'nvidia-container-runtime.modes.cdi.spec-dirs', 4,
                           'a string'),
    'an integer among the spec-dirs': ('[nvidia-container-runtime]\nmode = "auto"\n'
                                       '[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["/var/run/cdi", 1]\n',
                                       'nvidia-container-runtime.modes.cdi.spec-dirs', 4,
                                       'an array holding an integer'),
}


def refusal(key, line, found):
    return '%s: %s (line %d) is %s, where NVIDIA\'s runtime reads ' % (CONFIG, key, line, found)


@pytest.mark.parametrize('name', sorted(ODD))
def test_set_mode_refuses_a_value_of_another_type_naming_the_file_and_key(name):
    text, key, line, found = ODD[name]
    with pytest.raises(DocumentError) as exc:
        cdi_mode.set_mode(text, CONFIG, 'cdi')
    assert str(exc.value).startswith(refusal(key, line, found)), str(exc.value)
    assert str(exc.value).endswith('The file was left untouched.')


@pytest.mark.parametrize('state', ['present', 'absent'])
@pytest.mark.parametrize('name', sorted(ODD))
def test_cdi_spec_fails_naming_the_file_and_leaves_it_and_the_spec_alone(tmp_path, name, state):
    host = Host(tmp_path)
    text = ODD[name][0]
    path = write_config(host, text)
    with pytest.raises(GpufleetError) as exc:  # the module's failure (fail_json), never another exception
        host.converge(ConfigCtk(), boot=False, runtime_mode='cdi', state=state)
    assert str(exc.value).startswith('h1: %s: %s' % (CONFIG, ODD[name][1])), str(exc.value)
    assert path.read_text() == text
    assert not host.path('/var/run/cdi/nvidia.yaml').exists()


def test_values_of_the_expected_types_still_work():
    text = ('[nvidia-container-runtime]\nmode = "legacy"\n[nvidia-container-runtime.modes.cdi]\n'
            'spec-dirs = ["/etc/cdi", "/var/run/cdi"]\n[[nvidia-container-runtime.other]]\nx = 1\n')
    assert cdi_mode.set_mode(text, CONFIG, 'cdi') == text.replace('"legacy"', '"cdi"')


DEEP = {
    'arrays': 'a = ' + '[' * 5000 + ']' * 5000 + '\n',
    'inline tables': 'a = ' + '{b = ' * 5000 + '1' + '}' * 5000 + '\n',
    'unclosed arrays': 'a = ' + '[' * 100000 + '\n',
    'arrays in the table': '[nvidia-container-runtime]\nmode = ' + '[' * 5000 + '"cdi"' + ']' * 5000 + '\n',
}
READERS = {
    'runtime_mode': lambda text: cdi_mode.set_mode(text, CONFIG, 'cdi'),
    'containerd': lambda text: containerd_config.loads(text, CONFIG),
    'crio': lambda text: crio_config.loads(text, CONFIG),
}


@pytest.mark.parametrize('reader', sorted(READERS))
@pytest.mark.parametrize('name', sorted(DEEP))
def test_toml_nested_past_the_recursion_limit_is_a_document_error_naming_the_file(name, reader):
    with pytest.raises(DocumentError) as exc:
        READERS[reader](DEEP[name])
    assert str(exc.value).startswith(CONFIG + ': '), str(exc.value)
    assert 'nested' in str(exc.value) or 'not valid TOML' in str(exc.value), str(exc.value)
