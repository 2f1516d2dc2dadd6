# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU inventory, selectors and persistence-mode access for gpufleet.nvidia.

PRIVATE to the gpufleet.nvidia collection: the API may change at any time.
No AnsibleModule here; pytest drives it directly. Failures are raised as
``GpuError`` (``MissingLibrary`` when a Python library the host lacks is the
cause); the modules turn them into ``fail_json`` with ``fail_json_args()``.

Two ways to reach the GPUs, as NVIDIA's own tools do:

* ``RpcBackend`` -- when a persistence daemon answers on its socket: the GPU
  list comes from the driver's ``/proc/driver/nvidia/gpus/*/information`` and
  modes go through the daemon's RPC (what NVML does when the daemon runs).
  Needs nothing but the standard library. Indexes follow PCI bus order, as
  NVML's do.
* ``NvmlBackend`` -- when no daemon runs: NVML through ``pynvml``
  (nvidia-ml-py). Setting persistence then uses the kernel's legacy path,
  which NVIDIA deprecates and which does not survive a reboot.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import platform
import re
import stat
import sys
import traceback

from ansible.module_utils.basic import missing_required_lib

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import HostFileError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu.pci import parse_pci_bus_id
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import paths
from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import rpc

# pynvml is imported when NVML is first needed (no persistence daemon answers, or backend=nvml), not with this
# file: a node whose daemon answers, which is every node the collection converged, never pays for it (about 8 ms of
# CPU in each module run, node_state's included). ``load_pynvml`` sets both.
pynvml = None
PYNVML_IMPORT_ERROR = None

# The options of doc fragment gpufleet.nvidia.gpu_access, shared by gpu_info and gpu_persistence.
ACCESS_ARGUMENT_SPEC = dict(
    backend=dict(type='str', default='auto', choices=['auto', 'rpc', 'nvml']),
    socket_path=dict(type='path', default=rpc.DEFAULT_SOCKET_PATH),
    timeout=dict(type='float', default=rpc.DEFAULT_TIMEOUT),
)

PROC_GPUS = '/proc/driver/nvidia/gpus'
PROC_VERSION = '/proc/driver/nvidia/version'
RUN_DIR = '/var/run/nvidia-persistenced'
# Persistence modes by the value NVML and the daemon's RPC use for them: 0 disabled, 1 enabled.
# The state file's words (gpu.state.MODES) are names only, never wire values.
WIRE_MODES = ('disabled', 'enabled')
# The PyPI name of NVML's Python bindings (import name pynvml), as modules return it in missing_library.
NVML_LIBRARY = 'nvidia-ml-py'


def mode_of_wire(value):
    """The mode name of an NVML/RPC persistence value (any true value is enabled)."""
    return WIRE_MODES[1 if value else 0]


def wire_of_mode(mode):
    """The NVML/RPC value of a mode name."""
    return WIRE_MODES.index(mode)


class GpuError(Exception):
    """A failure with a message that names the host, the GPU and the remedy."""

    def fail_json_args(self):
        """The keyword arguments of ``module.fail_json`` for this failure."""
        return dict(msg=str(self))


class MissingLibrary(GpuError):
    """The path chosen needs a Python library that the host's Python lacks.

    ``library`` is its PyPI name, ``reason`` what it is needed for and
    ``import_error`` the failed import's traceback (or None).
    """

    def __init__(self, library, reason, import_error=None):
        super(MissingLibrary, self).__init__('%s: the Python library %s is missing; it is needed %s'
                                             % (host(), library, reason))
        self.library = library
        self.reason = reason
        self.import_error = import_error

    def fail_json_args(self):
        """Ansible's standard missing-library message, and ``missing_library`` for roles to decide on."""
        return dict(msg=missing_required_lib(self.library, reason=self.reason), exception=self.import_error,
                    missing_library=self.library)


def host():
    return platform.node() or 'this host'


def describe(gpu):
    return 'GPU %s (%s, %s)' % (gpu['index'], gpu.get('uuid') or 'no UUID', gpu['pci_bus_id'])


def list_gpus(gpus):
    return ', '.join(describe(g) for g in gpus) or 'none'


# --------------------------------------------------------------------------
# The driver's /proc files
# --------------------------------------------------------------------------

def read_driver_version(path=PROC_VERSION):
    try:
        with open(path) as handle:
            match = re.search(r'Kernel Module\s+(\S+)', handle.read())
    except (IOError, OSError):
        return None
    return match.group(1) if match else None


def read_proc_gpus(proc_gpus=PROC_GPUS):
    """GPUs the kernel driver lists, in PCI bus order (NVML's index order)."""
    if not os.path.isdir(proc_gpus):
        raise GpuError('%s: the NVIDIA kernel driver is not loaded (%s is missing); install the driver '
                       'or load it with "modprobe nvidia"' % (host(), proc_gpus))
    found = []
    for entry in os.listdir(proc_gpus):
        fields = {}
        path = os.path.join(proc_gpus, entry, 'information')
        try:
            with open(path) as handle:
                for line in handle:
                    key, sep, value = line.partition(':')
                    if sep:
                        fields[key.strip()] = value.strip()
            bus = parse_pci_bus_id(fields.get('Bus Location', entry))
            minor = int(fields['Device Minor'])
        except (IOError, OSError, KeyError, ValueError) as exc:
            raise GpuError('%s: cannot read %s: %s' % (host(), path, exc))
        found.append((tuple(bus), {
            'uuid': fields.get('GPU UUID'),
            'name': fields.get('Model'),
            'pci_bus_id': bus.nvml,
            'minor': minor,
        }))
    found.sort(key=lambda item: item[0])
    gpus = []
    for index, (unused_bus, gpu) in enumerate(found):
        gpu['index'] = index
        gpus.append(gpu)
    return gpus


def daemon_identity(run_dir=RUN_DIR):
    """Which persistence daemon owns the run directory: nvidia, bundled, or none."""
    pid_path = os.path.join(run_dir, 'nvidia-persistenced.pid')
    try:
        # The run directory is the service user's: read its pid file without following a link or
        # blocking on a FIFO planted there (this runs as root).
        fd = os.open(pid_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ValueError('not a regular file')
            pid = int(os.read(fd, 64).decode('ascii', 'replace').strip() or '0')
        finally:
            os.close(fd)
        if pid <= 0:
            raise ValueError('no pid')
        with open('/proc/%d/cmdline' % pid, 'rb') as handle:
            cmdline = handle.read().replace(b'\0', b' ').decode('utf-8', 'replace')
    except (IOError, OSError, ValueError):
        return {'kind': 'none', 'pid': None}
    if 'gpufleet-persistenced' in cmdline:
        kind = 'bundled'
    elif 'nvidia-persistenced' in cmdline:
        kind = 'nvidia'
    else:
        kind = 'unknown'
    return {'kind': kind, 'pid': pid}


# --------------------------------------------------------------------------
# Selectors
# --------------------------------------------------------------------------

def resolve(gpus, selector):
    """The GPU a selector names: index, UUID, or PCI bus id (NVML or lspci form)."""
    text = str(selector).strip()
    if isinstance(selector, int) or text.isdigit():
        for gpu in gpus:
            if gpu['index'] == int(text):
                return gpu
    elif text.upper().startswith('GPU-'):
        for gpu in gpus:
            if (gpu.get('uuid') or '').lower() == text.lower():
                return gpu
    else:
        try:
            wanted = parse_pci_bus_id(text)
        except ValueError:
            raise GpuError('%s: %r is not a GPU index, UUID (GPU-...) or PCI bus id (00000000:01:00.0 or 01:00.0). '
                           'GPUs here: %s' % (host(), selector, list_gpus(gpus)))
        for gpu in gpus:
            if parse_pci_bus_id(gpu['pci_bus_id']).same_slot(wanted):
                return gpu
    raise GpuError('%s: no GPU matches %r. GPUs here: %s' % (host(), selector, list_gpus(gpus)))


def desired_modes(gpus, selected=None, mode=None, modes=None):
    """Map bus id -> wanted mode from ``gpus``+``mode`` or ``modes`` ([{gpu, mode}]).

    ``selected`` None or containing ``all`` means every GPU. The same GPU named
    twice with different modes is an error.
    """
    wanted = {}
    pairs = []
    if modes is not None:
        pairs = [(item['gpu'], item['mode']) for item in modes]
    elif selected is None or any(str(s).strip().lower() == 'all' for s in selected):
        pairs = [(g['pci_bus_id'], mode) for g in gpus]
    else:
        pairs = [(s, mode) for s in selected]
    for selector, want in pairs:
        if want not in WIRE_MODES:
            raise GpuError('%s: mode for %r must be "enabled" or "disabled", not %r' % (host(), selector, want))
        gpu = resolve(gpus, selector)
        previous = wanted.get(gpu['pci_bus_id'])
        if previous is not None and previous != want:
            raise GpuError('%s: %s is asked to be both enabled and disabled (selector %r)'
                           % (host(), describe(gpu), selector))
        wanted[gpu['pci_bus_id']] = want
    return wanted


# --------------------------------------------------------------------------
# Backends
# --------------------------------------------------------------------------

class RpcBackend(object):
    """Modes through the persistence daemon's RPC; GPUs from /proc."""

    name = 'rpc'

    def __init__(self, socket_path=rpc.DEFAULT_SOCKET_PATH, timeout=rpc.DEFAULT_TIMEOUT, proc_gpus=PROC_GPUS):
        self.socket_path = socket_path
        self.timeout = timeout
        self.proc_gpus = proc_gpus
        self.client = None

    def __enter__(self):
        self.client = rpc.PersistencedClient(self.socket_path, timeout=self.timeout)
        return self

    def __exit__(self, *exc_info):
        self.client.close()

    def gpus(self):
        return read_proc_gpus(self.proc_gpus)

    def _wrap(self, gpu, action, call):
        try:
            return call()
        except rpc.PersistencedError as exc:
            raise GpuError('%s: %s %s: %s' % (host(), action, describe(gpu), exc))

    def get_mode(self, gpu):
        mode = self._wrap(gpu, 'reading persistence mode of', lambda: self.client.get_persistence_mode(gpu['pci_bus_id']))
        return mode_of_wire(mode)

    def set_mode(self, gpu, mode):
        self._wrap(gpu, 'setting persistence mode %s on' % mode,
                   lambda: self.client.set_persistence_mode(gpu['pci_bus_id'], wire_of_mode(mode)))


# NVML error name -> what to do about it.
NVML_REMEDIES = {
    'DriverNotLoaded': 'the NVIDIA kernel driver is not loaded: install the driver or run "modprobe nvidia"',
    'LibraryNotFound': 'libnvidia-ml.so.1 was not found: install the NVIDIA driver\'s NVML library',
    'LibRmVersionMismatch': 'the NVML library and the kernel driver are different versions, usually after a driver '
                            'upgrade: reboot the host (or reload the nvidia kernel modules)',
    'NoPermission': 'changing persistence mode needs root: run the task with become: true',
    'NotSupported': 'this GPU or platform does not support persistence mode',
    'GpuIsLost': 'the GPU has fallen off the bus: check dmesg for Xid errors, then reset the GPU or reboot',
    'InsufficientPower': 'the GPU lacks power: check its power cables and the PSU',
    'Uninitialized': 'NVML was not initialised (an internal error in the caller)',
    'InUse': 'the GPU is in use by another operation: retry when it is idle',
    'FunctionNotFound': 'the installed NVML library lacks this function: update the NVIDIA driver',
    'Unknown': 'NVML reported an unknown error: see dmesg and the driver logs',
}


def nvml_error_message(exc, action, gpu=None):
    # pynvml raises one subclass per error code, named NVMLError_<Name>.
    cls = type(exc).__name__
    name = cls[len('NVMLError_'):] if cls.startswith('NVMLError_') else None
    remedy = NVML_REMEDIES.get(name, 'see the NVIDIA driver logs')
    where = (' ' + describe(gpu)) if gpu else ''
    return '%s: %s%s failed: %s (NVML %s): %s' % (host(), action, where, exc, name or type(exc).__name__, remedy)


def _text(value):
    return value.decode('utf-8', 'replace') if isinstance(value, bytes) else value


class NvmlBackend(object):
    """GPUs and modes through NVML (pynvml); sets use the legacy kernel path."""

    name = 'nvml'

    def __init__(self, pynvml):
        self.pynvml = pynvml
        self.handles = {}

    def _call(self, action, fn, *args, **kwargs):
        gpu = kwargs.pop('gpu', None)
        try:
            return fn(*args)
        except self.pynvml.NVMLError as exc:
            raise GpuError(nvml_error_message(exc, action, gpu))

    def __enter__(self):
        self._call('initialising NVML', self.pynvml.nvmlInit)
        return self

    def __exit__(self, *exc_info):
        try:
            self.pynvml.nvmlShutdown()
        except self.pynvml.NVMLError:
            pass

    def gpus(self):
        nv = self.pynvml
        gpus = []
        for index in range(self._call('counting GPUs', nv.nvmlDeviceGetCount)):
            handle = self._call('opening GPU %d' % index, nv.nvmlDeviceGetHandleByIndex, index)
            stub = {'index': index, 'uuid': None, 'pci_bus_id': '?'}
            pci = self._call('reading the PCI address of', nv.nvmlDeviceGetPciInfo, handle, gpu=stub)
            stub['pci_bus_id'] = parse_pci_bus_id(_text(pci.busId)).nvml
            stub['uuid'] = _text(self._call('reading the UUID of', nv.nvmlDeviceGetUUID, handle, gpu=stub))
            stub['name'] = _text(self._call('reading the name of', nv.nvmlDeviceGetName, handle, gpu=stub))
            stub['minor'] = self._call('reading the minor number of', nv.nvmlDeviceGetMinorNumber, handle, gpu=stub)
            self.handles[stub['pci_bus_id']] = handle
            gpus.append(stub)
        return gpus

    def get_mode(self, gpu):
        value = self._call('reading persistence mode of', self.pynvml.nvmlDeviceGetPersistenceMode,
                           self.handles[gpu['pci_bus_id']], gpu=gpu)
        return mode_of_wire(value)

    def set_mode(self, gpu, mode):
        self._call('setting persistence mode %s on' % mode, self.pynvml.nvmlDeviceSetPersistenceMode,
                   self.handles[gpu['pci_bus_id']], wire_of_mode(mode), gpu=gpu)


def daemon_answers(socket_path, timeout):
    """True when a persistence daemon answers NULL on ``socket_path``."""
    if not os.path.exists(socket_path):
        return False
    try:
        with rpc.PersistencedClient(socket_path, timeout=timeout) as client:
            client.null()
    except rpc.PersistencedError:
        return False
    return True


def open_backend(params, purpose):
    """choose_backend() with a module's access options (ACCESS_ARGUMENT_SPEC).

    ``purpose`` says what NVML would be needed for ("to read GPUs through NVML").
    Raises MissingLibrary when NVML is needed and pynvml is missing, GpuError on
    any other failure.
    """
    return choose_backend(params['backend'], params['socket_path'], params['timeout'], purpose=purpose)


# NVML's Python bindings the collection put on the host (gpu_persistence_nvml_wheel): a wheel of nvidia-ml-py from the
# site's own index, copied by the gpu_persistence role into this root-only directory and imported from the wheel
# itself (a pure-Python wheel is a zip Python imports from). Never pip into the host's Python: PEP 668 refuses it on
# Debian 12 and Ubuntu 24.04, and air-gapped sites reach no index.
NVML_WHEEL_DIR = '/usr/lib/gpufleet/python'
NVML_WHEEL = re.compile(r'\Anvidia_ml_py-[0-9][0-9A-Za-z.+_-]*-py3-none-any\.whl\Z')


def collection_wheel(directory=NVML_WHEEL_DIR):
    """The newest nvidia-ml-py wheel in ``directory``, or None where there is none; HostFileError naming the path
    when the directory or the wheel is not root's alone (code from it runs as root)."""
    try:
        names = sorted(name for name in os.listdir(directory) if NVML_WHEEL.match(name))
    except OSError:
        return None
    if not names:
        return None
    real = paths.resolve_path(os.path.join(directory, names[-1]), reader='every module that reads the GPUs')
    st = os.lstat(real)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        paths.refuse(real, 'the NVML bindings', 'is not a regular file of root\'s that only root can write (uid %d, '
                     'mode %04o)' % (st.st_uid, stat.S_IMODE(st.st_mode)),
                     'Remove it, or copy it again as root with mode 0644 (gpu_persistence_nvml_wheel).',
                     'every module that reads the GPUs')
    return real


def load_pynvml(wheel_dir=NVML_WHEEL_DIR):
    """The pynvml module, imported on the first call: the host Python's own nvidia-ml-py, else the wheel the
    collection put on the host (``collection_wheel``); ImportError (its traceback in ``PYNVML_IMPORT_ERROR``) where
    there is neither. A wheel that is not root's alone is an ImportError saying so (HostFileError's message)."""
    global pynvml, PYNVML_IMPORT_ERROR  # pylint: disable=global-statement
    if pynvml is None and PYNVML_IMPORT_ERROR is None:
        try:
            import pynvml as module  # pylint: disable=import-outside-toplevel
        except ImportError:
            PYNVML_IMPORT_ERROR = traceback.format_exc()
            try:
                wheel = collection_wheel(wheel_dir)
            except HostFileError as exc:
                PYNVML_IMPORT_ERROR = str(exc)
                wheel = None
            if wheel is not None:
                sys.path.insert(0, wheel)
                try:
                    import pynvml as module  # pylint: disable=import-outside-toplevel,reimported
                except ImportError:
                    PYNVML_IMPORT_ERROR = '%s: not a wheel of nvidia-ml-py Python can import pynvml from: %s' % (
                        wheel, traceback.format_exc())
                    sys.path.remove(wheel)
                else:
                    pynvml, PYNVML_IMPORT_ERROR = module, None
        else:
            pynvml = module
    if pynvml is None:
        raise ImportError(PYNVML_IMPORT_ERROR)
    return pynvml


def driver_loaded(proc_version=PROC_VERSION, proc_gpus=PROC_GPUS):
    """Whether the NVIDIA kernel driver is loaded here (its /proc/driver/nvidia entries exist)."""
    return os.path.exists(proc_version) or os.path.isdir(proc_gpus)


def choose_backend(backend, socket_path, timeout, load_pynvml=load_pynvml, purpose='to use NVML', loaded=None):
    """The backend to use: ``rpc`` when a daemon answers (``auto``), else ``nvml``.

    ``load_pynvml()`` returns the pynvml module or raises ImportError, which
    becomes MissingLibrary(NVML_LIBRARY) with ``purpose`` in its reason; on a host with no NVIDIA driver loaded,
    a GpuError saying that first (no library would help there); ``loaded``: whether it is (``driver_loaded()``).
    Returns ``(backend, daemon_answers)``.
    """
    answers = daemon_answers(socket_path, timeout)
    if backend == 'rpc' or (backend == 'auto' and answers):
        if not answers:
            raise GpuError('%s: no persistence daemon answers on %s: start nvidia-persistenced (or deploy it with '
                           'gpufleet.nvidia.persistenced), or use backend=nvml' % (host(), socket_path))
        return RpcBackend(socket_path, timeout), answers
    try:
        pynvml = load_pynvml()
    except ImportError:
        if not (loaded() if loaded else driver_loaded()):
            raise GpuError('%s: no NVIDIA driver is loaded on this host (%s is missing), and no persistence daemon '
                           'answers on %s: install the NVIDIA driver and load it ("modprobe nvidia"). NVML is needed '
                           '%s; its Python library (nvidia-ml-py) is missing too.'
                           % (host(), PROC_VERSION, socket_path, purpose))
        raise MissingLibrary(NVML_LIBRARY, '%s when no persistence daemon answers on %s' % (purpose, socket_path),
                             PYNVML_IMPORT_ERROR)
    return NvmlBackend(pynvml), answers


def converge(backend, selected=None, mode=None, modes=None, check_mode=False):
    """Bring the selected GPUs to their wanted modes, changing only those that differ.

    Returns ``(gpus, report)``: every GPU, and per selected GPU a dict with
    ``before``/``after``/``changed``. On a failed set or a read-back that
    disagrees, GPUs already changed are set back and GpuError is raised.
    """
    gpus = backend.gpus()
    wanted = desired_modes(gpus, selected, mode, modes)
    report = []
    for gpu in gpus:
        if gpu['pci_bus_id'] not in wanted:
            continue
        before = backend.get_mode(gpu)
        after = wanted[gpu['pci_bus_id']]
        entry = dict(gpu)
        entry.update(before=before, after=after, changed=before != after)
        report.append(entry)
    if check_mode:
        return gpus, report
    done = []
    try:
        for entry in report:
            if entry['changed']:
                backend.set_mode(entry, entry['after'])
                done.append(entry)
        for entry in done:
            now = backend.get_mode(entry)
            if now != entry['after']:
                raise GpuError('%s: %s still reads %s after being set %s; see the persistence daemon\'s syslog'
                               % (host(), describe(entry), now, entry['after']))
    except GpuError as exc:
        undone = []
        for entry in reversed(done):
            try:
                backend.set_mode(entry, entry['before'])
                undone.append(describe(entry))
            except GpuError:
                pass
        message = str(exc)
        if undone:
            message += ' (set back: %s)' % ', '.join(undone)
        raise GpuError(message)
    return gpus, report
