"""gpu_info and gpu_persistence on fake GPU hosts, against NVIDIA's real daemons
(535 and 550), the bundled daemon, the fake NVML (no daemon) and Debian's real libnvidia-ml1.

The modules run as programs inside the host's mount namespace (what AnsiballZ
does on a managed host), with the arguments Ansible would pass.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile

import pytest

import fakehost
from fakehost import wait_gone

COLLECTIONS = fakehost.COLLECTIONS_DIR
BUNDLED = os.path.join(fakehost.REPO_DIR, "files", "gpufleet-persistenced")
STATE = "/run/gpufleet/persistence.json"  # inside the host: /run is the host tree's, never the machine's


def run_module(host, name, check_mode=False, diff=False, lib_dir=None, **args):
    """Run gpufleet.nvidia.<name> in the host; returns (rc, result dict)."""
    args = dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, dir=host.dir) as handle:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, handle)
    argv = [sys.executable, "-m", "ansible_collections.gpufleet.nvidia.plugins.modules.%s" % name, handle.name]
    if lib_dir:
        argv = ["env", "LD_LIBRARY_PATH=%s" % lib_dir] + argv
    env = dict(os.environ, PYTHONPATH=COLLECTIONS)
    proc = subprocess.run(fakehost.nsrun_argv(host.dir, argv), capture_output=True, text=True, timeout=60, env=env)
    os.unlink(handle.name)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, "module %s printed no JSON: rc=%d stdout=%r stderr=%r" % (name, proc.returncode, proc.stdout,
                                                                            proc.stderr)
    return proc.returncode, json.loads(lines[-1])


def state_file(host):
    path = os.path.join(host.dir, "run", "gpufleet", "persistence.json")
    with open(path) as handle:
        return json.load(handle)


def modes(result):
    return dict((g["index"], g["persistence_mode"]) for g in result["gpus"])


MIXED = [{"gpu": 0, "mode": "disabled"},                                   # by index
         {"gpu": "GPU-0000a102-1111-2222-3333-000000000002", "mode": "disabled"},  # by UUID
         {"gpu": "00000000:05:00.0", "mode": "disabled"},                  # NVML bus id
         {"gpu": "07:00.0", "mode": "disabled"},                           # lspci form
         {"gpu": 1, "mode": "enabled"}, {"gpu": 3, "mode": "enabled"},
         {"gpu": 5, "mode": "enabled"}, {"gpu": 7, "mode": "enabled"}]
EXPECTED = {0: "disabled", 1: "enabled", 2: "disabled", 3: "enabled",
            4: "disabled", 5: "enabled", 6: "disabled", 7: "enabled"}


def held(host):
    """Bus ids whose GPU the daemon holds open: the fake libnvidia-cfg's log for NVIDIA's
    daemon, the /dev/nvidiaN descriptors it holds for the bundled one."""
    if host.nvidia:
        return host.held()
    pid = host.daemon_pid()
    minors = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        name = os.path.basename(target)
        if target.startswith("/dev/nvidia") and name[6:].isdigit():
            minors.add(int(name[6:]))
    return set("0000:%02x:00.0" % (minor + 1) for minor in minors)  # example hosts: bus = minor + 1


def start_bundled(host, *options):
    argv = fakehost.nsrun_argv(host.dir, ["/usr/bin/python3", BUNDLED, "--state-file", STATE] + list(options))
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, "bundled daemon failed: %r %r" % (proc.stdout, proc.stderr)
    host.daemon_pids.append(host.daemon_pid())


def apply_saved(host):
    """What the service we install runs right after NVIDIA's daemon starts."""
    argv = fakehost.nsrun_argv(host.dir, ["/usr/bin/python3", BUNDLED, "--apply-saved-modes", "--state-file", STATE])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


@pytest.mark.parametrize("daemon", sorted(fakehost.NVIDIA_DAEMONS) + ["bundled"])
def test_mixed_modes_on_8_gpus_survive_a_daemon_restart(make_host, daemon):
    host = make_host(gpus=8, nvidia=daemon if daemon in fakehost.NVIDIA_DAEMONS else None)
    os.makedirs(os.path.join(host.dir, "run", "gpufleet"))
    if host.nvidia:
        host.start_daemon()
    else:
        start_bundled(host)

    rc, info = run_module(host, "gpu_info")
    assert rc == 0, info
    assert info["daemon"]["kind"] == ("nvidia" if host.nvidia else "bundled") and info["daemon"]["answers"] is True
    assert info["backend"] == "rpc" and info["count"] == 8
    assert info["driver_version"] == "535.171.04"
    assert set(modes(info).values()) == {"enabled"}

    # check mode predicts and changes nothing, not even the state file
    rc, result = run_module(host, "gpu_persistence", check_mode=True, diff=True, modes=MIXED, state_file=STATE)
    assert rc == 0 and result["changed"] is True, result
    assert [g["after"] for g in result["gpus"]] == [EXPECTED[i] for i in range(8)]
    assert len(held(host)) == 8
    assert not os.path.exists(os.path.join(host.dir, "run", "gpufleet", "persistence.json"))
    assert "GPU 2 (GPU-0000a102-1111-2222-3333-000000000002, 00000000:03:00.0): disabled" in result["diff"][0]["after"]

    # one call sets the mixed modes
    rc, result = run_module(host, "gpu_persistence", diff=True, modes=MIXED, state_file=STATE)
    assert rc == 0 and result["changed"] is True, result
    assert sum(g["changed"] for g in result["gpus"]) == 4
    assert modes(run_module(host, "gpu_info")[1]) == EXPECTED
    assert held(host) == set("0000:%02x:00.0" % (i + 1) for i, m in EXPECTED.items() if m == "enabled")
    saved = state_file(host)
    assert saved["gpus"]["GPU-0000a100-1111-2222-3333-000000000000"] == {"mode": "disabled",
                                                                         "pci_bus_id": "00000000:01:00.0"}
    assert saved["default_mode"] is None

    # second run: nothing to do
    rc, again = run_module(host, "gpu_persistence", modes=MIXED, state_file=STATE)
    assert rc == 0 and again["changed"] is False and again["state_changed"] is False, again

    # restart the daemon: each GPU comes back to its own mode, not the global default
    pid = host.stop_daemon()
    assert wait_gone(pid)
    if host.nvidia:
        host.start_daemon()
        assert len(held(host)) == 8  # NVIDIA's daemon resets every GPU to its default...
        apply_saved(host)             # ...and the service's post-start step restores them
    else:
        start_bundled(host)
    assert modes(run_module(host, "gpu_info")[1]) == EXPECTED


def test_all_gpus_records_the_default_for_cards_added_later(make_host, nvidia):
    host = make_host(gpus=2, nvidia=nvidia)
    host.start_daemon()
    rc, result = run_module(host, "gpu_persistence", gpus=["all"], mode="disabled", state_file=STATE)
    assert rc == 0 and result["changed"] is True
    assert state_file(host)["default_mode"] == "disabled"
    assert host.held() == set()


def test_unknown_selector_fails_listing_the_gpus_and_changes_nothing(make_host, nvidia):
    host = make_host(gpus=2, nvidia=nvidia)
    host.start_daemon()
    rc, result = run_module(host, "gpu_persistence", gpus=[0, "GPU-nope"], mode="disabled", state_file=STATE)
    assert rc == 1 and result["failed"] is True
    assert "no GPU matches 'GPU-nope'" in result["msg"]
    assert "GPU 1 (GPU-0000a101-1111-2222-3333-000000000001, 00000000:02:00.0)" in result["msg"]
    assert len(host.held()) == 2
    assert not os.path.exists(os.path.join(host.dir, "run", "gpufleet"))


def test_daemon_failure_mid_run_rolls_back_and_leaves_state_file(make_host, nvidia):
    host = make_host(gpus=3, nvidia=nvidia)
    host.start_daemon()
    host.inject("cfg_open", "unknown", gpu=2)  # the driver refuses to open GPU 2
    run_module(host, "gpu_persistence", gpus=[2], mode="disabled", state_file=STATE)  # release it first
    rc, result = run_module(host, "gpu_persistence", gpus=["all"], mode="disabled", state_file=STATE)
    assert rc == 0
    rc, result = run_module(host, "gpu_persistence", gpus=["all"], mode="enabled", state_file=STATE)
    assert rc == 1, result
    assert "GPU 2 (GPU-0000a102" in result["msg"] and "set back" in result["msg"]
    assert host.held() == set()  # GPUs 0 and 1 were enabled, then set back
    assert state_file(host)["default_mode"] == "disabled"  # untouched by the failed run


def test_nvml_legacy_path_without_daemon(make_host):
    host = make_host(gpus=2)
    rc, info = run_module(host, "gpu_info")
    assert rc == 0 and info["backend"] == "nvml" and info["daemon"]["kind"] == "none", info
    before = modes(info)
    rc, result = run_module(host, "gpu_persistence", gpus=["0000:02:00.0"], mode="enabled", state_file=STATE)
    assert rc == 0 and result["changed"] is True, result
    assert "legacy kernel path" in json.dumps(result.get("warnings")), result
    assert host.legacy()["0000:02:00.0"] == 1
    assert modes(run_module(host, "gpu_info")[1])[1] == "enabled"
    rc, again = run_module(host, "gpu_persistence", gpus=["0000:02:00.0"], mode="enabled", state_file=STATE)
    assert again["changed"] is False and "legacy kernel path" not in json.dumps(again.get("warnings"))
    assert before[0] == modes(run_module(host, "gpu_info")[1])[0]


@pytest.mark.parametrize("error,words", [
    ("driver_not_loaded", ["NVML DriverNotLoaded", "modprobe nvidia"]),
    ("lib_rm_version_mismatch", ["NVML LibRmVersionMismatch", "reboot the host"]),
    ("gpu_is_lost", ["NVML GpuIsLost", "Xid", "GPU 1 (GPU-0000a101"]),
])
def test_nvml_errors_reach_the_user_with_a_remedy(make_host, error, words):
    host = make_host(gpus=2)
    if error == "gpu_is_lost":
        host.inject("get_persistence", error, gpu=1)
    else:
        host.inject("init", error)
    rc, result = run_module(host, "gpu_persistence", mode="enabled", state_file=STATE)
    assert rc == 1
    for word in words:
        assert word in result["msg"], result["msg"]


def test_set_as_non_root_names_become(make_host):
    host = make_host(gpus=1)
    code = ("import pynvml; pynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(0)\n"
            "try:\n    pynvml.nvmlDeviceSetPersistenceMode(h, 1); result = 'set'\n"
            "except pynvml.NVMLError as exc:\n    result = type(exc).__name__\n")
    assert host.nvml(code, user="nobody") == {"result": "NVMLError_NoPermission"}
    sys.path.insert(0, COLLECTIONS)
    import pynvml
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import backends
    message = backends.nvml_error_message(pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION), "setting persistence on")
    assert "become: true" in message


def test_real_nvml_without_driver_gives_the_clear_message(make_host):
    host = make_host(gpus=1)
    rc, result = run_module(host, "gpu_info", lib_dir=fakehost.REAL_NVML_DIR)
    assert rc == 1
    assert "NVML DriverNotLoaded" in result["msg"] and "modprobe nvidia" in result["msg"], result["msg"]


def test_rpc_backend_forced_without_daemon_says_what_to_do(make_host):
    host = make_host(gpus=1)
    rc, result = run_module(host, "gpu_info", backend="rpc")
    assert rc == 1 and "no persistence daemon answers" in result["msg"]
    assert "gpufleet.nvidia.persistenced" in result["msg"]
