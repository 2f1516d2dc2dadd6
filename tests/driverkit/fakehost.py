#!/usr/bin/env python3
"""Fake NVIDIA GPU hosts for tests: lay out a host tree and run commands in it.

Library (import ``fakehost`` with ``tests/driverkit`` on ``sys.path``) and CLI.
The public API, which tests/lab/ reuses for its hosts:

``layout(host_dir, description, *, with_libs=True) -> HostTree``
    Create (or refresh) a fake host tree in ``host_dir``::

        proc/driver/nvidia/version
        proc/driver/nvidia/gpus/<bdf>/information     "Device Minor: N" etc.
        proc/driver/nvidia/gpufleet-fakedriver/host.json    the description
        proc/driver/nvidia/gpufleet-fakedriver/cfg.log      libnvidia-cfg opens/closes
        proc/driver/nvidia/gpufleet-fakedriver/persistence  legacy per-GPU flag
        proc/driver/nvidia/gpufleet-fakedriver/kmsg         driver "kernel log"
        proc/driver/nvidia/gpufleet-fakedriver/stand-in/nvidia<minor>
                                             regular files the preloaded stand-in
                                             binds over /dev/nvidiaN for persistence daemons
        proc/devices                         this kernel's list plus the driver's majors
        dev/nvidia<minor>, nvidiactl, nvidia-modeset   character devices 195:minor, 195:255, 195:254
        dev/nvidia-uvm, nvidia-uvm-tools     character devices UVM_MAJOR:0, :1; all mode 0666
        dev/{null,zero,full,random,urandom,tty}, dev/{pts,shm}/  mount points
        sys/bus/pci/drivers/nvidia/<bdf>/numa_node
        run/                                 becomes /run (so /var/run)
        lib/libnvidia-cfg.so.1               the fake libnvidia-cfg
        lib/libnvidia-ml.so.<version>, lib/libcuda.so.<version>   fake NVML, stub libcuda
        lib/libnvidia-ml.so.1, lib/libcuda.so.1   links to them, as ldconfig makes

    No kernel driver answers the device nodes: opening one fails with ENXIO.

    Inside the host the description is at ``DESCRIPTION_PATH``; the fake
    libraries read it on every call, so ``write_description`` changes a
    running host (error injection). ``host_dir`` must be short: the syslog
    socket ``<host_dir>/dev/log`` must fit in 107 bytes.

``ld_cache(host_dir) -> path``
    Write the tree's etc/ld.so.cache (this machine's libraries plus lib/),
    which nsrun binds over /etc/ld.so.cache from then on (NVIDIA's container
    toolkit finds the driver's libraries through the cache).

``nsrun_argv(host_dir, argv) -> list`` / ``nsrun(host_dir, argv, **popen)``
    Run ``argv`` in a private mount namespace where the tree's proc/driver,
    dev (with the real null, zero, full, random, urandom, tty, pts, shm bound
    back in), proc/devices, run and sys/bus/pci/drivers are bind-mounted over
    the real paths (and etc/ld.so.cache over /etc/ld.so.cache once
    ``ld_cache`` made it), with ``LD_LIBRARY_PATH`` starting with the tree's
    lib/ and the kit's stand-in preloaded (``STANDIN_LIB``). Needs root.

``persistenced_argv(host_dir, *options, keep_sigpipe=False, nvidia="nvidia535") -> list``
    NVIDIA's nvidia-persistenced under the NUMA seccomp wrapper, with
    ``--nvidia-cfg-path`` pointing at the tree's lib/. Wrap it in nsrun_argv.
    ``nvidia`` names one of ``NVIDIA_DAEMONS``, both fetched by
    tests/driverkit/setup: ``nvidia535`` (Debian 12's 535.171.04 build) or
    ``nvidia550`` (Debian 13's 550 build).

``SyslogCapture(host_dir)``: a /dev/log listener (thread) writing every
    message to ``<host_dir>/syslog.log``.

``held_gpus(host_dir) -> set``: bus ids the fake libnvidia-cfg holds open.

``daemon_pid(host_dir)``, ``pid_alive(pid)``, ``wait_gone(pid, timeout)``:
    find and wait for the daemon (it forks, so it is nobody's child);
    ``stop_pids(pids)`` stops them (SIGTERM, then SIGKILL) and names the stubborn.

For the test suites on fake hosts (tests/kit, tests/daemon, tests/security and
the benchmark; tests/driverkit/pytest_fakehost.py holds their fixtures):
``TempHost(gpus=2, description=None)`` a host in a new short /tmp dir with
its syslog captured, which ``close()`` stops and removes;
``missing_prerequisites(...)`` what the machine lacks for a suite;
``use_collection()`` puts the built collection (``COLLECTIONS_DIR``) on
``sys.path``; ``python38()``; ``SYSTEM_PYTHON``.

The description (JSON)::

    {"driver_version": "535.171.04",
     "gpus": [{"name": "NVIDIA A100-SXM4-80GB",
               "uuid": "GPU-…", "pci_bus_id": "0000:01:00.0", "minor": 0,
               "persistence_mode": 0,           # initial legacy flag
               "errors": {"get_persistence": "gpu_is_lost"}}],
     "errors": {"init": "driver_not_loaded"}}

Error ops: host-wide ``init``, ``count``, ``cfg_enumerate``; per GPU or
host-wide ``any``, ``handle``, ``name``, ``uuid``, ``index``, ``minor``,
``pci_info``, ``get_persistence``, ``set_persistence``, ``cfg_open``. Values:
an NVML error name (``driver_not_loaded``, ``no_permission``,
``not_supported``, ``gpu_is_lost``, ``lib_rm_version_mismatch``,
``insufficient_power``, ``in_use``, ``unknown``, …) or a number.
"""

import argparse
import ctypes
import glob
import json
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time

KIT_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(os.path.dirname(KIT_DIR))
COLLECTIONS_DIR = os.path.join(REPO_DIR, ".build", "collections")
# Debian's python3: any user can run it (the test venv lives under /root, which others cannot enter).
SYSTEM_PYTHON = "/usr/bin/python3"
CACHE_DIR = os.environ.get("GPUFLEET_DRIVERKIT_CACHE",
                           os.path.join(REPO_DIR, ".cache", "driverkit"))
BUILD_LIB_DIR = os.path.join(CACHE_DIR, "build", "lib")
NUMA_SECCOMP = os.path.join(CACHE_DIR, "build", "bin", "numa-seccomp")
# NVIDIA's daemons the kit runs, by the name tests parametrize on: Debian 12 contrib's 535 build and
# Debian 13 (trixie) contrib's 550 build, each unpacked into its own root by tests/driverkit/setup.
NVIDIA_DAEMONS = {
    "nvidia535": os.path.join(CACHE_DIR, "root", "usr", "bin", "nvidia-persistenced"),
    "nvidia550": os.path.join(CACHE_DIR, "root550", "usr", "bin", "nvidia-persistenced"),
}
# Where they differ, measured on the kit (tests/driverkit/README.md, "535 and 550"):
# socket_mode: Debian builds 535.216.01-2 and later bind the socket under umask 0002 (Debian bug
#   1092449), so trixie's 550 socket is 0775 and only root, its user and group can connect;
# needs_driver_sysfs: 535 fails to start without /sys/bus/pci/drivers/nvidia/ (its NUMA auto-online
#   scan), 550 no longer looks; uvm_option: 550 knows --[no-]uvm-persistence-mode (535: unrecognized).
NVIDIA_TRAITS = {
    "nvidia535": {"major": 535, "socket_mode": 0o777, "needs_driver_sysfs": True, "uvm_option": False},
    "nvidia550": {"major": 550, "socket_mode": 0o775, "needs_driver_sysfs": False, "uvm_option": True},
}
REAL_NVML_DIR = os.path.join(CACHE_DIR, "root", "usr", "lib", "x86_64-linux-gnu",
                             "nvidia", "current")

DESCRIPTION_PATH = "/proc/driver/nvidia/gpufleet-fakedriver/host.json"
FAKEDRIVER_DIR = "proc/driver/nvidia/gpufleet-fakedriver"
PERSISTENCED_RUN_DIR = "/var/run/nvidia-persistenced"
PERSISTENCED_SOCKET = PERSISTENCED_RUN_DIR + "/socket"
PERSISTENCED_PID_FILE = PERSISTENCED_RUN_DIR + "/nvidia-persistenced.pid"
FAKE_LIBS = ("libnvidia-cfg.so.1", "libnvidia-ml.so.1", "libcuda.so.1")
# Built libraries a driver installs under its version (libX.so.<version>, with a libX.so.1 link).
VERSIONED_LIBS = ("libnvidia-ml.so.1", "libcuda.so.1")
STANDIN_LIB = os.path.join(BUILD_LIB_DIR, "libgpufleet-standin.so")
STANDIN_DIR = FAKEDRIVER_DIR + "/stand-in"
# Character devices of a loaded NVIDIA driver: the GPU major (nvidia0..N-1 at their minors, nvidiactl,
# nvidia-modeset) is fixed; nvidia-uvm gets a dynamic one (UVM_MAJOR when this kernel has it free).
NVIDIA_MAJOR = 195
CTL_MINOR = 255
MODESET_MINOR = 254
UVM_MAJOR = 510
PROC_DEVICES = "/proc/devices"
DEV_PASSTHROUGH_FILES = ("null", "zero", "full", "random", "urandom", "tty")
DEV_PASSTHROUGH_DIRS = ("pts", "shm")
SUN_PATH_MAX = 107

SETUP_HINT = "run tests/driverkit/setup first"


class KitError(Exception):
    """The kit is not built or a host tree is unusable; the message says why."""


def example_description(gpus=2, driver_version="535.171.04"):
    """A description with ``gpus`` A100s at buses 01, 02, … (minors 0, 1, …)."""
    return {
        "driver_version": driver_version,
        "gpus": [
            {
                "name": "NVIDIA A100-SXM4-80GB",
                "uuid": "GPU-%08x-1111-2222-3333-%012x" % (0xA100 + i, i),
                "pci_bus_id": "0000:%02x:00.0" % (i + 1),
                "minor": i,
            }
            for i in range(gpus)
        ],
        "errors": {},
    }


def normalize_bus_id(bus_id):
    """``0000:01:00.0`` form (lower case) of a bus id in any usual form."""
    text = bus_id.strip().lower()
    parts = text.split(":")
    if len(parts) == 2:
        parts.insert(0, "0")
    if len(parts) != 3 or "." not in parts[2]:
        raise ValueError("not a PCI bus id: %r" % bus_id)
    slot, function = parts[2].split(".", 1)
    return "%04x:%02x:%02x.%x" % (int(parts[0], 16), int(parts[1], 16),
                                  int(slot, 16), int(function, 16))


class HostTree:
    """Paths of one fake host tree (outside the namespace)."""

    def __init__(self, host_dir):
        self.root = os.path.abspath(host_dir)

    def path(self, inner):
        """Where ``inner`` (an absolute path inside the host) lies in the tree."""
        inner = inner.lstrip("/")
        if inner.startswith("var/run/"):
            inner = inner[len("var/"):]
        return os.path.join(self.root, inner)

    @property
    def description_file(self):
        return self.path(DESCRIPTION_PATH)

    @property
    def cfg_log(self):
        return self.path("/" + FAKEDRIVER_DIR + "/cfg.log")

    @property
    def legacy_file(self):
        return self.path("/" + FAKEDRIVER_DIR + "/persistence")

    @property
    def kmsg(self):
        return self.path("/" + FAKEDRIVER_DIR + "/kmsg")

    @property
    def lib_dir(self):
        return os.path.join(self.root, "lib")

    @property
    def devices_file(self):
        return self.path(PROC_DEVICES)

    @property
    def ld_cache(self):
        return os.path.join(self.root, "etc", "ld.so.cache")

    def stand_in(self, node):
        """The regular file that stands in for ``/dev/<node>`` in a persistence daemon's view."""
        return self.path("/%s/%s" % (STANDIN_DIR, node))

    @property
    def syslog_socket(self):
        return os.path.join(self.root, "dev", "log")

    @property
    def syslog_file(self):
        return os.path.join(self.root, "syslog.log")

    @property
    def run_dir(self):
        return self.path(PERSISTENCED_RUN_DIR)

    @property
    def socket(self):
        return self.path(PERSISTENCED_SOCKET)

    @property
    def pid_file(self):
        return self.path(PERSISTENCED_PID_FILE)


def _write(path, text, mode=0o644):
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        handle.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _information(gpu):
    return (
        "Model: \t\t %s\n"
        "IRQ:   \t\t 0\n"
        "GPU UUID: \t %s\n"
        "Video BIOS: \t 92.00.45.00.03\n"
        "Bus Type: \t PCIe\n"
        "DMA Size: \t 47 bits\n"
        "DMA Mask: \t 0x7fffffffffff\n"
        "Bus Location: \t %s\n"
        "Device Minor: \t %d\n"
        "GPU Excluded:\t No\n"
    ) % (gpu["name"], gpu["uuid"], normalize_bus_id(gpu["pci_bus_id"]), gpu["minor"])


def validate_description(description):
    """Fill defaults and check the description; returns a normalised copy."""
    desc = json.loads(json.dumps(description))
    desc.setdefault("driver_version", "535.171.04")
    desc.setdefault("errors", {})
    seen = set()
    for index, gpu in enumerate(desc.setdefault("gpus", [])):
        if "pci_bus_id" not in gpu:
            raise KitError("gpus[%d] has no pci_bus_id" % index)
        gpu["pci_bus_id"] = normalize_bus_id(gpu["pci_bus_id"])
        if gpu["pci_bus_id"] in seen:
            raise KitError("two GPUs at %s" % gpu["pci_bus_id"])
        seen.add(gpu["pci_bus_id"])
        gpu.setdefault("name", "NVIDIA A100-SXM4-80GB")
        gpu.setdefault("uuid", "GPU-%08x-0000-0000-0000-%012x" % (index, index))
        gpu.setdefault("minor", index)
    return desc


def gpu_device_name(driver_version):
    """The GPU major's name in /proc/devices: "nvidia" from driver 550.40, "nvidia-frontend" before."""
    try:
        numbers = tuple(int(part) for part in driver_version.split(".")[:2])
    except ValueError:
        return "nvidia"
    return "nvidia" if numbers >= (550, 40) else "nvidia-frontend"


def _kernel_devices(path=PROC_DEVICES):
    """(character, block) lists of (major, name) of this kernel, without NVIDIA's."""
    sections = {"Character devices:": [], "Block devices:": []}
    current = None
    with open(path) as handle:
        for line in handle:
            text = line.strip()
            if text in sections:
                current = sections[text]
            elif text and current is not None:
                major, name = text.split(None, 1)
                if not name.startswith("nvidia"):
                    current.append((int(major), name))
    return sections["Character devices:"], sections["Block devices:"]


def uvm_major(char_devices):
    """The dynamic major nvidia-uvm gets: UVM_MAJOR, or the next free one below it."""
    taken = {major for major, _ in char_devices}
    major = UVM_MAJOR
    while major in taken:
        major -= 1
    return major


def proc_devices(driver_version, source=PROC_DEVICES):
    """(text, uvm major): ``source`` (this kernel's /proc/devices) with the driver's majors added."""
    chars, blocks = _kernel_devices(source)
    uvm = uvm_major(chars)
    chars = sorted(chars + [(NVIDIA_MAJOR, gpu_device_name(driver_version)), (uvm, "nvidia-uvm")])
    text = "Character devices:\n" + "".join("%3d %s\n" % entry for entry in chars)
    text += "\nBlock devices:\n" + "".join("%3d %s\n" % entry for entry in blocks)
    return text, uvm


def _mknod(path, major, minor):
    if os.path.lexists(path):
        os.unlink(path)
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    os.chmod(path, 0o666)


def _link(target, path):
    if os.path.lexists(path):
        os.unlink(path)
    os.symlink(target, path)


def write_description(host_dir, description):
    """Replace a laid-out host's description (atomically); returns it normalised."""
    tree = HostTree(host_dir)
    desc = validate_description(description)
    _write(tree.description_file, json.dumps(desc, indent=2) + "\n")
    return desc


def read_description(host_dir):
    with open(HostTree(host_dir).description_file) as handle:
        return json.load(handle)


def layout(host_dir, description, with_libs=True):
    """Create or refresh the fake host tree in ``host_dir`` (see module doc)."""
    tree = HostTree(host_dir)
    desc = validate_description(description)
    if len(tree.syslog_socket.encode()) > SUN_PATH_MAX:
        raise KitError("host dir %s is too long for unix sockets in it; use a short "
                       "temporary dir (e.g. tempfile.mkdtemp(dir='/tmp'))" % tree.root)
    os.makedirs(tree.root, exist_ok=True)
    os.chmod(tree.root, 0o755)  # the daemon may run as --user nobody
    nvidia = tree.path("/proc/driver/nvidia")
    gpus_dir = os.path.join(nvidia, "gpus")
    if os.path.isdir(gpus_dir):
        shutil.rmtree(gpus_dir)
    for sub in (gpus_dir, tree.path("/" + FAKEDRIVER_DIR), tree.path("/" + STANDIN_DIR), tree.path("/dev/pts"),
                tree.path("/dev/shm"), tree.path("/sys/bus/pci/drivers/nvidia"),
                tree.path("/run"), tree.lib_dir):
        os.makedirs(sub, mode=0o755, exist_ok=True)
    _write(os.path.join(nvidia, "version"),
           "NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  (gpufleet fake driver)\n"
           "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n" % desc["driver_version"])
    drivers = tree.path("/sys/bus/pci/drivers/nvidia")
    for name in os.listdir(drivers):
        shutil.rmtree(os.path.join(drivers, name))
    for dev in os.listdir(tree.path("/dev")):
        if dev.startswith("nvidia"):
            os.unlink(tree.path("/dev/" + dev))
    for name in os.listdir(tree.path("/" + STANDIN_DIR)):
        os.unlink(tree.stand_in(name))
    devices_text, uvm = proc_devices(desc["driver_version"])
    _write(tree.devices_file, devices_text, 0o444)
    for gpu in desc["gpus"]:
        bdf = gpu["pci_bus_id"]
        os.makedirs(os.path.join(gpus_dir, bdf))
        _write(os.path.join(gpus_dir, bdf, "information"), _information(gpu))
        os.makedirs(os.path.join(drivers, bdf))
        _write(os.path.join(drivers, bdf, "numa_node"), "-1\n")
        _mknod(tree.path("/dev/nvidia%d" % gpu["minor"]), NVIDIA_MAJOR, gpu["minor"])
        _write(tree.stand_in("nvidia%d" % gpu["minor"]), "", 0o666)
    for name, major, minor in (("nvidiactl", NVIDIA_MAJOR, CTL_MINOR),
                               ("nvidia-modeset", NVIDIA_MAJOR, MODESET_MINOR),
                               ("nvidia-uvm", uvm, 0), ("nvidia-uvm-tools", uvm, 1)):
        _mknod(tree.path("/dev/" + name), major, minor)
    for name in DEV_PASSTHROUGH_FILES:
        if not os.path.exists(tree.path("/dev/" + name)):
            _write(tree.path("/dev/" + name), "", 0o666)
    for name, mode in (("cfg.log", 0o666), ("kmsg", 0o666)):
        path = tree.path("/%s/%s" % (FAKEDRIVER_DIR, name))
        if not os.path.exists(path):
            _write(path, "", mode)
        os.chmod(path, mode)
    _write(tree.legacy_file, "".join(
        "%s %d\n" % (gpu["pci_bus_id"], int(gpu.get("persistence_mode", 0)))
        for gpu in desc["gpus"]))
    write_description(tree.root, desc)
    if with_libs:
        for name in os.listdir(tree.lib_dir):
            os.unlink(os.path.join(tree.lib_dir, name))
        for lib in FAKE_LIBS:
            built = os.path.join(BUILD_LIB_DIR, lib)
            if not os.path.exists(built):
                raise KitError("%s is not built: %s" % (built, SETUP_HINT))
            if lib in VERSIONED_LIBS:
                versioned = lib[:-len("1")] + desc["driver_version"]
                shutil.copy2(built, os.path.join(tree.lib_dir, versioned))
                _link(versioned, os.path.join(tree.lib_dir, lib))
            else:
                shutil.copy2(built, os.path.join(tree.lib_dir, lib))
    return tree


def ld_cache(host_dir):
    """Write the tree's etc/ld.so.cache: this machine's libraries plus the tree's lib/ (ldconfig), as a
    driver's installer leaves the cache; ``nsrun`` binds it over /etc/ld.so.cache from then on."""
    tree = HostTree(host_dir)
    os.makedirs(os.path.dirname(tree.ld_cache), exist_ok=True)
    subprocess.run(["ldconfig", "-X", "-C", tree.ld_cache, tree.lib_dir], check=True)
    return tree.ld_cache


def held_gpus(host_dir):
    """Bus ids the fake libnvidia-cfg currently holds open (from cfg.log)."""
    held = {}
    with open(HostTree(host_dir).cfg_log) as handle:
        for line in handle:
            fields = line.split()
            if len(fields) >= 2 and fields[0] in ("open", "close"):
                held[fields[1]] = held.get(fields[1], 0) + (1 if fields[0] == "open" else -1)
    return {bdf for bdf, count in held.items() if count > 0}


def pid_alive(pid):
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open("/proc/%d/status" % pid) as handle:
            for line in handle:
                if line.startswith("State:"):
                    return "Z" not in line.split()[1]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return True


def wait_gone(pid, timeout=30.0):
    """Wait until ``pid`` (not necessarily our child: the daemon forks) is gone."""
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def daemon_pid(host_dir):
    """The pid in the host's nvidia-persistenced.pid, or None."""
    try:
        with open(HostTree(host_dir).pid_file) as handle:
            return int(handle.read().split()[0])
    except (FileNotFoundError, IndexError, ValueError):
        return None


def stop_pids(pids, timeout=5):
    """SIGTERM each live pid, SIGKILL the ones still there after ``timeout``; returns those."""
    stubborn = []
    for pid in pids:
        if pid_alive(pid):
            os.kill(pid, signal.SIGTERM)
            if not wait_gone(pid, timeout=timeout):
                stubborn.append(pid)
                os.kill(pid, signal.SIGKILL)
                wait_gone(pid)
    return stubborn


# ---- running commands inside a host ---------------------------------------

MS_RDONLY = 1
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18


def _mount_bind(source, target, recursive=False):
    libc = ctypes.CDLL(None, use_errno=True)
    flags = MS_BIND | (MS_REC if recursive else 0)
    if libc.mount(source.encode(), target.encode(), None, flags, None) != 0:
        err = ctypes.get_errno()
        raise KitError("bind mount %s on %s failed: %s" % (source, target, os.strerror(err)))


def _enter(host_dir, argv):
    """In a fresh private mount namespace: mount the host over / and exec argv."""
    tree = HostTree(host_dir)
    if not os.path.isfile(tree.description_file):
        raise KitError("%s is not a laid-out fake host (no %s)" % (host_dir, tree.description_file))
    for name in DEV_PASSTHROUGH_FILES + DEV_PASSTHROUGH_DIRS:
        if os.path.exists("/dev/" + name):
            _mount_bind("/dev/" + name, tree.path("/dev/" + name))
    _mount_bind(tree.path("/dev"), "/dev", recursive=True)
    if not os.path.isdir("/proc/driver"):
        raise KitError("/proc/driver does not exist on this kernel; cannot mount the fake driver")
    _mount_bind(tree.path("/proc/driver"), "/proc/driver")
    _mount_bind(tree.devices_file, PROC_DEVICES)
    if os.path.isfile(tree.ld_cache):
        _mount_bind(tree.ld_cache, "/etc/ld.so.cache")
    _mount_bind(tree.path("/run"), "/run")
    _mount_bind(tree.path("/sys/bus/pci/drivers"), "/sys/bus/pci/drivers")
    env = dict(os.environ)
    env.pop("GPUFLEET_FAKEDRIVER_ROOT", None)
    env.pop("GPUFLEET_FAKEDRIVER_DESCRIPTION", None)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (tree.lib_dir, env.get("LD_LIBRARY_PATH")) if p)
    if os.path.isfile(STANDIN_LIB):
        env["LD_PRELOAD"] = " ".join(p for p in (STANDIN_LIB, env.get("LD_PRELOAD")) if p)
    # Python ignores SIGPIPE and SIGXFSZ; give the command the defaults.
    for name in ("SIGPIPE", "SIGXFSZ"):
        signal.signal(getattr(signal, name), signal.SIG_DFL)
    os.execvpe(argv[0], argv, env)


def nsrun_argv(host_dir, argv):
    """argv that runs ``argv`` inside the fake host ``host_dir`` (needs root)."""
    return ["unshare", "--mount", "--propagation", "private", "--",
            sys.executable, os.path.abspath(__file__), "_enter",
            os.path.abspath(host_dir), "--"] + list(argv)


def nsrun(host_dir, argv, **popen_kwargs):
    """``subprocess.run`` of ``argv`` inside the fake host."""
    return subprocess.run(nsrun_argv(host_dir, argv), **popen_kwargs)


def persistenced_argv(host_dir, *options, keep_sigpipe=False, nvidia="nvidia535"):
    """NVIDIA's nvidia-persistenced ``nvidia`` (a key of NVIDIA_DAEMONS) with the fake libnvidia-cfg
    of ``host_dir``."""
    if nvidia not in NVIDIA_DAEMONS:
        raise KitError("no NVIDIA daemon %r in the kit (known: %s)" % (nvidia, ", ".join(sorted(NVIDIA_DAEMONS))))
    for path in (NUMA_SECCOMP, NVIDIA_DAEMONS[nvidia]):
        if not os.access(path, os.X_OK):
            raise KitError("%s is missing: %s" % (path, SETUP_HINT))
    wrapper = [NUMA_SECCOMP] + (["--keep-sigpipe"] if keep_sigpipe else []) + ["--"]
    return wrapper + [NVIDIA_DAEMONS[nvidia], "--nvidia-cfg-path",
                      HostTree(host_dir).lib_dir] + list(options)


class SyslogCapture:
    """A /dev/log (AF_UNIX datagram) listener for the host, in a thread.

    Writes each message as one line to ``<host_dir>/syslog.log`` (``lines()``
    reads them back). Use as a context manager or call ``close()``.
    """

    def __init__(self, host_dir, path=None):
        tree = HostTree(host_dir)
        self.socket_path = path or tree.syslog_socket
        self.file = tree.syslog_file
        if os.path.lexists(self.socket_path):
            os.unlink(self.socket_path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(self.socket_path)
        os.chmod(self.socket_path, 0o666)
        self._sock.settimeout(0.1)
        self._stop = threading.Event()
        self._out = open(self.file, "a", buffering=1)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._stop.is_set():
            try:
                data = self._sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                break
            self._out.write(data.decode("utf-8", "replace").rstrip("\n\0") + "\n")

    def lines(self):
        with open(self.file) as handle:
            return handle.read().splitlines()

    def wait_for(self, text, timeout=30.0):
        """Wait until a captured line contains ``text`` (the capture is a thread)."""
        deadline = time.monotonic() + timeout
        while True:
            lines = self.lines()
            if any(text in line for line in lines):
                return
            if time.monotonic() > deadline:
                raise AssertionError("no syslog line with %r in %d lines; the last 20: %r"
                                     % (text, len(lines), lines[-20:]))
            time.sleep(0.02)

    def close(self):
        self._stop.set()
        self._thread.join()
        self._sock.close()
        self._out.close()
        if os.path.lexists(self.socket_path):
            os.unlink(self.socket_path)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---- for the test suites ------------------------------------------------------

class TempHost:
    """A fake host laid out in a new short dir in /tmp, with its syslog captured.

    ``close()`` stops every daemon ``started_pids()`` names (by pid: they fork),
    removes the dir and returns the pids that ignored SIGTERM. Suites subclass
    it with their own ways of starting daemons.
    """

    prefix = "gfh"

    def __init__(self, gpus=2, description=None):
        self.dir = tempfile.mkdtemp(prefix=self.prefix, dir="/tmp")
        self.tree = layout(self.dir, description or example_description(gpus))
        self.syslog = SyslogCapture(self.dir)

    def started_pids(self):
        """Pids of the daemons started on this host that ``close`` must stop."""
        return []

    def wait_log(self, text, timeout=30.0):
        self.syslog.wait_for(text, timeout)

    def close(self):
        stubborn = stop_pids(self.started_pids())
        self.syslog.close()
        shutil.rmtree(self.dir)
        return stubborn


def use_collection():
    """Put the built collection (``scripts/test build``'s symlink tree) first on sys.path."""
    if COLLECTIONS_DIR not in sys.path:
        sys.path.insert(0, COLLECTIONS_DIR)


def python38():
    """pyenv's Python 3.8 (the oldest managed-host Python), or None."""
    found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8")))
    return found[0] if found else None


def missing_prerequisites(kit=True, nvidia_daemon=True, real_nvml=False, tools=("unshare", "setpriv"),
                          system_python=None, python38_needed=False, pynvml=False, files=(), users=(),
                          collection=()):
    """What this machine lacks to run a suite on fake hosts, one line each (empty: ready).

    Root always. ``kit``: the built fake libraries and numa-seccomp;
    ``nvidia_daemon``: NVIDIA's binaries (every one in NVIDIA_DAEMONS); ``real_nvml``: Debian's libnvidia-ml;
    ``tools``: programs on PATH (util-linux); ``system_python``: why the suite
    needs SYSTEM_PYTHON (None: it does not); ``python38_needed``: pyenv's 3.8;
    ``pynvml``: importable here; ``files``: more files that must exist;
    ``users``: accounts that must exist; ``collection``: module_utils that must
    import from the built collection.
    """
    missing = []
    if os.geteuid() != 0:
        missing.append("not root: the tests need root (private mount namespaces, other users' identities)")
    paths = ([os.path.join(BUILD_LIB_DIR, lib) for lib in FAKE_LIBS] + [STANDIN_LIB, NUMA_SECCOMP]) if kit else []
    if nvidia_daemon:
        paths += [NVIDIA_DAEMONS[name] for name in sorted(NVIDIA_DAEMONS)]
    if real_nvml:
        paths.append(os.path.join(REAL_NVML_DIR, "libnvidia-ml.so.1"))
    missing += ["%s is missing (%s)" % (path, SETUP_HINT) for path in paths if not os.path.exists(path)]
    missing += ["%s not found (util-linux)" % tool for tool in tools if not shutil.which(tool)]
    if system_python and not os.access(SYSTEM_PYTHON, os.X_OK):
        missing.append("%s (Debian's python3) is missing: %s" % (SYSTEM_PYTHON, system_python))
    if python38_needed and not python38():
        missing.append("no Python 3.8 (~/.pyenv/versions/3.8*/bin/python3.8)")
    if pynvml:
        try:
            import pynvml as _pynvml  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
        except ImportError:
            missing.append("pynvml is not importable (pip install nvidia-ml-py)")
    missing += ["%s is missing" % path for path in files if not os.path.isfile(path)]
    for user in users:
        try:
            pwd.getpwnam(user)
        except KeyError:
            missing.append("no user %s" % user)
    use_collection()
    for name in collection:
        try:
            __import__("ansible_collections.gpufleet.nvidia.plugins.module_utils." + name)
        except ImportError as exc:
            missing.append("the collection is not importable (%s); expected the symlink tree %s "
                           "(scripts/test build)" % (exc, COLLECTIONS_DIR))
            break
    return missing


# ---- CLI --------------------------------------------------------------------

def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_enter"]:
        if len(argv) < 4 or argv[2] != "--":
            sys.exit("usage: fakehost.py _enter HOST_DIR -- COMMAND...")
        _enter(argv[1], argv[3:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_layout = sub.add_parser("layout", help="lay out a fake host tree")
    p_layout.add_argument("host_dir")
    p_layout.add_argument("--description", help="JSON description file (default: example)")
    p_layout.add_argument("--gpus", type=int, default=2, help="GPUs in the example description")
    p_layout.add_argument("--no-libs", action="store_true", help="do not copy the fake libraries")
    p_example = sub.add_parser("example", help="print an example description")
    p_example.add_argument("--gpus", type=int, default=2)
    p_nsrun = sub.add_parser("nsrun", help="run a command inside a laid-out host (root)")
    p_nsrun.add_argument("host_dir")
    p_nsrun.add_argument("cmd", nargs=argparse.REMAINDER)
    p_daemon = sub.add_parser("persistenced-argv",
                              help="print the argv that runs NVIDIA's daemon for a host")
    p_daemon.add_argument("--nvidia", choices=sorted(NVIDIA_DAEMONS), default="nvidia535",
                          help="which of NVIDIA's daemons (default: nvidia535)")
    p_daemon.add_argument("host_dir")
    p_daemon.add_argument("options", nargs=argparse.REMAINDER)
    p_syslog = sub.add_parser("syslogd", help="capture the host's /dev/log until killed")
    p_syslog.add_argument("host_dir")
    p_held = sub.add_parser("held", help="print the bus ids the fake libnvidia-cfg holds open")
    p_held.add_argument("host_dir")
    args = parser.parse_args(argv)
    try:
        if args.command == "layout":
            if args.description:
                with open(args.description) as handle:
                    desc = json.load(handle)
            else:
                desc = example_description(args.gpus)
            tree = layout(args.host_dir, desc, with_libs=not args.no_libs)
            print(tree.root)
        elif args.command == "example":
            print(json.dumps(example_description(args.gpus), indent=2))
        elif args.command == "nsrun":
            cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
            if not cmd:
                parser.error("nsrun needs a command")
            os.execvp("unshare", nsrun_argv(args.host_dir, cmd))
        elif args.command == "persistenced-argv":
            opts = args.options[1:] if args.options[:1] == ["--"] else args.options
            print(" ".join(persistenced_argv(args.host_dir, *opts, nvidia=args.nvidia)))
        elif args.command == "syslogd":
            capture = SyslogCapture(args.host_dir)
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
            try:
                threading.Event().wait()
            except KeyboardInterrupt:
                pass
            finally:
                capture.close()
        elif args.command == "held":
            print("\n".join(sorted(held_gpus(args.host_dir))))
    except KitError as exc:
        sys.exit("fakehost: %s" % exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
