"""The fake host tree (fakehost.layout), nsrun, and the fake libnvidia-cfg."""

import json
import os
import socket
import stat
import subprocess
import sys
import tempfile

import pytest

import fakehost

FAKEHOST = fakehost.__file__


def mountinfo():
    with open("/proc/self/mountinfo") as handle:
        return sorted(handle.read().splitlines())


# Where nsrun mounts the fake host (fakehost._enter): a mount leaked out of its namespace would be on one of these,
# or come from the host's tree.
NSRUN_TARGETS = ("/dev", "/proc/driver", "/proc/devices", "/etc/ld.so.cache", "/run", "/var/run",
                 "/sys/bus/pci/drivers")


def leaked(before, after, host_dir):
    """The mounts of ``after`` not in ``before`` that nsrun could have made: on one of its targets, or of the host's
    tree. Other mounts the machine gained meanwhile (another test's, the lab's network namespaces) are not ours."""
    found = []
    for line in sorted(set(after) - set(before)):
        fields = line.split()
        root, point = fields[3], fields[4]
        if point in NSRUN_TARGETS or root.startswith(host_dir) or point.startswith(host_dir):
            found.append(line)
    return found


def test_layout_creates_the_driver_files(host):
    root = host.dir
    with open(os.path.join(root, "proc/driver/nvidia/gpus/0000:02:00.0/information")) as handle:
        info = handle.read()
    assert "Device Minor: \t 1\n" in info
    assert "Bus Location: \t 0000:02:00.0\n" in info
    assert "GPU UUID: \t %s\n" % host.description["gpus"][1]["uuid"] in info
    nodes = {}
    for name in os.listdir(os.path.join(root, "dev")):
        st = os.lstat(os.path.join(root, "dev", name))
        if name.startswith("nvidia"):
            assert stat.S_ISCHR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o666, name
            nodes[name] = (os.major(st.st_rdev), os.minor(st.st_rdev))
    uvm = fakehost.uvm_major(fakehost._kernel_devices()[0])
    assert nodes == {"nvidia0": (195, 0), "nvidia1": (195, 1), "nvidiactl": (195, 255),
                     "nvidia-modeset": (195, 254), "nvidia-uvm": (uvm, 0), "nvidia-uvm-tools": (uvm, 1)}
    for name in ("nvidia0", "nvidia1"):
        st = os.stat(host.tree.stand_in(name))
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o666
    assert sorted(os.listdir(os.path.dirname(host.tree.stand_in("x")))) == ["nvidia0", "nvidia1"]
    assert os.path.isdir(os.path.join(root, "sys/bus/pci/drivers/nvidia/0000:01:00.0"))
    assert os.path.isdir(os.path.join(root, "run"))
    with open(os.path.join(root, "proc/driver/nvidia/version")) as handle:
        assert "Kernel Module  535.171.04" in handle.read()
    assert json.load(open(host.tree.description_file))["gpus"][0]["pci_bus_id"] == "0000:01:00.0"
    assert sorted(os.listdir(host.tree.lib_dir)) == [
        "libcuda.so.1", "libcuda.so.535.171.04", "libnvidia-cfg.so.1",
        "libnvidia-ml.so.1", "libnvidia-ml.so.535.171.04"]
    for lib in ("libcuda", "libnvidia-ml"):
        assert os.readlink(os.path.join(host.tree.lib_dir, lib + ".so.1")) == lib + ".so.535.171.04"
        versioned = os.path.join(host.tree.lib_dir, lib + ".so.535.171.04")
        assert os.path.isfile(versioned) and not os.path.islink(versioned)
    assert host.legacy() == {"0000:01:00.0": 0, "0000:02:00.0": 0}
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o755


def test_relayout_refreshes_gpus(host):
    desc = fakehost.example_description(3)
    desc["gpus"][2]["pci_bus_id"] = "81:00.0"
    desc["gpus"][2]["minor"] = 7
    fakehost.layout(host.dir, desc)
    gpus = sorted(os.listdir(os.path.join(host.dir, "proc/driver/nvidia/gpus")))
    assert gpus == ["0000:01:00.0", "0000:02:00.0", "0000:81:00.0"]
    assert os.path.exists(os.path.join(host.dir, "dev/nvidia7"))
    fakehost.layout(host.dir, fakehost.example_description(1))
    assert sorted(os.listdir(os.path.join(host.dir, "proc/driver/nvidia/gpus"))) == ["0000:01:00.0"]
    assert not os.path.exists(os.path.join(host.dir, "dev/nvidia7"))
    assert sorted(n for n in os.listdir(os.path.join(host.dir, "dev")) if n.startswith("nvidia")) \
        == ["nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0", "nvidiactl"]
    assert os.listdir(os.path.dirname(host.tree.stand_in("x"))) == ["nvidia0"]
    desc = fakehost.example_description(1, driver_version="550.54.15")
    fakehost.layout(host.dir, desc)
    assert sorted(n for n in os.listdir(host.tree.lib_dir) if "535" in n or "550" in n) == [
        "libcuda.so.550.54.15", "libnvidia-ml.so.550.54.15"]
    with open(host.tree.devices_file) as handle:
        assert "195 nvidia\n" in handle.read()


def test_proc_devices_lists_the_driver_majors_after_this_kernels():
    kernel = "Character devices:\n  1 mem\n510 something\n\nBlock devices:\n  7 loop\n"
    with tempfile.NamedTemporaryFile("w", dir="/tmp", prefix="gfk") as handle:
        handle.write(kernel)
        handle.flush()
        text, uvm = fakehost.proc_devices("535.171.04", source=handle.name)
        assert (text, uvm) == ("Character devices:\n  1 mem\n195 nvidia-frontend\n509 nvidia-uvm\n"
                               "510 something\n\nBlock devices:\n  7 loop\n", 509)
        assert fakehost.proc_devices("550.40.07", source=handle.name)[0].count("195 nvidia\n") == 1
    with open("/proc/devices") as handle:
        real = [line.strip() for line in handle if line.strip()]
    text, uvm = fakehost.proc_devices("535.171.04")
    assert sorted(real + ["195 nvidia-frontend", "%d nvidia-uvm" % uvm]) == sorted(
        line.strip() for line in text.splitlines() if line.strip())


def test_a_device_node_without_a_driver_fails_to_open_and_a_daemon_opens_its_stand_in(host):
    """No kernel driver: open gives ENXIO to everyone; a persistence daemon (by program name, root) opens
    the fake driver's stand-in under /dev/nvidiaN in a mount namespace of its own; others see the node."""
    probe = ("import os, sys\n"
             "def opened(p):\n"
             "    try:\n"
             "        os.close(os.open(p, os.O_RDWR)); return 'ok'\n"
             "    except OSError as e:\n"
             "        return e.strerror\n"
             "st = os.stat('/dev/nvidia1')\n"
             "print(sys.argv[0].rsplit('/', 1)[-1], opened('/dev/nvidia1'), opened('/dev/nvidiactl'),"
             " 'chr' if st.st_rdev else 'reg', os.readlink('/proc/self/ns/mnt') == sys.argv[1])\n")
    scripts = {}
    for name in ("gpufleet-persistenced", "other-daemon"):
        scripts[name] = os.path.join(host.dir, name)
        with open(scripts[name], "w") as handle:
            handle.write(probe)
    shell = " ; ".join("%s %s $(readlink /proc/self/ns/mnt)" % (fakehost.SYSTEM_PYTHON, path)
                       for path in scripts.values())
    proc = fakehost.nsrun(host.dir, ["sh", "-c", shell], capture_output=True, text=True, check=True)
    assert proc.stdout.splitlines() == [
        "gpufleet-persistenced ok No such device or address reg False",
        "other-daemon No such device or address No such device or address chr True"]


def test_layout_rejects_bad_descriptions_and_long_dirs():
    desc = fakehost.example_description(2)
    desc["gpus"][1]["pci_bus_id"] = "01:00.0"
    with pytest.raises(fakehost.KitError, match="two GPUs"):
        fakehost.validate_description(desc)
    with pytest.raises(ValueError, match="not a PCI bus id"):
        fakehost.validate_description({"gpus": [{"pci_bus_id": "nope"}]})
    with pytest.raises(fakehost.KitError, match="no pci_bus_id"):
        fakehost.validate_description({"gpus": [{}]})
    with pytest.raises(fakehost.KitError, match="too long"):
        fakehost.layout("/tmp/" + "x" * 120, fakehost.example_description(1))


def test_cli_layout_example_and_held():
    with tempfile.TemporaryDirectory(prefix="gfk", dir="/tmp") as tmp:
        example = subprocess.run([sys.executable, FAKEHOST, "example", "--gpus", "3"],
                                 capture_output=True, text=True, check=True).stdout
        desc_file = os.path.join(tmp, "desc.json")
        with open(desc_file, "w") as handle:
            handle.write(example)
        host_dir = os.path.join(tmp, "h")
        subprocess.run([sys.executable, FAKEHOST, "layout", host_dir, "--description", desc_file],
                       check=True, capture_output=True)
        assert len(fakehost.read_description(host_dir)["gpus"]) == 3
        with open(fakehost.HostTree(host_dir).cfg_log, "a") as handle:
            handle.write("open 0000:02:00.0 pid=1 euid=0\n")
        held = subprocess.run([sys.executable, FAKEHOST, "held", host_dir],
                              capture_output=True, text=True, check=True).stdout
        assert held.split() == ["0000:02:00.0"]


def test_nsrun_mounts_the_host_privately(host):
    before = mountinfo()
    script = ("import os, json; print(json.dumps({"
              "'gpus': sorted(os.listdir('/proc/driver/nvidia/gpus')),"
              "'dev': sorted(os.listdir('/dev')),"
              "'null': os.major(os.stat('/dev/null').st_rdev),"
              "'drivers': os.listdir('/sys/bus/pci/drivers'),"
              "'run': os.listdir('/var/run'),"
              "'ld': os.environ['LD_LIBRARY_PATH'],"
              "'urandom': len(open('/dev/urandom','rb').read(8))}))")
    proc = fakehost.nsrun(host.dir, [sys.executable, "-c", script],
                          capture_output=True, text=True, check=True)
    seen = json.loads(proc.stdout)
    assert seen["gpus"] == ["0000:01:00.0", "0000:02:00.0"]
    assert {"nvidiactl", "nvidia0", "nvidia1", "nvidia-uvm", "null", "log"} <= set(seen["dev"])
    assert seen["null"] == 1 and seen["urandom"] == 8
    assert seen["drivers"] == ["nvidia"]
    assert seen["ld"].split(":")[0] == host.tree.lib_dir
    assert leaked(before, mountinfo(), host.dir) == []  # nothing leaked into our namespace
    assert not os.path.exists("/proc/driver/nvidia")
    assert not os.path.exists("/dev/nvidiactl")


def test_the_leak_check_finds_a_leaked_mount_and_not_the_others(host):
    before = ["22 27 0:21 / /proc rw,relatime - proc proc rw"]
    ours = "140 24 254:0 %s/dev /dev rw,relatime - ext4 /dev/vda rw" % host.dir
    other = "134 67 0:4 net:[4026532177] /run/netns/gflab-h1 rw shared:2 - nsfs nsfs rw"
    assert leaked(before, before + [ours, other], host.dir) == [ours]
    assert leaked(before, before + [other], host.dir) == []


def test_nsrun_cli_and_exit_status(host):
    proc = subprocess.run([sys.executable, FAKEHOST, "nsrun", host.dir, "--", "sh", "-c",
                           "test -c /dev/nvidiactl && grep -q '^195 nvidia' /proc/devices && exit 7"],
                          capture_output=True)
    assert proc.returncode == 7


def test_nsrun_restores_default_sigpipe(host):
    proc = fakehost.nsrun(host.dir, ["grep", "SigIgn", "/proc/self/status"],
                          capture_output=True, text=True, check=True)
    ignored = int(proc.stdout.split()[1], 16)
    assert not ignored & (1 << (13 - 1)), "SIGPIPE ignored in nsrun commands"


def test_nsrun_refuses_a_dir_that_is_not_a_host():
    with tempfile.TemporaryDirectory(prefix="gfk", dir="/tmp") as tmp:
        proc = subprocess.run(fakehost.nsrun_argv(tmp, ["true"]), capture_output=True, text=True)
    assert proc.returncode != 0 and "not a laid-out fake host" in proc.stderr


def test_persistenced_argv_uses_the_tree_and_the_wrapper(host):
    argv = fakehost.persistenced_argv(host.dir, "--user", "nobody")
    assert argv[0] == fakehost.NUMA_SECCOMP
    assert argv[argv.index("--nvidia-cfg-path") + 1] == host.tree.lib_dir
    assert argv[-2:] == ["--user", "nobody"]
    assert "--keep-sigpipe" in fakehost.persistenced_argv(host.dir, keep_sigpipe=True)
    assert argv[argv.index("--") + 1] == fakehost.NVIDIA_DAEMONS["nvidia535"]  # the default
    for name, binary in fakehost.NVIDIA_DAEMONS.items():
        assert fakehost.persistenced_argv(host.dir, nvidia=name)[2] == binary
    assert fakehost.NVIDIA_DAEMONS["nvidia550"].endswith("/root550/usr/bin/nvidia-persistenced")
    with pytest.raises(fakehost.KitError, match="no NVIDIA daemon 'nvidia470'"):
        fakehost.persistenced_argv(host.dir, nvidia="nvidia470")


def test_syslog_capture_receives_datagrams(host):
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.sendto(b"<29>Nov 30 00:00:00 test: hello\0", host.tree.syslog_socket)
    host.wait_log("test: hello")


# ---- the fake libnvidia-cfg.so.1 through ctypes --------------------------------

CFG_PROBE = r"""
import ctypes, json, os, sys
out_path = sys.argv[1]
if sys.argv[2] == "closed":
    for fd in (0, 1, 2):
        os.close(fd)
lib = ctypes.CDLL(sys.argv[3])
class Dev(ctypes.Structure):
    _fields_ = [("domain", ctypes.c_int), ("bus", ctypes.c_int),
                ("slot", ctypes.c_int), ("function", ctypes.c_int)]
n = ctypes.c_int()
devs = ctypes.POINTER(Dev)()
res = {"fds_before": sorted(os.listdir("/proc/self/fd"))}
res["get"] = lib.nvCfgGetPciDevices(ctypes.byref(n), ctypes.byref(devs))
res["devs"] = [[devs[i].domain, devs[i].bus, devs[i].slot, devs[i].function] for i in range(n.value)]
handle = ctypes.c_void_p()
res["open"] = lib.nvCfgOpenPciDevice(0, 1, 0, 0, ctypes.byref(handle))
res["open_bad"] = lib.nvCfgOpenPciDevice(0, 9, 0, 0, ctypes.byref(ctypes.c_void_p()))
res["close"] = lib.nvCfgCloseDevice(handle)
res["close_null"] = lib.nvCfgCloseDevice(None)
res["fds_after"] = sorted(os.listdir("/proc/self/fd"))
with open(out_path, "w") as f:
    json.dump(res, f)
"""


@pytest.mark.parametrize("stdio", ["pipes", "closed"])
def test_fake_cfg_library(host, stdio):
    out = os.path.join(host.dir, "cfg.json")
    lib = os.path.join(host.tree.lib_dir, "libnvidia-cfg.so.1")
    proc = subprocess.run([sys.executable, "-c", CFG_PROBE, out, stdio, lib],
                          capture_output=True, env=dict(os.environ, GPUFLEET_FAKEDRIVER_ROOT=host.dir))
    assert proc.returncode == 0 and proc.stdout == b"" and proc.stderr == b"", proc
    with open(out) as handle:
        res = json.load(handle)
    assert res["get"] == 1 and res["devs"] == [[0, 1, 0, 0], [0, 2, 0, 0]]
    assert (res["open"], res["open_bad"], res["close"], res["close_null"]) == (1, 0, 1, 0)
    assert res["fds_after"] == res["fds_before"]
    with open(host.tree.cfg_log) as handle:
        lines = handle.read().splitlines()
    assert [line.split()[:2] for line in lines] == [["open", "0000:01:00.0"],
                                                    ["close", "0000:01:00.0"]]


def test_fake_cfg_errors_and_missing_driver(host):
    lib_path = os.path.join(host.tree.lib_dir, "libnvidia-cfg.so.1")
    host.inject("cfg_enumerate", "fail")
    env = dict(os.environ, GPUFLEET_FAKEDRIVER_ROOT=host.dir)
    code = ("import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); n = ctypes.c_int(); "
            "p = ctypes.c_void_p(); print(lib.nvCfgGetPciDevices(ctypes.byref(n), ctypes.byref(p)))")
    out = subprocess.run([sys.executable, "-c", code, lib_path], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "0"
    env["GPUFLEET_FAKEDRIVER_ROOT"] = "/nonexistent"
    out = subprocess.run([sys.executable, "-c", code, lib_path], env=env,
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0" and out.stderr == ""
