"""Root lists the processes that hold NVIDIA device files (persistenced state=stopped): any user decides
what its own /proc/PID/fd links say, so root must only read them as text.

``procs.open_file_holders`` runs as root over every process. A stranger holds files of its choosing
under names of its choosing in a directory it owns, which here stands for the device directory (the
prefix root looks for is that directory's ``nvidia``): a FIFO with no writer (root would hang opening
it), a name with a newline and a forged " (deleted)" after it, a symbolic link to a root-only vault held with
O_PATH (following it would reach the vault), a deleted file, and a process name of undecodable bytes.
Root's reader must report them as text, open none of them (inotify sees every open), and never hang
or fail while the stranger keeps changing them, forking and exiting until the deadline.
"""

import ctypes
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import ATTACKER_PYTHON, COLLECTIONS, RACE_SECONDS

IN_ACCESS, IN_OPEN = 0x1, 0x20

# Root's side: what persistenced's stopped run calls, in a child so that a hang fails the test.
READER = r'''
import json, sys, time
sys.path.insert(0, %r)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import procs
prefix, end = sys.argv[1], float(sys.argv[2])
runs = 0
while True:
    found = procs.open_file_holders((prefix,))
    json.dumps(found)  # what exit_json does with it
    runs += 1
    if time.time() >= end:
        break
print(json.dumps({'runs': runs, 'holders': found}))
''' % COLLECTIONS

# The stranger: holds the crafted files, says "ready", then (with a deadline) keeps changing them.
HOLD = r'''
import ctypes, os, sys, time
base, vault, end = sys.argv[1], sys.argv[2], float(sys.argv[3])
ctypes.CDLL(None).prctl(15, b"\xff\n/dev/nvidia9", 0, 0, 0)  # PR_SET_NAME
fifo = os.path.join(base, "nvidia0")
os.mkfifo(fifo)
held = [os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)]  # no writer: a blocking open for reading hangs
crafted = os.path.join(base, "nvidia1\n(deleted)")
with open(crafted, "w") as handle:
    handle.write("x")
held.append(os.open(crafted, os.O_RDONLY))
link = os.path.join(base, "nvidia2")
os.symlink(vault, link)
held.append(os.open(link, os.O_PATH | os.O_NOFOLLOW))
gone = os.path.join(base, "nvidia3")
with open(gone, "w") as handle:
    handle.write("x")
held.append(os.open(gone, os.O_RDONLY))
os.unlink(gone)
print("ready", flush=True)
sys.stdin.readline()  # root reads now; then the race
n = 0
while time.time() < end:
    n += 1
    name = os.path.join(base, "nvidia%d" % (10 + n % 4))
    try:
        if n % 3 == 0:
            os.mkfifo(name)
            fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK)
            os.rename(name, name + "\n(deleted)")
            os.close(fd)
            os.unlink(name + "\n(deleted)")
        elif n % 3 == 1:
            if os.fork() == 0:
                fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
                os._exit(0)
            os.wait()
        else:
            held.append(os.open(link, os.O_PATH | os.O_NOFOLLOW))
            os.close(held.pop())
    except OSError:
        pass
'''


class Inotify(object):
    """Every open or read of the watched paths, by anyone (ctypes: the stdlib has no inotify)."""

    def __init__(self, paths):
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        assert self.fd >= 0, os.strerror(ctypes.get_errno())
        for path in paths:
            assert self.libc.inotify_add_watch(self.fd, path.encode(), IN_OPEN | IN_ACCESS) >= 0, path

    def events(self):
        try:
            return os.read(self.fd, 65536)
        except BlockingIOError:
            return b""

    def close(self):
        os.close(self.fd)


def run_reader(prefix, seconds):
    try:
        proc = subprocess.run([sys.executable, "-c", READER, prefix, str(time.time() + seconds)],
                              capture_output=True, text=True, timeout=seconds + 20)
    except subprocess.TimeoutExpired:
        pytest.fail("root's /proc reader hung on what the stranger holds: it opened something")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def hold(stranger, directory, vault, race_seconds):
    """Start HOLD as the stranger; it races for ``race_seconds`` once told to go on its stdin."""
    return stranger.popen([ATTACKER_PYTHON, "-c", HOLD, directory, vault, str(time.time() + race_seconds)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture
def stranger_dir(sandbox, stranger):
    return stranger.owned_dir(sandbox, "dev")


def test_crafted_fd_links_are_reported_as_text_and_never_opened(sandbox, stranger, stranger_dir):
    vault = os.path.join(sandbox, "vault")
    os.mkdir(vault, 0o700)
    secret = os.path.join(vault, "secret")
    with open(secret, "w") as handle:
        handle.write("root only\n")
    holder = hold(stranger, stranger_dir, secret, 0)
    try:
        assert holder.stdout.readline().strip() == "ready", holder.stderr.read()
        watch = Inotify([stranger_dir, secret])
        try:
            found = run_reader(os.path.join(stranger_dir, "nvidia"), 0)
            assert watch.events() == b"", "root opened or read a file the stranger holds"
        finally:
            watch.close()
    finally:
        holder.kill()
        holder.wait()
    mine = [h for h in found["holders"] if h["pid"] == holder.pid]
    assert mine == [{
        "pid": holder.pid, "name": "\ufffd?/dev/nvidia9", "uid": stranger.uid,
        "paths": sorted([os.path.join(stranger_dir, "nvidia0"), os.path.join(stranger_dir, "nvidia1?(deleted)"),
                         os.path.join(stranger_dir, "nvidia2"), os.path.join(stranger_dir, "nvidia3 (deleted)")]),
    }]
    assert all(h["pid"] == holder.pid for h in found["holders"])


def test_a_stranger_changing_what_it_holds_never_hangs_or_breaks_the_reader(sandbox, stranger, stranger_dir):
    holder = hold(stranger, stranger_dir, os.path.join(sandbox, "nothing"), RACE_SECONDS + 1)
    try:
        assert holder.stdout.readline().strip() == "ready", holder.stderr.read()
        holder.stdin.write("go\n")
        holder.stdin.flush()
        result = run_reader(os.path.join(stranger_dir, "nvidia"), RACE_SECONDS)
    finally:
        holder.kill()
        holder.wait()
    assert result["runs"] > 10
    for found in result["holders"]:
        assert all(path.startswith(os.path.join(stranger_dir, "nvidia")) for path in found["paths"])
        assert all(ch.isprintable() for path in found["paths"] for ch in path)
