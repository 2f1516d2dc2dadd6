"""GPU-health queries through the real pynvml on the fake libnvidia-ml.so.1.

Each GPU's ``health`` object in the host description (tests/driverkit/README.md, "GPU health") is read
back exactly through pynvml's own functions, on a healthy GPU (the defaults) and on a faulty one; errors
injected under an NVML function's name raise the matching ``pynvml.NVMLError_*``; the older driver's
build (``build/lib/old``) lacks the newer symbols; and a description rewritten between two calls of one
process is seen by the second.
"""

import os

import pytest

import fakehost

OLD_LIB_DIR = os.path.join(fakehost.BUILD_LIB_DIR, "old")
NS, INVALID, NOT_FOUND = "NVMLError_NotSupported", "NVMLError_InvalidArgument", "NVMLError_FunctionNotFound"
DESCRIPTION = fakehost.DESCRIPTION_PATH

# Reads every health value of every GPU through pynvml; result[key] is the value, or the class name of
# the NVMLError it raised. Keys are the NVML function names (the ops errors are injected under); the calls
# made once per threshold type or link answer one value or error each.
READ = r"""
from ctypes import byref

def call(f):
    try:
        return f()
    except pynvml.NVMLError as exc:
        return type(exc).__name__

def struct(s):
    return {name: (bytes(getattr(s, name)).hex() if name == "clusterUuid" else getattr(s, name))
            for name, _ in s._fields_}

def sram(h):
    s = pynvml.c_nvmlEccSramErrorStatus_v1_t()
    pynvml.nvmlDeviceGetSramEccErrorStatus(h, byref(s))
    return struct(s)

def fabric(h):
    f = pynvml.c_nvmlGpuFabricInfoV_t()
    pynvml.nvmlDeviceGetGpuFabricInfoV(h, byref(f))
    return struct(f)

def fields(h):
    values = pynvml.nvmlDeviceGetFieldValues(h, [pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION,
                                                 pynvml.NVML_FI_DEV_ECC_CURRENT])
    return [[v.fieldId, v.nvmlReturn, v.valueType, v.value.uiVal, v.timestamp > 0] for v in values]

def counts(f):  # [[volatile corrected, uncorrected], [aggregate corrected, uncorrected]]
    return [[f(error, counter) for error in (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                                             pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)]
            for counter in (pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC)]

def memory_errors(h):
    dram = counts(lambda e, c: pynvml.nvmlDeviceGetMemoryErrorCounter(h, e, c, pynvml.NVML_MEMORY_LOCATION_DRAM))
    elsewhere = sum(pynvml.nvmlDeviceGetMemoryErrorCounter(h, e, c, loc)
                    for e in (0, 1) for c in (0, 1) for loc in range(pynvml.NVML_MEMORY_LOCATION_COUNT)
                    if loc != pynvml.NVML_MEMORY_LOCATION_DRAM)
    return [dram, elsewhere]

CAUSES = (pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
          pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)

def read(h):
    return {
        "nvmlDeviceGetEccMode": call(lambda: pynvml.nvmlDeviceGetEccMode(h)),
        "nvmlDeviceGetTotalEccErrors": call(lambda: counts(lambda e, c: pynvml.nvmlDeviceGetTotalEccErrors(h, e, c))),
        "nvmlDeviceGetMemoryErrorCounter": call(lambda: memory_errors(h)),
        "nvmlDeviceGetRetiredPages": call(lambda: [pynvml.nvmlDeviceGetRetiredPages(h, c) for c in CAUSES]),
        "nvmlDeviceGetRetiredPages_v2": call(lambda: [pynvml.nvmlDeviceGetRetiredPages_v2(h, c) for c in CAUSES]),
        "nvmlDeviceGetRetiredPagesPendingStatus": call(lambda: pynvml.nvmlDeviceGetRetiredPagesPendingStatus(h)),
        "nvmlDeviceGetRemappedRows": call(lambda: pynvml.nvmlDeviceGetRemappedRows(h)),
        "nvmlDeviceGetSramEccErrorStatus": call(lambda: sram(h)),
        "nvmlDeviceGetFieldValues": call(lambda: fields(h)),
        "nvmlDeviceGetCurrentClocksEventReasons": call(lambda: pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)),
        "nvmlDeviceGetCurrentClocksThrottleReasons": call(lambda: pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h)),
        "nvmlDeviceGetTemperature": call(lambda: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)),
        "nvmlDeviceGetTemperatureV": call(lambda: pynvml.nvmlDeviceGetTemperatureV(h, pynvml.NVML_TEMPERATURE_GPU)),
        "nvmlDeviceGetTemperatureThreshold": [call(lambda t=t: pynvml.nvmlDeviceGetTemperatureThreshold(h, t))
                                              for t in range(pynvml.NVML_TEMPERATURE_THRESHOLD_COUNT)],
        "nvmlDeviceGetCurrPcieLinkGeneration": call(lambda: pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h)),
        "nvmlDeviceGetCurrPcieLinkWidth": call(lambda: pynvml.nvmlDeviceGetCurrPcieLinkWidth(h)),
        "nvmlDeviceGetMaxPcieLinkGeneration": call(lambda: pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h)),
        "nvmlDeviceGetMaxPcieLinkWidth": call(lambda: pynvml.nvmlDeviceGetMaxPcieLinkWidth(h)),
        "nvmlDeviceGetNvLinkState": [call(lambda l=l: pynvml.nvmlDeviceGetNvLinkState(h, l)) for l in range(4)],
        "nvmlDeviceGetGpuFabricInfoV": call(lambda: fabric(h)),
        "nvmlDeviceGetMigMode": call(lambda: pynvml.nvmlDeviceGetMigMode(h)),
    }

pynvml.nvmlInit()
result = [read(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(pynvml.nvmlDeviceGetCount())]
"""

SRAM_FIELDS = ("aggregateUncParity", "aggregateUncSecDed", "aggregateCor", "volatileUncParity",
               "volatileUncSecDed", "volatileCor", "aggregateUncBucketL2", "aggregateUncBucketSm",
               "aggregateUncBucketPcie", "aggregateUncBucketMcu", "aggregateUncBucketOther")


def sram_struct(**values):
    struct = dict({"version": 0x1000068, "bThresholdExceeded": 0}, **{f: 0 for f in SRAM_FIELDS})
    struct.update(values)
    return struct


# A healthy A100 with no health object at all: what every key defaults to.
HEALTHY = {
    "nvmlDeviceGetEccMode": [1, 1],
    "nvmlDeviceGetTotalEccErrors": [[0, 0], [0, 0]],
    "nvmlDeviceGetMemoryErrorCounter": [[[0, 0], [0, 0]], 0],
    "nvmlDeviceGetRetiredPages": [[], []],
    "nvmlDeviceGetRetiredPages_v2": [[], []],
    "nvmlDeviceGetRetiredPagesPendingStatus": 0,
    "nvmlDeviceGetRemappedRows": [0, 0, 0, 0],
    "nvmlDeviceGetSramEccErrorStatus": sram_struct(),
    # field 230 (recovery action NONE, unsigned int); field 1 (ECC_CURRENT) is not supported by the fake
    "nvmlDeviceGetFieldValues": [[230, 0, 1, 0, True], [1, 3, 0, 0, True]],
    "nvmlDeviceGetCurrentClocksEventReasons": 0,
    "nvmlDeviceGetCurrentClocksThrottleReasons": 0,
    "nvmlDeviceGetTemperature": 35,
    "nvmlDeviceGetTemperatureV": 35,
    # shutdown, slowdown, mem_max, gpu_max; the acoustic and GPS thresholds are not supported
    "nvmlDeviceGetTemperatureThreshold": [92, 89, 95, 87, NS, NS, NS, NS],
    "nvmlDeviceGetCurrPcieLinkGeneration": 5,
    "nvmlDeviceGetCurrPcieLinkWidth": 16,
    "nvmlDeviceGetMaxPcieLinkGeneration": 5,
    "nvmlDeviceGetMaxPcieLinkWidth": 16,
    "nvmlDeviceGetNvLinkState": [NS, NS, NS, NS],  # no "nvlink": no NVLink
    "nvmlDeviceGetGpuFabricInfoV": NS,             # no "fabric": not on an NVLink fabric
    "nvmlDeviceGetMigMode": [0, 0],
}

CLUSTER = "0d1c2b3a-4958-6776-8594-a3b2c1d0e0f1"
FABRIC = {"version": 0x2000024, "clusterUuid": "0" * 32, "status": 0, "cliqueId": 0, "state": 3, "healthMask": 0}

# id -> (the GPU's "health" object, what pynvml then reads where it differs from HEALTHY)
FAULTS = {
    "ecc_mode": ({"ecc_mode": {"current": 0, "pending": 1}},
                 {"nvmlDeviceGetEccMode": [0, 1]}),
    "ecc": ({"ecc": {"volatile": {"corrected": 5, "uncorrected": 1},
                     "aggregate": {"corrected": 120, "uncorrected": 3}}},
            {"nvmlDeviceGetTotalEccErrors": [[5, 1], [120, 3]],
             "nvmlDeviceGetMemoryErrorCounter": [[[5, 1], [120, 3]], 0]}),
    "retired_pages": ({"retired_pages": {"single_bit": 3, "double_bit": 2, "pending": True}},
                      {"nvmlDeviceGetRetiredPages": [[0x100000000, 0x100001000, 0x100002000],
                                                     [0x200000000, 0x200001000]],
                       "nvmlDeviceGetRetiredPages_v2": [
                           [{"address": 0x100000000 + i * 0x1000, "timestamp": 1700000000 + i} for i in range(3)],
                           [{"address": 0x200000000 + i * 0x1000, "timestamp": 1700000000 + i} for i in range(2)]],
                       "nvmlDeviceGetRetiredPagesPendingStatus": 1}),
    "remapped_rows": ({"remapped_rows": {"correctable": 0, "uncorrectable": 3, "pending": True, "failure": False}},
                      {"nvmlDeviceGetRemappedRows": [0, 3, 1, 0]}),
    "remapped_rows_failure": ({"remapped_rows": {"correctable": 2, "failure": True}},
                              {"nvmlDeviceGetRemappedRows": [2, 0, 0, 1]}),
    "sram_ecc": ({"sram_ecc": {"aggregate_uncorrectable_parity": 1, "aggregate_uncorrectable_secded": 2,
                               "aggregate_correctable": 3, "volatile_uncorrectable_parity": 4,
                               "volatile_uncorrectable_secded": 5, "volatile_correctable": 6,
                               "threshold_exceeded": True}},
                 {"nvmlDeviceGetSramEccErrorStatus": sram_struct(
                     aggregateUncParity=1, aggregateUncSecDed=2, aggregateCor=3, volatileUncParity=4,
                     volatileUncSecDed=5, volatileCor=6, bThresholdExceeded=1)}),
    "recovery_action": ({"recovery_action": 2},   # NVML_GPU_RECOVERY_ACTION_NODE_REBOOT
                        {"nvmlDeviceGetFieldValues": [[230, 0, 1, 2, True], [1, 3, 0, 0, True]]}),
    "recovery_action_unsupported": ({"recovery_action": None},
                                    {"nvmlDeviceGetFieldValues": [[230, 3, 0, 0, True], [1, 3, 0, 0, True]]}),
    "clocks_event_reasons": ({"clocks_event_reasons": 0x48},   # HW slowdown | HW thermal slowdown
                             {"nvmlDeviceGetCurrentClocksEventReasons": 0x48,
                              "nvmlDeviceGetCurrentClocksThrottleReasons": 0x48}),
    "temperature": ({"temperature": 91},
                    {"nvmlDeviceGetTemperature": 91, "nvmlDeviceGetTemperatureV": 91}),
    "temperature_thresholds": ({"temperature_thresholds": {"shutdown": 90, "slowdown": 85, "acoustic_max": 80}},
                               {"nvmlDeviceGetTemperatureThreshold": [90, 85, NS, NS, NS, NS, 80, NS]}),
    "pcie": ({"pcie": {"generation": 3, "width": 8}},   # a link trained down; max_* keep their defaults
             {"nvmlDeviceGetCurrPcieLinkGeneration": 3, "nvmlDeviceGetCurrPcieLinkWidth": 8}),
    "nvlink": ({"nvlink": [True, False, True]},
               {"nvmlDeviceGetNvLinkState": [1, 0, 1, INVALID]}),
    "fabric": ({"fabric": {"state": 3, "status": 0, "clique_id": 1, "cluster_uuid": CLUSTER, "health_mask": 0}},
               {"nvmlDeviceGetGpuFabricInfoV": dict(FABRIC, cliqueId=1, clusterUuid=CLUSTER.replace("-", ""))}),
    "fabric_fault": ({"fabric": {"state": 2, "status": "not_ready", "health_mask": 0x8000}},
                     {"nvmlDeviceGetGpuFabricInfoV": dict(FABRIC, state=2, status=27, healthMask=0x8000)}),
}


def description(gpu1_health=None):
    """Two A100s; GPU 1 with `gpu1_health` as its "health" object."""
    desc = fakehost.example_description(2)
    if gpu1_health is not None:
        desc["gpus"][1]["health"] = gpu1_health
    return desc


def read_all(host, lib_dir=None):
    out = host.nvml(READ, lib_dir=lib_dir)
    assert "error" not in out, out
    return out["result"]


def test_a_gpu_without_health_reads_healthy(host):
    assert read_all(host) == [HEALTHY, HEALTHY]


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_faults_read_back_exactly(make_host, fault):
    health, changed = FAULTS[fault]
    assert set(changed) <= set(HEALTHY)
    gpu0, gpu1 = read_all(make_host(description=description(health)))
    assert gpu0 == HEALTHY  # the fault is GPU 1's alone
    assert gpu1 == dict(HEALTHY, **changed)


def test_healthy_values_written_out_read_the_same(make_host):
    """The defaults, spelt out in the description, read as a GPU without "health" does."""
    health = {"ecc_mode": {"current": 1, "pending": 1},
              "ecc": {"volatile": {"corrected": 0, "uncorrected": 0}, "aggregate": {"corrected": 0, "uncorrected": 0}},
              "retired_pages": {"single_bit": 0, "double_bit": 0, "pending": False},
              "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
              "sram_ecc": {"aggregate_uncorrectable_parity": 0, "aggregate_uncorrectable_secded": 0,
                           "aggregate_correctable": 0, "volatile_uncorrectable_parity": 0,
                           "volatile_uncorrectable_secded": 0, "volatile_correctable": 0, "threshold_exceeded": False},
              "recovery_action": 0, "clocks_event_reasons": 0, "temperature": 35,
              "temperature_thresholds": {"shutdown": 92, "slowdown": 89, "gpu_max": 87, "mem_max": 95},
              "pcie": {"generation": 5, "width": 16, "max_generation": 5, "max_width": 16}}
    assert read_all(make_host(description=description(health))) == [HEALTHY, HEALTHY]


# Every health call of GPU 1 gets its own injected error, by its NVML name.
ERRORS = ["not_supported", "gpu_is_lost", "function_not_found", "no_permission", "unknown", "corrupted_inforom",
          "reset_required", "no_data", "not_ready", "insufficient_resources", 15, "timeout"]
CLASSES = {"not_supported": NS, "gpu_is_lost": "NVMLError_GpuIsLost", "function_not_found": NOT_FOUND,
           "no_permission": "NVMLError_NoPermission", "unknown": "NVMLError_Unknown",
           "corrupted_inforom": "NVMLError_CorruptedInforom", "reset_required": "NVMLError_ResetRequired",
           "no_data": "NVMLError_NoData", "not_ready": "NVMLError_NotReady",
           "insufficient_resources": "NVMLError_InsufficientResources", 15: "NVMLError_GpuIsLost",
           "timeout": "NVMLError_Timeout"}


def raised(op, cls):
    """What READ shows for `op` when every call of it raises `cls`."""
    return [cls] * len(HEALTHY[op]) if op in ("nvmlDeviceGetTemperatureThreshold", "nvmlDeviceGetNvLinkState") else cls


def test_errors_injected_by_function_name(make_host):
    desc = description()
    ops = sorted(HEALTHY)
    injected = {op: ERRORS[i % len(ERRORS)] for i, op in enumerate(ops)}
    desc["gpus"][1]["errors"] = injected
    gpu0, gpu1 = read_all(make_host(description=desc))
    assert gpu0 == HEALTHY
    assert gpu1 == {op: raised(op, CLASSES[injected[op]]) for op in ops}


def test_an_error_for_one_call_leaves_the_others(make_host):
    desc = description()
    desc["gpus"][1]["errors"] = {"nvmlDeviceGetRemappedRows": "not_supported",
                                 "nvmlDeviceGetCurrentClocksEventReasons": "function_not_found"}
    gpu0, gpu1 = read_all(make_host(description=desc))
    assert gpu0 == HEALTHY
    # the older name of the same query is another function: it still answers
    assert gpu1 == dict(HEALTHY, nvmlDeviceGetRemappedRows=NS, nvmlDeviceGetCurrentClocksEventReasons=NOT_FOUND)


def test_host_wide_errors_and_per_gpu_precedence(make_host):
    desc = description()
    desc["errors"] = {"nvmlDeviceGetTemperature": "unknown", "nvmlDeviceGetEccMode": "no_permission"}
    desc["gpus"][1]["errors"] = {"nvmlDeviceGetTemperature": "not_supported"}  # per GPU wins
    gpu0, gpu1 = read_all(make_host(description=desc))
    assert gpu0 == dict(HEALTHY, nvmlDeviceGetTemperature="NVMLError_Unknown",
                        nvmlDeviceGetEccMode="NVMLError_NoPermission")
    assert gpu1 == dict(HEALTHY, nvmlDeviceGetTemperature=NS, nvmlDeviceGetEccMode="NVMLError_NoPermission")


def test_any_error_of_a_gpu_stops_at_its_handle(make_host):
    """"any" matches every per-GPU op, the handle lookup included, as for the other calls."""
    desc = description()
    desc["gpus"][1]["errors"] = {"any": "gpu_is_lost"}
    host = make_host(description=desc)
    assert host.nvml("pynvml.nvmlInit()\npynvml.nvmlDeviceGetHandleByIndex(1)")["error"] == "NVMLError_GpuIsLost"
    out = host.nvml(READ.replace("for i in range(pynvml.nvmlDeviceGetCount())", "for i in [0]"))
    assert out["result"] == [HEALTHY], out


ABSENT_IN_OLD_DRIVER = ("nvmlDeviceGetRemappedRows", "nvmlDeviceGetFieldValues", "nvmlDeviceGetGpuFabricInfoV",
                        "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetSramEccErrorStatus")


def test_old_driver_lacks_the_newer_symbols(make_host):
    assert os.path.exists(os.path.join(OLD_LIB_DIR, "libnvidia-ml.so.1")), fakehost.SETUP_HINT
    health, faulty = {}, dict(HEALTHY)
    for fault in ("retired_pages", "remapped_rows", "clocks_event_reasons", "temperature", "fabric", "nvlink"):
        health.update(FAULTS[fault][0])
        faulty.update(FAULTS[fault][1])
    host = make_host(description=description(health))
    assert read_all(host) == [HEALTHY, faulty]  # the current build answers every call
    absent = {op: NOT_FOUND for op in ABSENT_IN_OLD_DRIVER}
    gpu0, gpu1 = read_all(host, lib_dir=OLD_LIB_DIR)
    assert gpu0 == dict(HEALTHY, **absent)
    assert gpu1 == dict(faulty, **absent)  # ThrottleReasons still reads 0x48, the retired pages, ...
    code = ("import os\npynvml.nvmlInit()\n"
            "result = [os.path.realpath(l.split()[-1]) for l in open('/proc/self/maps') if 'libnvidia-ml' in l][0]\n")
    loaded = host.nvml(code, lib_dir=OLD_LIB_DIR)["result"]
    assert loaded == os.path.realpath(os.path.join(OLD_LIB_DIR, "libnvidia-ml.so.1"))


LAYOUT = r"""
import ctypes
from ctypes import byref
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(1)
result = {}

def outcome(f):
    try:
        return f()
    except pynvml.NVMLError as exc:
        return type(exc).__name__

# fabric: a v2 struct is filled up to its 36 bytes, a v3 one adds healthSummary; other versions refused
buf = (ctypes.c_uint8 * 64)(*([0xAA] * 64))
v2 = pynvml.c_nvmlGpuFabricInfo_v2_t.from_buffer(buf)
v2.version = pynvml.nvmlGpuFabricInfo_v2
pynvml.nvmlDeviceGetGpuFabricInfoV(h, byref(v2))
result["v2"] = [v2.state, v2.status, v2.cliqueId, v2.healthMask, bytes(v2.clusterUuid).hex(), bytes(buf[36:]).hex()]
v3 = pynvml.c_nvmlGpuFabricInfo_v3_t()
pynvml.nvmlDeviceGetGpuFabricInfoV(h, byref(v3))
result["v3"] = [v3.version, v3.state, v3.cliqueId, v3.healthSummary]
bad = pynvml.c_nvmlGpuFabricInfo_v2_t()
bad.version = 0x1000024
result["fabric_v1"] = outcome(lambda: pynvml.nvmlDeviceGetGpuFabricInfoV(h, byref(bad)))

# SRAM ECC: versioned like NVML
sram = pynvml.c_nvmlEccSramErrorStatus_v1_t()
sram.version = 0x1000060
result["sram_bad_version"] = outcome(lambda: pynvml.nvmlDeviceGetSramEccErrorStatus(h, byref(sram)))

# TemperatureV: the version check is NVML's (pynvml's wrapper refuses other versions itself)
temp = pynvml.c_nvmlTemperature_v1_t()
temp.version, temp.sensorType = 0x2000010, 0
result["tempv_bad_version"] = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetTemperatureV")(h, byref(temp))
result["temp_sensors"] = [outcome(lambda s=s: pynvml.nvmlDeviceGetTemperature(h, s)) for s in range(3)]

# retired pages, count in/out like NVML: too small -> InsufficientSize and the count needed
fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetRetiredPages")
count, pages = ctypes.c_uint(1), (ctypes.c_ulonglong * 8)()
small = fn(h, 0, byref(count), pages)
small_count = count.value
count.value = 8
enough = fn(h, 0, byref(count), pages)
null_buffer = fn(h, 0, byref(ctypes.c_uint(8)), None)
result["retired"] = [small, small_count, enough, count.value, list(pages[:4]), null_buffer,
                     outcome(lambda: pynvml.nvmlDeviceGetRetiredPages(h, 2))]

# an error type, a memory location and a threshold type out of range
LOCATIONS, THRESHOLDS = pynvml.NVML_MEMORY_LOCATION_COUNT, pynvml.NVML_TEMPERATURE_THRESHOLD_COUNT
result["ecc_bad"] = [outcome(lambda: pynvml.nvmlDeviceGetTotalEccErrors(h, 2, 0)),
                     outcome(lambda: pynvml.nvmlDeviceGetMemoryErrorCounter(h, 0, 0, LOCATIONS)),
                     outcome(lambda: pynvml.nvmlDeviceGetTemperatureThreshold(h, THRESHOLDS))]
"""


def test_structures_and_arguments_as_nvml(make_host):
    health = {"fabric": {"clique_id": 9, "cluster_uuid": CLUSTER, "health_summary": 2},
              "retired_pages": {"single_bit": 3}}
    out = make_host(description=description(health)).nvml(LAYOUT)
    assert "error" not in out, out
    res = out["result"]
    assert res["v2"] == [3, 0, 9, 0, CLUSTER.replace("-", ""), "aa" * 28]
    assert res["v3"] == [0x3000028, 3, 9, 2]
    assert res["fabric_v1"] == "NVMLError_ArgumentVersionMismatch"
    assert res["sram_bad_version"] == "NVMLError_ArgumentVersionMismatch"
    assert res["tempv_bad_version"] == 25  # NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    assert res["temp_sensors"] == [35, NS, INVALID]
    assert res["retired"] == [7, 3, 0, 3, [0x100000000, 0x100001000, 0x100002000, 0], 2, INVALID]
    assert res["ecc_bad"] == [INVALID, INVALID, INVALID]


MIG = """
pynvml.nvmlInit()
result = []
for i in range(pynvml.nvmlDeviceGetCount()):
    try:
        result.append(pynvml.nvmlDeviceGetMigMode(pynvml.nvmlDeviceGetHandleByIndex(i)))
    except pynvml.NVMLError as exc:
        result.append(type(exc).__name__)
"""


def test_mig_mode_from_the_description(make_host):
    desc = fakehost.example_description(4)
    desc["gpus"][0]["mig_mode"] = {"current": 1, "pending": 1}
    desc["gpus"][1]["mig_mode"] = {"pending": 1}            # enabled at the next reset
    desc["gpus"][2]["name"] = "NVIDIA L40S"                  # no MIG on this board, whatever it says
    desc["gpus"][2]["mig_mode"] = {"current": 1, "pending": 1}
    out = make_host(description=desc).nvml(MIG)
    assert out["result"] == [[1, 1], [0, 1], NS, [0, 0]], out


# One process: read, rewrite the description as fakehost.write_description does (a new file renamed over
# it) or in place, read again at once.
CHANGES = r"""
import json, os, time
PATH = %r

def rewrite(change, in_place=False):
    with open(PATH) as handle:
        desc = json.load(handle)
    change(desc["gpus"][0].setdefault("health", {}), desc["gpus"][0])
    text = json.dumps(desc, indent=2) + "\n"
    if in_place:
        with open(PATH, "r+") as handle:
            handle.write(text)
            handle.truncate()
    else:
        with open(PATH + ".new", "w") as handle:
            handle.write(text)
        os.replace(PATH + ".new", PATH)

def temperature():
    try:
        return pynvml.nvmlDeviceGetTemperature(h, 0)
    except pynvml.NVMLError as exc:
        return type(exc).__name__

pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
seen = [temperature()]
rewrite(lambda health, gpu: health.update(temperature=36)); seen.append(temperature())
rewrite(lambda health, gpu: health.update(temperature=37)); seen.append(temperature())   # same size
rewrite(lambda health, gpu: health.update(temperature=101), in_place=True); seen.append(temperature())
rewrite(lambda health, gpu: gpu.update(errors={"nvmlDeviceGetTemperature": "gpu_is_lost"})); seen.append(temperature())
rewrite(lambda health, gpu: gpu.update(errors={})); seen.append(temperature())

# Unchanged, the description is not parsed again: with 8 MB of it, a call after a change parses it,
# the calls after that do not.
rewrite(lambda health, gpu: gpu.update(padding="x" * 8000000))
def timed():
    start = time.perf_counter()
    temperature()
    return time.perf_counter() - start
first = timed()
again = sorted(timed() for _ in range(40))
result = {"seen": seen, "first": first, "median": again[len(again) // 2]}
"""


def test_description_changes_are_seen_by_the_next_call(host):
    out = host.nvml(CHANGES % DESCRIPTION)
    assert "error" not in out, out
    res = out["result"]
    assert res["seen"] == [35, 36, 37, 101, "NVMLError_GpuIsLost", 101]
    # parsing 8 MB takes milliseconds; an unchanged description costs a stat (microseconds)
    assert res["median"] * 20 < res["first"], res
