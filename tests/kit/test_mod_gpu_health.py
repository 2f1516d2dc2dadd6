"""gpu_health on fake GPU hosts: real nvidia-ml-py (pynvml) on the driver kit's fake libnvidia-ml.so.1, every fault
of the fault table through it, a driver library without the newer symbols, an XID kernel log fixture, and the
Prometheus textfile.

The module runs as a program inside the host's mount namespace (what AnsiballZ does on a managed host). The fake
library is what cannot exist here (no GPU, no kernel driver); pynvml, the module and the metrics writer are real.
"""

import os
import stat

import pytest

import fakehost
from test_mod_gpu_persistence import run_module

from ansible_collections.gpufleet.nvidia.plugins.module_utils.health.xid import gpu_bus_key as xid_bus

OLD_DRIVER = os.path.join(fakehost.CACHE_DIR, "build", "lib", "old")


def with_health(host, gpu, **health):
    desc = host.description
    desc["gpus"][gpu].setdefault("health", {}).update(health)
    host.set_description(desc)


def by_check(result, gpu):
    return dict((c["check"], c) for c in result["checks"] if c["gpu"] == gpu)


def test_a_healthy_host_passes_with_every_value_read(host):
    rc, result = run_module(host, "gpu_health", check_mode=True, kernel_log="auto", report_passed=True)
    assert rc == 0, result
    assert (result["verdict"], result["action"], result["changed"]) == ("PASS", "none", False), result["reasons"]
    assert sorted(result["passed"]["ecc"]) == [0, 1] and result["passed"]["gpu_count"] == [None]
    assert result["metrics_file"] is None  # check mode writes nothing
    assert result["driver_version"] == host.description["driver_version"]
    assert [g["uuid"] for g in result["gpus"]] == [g["uuid"] for g in host.description["gpus"]]
    read = dict((name, check["value"]) for name, check in by_check(result, 0).items())
    assert read["ecc"]["volatile_uncorrected"] == 0 and read["remapped_rows"]["failure"] is False
    assert read["recovery_action"] == 0 and read["pcie"]["max_width"] >= read["pcie"]["width"] > 0
    assert read["temperature"]["current"] < read["temperature"]["slowdown"]
    assert "gpus" in result and all("raw" not in gpu for gpu in result["gpus"])  # the values once, in the checks
    # the kernel log of this machine (no NVIDIA driver, no XID), read for real: the host's /dev has no kmsg device,
    # so the ring buffer through syslog(2), as dmesg reads it
    assert result["xid"]["source"] == "syslog(2)" and result["xid"]["error"] is None
    assert result["xid"]["events"] == 0 and by_check(result, None)["xid"]["verdict"] == "PASS"


FAULTS = [
    ({"ecc": {"volatile": {"uncorrected": 2}}}, "ecc", "FAIL", "reset_gpu"),
    ({"retired_pages": {"double_bit": 63}}, "retired_pages", "FAIL", "replace_gpu"),
    ({"retired_pages": {"pending": True}}, "retired_pages", "WARN", "reset_gpu"),
    ({"remapped_rows": {"failure": True}}, "remapped_rows", "FAIL", "replace_gpu"),
    ({"remapped_rows": {"pending": True}}, "remapped_rows", "WARN", "reset_gpu"),
    ({"remapped_rows": {"uncorrectable": 600}}, "remapped_rows", "WARN", "service"),
    ({"sram_ecc": {"threshold_exceeded": True}}, "sram_ecc", "FAIL", "replace_gpu"),
    ({"recovery_action": 2}, "recovery_action", "FAIL", "reboot_node"),
    ({"recovery_action": 3}, "recovery_action", "WARN", "drain"),
    ({"clocks_event_reasons": 0x40}, "clocks", "WARN", "service"),
    ({"temperature": 95}, "temperature", "FAIL", "service"),
    ({"pcie": {"width": 8}}, "pcie", "WARN", "service"),
    ({"nvlink": [True, True, False, True]}, "nvlink", "WARN", "reset_gpu"),
    ({"fabric": {"state": 1, "status": 0, "clique_id": 0, "health_mask": 0}}, "fabric", "FAIL", "service"),
    ({"fabric": {"state": 2, "status": 0, "clique_id": 0, "health_mask": 0}}, "fabric", "WARN", "drain"),
    ({"fabric": {"state": 3, "status": 0, "clique_id": 1, "health_mask": 4}}, "fabric", "WARN", "service"),
    ({"ecc_mode": {"current": 0, "pending": 0}}, "ecc", "WARN", "service"),
    ({"sram_ecc": {"volatile_uncorrectable_parity": 2}}, "sram_ecc", "WARN", "reset_gpu"),
    ({"recovery_action": 1}, "recovery_action", "FAIL", "reset_gpu"),
    ({"recovery_action": 4}, "recovery_action", "FAIL", "reset_gpu"),
    ({"recovery_action": 7}, "recovery_action", "FAIL", "reboot_node"),
    ({"clocks_event_reasons": 0x80}, "clocks", "WARN", "service"),
    ({"temperature": 89}, "temperature", "WARN", "service"),
    ({"temperature": 80, "temperature_thresholds": {"shutdown": 85, "slowdown": 80}}, "temperature", "WARN", "service"),
    ({"nvlink": [False] * 4}, "nvlink", "PASS", "none"),
]


@pytest.mark.parametrize("health, check, verdict, action", FAULTS, ids=[f[1] + "-" + f[2] for f in FAULTS])
def test_each_fault_gives_its_verdict_on_its_gpu_alone(make_host, health, check, verdict, action):
    host = make_host(gpus=2)
    with_health(host, 1, **health)
    rc, result = run_module(host, "gpu_health", check_mode=True)
    assert rc == 0, result
    assert (result["verdict"], result["gpus"][1]["verdict"], result["gpus"][0]["verdict"]) == (verdict, verdict, "PASS")
    if verdict == "PASS":  # a state the check does not count: no NVLink bridge at all is not a link down
        assert result["checks"] == [] and sorted(result["passed"][check]) == [0, 1]
        return
    # the failing check alone, in full, with its action; the same check passed on the other GPU
    assert [(c["gpu"], c["check"], c["verdict"], c["action"]) for c in result["checks"]] == [(1, check, verdict, action)]
    assert result["passed"][check] == [0]


def test_an_nvml_error_makes_one_check_unknown_and_a_lost_gpu_fails(host):
    host.inject("nvmlDeviceGetRemappedRows", "unknown", gpu=0)
    host.inject("nvmlDeviceGetTotalEccErrors", "gpu_is_lost", gpu=1)
    rc, result = run_module(host, "gpu_health", check_mode=True)
    assert rc == 0, result
    assert by_check(result, 0)["remapped_rows"]["verdict"] == "UNKNOWN"
    assert by_check(result, 1)["ecc"]["verdict"] == "FAIL" and by_check(result, 1)["ecc"]["action"] == "reboot_node"
    assert by_check(result, 0)["remapped_rows"]["evidence"] == "Unknown Error"
    assert (result["verdict"], result["action"]) == ("FAIL", "reboot_node")


def test_a_driver_without_the_newer_symbols_gives_unknown_never_a_crash(host):
    rc, result = run_module(host, "gpu_health", check_mode=True, lib_dir=OLD_DRIVER, report_passed=True)
    assert rc == 0, result
    missing = sorted(c["check"] for c in result["checks"] if c["gpu"] == 0 and c["verdict"] == "UNKNOWN")
    assert missing == ["clocks", "fabric", "recovery_action", "remapped_rows", "sram_ecc"], result["checks"]
    assert all("lacks the call" in c["reason"] for c in result["checks"] if c["verdict"] == "UNKNOWN")
    assert result["verdict"] == "UNKNOWN" and by_check(result, 0)["ecc"]["verdict"] == "PASS"


def test_no_driver_is_one_clear_node_verdict(host):
    host.inject("init", "driver_not_loaded")
    rc, result = run_module(host, "gpu_health", check_mode=True)
    assert rc == 0, result
    assert [(c["check"], c["verdict"]) for c in result["checks"]] == [("nvml", "FAIL")]
    assert "kernel driver is not loaded" in result["msg"] and result["gpus"] == []


def test_the_contract_counts_models_and_bus_ids(make_host):
    host = make_host(gpus=2)
    gpus = host.description["gpus"]
    good = {"gpu_count": 2, "gpu_model": gpus[0]["name"][:8] + "*", "pci_bus_ids": [g["pci_bus_id"] for g in gpus],
            "driver_branch": host.description["driver_version"].split(".")[0]}
    rc, result = run_module(host, "gpu_health", check_mode=True, contract=good)
    assert rc == 0 and result["verdict"] == "PASS", result["reasons"]
    rc, result = run_module(host, "gpu_health", check_mode=True, contract=dict(good, gpu_count=3, driver_branch="999"))
    assert (result["verdict"], result["action"]) == ("FAIL", "service"), result["reasons"]
    assert sorted(r.split(":")[0] for r in result["reasons"]) == ["driver", "gpu_count"]
    rc, result = run_module(host, "gpu_health", check_mode=True, contract={"gpu_cuont": 2})
    assert rc == 1 and "gpu_cuont" in result["msg"], result


XIDS = ("6,900,41234567,-;NVRM: Xid (PCI:0000:%s): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit "
        "error (DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 0.\n"
        "6,901,41234600,-;NVRM: Xid (PCI:0000:%s): 13, pid=4242, name=python3, Graphics SM Warp Exception\n")


def test_xids_from_a_kernel_log_fixture_land_on_their_gpu(host):
    buses = [xid_bus(g["pci_bus_id"]) for g in host.description["gpus"]]  # 0000:01:00 as the driver prints it
    log = os.path.join(host.dir, "kern.log")
    with open(log, "w") as handle:
        handle.write(XIDS % (buses[1][5:], buses[0][5:]))
    rc, result = run_module(host, "gpu_health", check_mode=True, kernel_log=log, report_passed=True)
    assert rc == 0, result
    assert by_check(result, 0)["xid"]["verdict"] == "PASS" and by_check(result, 0)["xid"]["value"] == {"13": 1}
    xid = by_check(result, 1)["xid"]
    assert (xid["verdict"], xid["action"], xid["value"]) == ("FAIL", "reset_gpu", {"48": 1})
    assert "double bit" in xid["evidence"][0] and result["xid"] == {"source": log, "complete": True, "error": None,
                                                                    "events": 2}
    rc, result = run_module(host, "gpu_health", check_mode=True, kernel_log=log, contract={"xid_ignore": [48]})
    assert result["verdict"] == "PASS"


def test_metrics_are_written_atomically_and_cleared_with_the_fault(host):
    directory = os.path.join(host.dir, "var", "lib", "prometheus", "node-exporter")
    rc, result = run_module(host, "gpu_health", textfile_directory=directory)
    assert rc == 0 and result["metrics_file"] is None and not os.path.exists(directory)  # no directory: nothing
    rc, result = run_module(host, "gpu_health", textfile_directory=directory, textfile_create=True)
    path = os.path.join(directory, "gpufleet_health.prom")
    assert result["metrics_file"] == path and result["changed"] is False
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644 and os.listdir(directory) == ["gpufleet_health.prom"]
    assert "gpufleet_health_status 0\n" in open(path).read()
    with_health(host, 0, ecc={"volatile": {"uncorrected": 1}})
    run_module(host, "gpu_health", textfile_directory=directory)
    text = open(path).read()
    assert "gpufleet_health_status 3\n" in text and 'gpufleet_health_action{action="reset_gpu"} 1\n' in text
    assert 'counter="volatile",type="uncorrected"} 1\n' in text
    with_health(host, 0, ecc={"volatile": {"uncorrected": 0}})
    rc, result = run_module(host, "gpu_health", textfile_directory=directory)
    assert result["verdict"] == "PASS" and "gpufleet_health_status 0\n" in open(path).read()
    assert os.listdir(directory) == ["gpufleet_health.prom"]


def test_mig_against_the_contract_and_a_pending_change(make_host):
    host = make_host(gpus=2)
    desc = host.description
    desc["gpus"][1]["name"] = "NVIDIA H100 80GB HBM3"  # a MIG-capable board
    desc["gpus"][1]["mig_mode"] = {"current": 0, "pending": 1}
    host.set_description(desc)
    rc, result = run_module(host, "gpu_health", check_mode=True)
    assert rc == 0 and (by_check(result, 1)["mig"]["verdict"], by_check(result, 1)["mig"]["action"]) == (
        "WARN", "reset_gpu"), result
    rc, result = run_module(host, "gpu_health", check_mode=True, contract={"mig_mode": "enabled"})
    mig = by_check(result, 1)["mig"]
    assert (mig["verdict"], mig["action"], mig["value"], mig["threshold"]) == ("FAIL", "service", "disabled", "enabled")
