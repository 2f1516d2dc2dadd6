"""NVIDIA's nvidia-persistenced on the fake driver, driven over RPC: every test runs against each
version the kit has (Debian 12's 535, Debian 13's 550; ids nvidia535, nvidia550)."""

import os
import shutil
import signal
import socket
import stat
import struct
import subprocess
import time

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import rpc

import fakehost
from fakehost import wait_gone

GPU0, GPU1 = "0000:01:00.0", "0000:02:00.0"


@pytest.fixture
def host(make_host, nvidia):
    """Every test here runs once with each of NVIDIA's daemons."""
    return make_host(nvidia=nvidia)


def client(host, **kwargs):
    return rpc.PersistencedClient(host.tree.socket, **kwargs)


def test_start_creates_run_dir_pid_socket_and_opens_every_gpu(host):
    host.start_daemon()
    run_dir = os.stat(host.tree.run_dir)
    assert stat.S_IMODE(run_dir.st_mode) == 0o755
    pid = host.daemon_pid()
    assert os.path.exists("/proc/%d" % pid)
    with open("/proc/%d/cmdline" % pid, "rb") as handle:
        assert b"nvidia-persistenced" in handle.read()
    sock = os.stat(host.tree.socket)
    assert stat.S_ISSOCK(sock.st_mode)
    assert stat.S_IMODE(sock.st_mode) == host.traits["socket_mode"]  # 535: 0777; Debian 13's 550: 0775
    assert host.held() == {GPU0, GPU1}
    host.wait_log("Started (%d)" % pid)
    with client(host) as c:
        c.null()
        assert c.get_persistence_mode(GPU0) == rpc.MODE_ENABLED


def test_version_and_help(host):
    argv = host.daemon_argv()
    daemon = argv[argv.index("--") + 1]
    version = subprocess.run([daemon, "--version"], capture_output=True, text=True, check=True).stdout
    assert "nvidia-persistenced:  version %d." % host.traits["major"] in version
    usage = subprocess.run([daemon, "--help"], capture_output=True, text=True, check=True).stdout
    for option in ("--verbose", "--user", "--group", "--persistence-mode, --no-persistence-mode",
                   "--nvidia-cfg-path"):
        assert option in usage
    assert ("--uvm-persistence-mode, --no-uvm-persistence-mode" in usage) == host.traits["uvm_option"]
    assert "--foreground" not in usage


def test_v1_and_v2_set_change_what_the_driver_holds(host):
    host.start_daemon("--verbose")
    with client(host) as c:  # one connection for all calls
        c.set_persistence_mode(GPU0, rpc.MODE_DISABLED)
        assert host.held() == {GPU1}
        assert c.get_persistence_mode(GPU0) == 0
        assert c.get_persistence_mode("01:00.0") == 0  # lspci form
        c.set_persistence_mode(GPU0, rpc.MODE_DISABLED)  # no-op
        assert host.held() == {GPU1}
        c.set_persistence_mode_only("00000000:02:00.0", rpc.MODE_DISABLED)
        assert host.held() == set()
        c.set_persistence_mode_only(GPU0, rpc.MODE_ENABLED)
        c.set_persistence_mode(GPU1, rpc.MODE_ENABLED)
        assert host.held() == {GPU0, GPU1}
        assert [c.get_persistence_mode(g) for g in (GPU0, GPU1)] == [1, 1]
        c.set_numa_status(GPU0, rpc.NUMA_ONLINE)
    host.wait_log("device 0000:01:00.0 - persistence mode disabled.")


def test_function_number_is_ignored(host):
    host.start_daemon()
    with client(host) as c:
        assert c.get_persistence_mode("0000:01:00.3") == 1


def test_unknown_device_is_status_2(host):
    host.start_daemon()
    with client(host) as c:
        with pytest.raises(rpc.DeviceNotFoundError) as err:
            c.get_persistence_mode("0000:09:00.0")
        assert err.value.status == 2
        assert "0000:09:00.0" in str(err.value) and host.tree.socket in str(err.value)
        with pytest.raises(rpc.DeviceNotFoundError):
            c.set_persistence_mode("0000:09:00.0", 1)


@pytest.mark.parametrize("mode", [2, 7, 0xFFFFFFFF])
def test_bad_mode_is_status_5(host, mode):
    host.start_daemon()
    with client(host) as c:
        with pytest.raises(rpc.InvalidArgumentError) as err:
            c.set_persistence_mode(GPU0, mode)
        assert err.value.status == 5
        with pytest.raises(rpc.InvalidArgumentError):
            c.set_persistence_mode_only(GPU0, mode)
        assert c.get_persistence_mode(GPU0) == 1
    assert host.held() == {GPU0, GPU1}


def test_rpc_level_errors(host):
    host.start_daemon()
    with client(host) as c:
        with pytest.raises(rpc.RpcProcedureUnavailableError):
            c.call(1, 9)
        with pytest.raises(rpc.RpcProcedureUnavailableError):
            c.call(2, 3)
        with pytest.raises(rpc.RpcProgramMismatchError) as err:
            c.call(3, 0)
        assert (err.value.low, err.value.high) == (1, 2)
        with pytest.raises(rpc.RpcGarbageArgsError):
            c.call(1, rpc.V1_GET_PERSISTENCE_MODE, struct.pack(">3I", 0, 1, 0))
        with pytest.raises(rpc.RpcGarbageArgsError):
            c.call(1, rpc.V1_SET_PERSISTENCE_MODE, struct.pack(">4I", 0, 1, 0, 0))
        c.null()  # the connection survives all of these


def raw_call(path, header_words, args=b""):
    """Send a hand-made call; return the reply record's body (b"" if closed)."""
    message = struct.pack(">%dI" % len(header_words), *header_words) + args
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(5)
        sock.connect(path)
        sock.sendall(struct.pack(">I", 0x80000000 | len(message)) + message)
        head = sock.recv(4)
        if not head:
            return b""
        length = struct.unpack(">I", head)[0] & 0x7FFFFFFF
        data = b""
        while len(data) < length:
            data += sock.recv(length - len(data))
        return data


def test_wrong_program_credentials_and_rpc_version(host):
    host.start_daemon()
    c = client(host)
    # program 35007 -> PROG_UNAVAIL
    reply = raw_call(host.tree.socket, [5, 0, 2, 35007, 1, 0, 0, 0, 0, 0])
    with pytest.raises(rpc.RpcProgramUnavailableError):
        c._check_reply(reply, 5, dict(socket_path=c.socket_path))
    # AUTH_SYS credential with an empty body -> MSG_DENIED / AUTH_ERROR AUTH_BADCRED
    reply = raw_call(host.tree.socket, [7, 0, 2, 35006, 1, 0, 1, 0, 0, 0])
    with pytest.raises(rpc.RpcDeniedError, match="AUTH_BADCRED") as err:
        c._check_reply(reply, 7, dict(socket_path=c.socket_path))
    assert err.value.auth_stat == 1
    # ONC RPC version 3: libtirpc closes the connection without MSG_DENIED
    assert raw_call(host.tree.socket, [6, 0, 3, 35006, 1, 0, 0, 0, 0, 0]) == b""
    with client(host) as c:
        c.null()


def test_user_drops_privileges(host):
    host.start_daemon("--user", "nobody")
    pid = host.daemon_pid()
    with open("/proc/%d/status" % pid) as handle:
        ids = dict(line.split(":", 1) for line in handle if line.startswith(("Uid", "Gid")))
    assert ids["Uid"].split() == ["65534"] * 4
    assert ids["Gid"].split() == ["65534"] * 4
    run_dir = os.stat(host.tree.run_dir)
    assert (run_dir.st_uid, run_dir.st_gid) == (65534, 65534)
    assert host.held() == {GPU0, GPU1}
    with open(host.tree.cfg_log) as handle:  # it drops privileges before opening GPUs
        assert all(line.endswith("euid=65534") for line in handle.read().splitlines())
    with client(host) as c:
        c.set_persistence_mode(GPU0, 0)  # neither 535 nor 550 checks the caller (555+ do)
        assert c.get_persistence_mode(GPU0) == 0
    host.stop_daemon()
    assert host.held() == set()
    # after --user it cannot remove its run dir (NVIDIA's unit rm -rf's it)
    assert os.path.isdir(host.tree.run_dir)
    assert not os.path.exists(host.tree.socket)


def test_sigterm_disables_every_gpu_and_cleans_up(host):
    host.start_daemon("--verbose")
    pid = host.stop_daemon(signal.SIGTERM)
    assert host.held() == set()
    assert not os.path.exists(host.tree.run_dir)
    host.wait_log("Received signal 15")
    host.wait_log("Shutdown (%d)" % pid)


def test_default_syslog_has_no_per_gpu_lines(host):
    host.start_daemon("--user", "nobody")
    with client(host) as c:
        c.set_persistence_mode(GPU0, 0)
    pid = host.stop_daemon()
    host.wait_log("Shutdown (%d)" % pid)
    lines = host.syslog.lines()
    assert [line.split(": ", 1)[1] for line in lines] == ["Started (%d)" % pid,
                                                          "Shutdown (%d)" % pid]


def test_restart_drops_per_gpu_choices(host):
    host.start_daemon()
    with client(host) as c:
        c.set_persistence_mode(GPU0, 0)
    host.stop_daemon()
    host.start_daemon()
    with client(host) as c:
        assert c.get_persistence_mode(GPU0) == 1


def test_sigkill_leaves_stale_files_that_the_next_start_tolerates(host):
    host.start_daemon()
    host.stop_daemon(signal.SIGKILL)
    assert os.path.exists(host.tree.socket) and os.path.exists(host.tree.pid_file)
    with pytest.raises(rpc.PersistencedUnavailableError, match="stale"):
        with client(host) as c:
            c.null()
    host.start_daemon()
    with client(host) as c:
        c.null()


def test_no_persistence_mode_opens_nothing(host):
    host.start_daemon("--no-persistence-mode")
    assert host.held() == set()
    with client(host) as c:
        assert c.get_persistence_mode(GPU0) == 0
        c.set_persistence_mode(GPU1, 1)
    assert host.held() == {GPU1}


def test_second_instance_fails_to_lock_pid_file(host):
    host.start_daemon()
    second = host.start_daemon(check=False)
    assert second.returncode == 1
    assert "failed to initialize" in second.stdout + second.stderr
    host.wait_log("Failed to lock PID file")
    with client(host) as c:
        c.null()


def test_unknown_option_exits_0(host):
    proc = host.start_daemon("--no-such-option", check=False)
    assert proc.returncode == 0
    assert 'unrecognized option: "--no-such-option"' in proc.stdout + proc.stderr
    assert not os.path.exists(host.tree.socket)


def test_uvm_persistence_options(host):
    """550 knows --[no-]uvm-persistence-mode; 535 takes them for unknown options (exit 0, no daemon)."""
    if not host.traits["uvm_option"]:
        for option in ("--uvm-persistence-mode", "--no-uvm-persistence-mode"):
            proc = host.start_daemon(option, check=False)
            assert proc.returncode == 0 and 'unrecognized option: "%s"' % option in proc.stderr
            assert not os.path.exists(host.tree.socket)
        return
    host.start_daemon("--no-uvm-persistence-mode")
    assert host.held() == {GPU0, GPU1}
    host.stop_daemon()
    # --uvm-persistence-mode makes 550 load two more libnvidia-cfg calls, which the kit's fake lacks
    proc = host.start_daemon("--uvm-persistence-mode", check=False)
    assert proc.returncode == 1 and "failed to initialize" in proc.stderr
    host.wait_log("Failed to load symbol nvCfgEnableUVMPersistence from libnvidia-cfg.so.1")
    host.wait_log("Failed to load symbol nvCfgDisableUVMPersistence from libnvidia-cfg.so.1")
    assert not os.path.exists(host.tree.socket)


def test_missing_driver_sysfs_dir(host):
    """535 scans /sys/bus/pci/drivers/nvidia/ at start (NUMA auto-online) and fails without it; 550 does not."""
    shutil.rmtree(host.tree.path("/sys/bus/pci/drivers/nvidia"))
    proc = host.start_daemon(check=False)
    if host.traits["needs_driver_sysfs"]:
        assert proc.returncode == 1
        assert "failed to initialize" in proc.stdout + proc.stderr
        host.wait_log("NUMA: Failed to open /sys/bus/pci/drivers/nvidia/")
        assert host.held() == set()
    else:
        assert proc.returncode == 0, proc.stderr
        assert host.held() == {GPU0, GPU1}
        with client(host) as c:
            assert c.get_persistence_mode(GPU0) == 1


@pytest.mark.parametrize("gpus, error, logged", [
    (2, "fail", "Failed to query NVIDIA devices. Please ensure that the NVIDIA device files (/dev/nvidia*) "
                "exist, and that user 0 has read and write permissions for those files."),
    (0, None, "Unable to find any NVIDIA devices"),
], ids=["enumeration-fails", "no-gpus"])
def test_no_device_from_the_driver_fails_to_start(make_host, nvidia, gpus, error, logged):
    host = make_host(gpus=gpus, nvidia=nvidia)
    if error:
        host.inject("cfg_enumerate", error)
    proc = host.start_daemon(check=False)
    assert proc.returncode == 1 and "failed to initialize" in proc.stderr
    host.wait_log(logged)
    assert not os.path.exists(host.tree.socket)


def test_cfg_open_failure_at_start_is_tolerated_per_gpu(host):
    host.inject("cfg_open", "fail", gpu=1)
    host.start_daemon()
    assert host.held() == {GPU0}
    with client(host) as c:
        assert c.get_persistence_mode(GPU1) == 0
        with pytest.raises(rpc.DriverError) as err:
            c.set_persistence_mode(GPU1, 1)
        assert err.value.status == 3
    host.wait_log("device 0000:02:00.0 - failed to open.")


def _disconnect_early(path):
    message = struct.pack(">14I", 9, 0, 2, 35006, 1, 2, 0, 0, 0, 0, 0, 1, 0, 0)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(path)
        sock.sendall(struct.pack(">I", 0x80000000 | len(message)) + message)


def test_early_disconnect_is_survived_with_sigpipe_ignored(host):
    host.start_daemon()
    for _ in range(200):
        _disconnect_early(host.tree.socket)
    with client(host) as c:
        assert c.get_persistence_mode(GPU0) == 1


def test_early_disconnect_kills_it_with_default_sigpipe(host):
    host.start_daemon(keep_sigpipe=True)
    pid = host.daemon_pid()
    for _ in range(2000):
        try:
            _disconnect_early(host.tree.socket)
        except (ConnectionRefusedError, FileNotFoundError, BrokenPipeError):
            break
        if not os.path.exists("/proc/%d" % pid):
            break
    assert wait_gone(pid), "%s survived 2000 early disconnects" % host.nvidia
    host.daemon_pids.remove(pid)


def test_half_a_request_blocks_other_clients(host):
    host.start_daemon()
    with socket.socket(socket.AF_UNIX) as hog:
        hog.connect(host.tree.socket)
        hog.sendall(struct.pack(">I", 0x80000000 | 56) + b"\0" * 8)
        started = time.monotonic()
        with pytest.raises(rpc.PersistencedTimeoutError) as err:
            with client(host, timeout=0.5) as c:
                c.get_persistence_mode(GPU0)
        assert time.monotonic() - started < 10  # the client's 0.5 s timeout ended it, not the hog
        assert "one client at a time" in str(err.value)
    with client(host) as c:  # released once the hog goes away
        assert c.get_persistence_mode(GPU0) == 1


def test_get_latency(host, record_property):
    host.start_daemon()
    samples = {}
    for label, reuse in (("reused", True), ("new_connection", False)):
        latencies = []
        c = client(host)
        for _ in range(2000):
            started = time.perf_counter()
            if reuse:
                c.get_persistence_mode(GPU0)
            else:
                with client(host) as fresh:
                    fresh.get_persistence_mode(GPU0)
            latencies.append(time.perf_counter() - started)
        c.close()
        latencies.sort()
        samples[label] = (latencies[len(latencies) // 2] * 1e6,
                          latencies[int(len(latencies) * 0.99)] * 1e6)
        record_property("get_%s_p50_us" % label, round(samples[label][0], 1))
        record_property("get_%s_p99_us" % label, round(samples[label][1], 1))
    print("Get round trip (us): %r" % samples)
    assert samples["reused"][0] < 5000


PY38_CLIENT = r"""
import sys
sys.path.insert(0, sys.argv[2])
from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import rpc
with rpc.PersistencedClient(sys.argv[1]) as c:
    c.null()
    c.set_persistence_mode("00000000:02:00.0", 0)
    modes = [c.get_persistence_mode(b) for b in ("01:00.0", "0000:02:00.0")]
    try:
        c.get_persistence_mode("0000:07:00.0")
    except rpc.DeviceNotFoundError as exc:
        err = exc.status
print(sys.version_info[:2], modes, err)
"""


def test_client_on_python38_against_nvidia_daemon(host):
    """Managed hosts may run Python 3.8: the client must work there, not just compile."""
    python38 = fakehost.python38()
    assert python38, "no Python 3.8 (pyenv 3.8.x, as scripts/test's py38 layer uses) found"
    host.start_daemon()
    out = subprocess.run([python38, "-c", PY38_CLIENT, host.tree.socket, fakehost.COLLECTIONS_DIR],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "(3, 8) [1, 0] 2"
    assert host.held() == {GPU0}


NOBODY_CLIENT = r"""
import sys
sys.path.insert(0, sys.argv[2])
from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import rpc
try:
    with rpc.PersistencedClient(sys.argv[1]) as c:
        c.set_persistence_mode("0000:01:00.0", 0)
        print(c.get_persistence_mode("0000:01:00.0"))
except rpc.PersistencedUnavailableError as exc:
    print(exc)
"""


def nobody_sets_gpu0(host):
    return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           "/usr/bin/python3", "-c", NOBODY_CLIENT, host.tree.socket, fakehost.COLLECTIONS_DIR],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_any_user_who_can_connect_may_set(host, user):
    """Neither checks SO_PEERCRED (555+ allow only root to set); the socket's mode decides who connects:
    everyone to 535's 0777, only root and the daemon's user or group to Debian 13's 0775 550 one."""
    host.start_daemon(*(["--user", user] if user != "root" else []))
    assert stat.S_IMODE(os.stat(host.tree.socket).st_mode) == host.traits["socket_mode"]
    if host.traits["socket_mode"] & 0o002 or user == "nobody":
        assert nobody_sets_gpu0(host) == "0"
        assert host.held() == {GPU1}
    else:
        assert nobody_sets_gpu0(host).endswith("failed: permission denied opening the socket")
        assert host.held() == {GPU0, GPU1}
