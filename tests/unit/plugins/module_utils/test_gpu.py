# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Selectors, planning, roll-back and error mapping of module_utils/gpu/backends.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys

import pynvml
import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import backends


def make_gpus(count=4):
    return [{'index': i, 'uuid': 'GPU-%08x-0000-0000-0000-%012x' % (0xa100 + i, i), 'name': 'NVIDIA H100 80GB HBM3',
             'pci_bus_id': '00000000:%02X:00.0' % (0x1b + i * 0x10), 'minor': i} for i in range(count)]


class FakeBackend(object):
    """Records calls; ``fail_on`` makes setting that bus id fail; ``stuck`` ignores sets."""

    name = 'fake'

    def __init__(self, gpus, modes=None, fail_on=None, stuck=None):
        self._gpus = gpus
        self.modes = dict(modes or dict((g['pci_bus_id'], 'disabled') for g in gpus))
        self.fail_on = fail_on
        self.stuck = stuck
        self.sets = []

    def gpus(self):
        return [dict(g) for g in self._gpus]

    def get_mode(self, gpu):
        return self.modes[gpu['pci_bus_id']]

    def set_mode(self, gpu, mode):
        self.sets.append((gpu['pci_bus_id'], mode))
        if gpu['pci_bus_id'] == self.fail_on:
            raise backends.GpuError('boom on %s' % backends.describe(gpu))
        if gpu['pci_bus_id'] != self.stuck:
            self.modes[gpu['pci_bus_id']] = mode


@pytest.mark.parametrize('selector,index', [
    (0, 0), ('2', 2), ('GPU-0000a101-0000-0000-0000-000000000001', 1),
    ('gpu-0000A101-0000-0000-0000-000000000001', 1),
    ('00000000:2B:00.0', 1), ('0000:2b:00.0', 1), ('2b:00.0', 1), ('2B:00.1', 1),
])
def test_selectors(selector, index):
    assert backends.resolve(make_gpus(), selector)['index'] == index


@pytest.mark.parametrize('selector,why', [
    (7, 'no GPU matches 7'), ('GPU-deadbeef', 'no GPU matches'), ('99:00.0', 'no GPU matches'),
    ('eth0', 'is not a GPU index, UUID'), ('1b:00', 'is not a GPU index, UUID'),
])
def test_unknown_selectors_list_the_gpus_that_exist(selector, why):
    with pytest.raises(backends.GpuError) as exc:
        backends.resolve(make_gpus(2), selector)
    assert why in str(exc.value)
    assert 'GPUs here: GPU 0 (GPU-0000a100-0000-0000-0000-000000000000, 00000000:1B:00.0), GPU 1' in str(exc.value)


def test_desired_modes_all_and_conflicts():
    gpus = make_gpus(3)
    assert backends.desired_modes(gpus, ['all'], 'enabled') == dict((g['pci_bus_id'], 'enabled') for g in gpus)
    assert backends.desired_modes(gpus, None, 'disabled')['00000000:3B:00.0'] == 'disabled'
    mixed = backends.desired_modes(gpus, modes=[{'gpu': 0, 'mode': 'enabled'}, {'gpu': '3b:00.0', 'mode': 'disabled'}])
    assert mixed == {'00000000:1B:00.0': 'enabled', '00000000:3B:00.0': 'disabled'}
    # The same GPU twice, same mode: fine. Different modes: an error naming it.
    assert len(backends.desired_modes(gpus, [0, '1b:00.0'], 'enabled')) == 1
    with pytest.raises(backends.GpuError, match='both enabled and disabled'):
        backends.desired_modes(gpus, modes=[{'gpu': 0, 'mode': 'enabled'}, {'gpu': '1b:00.0', 'mode': 'disabled'}])


def test_converge_changes_only_what_differs_and_check_mode_changes_nothing():
    gpus = make_gpus(4)
    backend = FakeBackend(gpus, modes={'00000000:1B:00.0': 'enabled', '00000000:2B:00.0': 'disabled',
                                       '00000000:3B:00.0': 'enabled', '00000000:4B:00.0': 'disabled'})
    unused_gpus, report = backends.converge(backend, ['all'], 'enabled', check_mode=True)
    assert [e['changed'] for e in report] == [False, True, False, True]
    assert backend.sets == []
    unused_gpus, report = backends.converge(backend, ['all'], 'enabled')
    assert backend.sets == [('00000000:2B:00.0', 'enabled'), ('00000000:4B:00.0', 'enabled')]
    assert [(e['before'], e['after']) for e in report][1] == ('disabled', 'enabled')
    backend.sets = []
    unused_gpus, report = backends.converge(backend, ['all'], 'enabled')
    assert backend.sets == [] and not any(e['changed'] for e in report)


def test_failed_set_rolls_back_what_was_changed():
    gpus = make_gpus(4)
    backend = FakeBackend(gpus, fail_on='00000000:3B:00.0')
    with pytest.raises(backends.GpuError) as exc:
        backends.converge(backend, ['all'], 'enabled')
    assert 'boom on GPU 2' in str(exc.value)
    assert 'set back: GPU 1' in str(exc.value) and 'GPU 0' in str(exc.value)
    assert set(backend.modes.values()) == {'disabled'}


def test_read_back_mismatch_fails_and_rolls_back():
    backend = FakeBackend(make_gpus(2), stuck='00000000:2B:00.0')
    with pytest.raises(backends.GpuError, match='still reads disabled after being set enabled'):
        backends.converge(backend, ['all'], 'enabled')
    assert backend.modes['00000000:1B:00.0'] == 'disabled'


@pytest.mark.parametrize('code,name,remedy', [
    (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, 'DriverNotLoaded', 'modprobe nvidia'),
    (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, 'LibRmVersionMismatch', 'reboot the host'),
    (pynvml.NVML_ERROR_NO_PERMISSION, 'NoPermission', 'become: true'),
    (pynvml.NVML_ERROR_NOT_SUPPORTED, 'NotSupported', 'does not support persistence'),
    (pynvml.NVML_ERROR_GPU_IS_LOST, 'GpuIsLost', 'Xid'),
    (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, 'LibraryNotFound', 'libnvidia-ml.so.1'),
])
def test_nvml_errors_name_host_gpu_and_remedy(code, name, remedy):
    gpu = make_gpus(1)[0]
    message = backends.nvml_error_message(pynvml.NVMLError(code), 'setting persistence mode enabled on', gpu)
    assert message.startswith(backends.host() + ': setting persistence mode enabled on GPU 0 (GPU-0000a100')
    assert '00000000:1B:00.0' in message
    assert '(NVML %s)' % name in message and remedy in message


def write_information(root, bdf, uuid, minor, model='NVIDIA A100-SXM4-80GB'):
    path = os.path.join(root, bdf)
    os.makedirs(path)
    with open(os.path.join(path, 'information'), 'w') as handle:
        handle.write('Model: \t\t %s\nIRQ:   \t\t 0\nGPU UUID: \t %s\nBus Location: \t %s\nDevice Minor: \t %d\n'
                     % (model, uuid, bdf, minor))


def test_proc_gpus_are_indexed_in_pci_order(tmp_path):
    root = str(tmp_path)
    write_information(root, '0000:c1:00.0', 'GPU-c', 2)
    write_information(root, '0000:01:00.0', 'GPU-a', 0)
    write_information(root, '0000:41:00.0', 'GPU-b', 1)
    gpus = backends.read_proc_gpus(root)
    assert [(g['index'], g['uuid'], g['pci_bus_id'], g['minor']) for g in gpus] == [
        (0, 'GPU-a', '00000000:01:00.0', 0), (1, 'GPU-b', '00000000:41:00.0', 1), (2, 'GPU-c', '00000000:C1:00.0', 2)]
    assert gpus[0]['name'] == 'NVIDIA A100-SXM4-80GB'


def test_missing_proc_says_driver_not_loaded(tmp_path):
    with pytest.raises(backends.GpuError, match='kernel driver is not loaded'):
        backends.read_proc_gpus(str(tmp_path / 'nope'))


def test_driver_version(tmp_path):
    path = tmp_path / 'version'
    path.write_text('NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.171.04  Tue Mar 19 2024\nGCC version: 12\n')
    assert backends.read_driver_version(str(path)) == '535.171.04'
    assert backends.read_driver_version(str(tmp_path / 'missing')) is None


def test_choose_backend_without_daemon_needs_pynvml(tmp_path):
    def no_pynvml():
        raise ImportError('no pynvml')
    socket = str(tmp_path / 'socket')
    for backend in ('auto', 'nvml'):
        with pytest.raises(backends.MissingLibrary) as exc:
            backends.choose_backend(backend, socket, 1.0, no_pynvml, purpose='to count GPUs', loaded=lambda: True)
        assert exc.value.library == backends.NVML_LIBRARY == 'nvidia-ml-py'
        assert exc.value.reason == 'to count GPUs when no persistence daemon answers on %s' % socket
        # no driver loaded: that is said first, not a library to install
        with pytest.raises(backends.GpuError) as exc:
            backends.choose_backend(backend, socket, 1.0, no_pynvml, purpose='to count GPUs', loaded=lambda: False)
        assert not isinstance(exc.value, backends.MissingLibrary)
        assert 'no NVIDIA driver is loaded on this host (/proc/driver/nvidia/version is missing)' in str(exc.value)
    with pytest.raises(backends.GpuError, match='no persistence daemon answers'):
        backends.choose_backend('rpc', str(tmp_path / 'socket'), 1.0, no_pynvml)
    backend, answers = backends.choose_backend('auto', str(tmp_path / 'socket'), 1.0, lambda: pynvml)
    assert backend.name == 'nvml' and answers is False


def test_pynvml_is_imported_only_when_nvml_is_needed(monkeypatch):
    # a fresh interpreter: node_state (which imports backends) runs without importing pynvml
    probe = ('import sys\n'
             'from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import node_state\n'
             'from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import backends\n'
             'print("pynvml" in sys.modules)\nbackends.load_pynvml()\nprint("pynvml" in sys.modules)\n')
    out = subprocess.run([sys.executable, '-c', probe], check=False, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert out.stdout.split() == ['False', 'True'], out.stdout
    # here: the first call imports it and keeps it; a failed import is kept as its traceback and raised again
    monkeypatch.setattr(backends, 'pynvml', None)
    monkeypatch.setattr(backends, 'PYNVML_IMPORT_ERROR', None)
    assert backends.load_pynvml() is pynvml and backends.pynvml is pynvml
    monkeypatch.setattr(backends, 'pynvml', None)
    monkeypatch.setitem(sys.modules, 'pynvml', None)  # what Python does for a module that cannot be imported
    with pytest.raises(ImportError):
        backends.load_pynvml()
    assert 'import of pynvml halted' in backends.PYNVML_IMPORT_ERROR
    with pytest.raises(ImportError) as again:
        backends.load_pynvml()
    assert str(again.value) == backends.PYNVML_IMPORT_ERROR


def test_open_backend_takes_the_access_options_not_a_module(tmp_path):
    params = {'backend': 'nvml', 'socket_path': str(tmp_path / 'socket'), 'timeout': 1.0}
    backend, answers = backends.open_backend(params, 'to read GPUs through NVML')
    assert backend.name == 'nvml' and answers is False
    params['backend'] = 'rpc'
    with pytest.raises(backends.GpuError, match='no persistence daemon answers') as exc:
        backends.open_backend(params, 'to read GPUs through NVML')
    assert not isinstance(exc.value, backends.MissingLibrary)


def test_missing_library_is_a_gpu_error_with_a_structured_key(monkeypatch):
    monkeypatch.setattr(backends, 'driver_loaded', lambda: True)  # this machine has no driver
    monkeypatch.setattr(backends, 'pynvml', None)
    monkeypatch.setattr(backends, 'PYNVML_IMPORT_ERROR', 'Traceback: No module named pynvml')
    params = {'backend': 'auto', 'socket_path': '/nonexistent/gpufleet-test/socket', 'timeout': 1.0}
    with pytest.raises(backends.GpuError) as exc:
        backends.open_backend(params, 'to set persistence through NVML')
    assert isinstance(exc.value, backends.MissingLibrary)
    args = exc.value.fail_json_args()
    assert args['missing_library'] == 'nvidia-ml-py'
    assert args['exception'] == 'Traceback: No module named pynvml'
    # Ansible's standard wording, with what it is needed for and where no daemon answers.
    assert args['msg'].startswith('Failed to import the required Python library (nvidia-ml-py)')
    assert 'to set persistence through NVML when no persistence daemon answers on /nonexistent/gpufleet-test/socket' \
        in args['msg']
    assert sorted(args) == ['exception', 'missing_library', 'msg']
    assert 'nvidia-ml-py is missing' in str(exc.value) and str(exc.value).startswith(backends.host() + ': ')


def test_other_gpu_errors_fail_with_their_message_only():
    assert backends.GpuError('host: no GPU matches 7').fail_json_args() == {'msg': 'host: no GPU matches 7'}


def test_wire_modes_are_indexed_by_the_nvml_and_rpc_value():
    assert backends.WIRE_MODES == ('disabled', 'enabled')
    assert [backends.wire_of_mode(m) for m in ('disabled', 'enabled')] == [0, 1]
    values = (0, 1, 2, True, False)
    assert [backends.mode_of_wire(v) for v in values] == ['disabled', 'enabled', 'enabled', 'enabled', 'disabled']


class WireRecorder(object):
    """The daemon's RPC client and pynvml, reduced to the persistence-mode calls: records what is sent."""

    class NVMLError(Exception):
        pass

    def __init__(self, value):
        self.value = value
        self.sent = []

    def read(self, target):
        return self.value

    def write(self, target, value):
        self.sent.append((target, value))

    get_persistence_mode = nvmlDeviceGetPersistenceMode = read
    set_persistence_mode = nvmlDeviceSetPersistenceMode = write


def test_both_backends_send_1_for_enabled_and_read_1_as_enabled():
    gpu = make_gpus(1)[0]
    rpc_backend = backends.RpcBackend()
    rpc_backend.client = WireRecorder(1)
    rpc_backend.set_mode(gpu, 'enabled')
    rpc_backend.set_mode(gpu, 'disabled')
    assert rpc_backend.client.sent == [('00000000:1B:00.0', 1), ('00000000:1B:00.0', 0)]
    assert rpc_backend.get_mode(gpu) == 'enabled'
    nvml = WireRecorder(0)
    nvml_backend = backends.NvmlBackend(nvml)
    nvml_backend.handles[gpu['pci_bus_id']] = 'handle0'
    nvml_backend.set_mode(gpu, 'enabled')
    nvml_backend.set_mode(gpu, 'disabled')
    assert nvml.sent == [('handle0', 1), ('handle0', 0)]
    assert nvml_backend.get_mode(gpu) == 'disabled'


WHEEL_PROBE = '''
import json, sys
from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import backends
sys.path[:] = [p for p in sys.path if not p.endswith(("site-packages", "dist-packages"))]  # no pynvml of the host
try:
    module = backends.load_pynvml(sys.argv[1])
    print(json.dumps({"file": module.__file__}))
except ImportError as exc:
    print(json.dumps({"error": str(exc)}))
'''


def wheel_probe(directory):
    out = subprocess.run([sys.executable, '-c', WHEEL_PROBE, str(directory)], check=False, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, universal_newlines=True,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    return json.loads(out.stdout.strip().splitlines()[-1])


def make_wheel(directory, name='nvidia_ml_py-13.615.71-py3-none-any.whl', mode=0o644, text=None):
    import zipfile
    directory.mkdir(mode=0o755, exist_ok=True)
    path = directory / name
    if text is None:
        with zipfile.ZipFile(str(path), 'w') as archive:
            archive.write(pynvml.__file__, 'pynvml.py')
    else:
        path.write_text(text)
    os.chmod(str(path), mode)
    return path


def test_nvml_comes_from_the_collections_wheel_where_the_host_python_has_none(tmp_path):
    wheels = tmp_path / 'python'
    # none there: the host's ImportError stands (and nothing is installed anywhere)
    assert 'No module named' in wheel_probe(wheels)['error']
    path = make_wheel(wheels)
    make_wheel(wheels, name='not-a-wheel.txt', text='ignored')
    assert wheel_probe(wheels) == {'file': str(path / 'pynvml.py')}
    # a wheel another user could change: refused, naming it (its code would run as root)
    os.chmod(str(path), 0o664)
    found = wheel_probe(wheels)['error']
    assert found.startswith('%s: refusing to use the NVML bindings' % path) and 'gpu_persistence_nvml_wheel' in found
    os.chmod(str(path), 0o644)
    os.chmod(str(wheels), 0o777)
    assert 'refusing to use' in wheel_probe(wheels)['error']
    os.chmod(str(wheels), 0o755)
    # a file of that name that is no wheel of pynvml: said so
    path.unlink()
    bad = make_wheel(wheels, name='nvidia_ml_py-99.0-py3-none-any.whl', text='not a zip')
    assert wheel_probe(wheels)['error'].startswith('%s: not a wheel of nvidia-ml-py' % bad)
