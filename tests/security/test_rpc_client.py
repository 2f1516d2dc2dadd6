"""Root's RPC client (gpu_info, gpu_persistence) never follows a link planted
in place of the daemon's socket.

The run directory belongs to the service user. A link there pointing at any
other socket on the host (dockerd's, systemd's) would make root's client send
its call to that socket instead. The attacker below is the service user: it
owns the run directory and loops, until the deadline, swapping the socket name
between its own real socket and a link to a root-only "victim" socket, while root
connects again and again. The victim must never see a connection.
"""

import os
import socket
import subprocess
import threading
import time

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import rpc
from conftest import RACE_SECONDS

SWAPPER = r"""
import os, socket, sys, time
run_dir, victim, stop_at = sys.argv[1], sys.argv[2], float(sys.argv[3])
name = os.path.join(run_dir, "socket")
real = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
real.bind(os.path.join(run_dir, "real.sock")); real.listen(64)
tmp = os.path.join(run_dir, "swap")
while time.time() < stop_at:
    for plant in ("real", "link"):
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if plant == "real":
            os.link(os.path.join(run_dir, "real.sock"), tmp)  # the attacker's own socket
        else:
            os.symlink(victim, tmp)
        os.rename(tmp, name)
"""


class Listener(object):
    """A root-only socket that counts the connections it is given."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(64)
        self.accepted = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self):
        self.sock.close()


@pytest.fixture
def run_dir(sandbox, service_user):
    return service_user.owned_dir(sandbox, "run")


@pytest.fixture
def victim(sandbox):
    private = os.path.join(sandbox, "private")
    os.mkdir(private, 0o711)  # the attacker may name it but not list it
    listener = Listener(os.path.join(private, "victim.sock"))
    yield listener, os.path.join(private, "victim.sock")
    listener.close()


def test_a_planted_link_is_refused(run_dir, victim, service_user):
    listener, victim_path = victim
    planted = service_user.run(["ln", "-s", victim_path, os.path.join(run_dir, "socket")])
    assert planted.returncode == 0, planted.stderr
    client = rpc.PersistencedClient(os.path.join(run_dir, "socket"), timeout=1.0)
    with pytest.raises(rpc.PersistencedUnavailableError) as err:
        client.connect()
    assert "symbolic link" in str(err.value)
    assert listener.accepted == 0


def test_link_swaps_racing_root_never_reach_the_victim(run_dir, victim, service_user, deadline):
    listener, victim_path = victim
    stop_at = time.time() + RACE_SECONDS + 1
    swapper = service_user.python_popen(SWAPPER, run_dir, victim_path, stop_at)
    tries = refused = 0
    try:
        for _ in deadline():
            client = rpc.PersistencedClient(os.path.join(run_dir, "socket"), timeout=1.0)
            tries += 1
            try:
                client.connect()
            except rpc.PersistencedUnavailableError:
                refused += 1
            finally:
                client.close()
        assert swapper.poll() is None, "the attacker stopped before the deadline"
    finally:
        swapper.wait(timeout=30)
    assert swapper.returncode == 0
    assert 0 < refused < tries, (tries, refused)  # both the link and the real socket were met
    assert listener.accepted == 0, "root's client followed a planted link %d times in %d tries" % (
        listener.accepted, tries)


def drain(server):
    """Accept whatever arrives until nothing has for half a second."""
    server.settimeout(0.5)
    while True:
        try:
            server.accept()
        except socket.timeout:
            return


def test_a_full_listen_backlog_makes_root_wait_not_fail(sandbox, stranger):
    """Connections that a flood leaves in the backlog answer root's connect with EAGAIN
    at once; root's client waits for room (as a blocking client does) within its timeout."""
    path = os.path.join(sandbox, "sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o777)
    server.listen(1)
    fill = stranger.python_popen(
        "import socket, sys, time\n"
        "held = []\n"
        "while True:\n"
        "    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.setblocking(False)\n"
        "    try:\n"
        "        s.connect(sys.argv[1])\n"
        "    except BlockingIOError:\n"
        "        break\n"
        "    held.append(s)\n"
        "print(len(held), flush=True)\n"
        "time.sleep(30)\n", path, stdout=subprocess.PIPE, text=True)
    try:
        assert int(fill.stdout.readline()) >= 1  # the backlog is full now
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.setblocking(False)
        with pytest.raises(BlockingIOError):
            probe.connect(path)
        probe.close()
        # The server drains its backlog a moment later, as the daemon does.
        drainer = threading.Timer(0.3, drain, (server,))
        drainer.start()
        started = time.monotonic()
        client = rpc.PersistencedClient(path, timeout=3.0)
        client.connect()
        client.close()
        assert 0.2 < time.monotonic() - started < 3.0
        drainer.join()
    finally:
        fill.kill()
        fill.wait()
        server.close()
