"""Both persistence daemons on fake hosts, and a raw ONC RPC client.

Shared by ``tests/daemon`` (pytest) and ``tests/benchmark/daemon_bench.py``;
no pytest here. ``Host`` is a fake NVIDIA host (tests/driverkit's
``fakehost.layout`` in a short temp dir, with a syslog capture and a state
file directory); ``NvidiaDaemon`` runs NVIDIA's real ``nvidia-persistenced``
on it (535 or 550: ``fakehost.NVIDIA_DAEMONS``), ``OurDaemon`` runs
``files/gpufleet-persistenced``; all fork, so they are tracked by the pid in
their pid file and stopped by that pid. ``make_daemon(name, host)`` builds one
by the name the tests parametrize on (``DAEMON_NAMES``).
"""

import os
import signal
import socket
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "driverkit"))

import fakehost  # noqa: E402

fakehost.use_collection()

# GPUFLEET_DAEMON_UNDER_TEST runs the suite against another copy of our daemon
# (e.g. an older one, to see what a change fixed).
OURS = (os.environ.get("GPUFLEET_DAEMON_UNDER_TEST")
        or os.path.join(fakehost.REPO_DIR, "files", "gpufleet-persistenced"))
SYSTEM_PYTHON = fakehost.SYSTEM_PYTHON
NOBODY = 65534
python38 = fakehost.python38

PROGRAM = 35006
LAST_FRAGMENT = 0x80000000


def missing_prerequisites():
    """What this machine lacks to run the daemon tests or the benchmark (empty: ready)."""
    return fakehost.missing_prerequisites(
        tools=("unshare", "setpriv", "prlimit"), system_python="it runs our daemon and clients as nobody",
        python38_needed=True, files=[OURS], users=["nobody"],
        collection=["gpu.rpc", "gpu.state"])


# ---- fake hosts --------------------------------------------------------------

def bdf(index):
    """Bus id of the example description's GPU ``index`` (0 -> 0000:01:00.0)."""
    return "0000:%02x:00.0" % (index + 1)


class Host(fakehost.TempHost):
    """A fake NVIDIA host in a short temp dir, with syslog capture and a state dir."""

    prefix = "gfd"

    def __init__(self, gpus=2, description=None):
        super().__init__(gpus, description)
        self.state_dir = os.path.join(self.dir, "state")
        os.mkdir(self.state_dir)
        os.chmod(self.state_dir, 0o755)
        self.state_file = os.path.join(self.state_dir, "persistence.json")
        self.daemons = []

    @property
    def gpus(self):
        return fakehost.read_description(self.dir)["gpus"]

    def uuid(self, index):
        return self.gpus[index]["uuid"]

    def nsrun_argv(self, argv):
        return fakehost.nsrun_argv(self.dir, argv)

    def cfg_held(self):
        """Bus ids NVIDIA's daemon holds through the fake libnvidia-cfg."""
        return fakehost.held_gpus(self.dir)

    def log_lines(self):
        return self.syslog.lines()

    def started_pids(self):
        """Every pid a daemon object on this host started (``close`` stops those still running)."""
        return [pid for daemon in self.daemons for pid in daemon.pids]


# ---- the two daemons -------------------------------------------------------------

class Daemon:
    """One persistence daemon on a host; ``start`` waits for its fork-and-wait parent."""

    kind = None

    def __init__(self, host):
        self.host = host
        self.pids = []  # every daemon pid this object started (for cleanup)
        self.last = None  # CompletedProcess of the last start
        host.daemons.append(self)

    @property
    def socket_path(self):
        return self.host.tree.socket

    def argv(self, *options, **kwargs):
        raise NotImplementedError

    def start(self, *options, check=True, timeout=30, **kwargs):
        argv = self.host.nsrun_argv(self.argv(*options, **kwargs))
        self.last = proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError("%s failed to start: rc=%d stdout=%r stderr=%r syslog=%r"
                                 % (self.kind, proc.returncode, proc.stdout, proc.stderr,
                                    self.host.log_lines()))
        if proc.returncode == 0:
            pid = fakehost.daemon_pid(self.host.dir)
            if pid is not None and fakehost.pid_alive(pid) and pid not in self.pids:
                self.pids.append(pid)
        return proc

    @property
    def pid(self):
        return fakehost.daemon_pid(self.host.dir)

    def stop(self, sig=signal.SIGTERM, timeout=10):
        pid = self.pid
        assert pid and fakehost.pid_alive(pid), "%s is not running" % self.kind
        os.kill(pid, sig)
        assert fakehost.wait_gone(pid, timeout), "%s (pid %d) ignored signal %d" % (self.kind, pid, sig)
        return pid

    def restart(self, *options, **kwargs):
        self.stop()
        return self.start(*options, **kwargs)

    def held(self):
        """Bus ids whose GPU the daemon keeps initialised."""
        raise NotImplementedError

    def proc_status(self, pid=None):
        with open("/proc/%d/status" % (pid or self.pid)) as handle:
            return dict(line.rstrip("\n").split(":\t", 1) for line in handle if ":\t" in line)

    def wakeups(self, pid=None):
        status = self.proc_status(pid)
        return int(status["voluntary_ctxt_switches"]) + int(status["nonvoluntary_ctxt_switches"])

    def fd_count(self, pid=None):
        return len(os.listdir("/proc/%d/fd" % (pid or self.pid)))

    def rss_kb(self, field="VmHWM"):
        return int(self.proc_status()[field].split()[0])


class NvidiaDaemon(Daemon):
    """NVIDIA's real nvidia-persistenced on the fake driver (SIGPIPE ignored unless asked);
    ``nvidia`` is which one (a key of ``fakehost.NVIDIA_DAEMONS``)."""

    kind = "nvidia"

    def __init__(self, host, nvidia="nvidia535"):
        super().__init__(host)
        self.nvidia = nvidia

    def argv(self, *options, keep_sigpipe=False):
        return fakehost.persistenced_argv(self.host.dir, *options, keep_sigpipe=keep_sigpipe, nvidia=self.nvidia)

    def held(self):
        return self.host.cfg_held()

    def gpu_activity(self):
        """Every open/close the daemon made through libnvidia-cfg so far."""
        with open(self.host.tree.cfg_log) as handle:
            return handle.read()


class OurDaemon(Daemon):
    """files/gpufleet-persistenced, run by Debian's python3 (or ``python=``)."""

    kind = "ours"

    script = OURS

    def argv(self, *options, python=SYSTEM_PYTHON, state_file=True):
        extra = ["--state-file", self.host.state_file] if state_file else []
        return [python, self.script] + extra + list(options)

    def held(self, pid=None):
        """GPUs whose /dev/nvidiaN the daemon holds open (from /proc/<pid>/fd)."""
        by_minor = dict(("/dev/nvidia%d" % gpu["minor"], gpu["pci_bus_id"]) for gpu in self.host.gpus)
        pid = pid or self.pid
        held = set()
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if target in by_minor:
                held.add(by_minor[target])
        return held

    def gpu_activity(self):
        """The daemon's open GPU device fds (a reopen would change them)."""
        pid = self.pid
        links = []
        for fd in sorted(os.listdir("/proc/%d/fd" % pid), key=int):
            try:
                target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if target.startswith("/dev/nvidia"):
                links.append((fd, target))
        return links


DAEMONS = {"nvidia": NvidiaDaemon, "ours": OurDaemon}
# What the tests run: each of NVIDIA's daemons in the kit, and ours.
DAEMON_NAMES = sorted(fakehost.NVIDIA_DAEMONS) + ["ours"]


def make_daemon(name, host):
    """The daemon ``name`` (one of DAEMON_NAMES) on ``host``, not started."""
    return OurDaemon(host) if name == "ours" else NvidiaDaemon(host, nvidia=name)


# ---- raw ONC RPC ------------------------------------------------------------------

def call_message(xid, version, procedure, args=b"", prog=PROGRAM, rpcvers=2, mtype=0,
                 cred=(0, b""), verf=(0, b"")):
    """An ONC RPC call message (no record mark)."""
    def auth(flavor_body):
        flavor, body = flavor_body
        return struct.pack(">II", flavor, len(body)) + body + b"\0" * (-len(body) % 4)
    return (struct.pack(">IIIIII", xid, mtype, rpcvers, prog, version, procedure)
            + auth(cred) + auth(verf) + args)


def record(message, last=True):
    return struct.pack(">I", (LAST_FRAGMENT if last else 0) | len(message)) + message


def ints(*values):
    return b"".join(struct.pack(">i" if v < 0x80000000 else ">I", v) for v in values)


def dev_args(index, *extra, function=0):
    """domain, bus, slot, function of the example GPU ``index`` (+ extra ints)."""
    return ints(0, index + 1, 0, function, *extra)


class Conn:
    """One client connection sending raw records and reading raw reply records."""

    def __init__(self, path, timeout=5.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        # A full listen backlog answers a non-blocking connect with EAGAIN at once,
        # where a blocking client (NVML's) waits: wait too, within the timeout.
        give_up = time.monotonic() + timeout
        while True:
            try:
                self.sock.connect(path)
                break
            except BlockingIOError:
                if time.monotonic() >= give_up:
                    raise
                time.sleep(0.002)
        self.xid = 0x1000

    def send(self, data):
        self.sock.sendall(data, socket.MSG_NOSIGNAL)

    def _exact(self, count):
        data = b""
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def reply(self):
        """The next reply record's bytes; None when the daemon closed the connection."""
        body = b""
        while True:
            head = self._exact(4)
            if head is None:
                return None
            header = struct.unpack(">I", head)[0]
            chunk = self._exact(header & ~LAST_FRAGMENT)
            if chunk is None:
                return None
            body += chunk
            if header & LAST_FRAGMENT:
                return body

    def call(self, version, procedure, args=b"", **kwargs):
        """Send one call and return its decoded reply (see ``decode_reply``)."""
        self.xid += 1
        self.send(record(call_message(self.xid, version, procedure, args, **kwargs)))
        raw = self.reply()
        return decode_reply(raw, self.xid)

    def closed(self, timeout=2.0):
        """True when the daemon closes the connection within ``timeout`` (no data)."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except socket.timeout:
            return False
        except ConnectionResetError:
            return True

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def decode_reply(raw, xid=None):
    """A reply as a comparable tuple.

    ``None`` (connection closed); ``("accepted", accept_stat, body_words)``;
    ``("denied", reject_stat, words)``. Asserts the xid and REPLY type.
    """
    if raw is None:
        return None
    words = struct.unpack(">%dI" % (len(raw) // 4), raw[:len(raw) // 4 * 4])
    assert len(raw) % 4 == 0, raw
    if xid is not None:
        assert words[0] == xid, "reply xid %#x for call %#x" % (words[0], xid)
    assert words[1] == 1, "not a REPLY: %r" % (words,)
    if words[2] == 0:
        verf_len = words[4]
        at = 5 + (verf_len + 3) // 4
        return ("accepted", words[at], tuple(struct.unpack(">i", struct.pack(">I", w))[0]
                                             for w in words[at + 1:]))
    return ("denied", words[3], tuple(words[4:]))


def wait_socket(path, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            with Conn(path, timeout=1.0) as conn:
                if conn.call(1, 0) == ("accepted", 0, ()):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError("no daemon answers at %s" % path)
        time.sleep(0.02)
