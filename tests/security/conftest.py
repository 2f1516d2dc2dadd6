"""Shared fixtures for the security layer: an unprivileged attacker, and loops
that run until a deadline.

Every test here attacks a boundary the collection keeps between root and
everyone else (the service user, or any local user through the daemon's
socket).  The attacker is a real unprivileged process: ``setpriv`` to a uid
and gid with no supplementary groups and no capabilities.  Races run until a
deadline (``GPUFLEET_SECURITY_SECONDS`` per race, default 4 s), never once.

Needs root (to become the attacker and to run the root side). Nothing here
changes the machine's /etc: attackers use uids that need no passwd entry, or
``nobody`` (which Debian always has).
"""

import os
import pwd
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "driverkit"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fakehost  # noqa: E402
from pytest_fakehost import require  # noqa: E402
from privatedaemon import private_lock_dir  # noqa: E402,F401 (a fixture: the modules' locks off the machine's /run)

COLLECTIONS = fakehost.COLLECTIONS_DIR
RACE_SECONDS = float(os.environ.get("GPUFLEET_SECURITY_SECONDS", "4"))
# The attacker's interpreter: the machine's own, which any user can run (the
# test venv's Python lives under /root, which other users cannot enter).
ATTACKER_PYTHON = fakehost.SYSTEM_PYTHON
# A local user with no passwd entry: nothing on the machine changes for it.
STRANGER_UID = 4242


@pytest.fixture(scope="session", autouse=True)
def _prerequisites():
    require("the security layer", fakehost.missing_prerequisites(
        kit=False, nvidia_daemon=False, tools=("setpriv",), system_python="the attackers' interpreter"))


class Attacker(object):
    """An unprivileged identity and ways to run code as it."""

    def __init__(self, uid, gid, name):
        self.uid = uid
        self.gid = gid
        self.name = name

    def argv(self, argv):
        return ["setpriv", "--reuid=%d" % self.uid, "--regid=%d" % self.gid,
                "--clear-groups", "--inh-caps=-all", "--bounding-set=-all",
                "--no-new-privs", "--"] + list(argv)

    def run(self, argv, **kwargs):
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        kwargs.setdefault("text", True)
        return subprocess.run(self.argv(argv), **kwargs)

    def owned_dir(self, parent, name):
        """A new 0755 directory ``parent/name`` that this attacker owns."""
        path = os.path.join(parent, name)
        os.mkdir(path, 0o755)
        os.chown(path, self.uid, self.gid)
        return path

    def popen(self, argv, **kwargs):
        return subprocess.Popen(self.argv(argv), **kwargs)

    def python(self, code, *args, **kwargs):
        """Run Python ``code`` (a string) as the attacker; returns CompletedProcess."""
        return self.run([ATTACKER_PYTHON, "-c", code] + [str(a) for a in args], **kwargs)

    def python_popen(self, code, *args, **kwargs):
        """Start Python ``code`` as the attacker; fails the test if it is not running
        a moment later (an attacker that died at once would attack nothing)."""
        proc = self.popen([ATTACKER_PYTHON, "-c", code] + [str(a) for a in args], **kwargs)
        time.sleep(0.05)
        if proc.poll() is not None:
            pytest.fail("the attacker (%s) exited at once with rc %d" % (self.name, proc.returncode),
                        pytrace=False)
        return proc


@pytest.fixture
def service_user():
    """The daemon's service user as an attacker: ``nobody``."""
    entry = pwd.getpwnam("nobody")
    return Attacker(entry.pw_uid, entry.pw_gid, "nobody")


@pytest.fixture
def stranger():
    """Any other local user: a uid with no passwd entry and no groups."""
    return Attacker(STRANGER_UID, STRANGER_UID, "uid %d" % STRANGER_UID)


def until_deadline(seconds=None):
    """Yield iteration numbers until ``seconds`` (default RACE_SECONDS) pass."""
    end = time.monotonic() + (RACE_SECONDS if seconds is None else seconds)
    count = 0
    while True:
        yield count
        count += 1
        if time.monotonic() >= end:
            return


@pytest.fixture
def deadline():
    return until_deadline


@pytest.fixture
def sandbox():
    """A root-owned 0755 directory in /tmp for one test, removed afterwards.
    Its parent is sticky /tmp, so an attacker cannot rename or remove it."""
    path = tempfile.mkdtemp(prefix="gfsec", dir="/tmp")
    os.chmod(path, 0o755)
    yield path
    subprocess.run(["rm", "-rf", "--one-file-system", path], check=False)


# As the attacker: try to open a root-only file (argv[1]) for reading, then for appending, and to list its
# directory; print what each attempt gave (the audit log's and the rollback store's tests).
PRIVATE_FILE_PROBE = r'''
import json, os, sys
path = sys.argv[1]
found = {}
for what, flags in (("read", os.O_RDONLY), ("append", os.O_WRONLY | os.O_APPEND)):
    try:
        os.close(os.open(path, flags))
        found[what] = "opened"
    except OSError as exc:
        found[what] = exc.errno
try:
    os.listdir(os.path.dirname(path))
    found["list"] = "listed"
except OSError as exc:
    found["list"] = exc.errno
print(json.dumps(found))
'''

# As the attacker, until argv[2]: every way into root's own directory argv[1], again and again: list it, read and
# append to each file named ``read:NAME`` after it, create each file named ``plant:NAME`` in it, rename the
# directory, put a link beside it; prints how many tries there were and how many got through (node_state's memo,
# the modules' kept bytecode).
DIRECTORY_PRY = r'''
import json, os, sys, time
directory, deadline = sys.argv[1], float(sys.argv[2])
named = [item.split(':', 1) for item in sys.argv[3:]]
attempts = [lambda: os.listdir(directory)]
for kind, name in named:
    path = os.path.join(directory, name)
    if kind == 'read':
        attempts += [lambda path=path: open(path, 'rb').read(), lambda path=path: open(path, 'ab').write(b'planted')]
    else:
        attempts.append(lambda path=path: open(path, 'wb').write(b'planted'))
attempts += [lambda: os.rename(directory, directory + '.gone'), lambda: os.symlink('/tmp', directory + '.next')]
tries = through = 0
while time.time() < deadline:
    for attempt in attempts:
        tries += 1
        try:
            attempt()
            through += 1
        except OSError:
            pass
print(json.dumps({'tries': tries, 'through': through}))
'''

# As the attacker, until argv[2]: the directory argv[1] becomes a link to the vault argv[3] and back again.
DIRECTORY_SWAP = r'''
import os, sys, time
directory, end, vault = sys.argv[1], float(sys.argv[2]), sys.argv[3]
away = directory + ".away"
swaps = 0
while time.time() < end:
    try:
        os.rename(directory, away)
        os.symlink(vault, directory)
        swaps += 1
        time.sleep(0.001)
        os.unlink(directory)
        os.rename(away, directory)
    except OSError:
        pass
print("swaps", swaps)
'''
