# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_info and gpu_persistence, run in-process, when they cannot open a backend.

Nothing on this machine is read or changed: the socket path is in a temporary
directory (no daemon answers), and both modules fail before touching any GPU
or state file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest

from core_compat import patch_module_args

from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import backends
from ansible_collections.gpufleet.nvidia.plugins.modules import gpu_info, gpu_persistence

MODULES = {
    'gpu_info': (gpu_info, {}, 'to read GPUs through NVML'),
    'gpu_persistence': (gpu_persistence, {'mode': 'enabled', 'persist': False}, 'to set persistence through NVML'),
}


def run_module(capsys, name, tmp_path, **args):
    module, required, unused_purpose = MODULES[name]
    args = dict(required, socket_path=str(tmp_path / 'socket'), timeout=1.0, **args)
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            module.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


@pytest.fixture
def without_pynvml(monkeypatch):
    monkeypatch.setattr(backends, 'driver_loaded', lambda: True)  # a driver, as a GPU host has (this machine has none)
    monkeypatch.setattr(backends, 'pynvml', None)
    monkeypatch.setattr(backends, 'PYNVML_IMPORT_ERROR', 'Traceback (most recent call last):\nImportError: pynvml')


@pytest.mark.parametrize('backend', ['auto', 'nvml'])
@pytest.mark.parametrize('name', sorted(MODULES))
def test_missing_nvml_library_is_a_structured_key(capsys, tmp_path, without_pynvml, name, backend):
    rc, result = run_module(capsys, name, tmp_path, backend=backend)
    assert rc == 1 and result['failed'] is True
    assert result['missing_library'] == 'nvidia-ml-py'
    assert result['msg'].startswith('Failed to import the required Python library (nvidia-ml-py)')
    assert '%s when no persistence daemon answers on %s' % (MODULES[name][2], tmp_path / 'socket') in result['msg']


@pytest.mark.parametrize('name', sorted(MODULES))
def test_other_backend_failures_have_no_missing_library(capsys, tmp_path, without_pynvml, name):
    rc, result = run_module(capsys, name, tmp_path, backend='rpc')
    assert rc == 1 and result['failed'] is True
    assert 'missing_library' not in result
    assert 'no persistence daemon answers on %s' % (tmp_path / 'socket') in result['msg']
    assert 'use backend=nvml' in result['msg']


@pytest.mark.parametrize('name', sorted(MODULES))
def test_no_driver_is_said_as_such_not_as_a_library_to_install(capsys, tmp_path, without_pynvml, monkeypatch, name):
    monkeypatch.setattr(backends, 'driver_loaded', lambda: False)
    rc, result = run_module(capsys, name, tmp_path, backend='auto')
    assert rc == 1 and result['failed'] is True and 'missing_library' not in result
    assert 'no NVIDIA driver is loaded on this host' in result['msg'] and 'modprobe nvidia' in result['msg']
