"""The bundled daemon's files: nothing it does as root follows a link planted by
the service user, and no state file or failed write takes it down.

Each test runs files/gpufleet-persistenced on a fake NVIDIA host (tests/daemon's
harness: a private mount namespace per daemon) and attacks it as a real
unprivileged process: ``nobody`` (the service user, who owns the run directory
after a start with ``--user nobody`` and the state directory) plants symbolic
and hard links at the paths root opens, before a start and in a loop during
root's starts and writes, until the deadline.

Victims live in the ``sandbox`` fixture (root-owned, same file system as the
fake hosts in /tmp, so hard links work). With ``fs.protected_hardlinks = 1``
(Debian's default) an unprivileged user may hard-link only a file it can read
and write, so hard-link victims are root-owned mode 0666 files: what counts is
that root neither writes nor chmods them.

Attacker code runs under Debian's /usr/bin/python3 (the venv's interpreter
lives under /root, which nobody cannot enter).
"""

import json
import os
import signal
import stat
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "daemon"))

import harness  # noqa: E402
from harness import NOBODY, Conn, dev_args  # noqa: E402

GPU0, GPU1 = harness.bdf(0), harness.bdf(1)
PID_NAME = "nvidia-persistenced.pid"
PRECIOUS = b"root's precious data\n"


def status(*words):
    return ("accepted", 0, words)


# ---- helpers ------------------------------------------------------------------------

def our_pids(host):
    """Every process of our daemon on ``host`` (found by its --state-file in /proc; killed by pid)."""
    pids = []
    marker = host.state_file.encode()
    script = harness.OURS.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as handle:
                argv = handle.read().split(b"\0")
        except OSError:
            continue
        if marker in argv and script in argv and harness.fakehost.pid_alive(int(entry)):
            pids.append(int(entry))
    return pids


def kill_all(host, sig=signal.SIGKILL):
    for pid in our_pids(host):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
        harness.fakehost.wait_gone(pid, timeout=5)


@pytest.fixture
def host():
    """A 2-GPU fake host whose state directory belongs to the service user (as the persistenced role makes it)."""
    made = harness.Host(gpus=2)
    os.chown(made.state_dir, NOBODY, NOBODY)
    yield made
    kill_all(made)
    made.close()


class Victim(object):
    """A root-owned file the attacker wants root to write, truncate or chmod."""

    def __init__(self, directory, name="victim", mode=0o644):
        self.path = os.path.join(directory, name)
        with open(self.path, "wb") as handle:
            handle.write(PRECIOUS)
        os.chmod(self.path, mode)
        self.before = self.snapshot()

    def snapshot(self):
        st = os.lstat(self.path)
        with open(self.path, "rb") as handle:
            return (handle.read(), st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode), st.st_ino)

    def assert_intact(self, context=""):
        assert self.snapshot() == self.before, "root changed %s %s" % (self.path, context)


def start(host, *options, timeout=20, daemon=None):
    """Start our daemon (fork-and-wait); returns the CompletedProcess (no check)."""
    daemon = daemon or harness.OurDaemon(host)
    try:
        return daemon.start(*options, check=False, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError("the daemon did not finish starting within %d s (hung?): %r"
                             % (timeout, host.log_lines()[-5:])) from exc


def answers_get(host, timeout=2.0):
    with Conn(host.tree.socket, timeout=timeout) as conn:
        return conn.call(1, 2, dev_args(0))


def assert_refused_or_safe(proc, host):
    """A start either refuses with a clear reason or gives a working daemon."""
    if proc.returncode == 0:
        assert answers_get(host) == status(0, 1)
    else:
        assert proc.returncode == 1, (proc.returncode, proc.stderr)
        assert "failed to initialize" in proc.stderr and "unexpected error" not in proc.stderr, proc.stderr


PLANT = r"""
import os, signal, sys
kind, target, path = sys.argv[1:4]
pid = int(sys.argv[4]) if len(sys.argv) > 4 else 0
if pid:
    os.kill(pid, signal.SIGKILL)   # the service user may kill its own daemon
    while os.path.exists("/proc/%d" % pid):
        pass
try:
    os.unlink(path)
except FileNotFoundError:
    pass
(os.symlink if kind == "symlink" else os.link)(target, path)
"""

# Replants links at the given names in a loop until the file ``stop`` exists.
RACE = r"""
import os, sys, itertools
stop, victim, directory = sys.argv[1:4]
names = sys.argv[4:]
tmp = os.path.join(directory, ".plant.%d" % os.getpid())
for n in itertools.count():
    if n % 64 == 0 and os.path.exists(stop):
        break
    name = names[n % len(names)]
    try:
        if n % 2:
            os.symlink(victim, tmp)
        else:
            os.link(victim, tmp)
        os.rename(tmp, os.path.join(directory, name))
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
"""


def race(attacker, stop, victim, directory, names):
    return attacker.popen([harness.SYSTEM_PYTHON, "-c", RACE, stop, victim, directory] + list(names),
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def end_race(proc, stop):
    with open(stop, "w"):
        pass
    try:
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ---- the run directory ----------------------------------------------------------------

@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_pid_file_planted_by_the_service_user_is_not_followed(link, host, service_user, sandbox):
    """nobody kills its daemon and plants a link at the pid file; root's next start must not write through it."""
    victim = Victim(sandbox, mode=0o644 if link == "symlink" else 0o666)
    first = start(host, "--user", "nobody")
    assert first.returncode == 0, first.stderr
    pid = harness.fakehost.daemon_pid(host.dir)
    planted = service_user.run([harness.SYSTEM_PYTHON, "-c", PLANT, link, victim.path,
                                host.tree.pid_file, str(pid)])
    assert planted.returncode == 0, planted.stderr
    proc = start(host, "--user", "nobody")
    victim.assert_intact("through a %s at the pid file" % link)
    assert_refused_or_safe(proc, host)
    assert proc.returncode == 0, "a planted link is removed, not a reason to stay down: %s" % proc.stderr


def test_links_planted_during_root_starts(host, service_user, sandbox, deadline):
    """While root starts and restarts the daemon, nobody keeps planting links at the
    pid file, the socket and a spare name in the run dir (it owns the dir after each start)."""
    victim = Victim(sandbox, mode=0o666)
    first = start(host, "--user", "nobody")
    assert first.returncode == 0, first.stderr
    stop = os.path.join(sandbox, "stop")
    attack = race(service_user, stop, victim.path, host.tree.run_dir, [PID_NAME, "socket"])
    outcomes = {}
    try:
        for _ in deadline():
            kill_all(host)
            proc = start(host, "--user", "nobody")
            victim.assert_intact("during a start")
            outcomes[proc.returncode] = outcomes.get(proc.returncode, 0) + 1
            assert proc.returncode in (0, 1), proc.stderr
            assert "unexpected error" not in proc.stderr, proc.stderr
    finally:
        end_race(attack, stop)
    victim.assert_intact()
    kill_all(host)
    assert start(host, "--user", "nobody").returncode == 0  # and it starts once the attack stops
    assert answers_get(host) == status(0, 1)
    print("starts during the race (exit status: count): %r" % outcomes)
    assert outcomes.get(0), outcomes


# Holds a shared lock on a file it can only read: argv = path, seconds, lockf|flock
# (the pid file is locked with lockf, the state file's lock with flock).
HOLD_SHARED_LOCK = r"""
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
getattr(fcntl, sys.argv[3])(fd, fcntl.LOCK_SH)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def test_a_stranger_holding_a_read_lock_on_a_stale_pid_file_cannot_keep_the_daemon_down(host, stranger):
    """The pid file is world-readable: after the daemon dies, any local user can
    hold a read lock on the stale file; the next start must not take that for a live instance."""
    first = start(host)
    assert first.returncode == 0, first.stderr
    kill_all(host)
    holder = stranger.popen([harness.SYSTEM_PYTHON, "-c", HOLD_SHARED_LOCK, host.tree.pid_file, "30", "lockf"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held", holder.stderr.read()
        proc = start(host)
        assert proc.returncode == 0, proc.stderr
        assert answers_get(host) == status(0, 1)
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("case", ["symlink", "stranger_owned"])
def test_run_dir_that_is_not_ours_is_refused(case, host, stranger, sandbox):
    """A run dir that is a symlink, or a directory another user owns (who planted a
    link in it), is refused with a clear error; nothing in or through it changes."""
    victim = Victim(sandbox, mode=0o644)
    elsewhere = os.path.join(sandbox, "elsewhere")
    os.mkdir(elsewhere, 0o755)
    if case == "symlink":
        os.symlink(elsewhere, host.tree.run_dir)
    else:
        os.mkdir(host.tree.run_dir, 0o755)
        os.chown(host.tree.run_dir, stranger.uid, stranger.gid)
        planted = stranger.run([harness.SYSTEM_PYTHON, "-c", PLANT, "symlink", victim.path, host.tree.pid_file])
        assert planted.returncode == 0, planted.stderr
    proc = start(host, "--user", "nobody")
    victim.assert_intact()
    assert proc.returncode == 1, proc.stderr
    assert "/var/run/nvidia-persistenced" in proc.stderr, proc.stderr
    assert os.listdir(elsewhere) == []
    assert os.stat(elsewhere).st_uid == 0
    if case == "stranger_owned":
        assert os.lstat(host.tree.run_dir).st_uid == stranger.uid
        assert sorted(os.listdir(host.tree.run_dir)) == [PID_NAME]


def test_apply_saved_modes_does_not_follow_a_planted_socket_link(host, service_user, sandbox):
    """--apply-saved-modes runs as root and connects to the socket in the service
    user's run dir; nobody replaces the socket with a link to another root socket."""
    import socket
    import threading
    victim_path = os.path.join(sandbox, "root-service.sock")
    victim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    victim.bind(victim_path)
    victim.listen(8)
    victim.settimeout(0.2)
    received = []
    done = threading.Event()

    def serve():
        while not done.is_set():
            try:
                conn, _ = victim.accept()
            except socket.timeout:
                continue
            received.append(conn.recv(4096))
            conn.close()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    with open(host.state_file, "w") as handle:
        json.dump({"format_version": 1, "gpus": {host.uuid(0): {"mode": "disabled"}}}, handle)
    os.chown(host.state_file, NOBODY, NOBODY)
    try:
        proc = start(host, "--user", "nobody")
        assert proc.returncode == 0, proc.stderr
        code = "import os, sys; os.unlink(sys.argv[2]); os.symlink(sys.argv[1], sys.argv[2])"
        planted = service_user.run([harness.SYSTEM_PYTHON, "-c", code, victim_path, host.tree.socket])
        assert planted.returncode == 0, planted.stderr
        apply = subprocess.run(host.nsrun_argv([harness.SYSTEM_PYTHON, harness.OURS, "--apply-saved-modes",
                                                "--state-file", host.state_file]),
                               capture_output=True, text=True, timeout=30)
        time.sleep(0.3)
    finally:
        done.set()
        server.join()
        victim.close()
    assert received == [], "root sent %r to another socket through the planted link" % received
    assert apply.returncode == 0 and "symbolic link" in apply.stderr, apply.stderr


# ---- the state file, when the daemon runs as root ---------------------------------------

STATE_RACE = r"""
import os, sys, itertools
stop, victim, created, state, pid = sys.argv[1:6]
names = [state + ".lock", "%s.%s.tmp" % (state, pid)]
directory = os.path.dirname(state)
tmp = os.path.join(directory, ".plant")
for n in itertools.count():
    if n % 64 == 0 and os.path.exists(stop):
        break
    name = names[n % 2]
    target = created if name.endswith(".lock") else victim
    try:
        if n % 4 < 2:
            os.symlink(target, tmp)
        else:
            os.link(victim, tmp)
        os.rename(tmp, name)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
"""


def test_state_writes_as_root_do_not_follow_planted_links(host, service_user, sandbox, deadline):
    """A daemon run as root (no --user, e.g. for GH200) records each Set in the state
    directory the service user owns; nobody keeps planting links at the lock file
    and the temp file's name. No victim may change and no file may appear elsewhere."""
    victim = Victim(sandbox, mode=0o666)
    created = os.path.join(sandbox, "created-by-root")
    proc = start(host)
    assert proc.returncode == 0, proc.stderr
    pid = harness.fakehost.daemon_pid(host.dir)
    stop = os.path.join(sandbox, "stop")
    attack = service_user.popen([harness.SYSTEM_PYTHON, "-c", STATE_RACE, stop, victim.path, created,
                                 host.state_file, str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for n in deadline():
            with Conn(host.tree.socket, timeout=2.0) as conn:
                reply = conn.call(1, 1, dev_args(0, n % 2))
            assert reply == status(0), reply
            victim.assert_intact("recording a Set")
            assert not os.path.lexists(created), "root created %s through a planted lock link" % created
    finally:
        end_race(attack, stop)
    assert harness.fakehost.pid_alive(pid)
    victim.assert_intact()
    assert not os.path.lexists(created)


def test_a_stranger_holding_the_state_lock_cannot_stall_the_daemon(host, stranger):
    """Any local user can open a 0644 lock file (as earlier versions and other
    writers created it) and hold a shared flock on it: root's Set must still be
    answered promptly, and everyone else served meanwhile."""
    lock = host.state_file + ".lock"
    open(lock, "w").close()
    os.chmod(lock, 0o644)
    os.chown(lock, NOBODY, NOBODY)
    proc = start(host, "--user", "nobody")
    assert proc.returncode == 0, proc.stderr
    with Conn(host.tree.socket, timeout=2.0) as conn:
        assert conn.call(1, 1, dev_args(0, 0)) == status(0)
    holder = stranger.popen([harness.SYSTEM_PYTHON, "-c", HOLD_SHARED_LOCK, host.state_file + ".lock", "30", "flock"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held", holder.stderr.read()
        for mode in (1, 0, 1):
            started = time.monotonic()
            with Conn(host.tree.socket, timeout=5.0) as conn:
                assert conn.call(1, 1, dev_args(0, mode)) == status(0)
            assert time.monotonic() - started < 1.5
            with Conn(host.tree.socket, timeout=1.0) as conn:
                assert conn.call(1, 2, dev_args(0)) == status(0, mode)
        host.wait_log("could not be recorded in %s" % host.state_file)
    finally:
        holder.kill()
        holder.wait()


# ---- bad state files ------------------------------------------------------------------------

def _deep(host):
    return b"[" * 100000


def _large(host):
    return b'{"format_version": 1, "gpus": {}, "padding": "' + b"x" * (50 * 1024 * 1024) + b'"}'


def _not_an_object(host):
    return b'["format_version", 1]'


def _bool_version(host):
    return json.dumps({"format_version": True, "gpus": {host.uuid(0): {"mode": "disabled"}}}).encode()


BAD_STATES = {"deep": _deep, "large": _large, "not_an_object": _not_an_object, "bool_format_version": _bool_version}


def plant_state(case, host, service_user, sandbox):
    """Put the bad state file in place; planted ones as the service user (who owns the dir)."""
    if case in BAD_STATES:
        with open(host.state_file, "wb") as handle:
            handle.write(BAD_STATES[case](host))
        os.chown(host.state_file, NOBODY, NOBODY)
        return
    if case == "fifo":
        code = "import os, sys; os.mkfifo(sys.argv[1], 0o644)"
        planted = service_user.run([harness.SYSTEM_PYTHON, "-c", code, host.state_file])
    else:  # a symbolic link to a root-only file that would disable GPU 0
        secret = os.path.join(sandbox, "root-only.json")
        with open(secret, "w") as handle:
            json.dump({"format_version": 1, "gpus": {host.uuid(0): {"mode": "disabled"}}}, handle)
        os.chmod(secret, 0o600)
        code = "import os, sys; os.symlink(sys.argv[1], sys.argv[2])"
        planted = service_user.run([harness.SYSTEM_PYTHON, "-c", code, secret, host.state_file])
    assert planted.returncode == 0, planted.stderr


@pytest.mark.parametrize("case", sorted(BAD_STATES) + ["fifo", "symlink_to_root_only_file"])
def test_bad_state_file_keeps_the_daemon_running(case, host, service_user, sandbox):
    """At start and on SIGHUP, a bad state file gives the documented fallback (every
    GPU at the start-up default, one log line naming the file), never a dead or hung
    daemon; --apply-saved-modes (run as root by NVIDIA's unit) exits 0 promptly."""
    plant_state(case, host, service_user, sandbox)
    proc = start(host, timeout=15)
    assert proc.returncode == 0, (proc.stderr, host.log_lines()[-5:])
    daemon = harness.OurDaemon(host)
    pid = daemon.pid
    assert answers_get(host) == status(0, 1)
    assert daemon.held(pid) == {GPU0, GPU1}  # the start-up default, not the file's wishes
    host.wait_log(host.state_file)
    with open("/proc/%d/status" % pid) as handle:
        hwm = [int(line.split()[1]) for line in handle if line.startswith("VmHWM:")][0]
    assert hwm < 40 * 1024, "reading the state file cost %d kB of memory" % hwm
    lines_before = len(host.log_lines())
    os.kill(pid, signal.SIGHUP)
    deadline = time.monotonic() + 5
    while len([line for line in host.log_lines()[lines_before:] if host.state_file in line]) < 2:
        assert time.monotonic() < deadline, host.log_lines()[lines_before:]
        time.sleep(0.05)
    assert harness.fakehost.pid_alive(pid)
    assert answers_get(host) == status(0, 1)
    assert daemon.held(pid) == {GPU0, GPU1}
    apply = subprocess.run(host.nsrun_argv([harness.SYSTEM_PYTHON, harness.OURS, "--apply-saved-modes",
                                            "--state-file", host.state_file]),
                           capture_output=True, text=True, timeout=15)
    assert apply.returncode == 0, apply.stderr
    assert host.state_file in apply.stderr and "Traceback" not in apply.stderr, apply.stderr
    assert daemon.held(pid) == {GPU0, GPU1}
    assert not [line for line in host.log_lines() if "Traceback" in line or "unexpected error" in line]


# ---- failed writes of the state file ---------------------------------------------------------

class MountedDaemon(harness.OurDaemon):
    """Our daemon with ``setup`` (shell, ``$1`` = the state dir) run first in its own
    mount namespace: a read-only bind mount or a small tmpfs only it sees. The test
    looks at its state dir through /proc/<pid>/root."""

    def __init__(self, host, setup):
        super().__init__(host)
        self.setup = setup

    def argv(self, *options, **kwargs):
        return ["sh", "-c", self.setup + ' && shift && exec "$@"', "sh", self.host.state_dir] + \
            super().argv(*options, **kwargs)


WRITE_FAILURES = {
    "read_only_fs": 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1"',
    "no_space": ('cp -a "$1" "$1.orig" && mount -t tmpfs -o size=64k,mode=0755,uid=%d,gid=%d gfd-full "$1"'
                 ' && cp -a "$1.orig/." "$1/" && { head -c 1048576 /dev/zero > "$1/fill" 2>/dev/null; true; }'
                 % (NOBODY, NOBODY)),
    "immutable_file": None,
    "immutable_dir": None,
    "permission": None,
}


def chattr(flag, path):
    proc = subprocess.run(["chattr", flag, path], capture_output=True, text=True)
    assert proc.returncode == 0, "chattr %s %s: %s (does this file system support it?)" % (flag, path, proc.stderr)


@pytest.mark.parametrize("case", sorted(WRITE_FAILURES))
def test_failed_state_write_leaves_the_file_intact_and_the_daemon_up(case, host):
    """A Set whose recording fails (read-only fs, no space, immutable file or dir, no
    permission): the mode still changes and the client gets status 0 (the Set did
    happen), one line names the state file, the file is byte-identical, no temp file
    is left, and the daemon keeps serving."""
    with open(host.state_file, "w") as handle:
        json.dump({"format_version": 1, "default_mode": None, "gpus": {
            host.uuid(0): {"mode": "enabled", "pci_bus_id": "00000000:01:00.0"}}}, handle, indent=2)
    lock = host.state_file + ".lock"
    open(lock, "w").close()
    for path in (host.state_file, lock):
        os.chown(path, NOBODY, NOBODY)
    immutable = {"immutable_file": host.state_file, "immutable_dir": host.state_dir}.get(case)
    if case == "permission":
        os.chown(host.state_dir, 0, 0)
    daemon = MountedDaemon(host, WRITE_FAILURES[case]) if WRITE_FAILURES[case] else harness.OurDaemon(host)
    if immutable:
        chattr("+i", immutable)
    try:
        proc = start(host, "--user", "nobody", daemon=daemon)
        assert proc.returncode == 0, proc.stderr
        pid = daemon.pid
        seen = "/proc/%d/root%s" % (pid, host.state_dir)
        before_names = sorted(os.listdir(seen))
        with open(os.path.join(seen, "persistence.json"), "rb") as handle:
            before = handle.read()
        with Conn(host.tree.socket, timeout=2.0) as conn:
            assert conn.call(1, 1, dev_args(0, 0)) == status(0)
            assert conn.call(1, 2, dev_args(0)) == status(0, 0)
        host.wait_log("could not be recorded in %s" % host.state_file)
        with open(os.path.join(seen, "persistence.json"), "rb") as handle:
            assert handle.read() == before
        assert sorted(os.listdir(seen)) == before_names
        assert harness.fakehost.pid_alive(pid)
        with Conn(host.tree.socket, timeout=2.0) as conn:
            assert conn.call(1, 2, dev_args(1)) == status(0, 1)
    finally:
        if immutable:
            chattr("-i", immutable)
        kill_all(host)
        orig = host.state_dir + ".orig"
        if os.path.isdir(orig):
            subprocess.run(["rm", "-rf", orig], check=False)
