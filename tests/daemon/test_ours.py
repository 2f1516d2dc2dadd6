"""What only our daemon promises: permissions, concurrency, robustness, state, life cycle."""

import os
import random
import shutil
import signal
import socket
import stat
import struct
import subprocess
import threading
import time

from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import state

import harness
from harness import NOBODY, Conn, bdf, call_message, dev_args, ints, record

GPU0, GPU1 = bdf(0), bdf(1)
OK = ("accepted", 0, ())
SOCKET_IN_HOST = "/var/run/nvidia-persistenced/socket"


def status(*words):
    return ("accepted", 0, words)


def wait_until(predicate, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for %s" % what)
        time.sleep(0.02)


# ---- permissions ------------------------------------------------------------------

NOBODY_CLIENT = r"""
import socket, struct, sys
def call(sock, xid, vers, proc, args):
    msg = struct.pack(">10I", xid, 0, 2, 35006, vers, proc, 0, 0, 0, 0) + args
    sock.sendall(struct.pack(">I", 0x80000000 | len(msg)) + msg)
    n = struct.unpack(">I", sock.recv(4))[0] & 0x7fffffff
    data = b""
    while len(data) < n:
        data += sock.recv(n - len(data))
    return list(struct.unpack(">%di" % (n // 4), data))[5:]
sock = socket.socket(socket.AF_UNIX)
sock.connect(sys.argv[1])
gpu0 = struct.pack(">4i", 0, 1, 0, 0)
print([call(sock, 1, 1, 2, gpu0), call(sock, 2, 1, 1, gpu0 + struct.pack(">i", 0)),
       call(sock, 3, 2, 1, gpu0 + struct.pack(">i", 0)), call(sock, 4, 2, 2, gpu0 + struct.pack(">i", 1)),
       call(sock, 5, 1, 2, gpu0)])
"""


def test_only_root_may_set(ours, host):
    """A non-root client (nobody, inside the host) may Get; every Set is status 7."""
    argv = host.nsrun_argv(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups",
                            harness.SYSTEM_PYTHON, "-c", NOBODY_CLIENT, SOCKET_IN_HOST])
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout
    # [accept_stat, status, (mode)] per call: Get, v1 Set, v2 Set, v2 NUMA, Get
    assert out.strip() == "[[0, 0, 1], [0, 7], [0, 7], [0, 7], [0, 0, 1]]"
    assert ours.held() == {GPU0, GPU1}
    host.wait_log("from uid 65534: only root may set")


# ---- concurrency -----------------------------------------------------------------

def test_half_a_request_never_delays_other_clients(host):
    daemon = harness.OurDaemon(host)
    daemon.start("--client-timeout", "1.5")
    hog = Conn(daemon.socket_path)
    hog.send(struct.pack(">I", 0x80000000 | 56) + b"\0" * 8)  # 8 of 56 bytes, then silence
    started = time.monotonic()
    latencies = []
    for _ in range(100):  # one after another, each on a new connection
        begin = time.perf_counter()
        with Conn(daemon.socket_path, timeout=1.0) as c:
            assert c.call(1, 2, dev_args(0)) == status(0, 1)
        latencies.append(time.perf_counter() - begin)
    crowd = [Conn(daemon.socket_path, timeout=1.0) for _ in range(100)]  # and 100 at once
    try:
        for i, c in enumerate(crowd):
            c.send(record(call_message(i + 1, 1, 2, dev_args(1))))
        assert [harness.decode_reply(c.reply(), i + 1) for i, c in enumerate(crowd)] == [status(0, 1)] * 100
    finally:
        for c in crowd:
            c.close()
    elapsed = time.monotonic() - started
    assert max(latencies) < 0.25 and elapsed < 1.5, (max(latencies), elapsed)
    assert hog.closed(timeout=3.0)  # dropped once --client-timeout passed
    hog.close()


def test_trickling_bytes_does_not_extend_the_timeout(host):
    daemon = harness.OurDaemon(host)
    daemon.start("--client-timeout", "1")
    message = record(call_message(1, 1, 2, dev_args(0)))
    with Conn(daemon.socket_path) as slow:
        started = time.monotonic()
        closed_after = None
        for byte in message:
            try:
                slow.send(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                closed_after = time.monotonic() - started
                break
            time.sleep(0.1)
        assert closed_after is not None and closed_after < 2.0, closed_after


def test_a_client_that_never_reads_is_not_buffered(ours):
    """The daemon stops reading from a client whose replies pile up; none is lost."""
    count = 20000
    calls = b"".join(record(call_message(i, 1, 2, dev_args(0))) for i in range(count))
    rss_before = ours.rss_kb("VmRSS")
    hog = socket.socket(socket.AF_UNIX)
    hog.connect(ours.socket_path)
    hog.setblocking(False)
    sent = 0
    stuck_since = None
    while sent < len(calls):
        try:
            sent += hog.send(calls[sent:sent + 65536])
            stuck_since = None
        except BlockingIOError:
            stuck_since = stuck_since or time.monotonic()
            if time.monotonic() - stuck_since > 0.3:
                break
            time.sleep(0.01)
    assert sent < len(calls), "the daemon buffered %d bytes of calls from a client that never reads" % sent
    with Conn(ours.socket_path, timeout=1.0) as other:  # everyone else is still served
        assert other.call(1, 2, dev_args(1)) == status(0, 1)
    assert ours.rss_kb("VmRSS") - rss_before < 4096
    replies = []

    def read_all():
        hog.settimeout(5)
        buf = b""
        while len(replies) < count:
            chunk = hog.recv(65536)
            if not chunk:
                break
            buf += chunk
            while len(buf) >= 36:
                replies.append(buf[4:36])
                buf = buf[36:]

    reader = threading.Thread(target=read_all)
    reader.start()
    hog.settimeout(5)
    hog.sendall(calls[sent:])
    reader.join(timeout=20)
    hog.close()
    assert len(replies) == count
    assert all(struct.unpack(">I", r[:4])[0] == i and r[-8:] == ints(0, 1) for i, r in enumerate(replies))


# ---- robustness -------------------------------------------------------------------

def _sigpipe_ignored(pid):
    with open("/proc/%d/status" % pid) as handle:
        fields = dict(line.split(":", 1) for line in handle)
    return bool(int(fields["SigIgn"], 16) & (1 << (signal.SIGPIPE - 1)))


def test_early_disconnects(ours):
    """Clients that leave before their reply never take the daemon down.

    nsrun starts it with SIGPIPE at its default (fatal) disposition, as a
    service manager would; the daemon ignores SIGPIPE itself and sends with
    MSG_NOSIGNAL.
    """
    pid = ours.pid
    assert _sigpipe_ignored(pid)
    baseline = ours.fd_count()
    get = record(call_message(1, 1, 2, dev_args(0)))
    for _ in range(300):
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(ours.socket_path)
        sock.sendall(get)
        sock.close()
    for _ in range(30):  # many replies pending when the client goes
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(ours.socket_path)
        sock.sendall(get * 500)
        sock.close()
    for _ in range(30):  # reset: unread data in the client's socket when it closes
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(ours.socket_path)
        sock.sendall(get * 10)
        time.sleep(0.002)
        sock.close()
    assert harness.fakehost.pid_alive(pid)
    with Conn(ours.socket_path) as c:
        assert c.call(1, 2, dev_args(0)) == status(0, 1)
    wait_until(lambda: ours.fd_count() == baseline, what="the daemon to close every connection")


def _fuzz_frames(rng, count):
    valid = [
        lambda x: call_message(x, 1, 0),
        lambda x: call_message(x, 2, 0),
        lambda x: call_message(x, 1, 2, dev_args(rng.randrange(3))),
        lambda x: call_message(x, 2, 2, dev_args(rng.randrange(3), rng.randrange(3))),
        lambda x: call_message(x, rng.randrange(4), rng.randrange(4),
                               ints(*[rng.randrange(3) for _ in range(rng.randrange(6))])),
        lambda x: call_message(x, 1, 1, dev_args(1, 1)),  # enable (GPU1 stays enabled: no churn)
        lambda x: call_message(x, 1, 0, cred=(rng.choice([0, 1, 2, 3, 6, 99]), rng.randbytes(rng.randrange(24)))),
    ]
    frames = []
    for xid in range(count):
        message = rng.choice(valid)(xid)
        shape = rng.randrange(10)
        if shape == 0:  # random bytes
            frames.append(rng.randbytes(rng.randrange(0, 120)))
        elif shape == 1:  # a flipped byte
            data = bytearray(record(message))
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            frames.append(bytes(data))
        elif shape == 2:  # truncated
            data = record(message)
            frames.append(data[:rng.randrange(len(data))])
        elif shape == 3:  # a lying record mark
            frames.append(struct.pack(">I", rng.choice([0, 1, 0x80000000, 0x7FFFFFFF, 0xFFFFFFFF,
                                                        0x80000000 | rng.randrange(200)])) + message)
        elif shape == 4:  # random header words
            words = [rng.choice([0, 1, 2, 3, 35006, 0xFFFFFFFF, rng.getrandbits(32)]) for _ in range(rng.randrange(14))]
            frames.append(record(struct.pack(">%dI" % len(words), *words)))
        elif shape == 5:  # fragmented at random points
            cuts = sorted(rng.sample(range(1, len(message)), 2))
            frames.append(record(message[:cuts[0]], last=False) + record(message[cuts[0]:cuts[1]], last=False)
                          + record(message[cuts[1]:]))
        else:
            frames.append(record(message))
    return frames


def _exchange(path, payload):
    """Send ``payload``, half-close, read until the daemon closes; returns the bytes read."""
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(5)
    sock.connect(path)
    received = b""
    try:
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
    except (BrokenPipeError, ConnectionResetError):
        pass  # the daemon closed on garbage before taking everything
    finally:
        sock.close()
    return received


def _replies_well_formed(data):
    words = 0
    while data:
        assert len(data) >= 4
        header = struct.unpack(">I", data[:4])[0]
        assert header & 0x80000000
        length = header & 0x7FFFFFFF
        assert 20 <= length <= 64 and length % 4 == 0 and len(data) >= 4 + length, data[:64]
        assert struct.unpack(">I", data[8:12])[0] == 1  # REPLY
        data = data[4 + length:]
        words += 1
    return words


def test_ten_thousand_fuzzed_frames(ours):
    """10,000 seeded (reproducible) mutated frames, each on its own connection after 0-3 well-formed calls.

    The well-formed calls must all be answered (whatever the frame after them
    does to the connection); the daemon must stay up and leak nothing.
    """
    rng = random.Random(20260601)
    frames = _fuzz_frames(rng, 10000)
    pid = ours.pid
    baseline = ours.fd_count()
    rss_before = ours.rss_kb("VmRSS")
    started = time.monotonic()
    for frame in frames:
        prefix = rng.randrange(4)
        payload = b"".join(record(call_message(0x7000 + i, 1, 2, dev_args(0))) for i in range(prefix))
        replies = _replies_well_formed(_exchange(ours.socket_path, payload + frame))
        assert replies >= prefix, (prefix, frame)
    elapsed = time.monotonic() - started
    assert harness.fakehost.pid_alive(pid)
    assert elapsed < 30, "10,000 frames took %.1f s" % elapsed
    with Conn(ours.socket_path) as c:
        assert c.call(1, 2, dev_args(1)) == status(0, 1)
    wait_until(lambda: ours.fd_count() == baseline, what="no leaked descriptor")
    assert ours.rss_kb("VmRSS") - rss_before < 4096
    assert not [line for line in ours.host.log_lines() if "internal error" in line]


def test_unreadable_state_file_is_logged_not_fatal(host):
    with open(host.state_file, "wb") as handle:
        handle.write(b"\xff\xfe not utf-8")
    daemon = harness.OurDaemon(host)
    daemon.start()
    assert daemon.held() == {GPU0, GPU1}  # the start-up default
    host.wait_log("is not valid UTF-8")
    with Conn(daemon.socket_path) as c:  # a Set cannot record, but it still works
        assert c.call(1, 1, dev_args(0, 0)) == status(0)
    host.wait_log("could not be recorded")


# ---- state -----------------------------------------------------------------------

def test_restart_keeps_per_gpu_modes(ours, host):
    with Conn(ours.socket_path) as c:
        assert c.call(1, 1, dev_args(0, 0)) == status(0)
        assert c.call(2, 1, dev_args(1, 1)) == status(0)
    saved = state.load(host.state_file)
    assert saved["gpus"] == {host.uuid(0): {"mode": "disabled", "pci_bus_id": "00000000:01:00.0"},
                             host.uuid(1): {"mode": "enabled", "pci_bus_id": "00000000:02:00.0"}}
    ours.restart("--no-persistence-mode")  # saved entries win over the start-up default
    assert ours.held() == {GPU1}
    with Conn(ours.socket_path) as c:
        assert [c.call(1, 2, dev_args(i)) for i in (0, 1)] == [status(0, 0), status(0, 1)]


def test_sighup_rereads_the_state_file(ours, host):
    state.update(host.state_file, lambda st: state.with_modes(
        st, {host.uuid(1): ("00000000:02:00.0", "disabled")}))
    os.kill(ours.pid, signal.SIGHUP)
    wait_until(lambda: ours.held() == {GPU0}, what="GPU1 released after SIGHUP")
    state.update(host.state_file, lambda st: state.with_modes(
        st, {host.uuid(1): ("00000000:02:00.0", "enabled")}, default_mode="disabled"))
    os.kill(ours.pid, signal.SIGHUP)
    wait_until(lambda: ours.held() == {GPU1}, what="the saved default applied after SIGHUP")
    with Conn(ours.socket_path) as c:
        assert [c.call(1, 2, dev_args(i)) for i in (0, 1)] == [status(0, 0), status(0, 1)]
    host.wait_log("SIGHUP: re-reading %s" % host.state_file)


# ---- life cycle -----------------------------------------------------------------

def test_user_nobody_drops_privileges_and_still_works(host):
    os.chown(host.state_dir, NOBODY, NOBODY)
    daemon = harness.OurDaemon(host)
    daemon.start("--user", "nobody")
    status_lines = daemon.proc_status()
    assert status_lines["Uid"].split() == [str(NOBODY)] * 4
    assert status_lines["Gid"].split() == [str(NOBODY)] * 4
    assert status_lines["Groups"].split() == []
    run_dir = os.stat(host.tree.run_dir)
    assert (run_dir.st_uid, run_dir.st_gid, stat.S_IMODE(run_dir.st_mode)) == (NOBODY, NOBODY, 0o755)
    assert stat.S_IMODE(os.stat(host.tree.socket).st_mode) == 0o777
    assert daemon.held() == {GPU0, GPU1}
    with Conn(daemon.socket_path) as c:  # we are root: a Set is allowed
        assert c.call(1, 1, dev_args(0, 0)) == status(0)
        assert c.call(1, 2, dev_args(0)) == status(0, 0)
    assert daemon.held() == {GPU1}
    assert os.stat(host.state_file).st_uid == NOBODY
    assert state.load(host.state_file)["gpus"][host.uuid(0)]["mode"] == "disabled"
    daemon.stop()
    assert not os.path.exists(host.tree.socket) and not os.path.exists(host.tree.pid_file)
    assert os.listdir(host.tree.run_dir) == []  # like NVIDIA's, it cannot remove the dir itself


def test_second_instance_is_refused(ours, host):
    first = ours.pid
    second = harness.OurDaemon(host).start(check=False)
    assert second.returncode == 1
    assert "Failed to lock PID file" in second.stderr
    assert "failed to initialize" in second.stderr
    assert ours.pid == first and harness.fakehost.pid_alive(first)
    with Conn(ours.socket_path) as c:
        assert c.call(1, 0) == OK


def test_start_failure_is_reported_by_the_waiting_parent(host):
    shutil.rmtree(host.tree.path("/proc/driver/nvidia/gpus"))
    proc = harness.OurDaemon(host).start(check=False)
    assert proc.returncode == 1
    assert "gpufleet-persistenced failed to initialize" in proc.stderr
    assert "/proc/driver/nvidia/gpus does not exist" in proc.stderr
    assert not os.path.exists(host.tree.socket)
    host.wait_log("/proc/driver/nvidia/gpus does not exist")


def test_unknown_user_fails_to_start(host):
    proc = harness.OurDaemon(host).start("--user", "no-such-user", check=False)
    assert proc.returncode == 1
    assert "user 'no-such-user' does not exist" in proc.stderr
    assert not os.path.exists(host.tree.socket)


def test_apply_saved_modes_restores_nvidia_daemon_after_restart(make_host, nvidia):
    host = make_host(gpus=8)
    disabled = {1, 2, 5}
    state.update(host.state_file, lambda st: state.with_modes(st, dict(
        (host.uuid(i), ("0000%s" % bdf(i), "disabled" if i in disabled else "enabled"))
        for i in range(7)), default_mode="disabled"))  # GPU 7 has no entry: the default
    expected = set(bdf(i) for i in range(7) if i not in disabled)
    nvidia = harness.NvidiaDaemon(host, nvidia=nvidia)
    apply_argv = host.nsrun_argv([harness.SYSTEM_PYTHON, harness.OURS, "--apply-saved-modes",
                                  "--state-file", host.state_file, "--verbose"])
    for attempt in range(2):
        if attempt == 0:
            nvidia.start()
        else:
            nvidia.restart()  # NVIDIA's daemon resets every GPU to its default ...
        assert nvidia.held() == set(bdf(i) for i in range(8))
        proc = subprocess.run(apply_argv, capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0, proc.stderr
        assert "8 GPU(s) set, 0 failed" in proc.stderr
        assert nvidia.held() == expected  # ... and --apply-saved-modes restores each one
        with Conn(nvidia.socket_path) as c:
            modes = [c.call(1, 2, dev_args(i)) for i in range(8)]
        assert modes == [status(0, 0 if i in disabled or i == 7 else 1) for i in range(8)]


def test_runs_on_python38(host):
    daemon = harness.OurDaemon(host)
    daemon.start("--verbose", python=harness.python38())
    assert "python3.8" in os.readlink("/proc/%d/exe" % daemon.pid)
    with Conn(daemon.socket_path) as c:
        assert c.call(1, 1, dev_args(1, 0)) == status(0)
        assert [c.call(1, 2, dev_args(i)) for i in (0, 1)] == [status(0, 1), status(0, 0)]
        assert c.call(1, 0, rpcvers=3) == ("denied", 0, (2, 2))
    assert daemon.held() == {GPU0}
    os.kill(daemon.pid, signal.SIGHUP)
    host.wait_log("SIGHUP: re-reading")
    daemon.stop()
    assert not os.path.exists(host.tree.socket)


def test_idle_daemon_never_wakes_up(ours):
    with Conn(ours.socket_path) as c:  # serve a little first: no timer may outlive its client
        for _ in range(20):
            assert c.call(1, 2, dev_args(0)) == status(0, 1)
    time.sleep(0.2)
    before = ours.wakeups()
    time.sleep(3)
    assert ours.wakeups() == before


def test_out_of_descriptors_pauses_accepting_without_spinning(ours, host):
    """EMFILE on accept: the listener stays readable, so the daemon must back off, not spin."""
    pid = ours.pid
    limit = ours.fd_count() + 4
    subprocess.run(["prlimit", "--pid", str(pid), "--nofile=%d:%d" % (limit, limit)], check=True)
    crowd = [Conn(ours.socket_path) for _ in range(12)]  # the kernel queues what the daemon cannot accept
    try:
        host.wait_log("pausing new connections")
        before = ours.wakeups()
        time.sleep(1.0)
        assert ours.wakeups() - before < 10
        assert harness.fakehost.pid_alive(pid)
    finally:
        for c in crowd:
            c.close()
    with Conn(ours.socket_path, timeout=3) as c:  # accepting again once descriptors are free
        assert c.call(1, 2, dev_args(0)) == status(0, 1)


def test_foreground_for_supervisors(host):
    """--foreground: no fork, logs to stderr too, SIGTERM cleans up and exits 0."""
    argv = host.nsrun_argv([harness.SYSTEM_PYTHON, harness.OURS, "--foreground", "--verbose",
                            "--state-file", host.state_file])
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        harness.wait_socket(host.tree.socket)
        assert harness.fakehost.daemon_pid(host.dir) == proc.pid  # unshare and nsrun exec, never fork
        with Conn(host.tree.socket) as c:
            assert c.call(1, 1, dev_args(0, 0)) == status(0)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert "ready" in err and "persistence mode disabled" in err and "shut down" in err
    assert not os.path.exists(host.tree.socket) and not os.path.exists(host.tree.pid_file)


def test_sighup_follows_the_driver_gpu_list(ours, host):
    """SIGHUP re-enumerates GPUs: a GPU gone from the driver is released; no GPU list is survived."""
    gpus_dir = host.tree.path("/proc/driver/nvidia/gpus")
    hidden = gpus_dir + ".hidden"
    os.rename(gpus_dir, hidden)
    try:
        os.kill(ours.pid, signal.SIGHUP)
        host.wait_log("cannot re-read GPUs")
        assert ours.held() == {GPU0, GPU1}  # keeps what it had
    finally:
        os.rename(hidden, gpus_dir)
    shutil.rmtree(os.path.join(gpus_dir, GPU1))
    os.kill(ours.pid, signal.SIGHUP)
    wait_until(lambda: ours.held() == {GPU0}, what="the removed GPU released")
    with Conn(ours.socket_path) as c:
        assert c.call(1, 2, dev_args(1)) == status(2)
        assert c.call(1, 2, dev_args(0)) == status(0, 1)
