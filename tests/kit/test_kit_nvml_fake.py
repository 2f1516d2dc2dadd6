"""pynvml (nvidia-ml-py) against the fake libnvidia-ml.so.1 on fake hosts."""

import os
import subprocess
import sys
import threading
import time

import pytest

import fakehost

from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import rpc

GPU0, GPU1 = "0000:01:00.0", "0000:02:00.0"

ENUMERATE = """
pynvml.nvmlInit()
result = {"driver": pynvml.nvmlSystemGetDriverVersion(),
          "nvml": pynvml.nvmlSystemGetNVMLVersion(),
          "count": pynvml.nvmlDeviceGetCount(), "gpus": []}
for i in range(result["count"]):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    pci = pynvml.nvmlDeviceGetPciInfo(h)
    uuid = pynvml.nvmlDeviceGetUUID(h)
    same = [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByUUID(uuid)),
            pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByPciBusId(pci.busId)),
            pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByPciBusId(pci.busId[4:].lower())),
            pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByPciBusId(pci.busId[9:]))]
    result["gpus"].append({"name": pynvml.nvmlDeviceGetName(h), "uuid": uuid,
                           "busId": pci.busId, "busIdLegacy": pci.busIdLegacy,
                           "domain": pci.domain, "bus": pci.bus, "device": pci.device,
                           "minor": pynvml.nvmlDeviceGetMinorNumber(h),
                           "index": pynvml.nvmlDeviceGetIndex(h),
                           "persistence": pynvml.nvmlDeviceGetPersistenceMode(h),
                           "lookups_agree": same == [uuid] * 4})
pynvml.nvmlShutdown()
"""


def set_mode(index, mode):
    return ("pynvml.nvmlInit()\n"
            "h = pynvml.nvmlDeviceGetHandleByIndex(%d)\n"
            "pynvml.nvmlDeviceSetPersistenceMode(h, %d)\n"
            "result = pynvml.nvmlDeviceGetPersistenceMode(h)\n" % (index, mode))


GET_ALL = ("pynvml.nvmlInit()\n"
           "result = [pynvml.nvmlDeviceGetPersistenceMode(pynvml.nvmlDeviceGetHandleByIndex(i))"
           " for i in range(pynvml.nvmlDeviceGetCount())]\n")


def test_enumeration_by_index_uuid_and_bus_id(host):
    out = host.nvml(ENUMERATE)
    assert "error" not in out, out
    res = out["result"]
    assert res["driver"] == "535.171.04" and res["nvml"] == "12.535.171.04"
    assert res["count"] == 2
    desc = host.description["gpus"]
    for i, gpu in enumerate(res["gpus"]):
        assert gpu["name"] == desc[i]["name"]
        assert gpu["uuid"] == desc[i]["uuid"]
        assert gpu["busId"] == "00000000:%02X:00.0" % (i + 1)
        assert gpu["busIdLegacy"] == "0000:%02X:00.0" % (i + 1)
        assert (gpu["domain"], gpu["bus"], gpu["device"]) == (0, i + 1, 0)
        assert gpu["minor"] == i and gpu["index"] == i
        assert gpu["persistence"] == 0
        assert gpu["lookups_agree"]


def test_unknown_uuid_and_bus_id_are_not_found(host):
    out = host.nvml("pynvml.nvmlInit()\npynvml.nvmlDeviceGetHandleByUUID('GPU-nope')")
    assert out["error"] == "NVMLError_NotFound"
    out = host.nvml("pynvml.nvmlInit()\npynvml.nvmlDeviceGetHandleByPciBusId('0000:09:00.0')")
    assert out["error"] == "NVMLError_NotFound"
    out = host.nvml("pynvml.nvmlInit()\npynvml.nvmlDeviceGetHandleByPciBusId('garbage')")
    assert out["error"] == "NVMLError_InvalidArgument"
    out = host.nvml("pynvml.nvmlInit()\npynvml.nvmlDeviceGetHandleByIndex(5)")
    assert out["error"] == "NVMLError_InvalidArgument"


def test_calls_before_init_are_uninitialized(host):
    out = host.nvml("pynvml.nvmlInit()\npynvml.nvmlShutdown()\npynvml.nvmlDeviceGetCount()")
    assert out["error"] == "NVMLError_Uninitialized"


def test_persistence_through_nvidia_daemon(make_host, nvidia):
    host = make_host(nvidia=nvidia)
    host.start_daemon()
    assert host.nvml(GET_ALL)["result"] == [1, 1]
    assert host.nvml(set_mode(0, 0))["result"] == 0
    assert host.held() == {GPU1}
    with rpc.PersistencedClient(host.tree.socket) as c:
        assert c.get_persistence_mode(GPU0) == 0
        c.set_persistence_mode(GPU1, 0)
    assert host.nvml(GET_ALL)["result"] == [0, 0]
    assert host.legacy() == {GPU0: 0, GPU1: 0}  # the legacy flag was not used
    with open(host.tree.kmsg) as handle:
        assert handle.read() == ""


def test_persistence_through_legacy_flag_without_daemon(host):
    assert host.nvml(set_mode(1, 1))["result"] == 1
    assert host.legacy() == {GPU0: 0, GPU1: 1}
    assert host.nvml(GET_ALL)["result"] == [0, 1]
    assert host.held() == set()
    with open(host.tree.kmsg) as handle:
        assert "Persistence mode is deprecated" in handle.read()


def test_stale_socket_falls_back_to_legacy_flag(make_host, nvidia):
    host = make_host(nvidia=nvidia)
    host.start_daemon()
    host.stop_daemon(9)  # SIGKILL: the socket file stays
    assert os.path.exists(host.tree.socket)
    assert host.nvml(set_mode(0, 1))["result"] == 1
    assert host.legacy()[GPU0] == 1


def test_initial_legacy_flag_comes_from_the_description(make_host):
    desc = fakehost.example_description(2)
    desc["gpus"][1]["persistence_mode"] = 1
    host = make_host(description=desc)
    assert host.nvml(GET_ALL)["result"] == [0, 1]


def test_set_needs_root_get_does_not(make_host, nvidia):
    host = make_host(nvidia=nvidia)
    out = host.nvml(set_mode(0, 1), user="nobody")
    assert out["error"] == "NVMLError_NoPermission"
    out = host.nvml(GET_ALL, user="nobody")
    assert out["result"] == [0, 0]
    host.start_daemon()
    # nobody reaches 535's 0777 socket; Debian 13's 550 socket (0775, root's) refuses the connection,
    # and the fake NVML then reads the legacy flag, as it does when no daemon listens
    seen = [1, 1] if host.traits["socket_mode"] & 0o002 else [0, 0]
    assert host.nvml(GET_ALL, user="nobody")["result"] == seen
    assert host.nvml(set_mode(0, 0), user="nobody")["error"] == "NVMLError_NoPermission"


def test_bad_mode_is_invalid_argument(host):
    assert host.nvml(set_mode(0, 2))["error"] == "NVMLError_InvalidArgument"


@pytest.mark.parametrize("error, cls", [
    ("driver_not_loaded", "NVMLError_DriverNotLoaded"),
    ("lib_rm_version_mismatch", "NVMLError_LibRmVersionMismatch"),
    ("no_permission", "NVMLError_NoPermission"),
    ("unknown", "NVMLError_Unknown"),
    (9, "NVMLError_DriverNotLoaded"),
])
def test_injected_init_errors(host, error, cls):
    host.inject("init", error)
    out = host.nvml("pynvml.nvmlInit()")
    assert out["error"] == cls, out


@pytest.mark.parametrize("op, error, cls", [
    ("get_persistence", "gpu_is_lost", "NVMLError_GpuIsLost"),
    ("get_persistence", "not_supported", "NVMLError_NotSupported"),
    ("set_persistence", "no_permission", "NVMLError_NoPermission"),
    ("set_persistence", "not_supported", "NVMLError_NotSupported"),
    ("set_persistence", "insufficient_power", "NVMLError_InsufficientPower"),
    ("set_persistence", "in_use", "NVMLError_InUse"),
    ("any", "gpu_is_lost", "NVMLError_GpuIsLost"),
])
def test_injected_per_gpu_errors(host, op, error, cls):
    host.inject(op, error, gpu=1)
    call = ("pynvml.nvmlDeviceGetPersistenceMode(h)" if op == "get_persistence"
            else "pynvml.nvmlDeviceSetPersistenceMode(h, 1)")
    code = ("pynvml.nvmlInit()\n"
            "ok = pynvml.nvmlDeviceGetPersistenceMode(pynvml.nvmlDeviceGetHandleByIndex(0))\n"
            "h = pynvml.nvmlDeviceGetHandleByIndex(1)\n" + call)
    out = host.nvml(code)
    assert out["error"] == cls, out


def test_gpu_lost_at_handle_and_host_wide(host):
    host.inject("handle", "gpu_is_lost", gpu=0)
    assert host.nvml("pynvml.nvmlInit()\npynvml.nvmlDeviceGetHandleByIndex(0)")["error"] == \
        "NVMLError_GpuIsLost"
    assert host.nvml("pynvml.nvmlInit()\nresult = pynvml.nvmlDeviceGetName("
                     "pynvml.nvmlDeviceGetHandleByIndex(1))")["result"] == "NVIDIA A100-SXM4-80GB"
    host.inject("handle", None, gpu=0)
    host.inject("get_persistence", "not_supported")
    assert host.nvml(GET_ALL)["error"] == "NVMLError_NotSupported"


def test_errors_injected_while_running_take_effect(host):
    """The fake re-reads the description on every call: inject into a live program."""
    marker = os.path.join(host.dir, "marker")
    go = os.path.join(host.dir, "go")
    code = ("import os, time\n"
            "pynvml.nvmlInit()\n"
            "h = pynvml.nvmlDeviceGetHandleByIndex(0)\n"
            "pynvml.nvmlDeviceGetPersistenceMode(h)\n"
            "open(%r, 'w').close()\n"
            "while not os.path.exists(%r): time.sleep(0.01)\n"
            "pynvml.nvmlDeviceGetPersistenceMode(h)\n" % (marker, go))
    results = {}
    thread = threading.Thread(target=lambda: results.update(host.nvml(code)))
    thread.start()
    deadline = time.monotonic() + 20
    while not os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.01)
    host.inject("get_persistence", "gpu_is_lost", gpu=0)
    open(go, "w").close()
    thread.join(30)
    assert results.get("error") == "NVMLError_GpuIsLost", results


def test_no_fake_driver_is_driver_not_loaded(host):
    """The fake library outside any fake host (no description at /proc/driver)."""
    out = host.nvml("pynvml.nvmlInit()", namespace=False, lib_dir=host.tree.lib_dir)
    assert out["error"] == "NVMLError_DriverNotLoaded"


def test_root_override_without_namespace(make_host, nvidia):
    host = make_host(nvidia=nvidia)
    """GPUFLEET_FAKEDRIVER_ROOT points the library at a tree: no root, no namespace."""
    out = host.nvml(ENUMERATE, namespace=False, lib_dir=host.tree.lib_dir,
                    env={"GPUFLEET_FAKEDRIVER_ROOT": host.dir})
    assert out["result"]["count"] == 2
    host.start_daemon()
    out = host.nvml(GET_ALL, namespace=False, lib_dir=host.tree.lib_dir,
                    env={"GPUFLEET_FAKEDRIVER_ROOT": host.dir})
    assert out["result"] == [1, 1]


def test_no_library_is_library_not_found(host):
    out = host.nvml("pynvml.nvmlInit()", namespace=False, lib_dir=host.dir)
    assert out["error"] == "NVMLError_LibraryNotFound"


def test_missing_function_is_function_not_found(host):
    out = host.nvml("pynvml.nvmlInit()\npynvml.nvmlDeviceGetPowerUsage("
                    "pynvml.nvmlDeviceGetHandleByIndex(0))")
    assert out["error"] == "NVMLError_FunctionNotFound"


SIZE_PROBE = r"""
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
assert lib.nvmlInit_v2() == 0
dev = ctypes.c_void_p()
assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)) == 0
small, big = ctypes.create_string_buffer(8), ctypes.create_string_buffer(96)
print(lib.nvmlDeviceGetUUID(dev, small, 8), lib.nvmlDeviceGetName(dev, small, 8),
      lib.nvmlSystemGetDriverVersion(small, 8), lib.nvmlDeviceGetUUID(dev, big, 96),
      lib.nvmlShutdown(), lib.nvmlShutdown())
"""


def test_small_buffers_and_shutdown_refcount(host):
    lib = os.path.join(host.tree.lib_dir, "libnvidia-ml.so.1")
    out = subprocess.run([sys.executable, "-c", SIZE_PROBE, lib], capture_output=True, text=True,
                         env=dict(os.environ, GPUFLEET_FAKEDRIVER_ROOT=host.dir), check=True)
    # InsufficientSize for each too-small buffer; a second shutdown is Uninitialized
    assert out.stdout.split() == ["7", "7", "7", "0", "0", "1"]


def test_no_nvidiactl_is_driver_not_loaded(host):
    os.remove(host.tree.path("/dev/nvidiactl"))
    assert host.nvml("pynvml.nvmlInit()")["error"] == "NVMLError_DriverNotLoaded"


MIG = """
pynvml.nvmlInit()
result = []
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    row = {"is_mig": pynvml.nvmlDeviceIsMigDeviceHandle(h).value, "max": pynvml.nvmlDeviceGetMaxMigDeviceCount(h)}
    for name, call in (("mode", lambda: pynvml.nvmlDeviceGetMigMode(h)),
                       ("by_index", lambda: pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)),
                       ("parent", lambda: pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(h)),
                       ("gi", lambda: pynvml.nvmlDeviceGetGpuInstanceId(h)),
                       ("ci", lambda: pynvml.nvmlDeviceGetComputeInstanceId(h))):
        try:
            row[name] = call()
        except pynvml.NVMLError as exc:
            row[name] = type(exc).__name__
    result.append(row)
"""


def test_mig_queries_answer_not_a_mig_device_and_mig_disabled(make_host):
    """What NVIDIA's toolkit asks before it selects a device: a full GPU's handle is not a MIG device; a
    MIG-capable board (A100, by name or "mig_capable") has MIG disabled, no MIG devices; another board
    (L40S) does not support MIG. Calls that take a MIG handle refuse a full GPU's."""
    desc = fakehost.example_description(3)
    desc["gpus"][1]["name"] = "NVIDIA L40S"
    desc["gpus"][2]["name"] = "NVIDIA L40S"
    desc["gpus"][2]["mig_capable"] = True
    out = make_host(description=desc).nvml(MIG)
    assert "error" not in out, out
    refused = {"parent": "NVMLError_InvalidArgument", "gi": "NVMLError_InvalidArgument",
               "ci": "NVMLError_InvalidArgument"}
    capable = dict(refused, is_mig=0, max=0, mode=[0, 0], by_index="NVMLError_InvalidArgument")
    other = dict(refused, is_mig=0, max=0, mode="NVMLError_NotSupported", by_index="NVMLError_NotSupported")
    assert out["result"] == [capable, other, capable]


def test_mig_queries_take_injected_errors(make_host):
    desc = fakehost.example_description(1)
    desc["gpus"][0]["errors"] = {"mig": "gpu_is_lost"}
    out = make_host(description=desc).nvml(
        "pynvml.nvmlInit()\nresult = pynvml.nvmlDeviceIsMigDeviceHandle(pynvml.nvmlDeviceGetHandleByIndex(0))\n")
    assert out["error"] == "NVMLError_GpuIsLost", out
