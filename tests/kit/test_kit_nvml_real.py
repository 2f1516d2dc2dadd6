"""pynvml against Debian's real libnvidia-ml1 (non-free) in a throwaway namespace.

There is no NVIDIA kernel driver here, so only NVML's real error path runs.
Real NVML run as root may create /dev/nvidiactl: inside the namespace that
lands in the fake host's dev/ (a temp dir), never in the real /dev.
"""

import os
import stat

import fakehost


def test_real_nvml_without_kernel_driver_is_driver_not_loaded(host):
    real_dev_before = sorted(n for n in os.listdir("/dev") if n.startswith("nvidia"))
    out = host.nvml("pynvml.nvmlInit()", lib_dir=fakehost.REAL_NVML_DIR)
    assert out["error"] == "NVMLError_DriverNotLoaded", out
    assert sorted(n for n in os.listdir("/dev") if n.startswith("nvidia")) == real_dev_before


def test_real_nvml_is_the_library_pynvml_loaded(host):
    code = ("import ctypes\n"
            "try:\n"
            "    pynvml.nvmlInit()\n"
            "except pynvml.NVMLError:\n"
            "    pass\n"
            "result = [l.split()[-1] for l in open('/proc/self/maps') if 'libnvidia-ml' in l][0]\n")
    out = host.nvml(code, lib_dir=fakehost.REAL_NVML_DIR)
    assert out["result"].startswith(fakehost.REAL_NVML_DIR), out
    assert "libnvidia-ml.so.535." in os.path.realpath(out["result"])


def test_real_nvml_as_root_creates_nvidiactl_only_inside_the_host(host):
    os.remove(host.tree.path("/dev/nvidiactl"))
    out = host.nvml("pynvml.nvmlInit()", lib_dir=fakehost.REAL_NVML_DIR)
    assert out["error"] == "NVMLError_DriverNotLoaded", out
    created = os.stat(host.tree.path("/dev/nvidiactl"))
    assert stat.S_ISCHR(created.st_mode)
    assert (os.major(created.st_rdev), os.minor(created.st_rdev)) == (195, 255)
    assert not os.path.exists("/dev/nvidiactl")
