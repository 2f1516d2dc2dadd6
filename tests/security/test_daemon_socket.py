"""Any local user reaches the bundled daemon's 0777 socket: none may keep root
from being served, and none may flood syslog through it.

The daemon (files/gpufleet-persistenced, ``--user nobody``) runs on a fake
NVIDIA host (tests/daemon's harness). A stranger (uid 4242, no passwd entry)
attacks from outside the host's mount namespace through the socket's path:
connections held open and kept alive, slow senders that trickle half a
request, and a flood of connects with refused Set calls. Throughout each
attack, until the deadline, root connects and asks GetPersistenceMode; every
answer must come within ROOT_BOUND seconds. The daemon's syslog lines during
the attack must stay under LOG_BOUND.

Attacker code runs under Debian's /usr/bin/python3 (the venv's interpreter
lives under /root, which the stranger cannot enter).
"""

import os
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "daemon"))

import harness  # noqa: E402
from harness import NOBODY, Conn, dev_args  # noqa: E402

ROOT_BOUND = 1.0      # seconds for one root Get (connect, call, reply) during an attack
LOG_BOUND = 12        # daemon syslog lines over one attack
# the conftest's deadline length: each attack outlives root's probes by a second
ATTACK_SECONDS = float(os.environ.get("GPUFLEET_SECURITY_SECONDS", "4"))


@pytest.fixture
def host():
    made = harness.Host(gpus=2)
    os.chown(made.state_dir, NOBODY, NOBODY)
    yield made
    made.close()


@pytest.fixture
def daemon(host):
    ours = harness.OurDaemon(host)
    ours.start("--user", "nobody")
    harness.wait_socket(ours.socket_path)
    return ours


COMMON = r"""
import os, socket, struct, sys, time
path, until, count = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])

def record(xid, vers, proc, args=b""):
    msg = struct.pack(">10I", xid, 0, 2, 35006, vers, proc, 0, 0, 0, 0) + args
    return struct.pack(">I", 0x80000000 | len(msg)) + msg

def connect(timeout=0.5):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    return sock
"""

# Holds ``count`` connections, topping up whatever the daemon closes, and keeps
# each alive with a NULL call every half second (so --client-timeout never fires).
HOLD = COMMON + r"""
NULL = record(1, 1, 0)
conns = []
held = 0
while time.time() < until:
    while len(conns) < count:
        sock = connect()
        if sock is None:
            break
        conns.append(sock)
    alive = []
    for sock in conns:
        try:
            sock.sendall(NULL)
            if sock.recv(64):
                alive.append(sock)
                continue
        except OSError:
            pass
        sock.close()
    conns = alive
    held = max(held, len(conns))
    time.sleep(0.5)
print(held)
"""

# Opens ``count`` connections that each trickle one byte of a Get every 0.3 s,
# reconnecting whenever the daemon closes one.
TRICKLE = COMMON + r"""
GET = record(7, 1, 2, struct.pack(">4i", 0, 1, 0, 0))
conns = {}
while time.time() < until:
    while len(conns) < count:
        sock = connect()
        if sock is None:
            break
        conns[sock] = 0
    for sock, sent in list(conns.items()):
        try:
            sock.send(GET[sent % (len(GET) - 1):sent % (len(GET) - 1) + 1])
            conns[sock] = sent + 1
        except OSError:
            sock.close()
            del conns[sock]
    time.sleep(0.3)
"""

# Connects, asks for a Set (refused: not root), reads the answer, closes; as fast as it can.
FLOOD = COMMON + r"""
SET = record(9, 1, 1, struct.pack(">5i", 0, 1, 0, 0, 0))
HALF = SET[:10]
n = 0
while time.time() < until:
    sock = connect()
    if sock is None:
        continue
    try:
        if n % 4 == 3:
            sock.sendall(HALF)          # and some leave half a request behind
        else:
            sock.sendall(SET)
            sock.recv(64)
    except OSError:
        pass
    sock.close()
    n += 1
print(n)
"""


def attack(attacker, code, path, seconds, count, processes=1):
    until = time.time() + seconds
    return [attacker.popen([harness.SYSTEM_PYTHON, "-c", code, path, "%.3f" % until, str(count)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(processes)]


def finish(procs):
    outs = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        assert proc.returncode == 0, err
        outs.append(out.strip())
    return outs


def root_gets_during(daemon, deadline, warmup=0.5):
    """Root's Get, on a new connection each time, until the deadline; returns the latencies."""
    time.sleep(warmup)  # let the attack take hold
    latencies = []
    for _ in deadline():
        started = time.monotonic()
        try:
            with Conn(daemon.socket_path, timeout=ROOT_BOUND) as conn:
                reply = conn.call(1, 2, dev_args(0))
        except OSError as exc:
            reply = "error: %r" % (exc,)
        elapsed = time.monotonic() - started
        assert reply == ("accepted", 0, (0, 1)), \
            "root's Get #%d got %r after %.3f s during the attack" % (len(latencies), reply, elapsed)
        assert elapsed < ROOT_BOUND, "root's Get #%d took %.3f s" % (len(latencies), elapsed)
        latencies.append(elapsed)
        time.sleep(0.05)
    return latencies


def daemon_lines(host, since):
    return [line for line in host.log_lines()[since:] if "gpufleet-persistenced" in line]


@pytest.mark.parametrize("who", ["stranger", "service_user"])
def test_held_connections_cannot_lock_out_root(who, daemon, host, deadline, request):
    """One user holds as many connections as the daemon will give it (and keeps asking for 400)."""
    attacker = request.getfixturevalue(who)
    mark = len(host.log_lines())
    procs = attack(attacker, HOLD, daemon.socket_path, ATTACK_SECONDS + 1.0, 400)
    try:
        latencies = root_gets_during(daemon, deadline)
    finally:
        held = finish(procs)
    lines = daemon_lines(host, mark)
    assert len(lines) <= LOG_BOUND, "%d syslog lines from one attack: %r" % (len(lines), lines[:20])
    assert latencies and harness.fakehost.pid_alive(daemon.pid)
    assert int(held[0]) >= 1


def test_slow_senders_cannot_lock_out_root(daemon, host, stranger, deadline):
    """Many connections that each trickle half a request (a slow sender per slot)."""
    mark = len(host.log_lines())
    procs = attack(stranger, TRICKLE, daemon.socket_path, ATTACK_SECONDS + 1.0, 400)
    try:
        root_gets_during(daemon, deadline)
    finally:
        finish(procs)
    lines = daemon_lines(host, mark)
    assert len(lines) <= LOG_BOUND, "%d syslog lines from one attack: %r" % (len(lines), lines[:20])


def test_connect_and_set_flood_neither_locks_out_root_nor_floods_syslog(daemon, host, stranger, deadline):
    """Two processes connect, ask a (refused) Set or leave half a request, and close, as fast as they can."""
    mark = len(host.log_lines())
    procs = attack(stranger, FLOOD, daemon.socket_path, ATTACK_SECONDS + 1.0, 0, processes=2)
    try:
        root_gets_during(daemon, deadline)
    finally:
        counts = finish(procs)
    assert sum(int(c) for c in counts) > 100, counts  # the flood did run
    host.wait_log("only root may set")
    time.sleep(0.3)  # the capture is a thread
    lines = daemon_lines(host, mark)
    assert len(lines) <= LOG_BOUND, "%d syslog lines from one flood: %r" % (len(lines), lines[:20])
    with Conn(daemon.socket_path) as conn:
        assert conn.call(1, 1, dev_args(0, 0)) == ("accepted", 0, (0,))  # root still sets


def test_limits_leave_root_its_reserve(daemon, host, stranger, service_user):
    """Two users at their per-user limit together, then root opens 20 connections at once: all served."""
    procs = attack(stranger, HOLD, daemon.socket_path, 3.0, 400) + \
        attack(service_user, HOLD, daemon.socket_path, 3.0, 400)
    try:
        time.sleep(1.0)
        crowd = [Conn(daemon.socket_path, timeout=ROOT_BOUND) for _ in range(20)]
        try:
            assert [c.call(1, 2, dev_args(1)) for c in crowd] == [("accepted", 0, (0, 1))] * 20
        finally:
            for c in crowd:
                c.close()
    finally:
        finish(procs)

