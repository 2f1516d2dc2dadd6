"""The README's first command, run as a new user runs it.

A fresh clone in an empty temporary folder: no .venv, no .build, nothing
under .cache (no driver kit, no lab rootfs), then ``bash scripts/demo`` and
nothing else.  The demo must build everything it needs itself (bootstrap,
the driver kit, the lab rootfs), converge the lab fleet and report it
converged.  A second ``bash scripts/demo`` in the same clone then runs from
the warm caches.  Each run's wall time and the demo's own step timings are
printed (run pytest with -s to see them as they come).

When the working tree has uncommitted changes (a developer's machine), the
clone is made of the working tree's files (tracked and untracked, not
ignored) in a new repository, which is what ``git clone`` of a commit of
them would give; CI's checkout is clean and gets a real ``git clone``.
"""

import os
import re
import subprocess
import sys
import tempfile
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO_TIMEOUT = int(os.environ.get("GPUFLEET_DEMO_TIMEOUT", "1800"))


def fresh_clone(dest):
    status = subprocess.run(["git", "-C", REPO, "status", "--porcelain"],
                            stdout=subprocess.PIPE, text=True, check=True).stdout
    if not status.strip():
        subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", REPO, dest], check=True)
        return "git clone of %s" % subprocess.run(
            ["git", "-C", REPO, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
            text=True, check=True).stdout.strip()
    files = subprocess.run(["git", "-C", REPO, "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard"], stdout=subprocess.PIPE, check=True).stdout
    existing = b"\0".join(f for f in files.split(b"\0") if f and os.path.lexists(
        os.path.join(REPO.encode(), f)))
    os.makedirs(dest)
    subprocess.run(["rsync", "-a", "--from0", "--files-from=-", REPO + "/", dest + "/"],
                   input=existing, check=True)
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    subprocess.run(["git", "add", "-A"], cwd=dest, check=True)
    subprocess.run(["git", "-c", "user.name=demo", "-c", "user.email=demo@localhost",
                    "commit", "-qm", "working tree"], cwd=dest, check=True)
    return "copy of the working tree (uncommitted changes present)"


def user_env():
    """The environment a new user's shell has: none of the test run's own settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPUFLEET_", "ANSIBLE_", "VIRTUAL_ENV", "PYTHON", "MOLECULE_"))}
    venv_bin = os.path.join(REPO, ".venv", "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and p != venv_bin)
    return env


def run_demo(clone, log_path):
    start = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(["bash", "scripts/demo"], cwd=clone, env=user_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                stdin=subprocess.DEVNULL)
        for line in proc.stdout:
            log.write(line)
            if line.startswith("== ") or line.startswith("demo:") or line.startswith("lab:"):
                sys.stdout.write("    " + line)
                sys.stdout.flush()
        rc = proc.wait(timeout=DEMO_TIMEOUT)
    with open(log_path) as log:
        return rc, log.read(), time.monotonic() - start


@pytest.fixture(scope="module")
def clone():
    top = tempfile.mkdtemp(prefix="gfdemo", dir="/tmp")
    dest = os.path.join(top, "gpufleet")
    how = fresh_clone(dest)
    print("\nfresh clone: %s in %s" % (how, dest))
    yield dest
    # Never leave a lab fleet up, whatever happened.
    subprocess.run([sys.executable, os.path.join(dest, "tests", "lab", "lab"), "down"],
                   cwd=dest, env=dict(user_env(), GPUFLEET_LAB_CACHE=os.path.join(dest, ".cache", "lab")),
                   check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run(["rm", "-rf", "--one-file-system", top], check=False)


def assert_converged(rc, out):
    tail = "\n".join(out.splitlines()[-60:])
    assert rc == 0, "scripts/demo exited %d; last lines:\n%s" % (rc, tail)
    assert "the fleet is converged" in out, tail
    summary = out.split("== per-host summary ==", 1)[1]
    hosts = re.findall(r"^(h\d+)\s", summary, re.M)
    assert len(hosts) == 4, summary
    # The second run found every host converged in one round trip (node_state) ...
    converged = re.findall(r"^h\d+\s+found=converged\b", summary, re.M)
    assert len(converged) == 4, summary
    # ... and the first ran a container through the registered nvidia runtime (the lab's stand-in) on each.
    assert "first run: nvidia_run=ok on 4 hosts" in summary, summary


def test_first_command_on_a_fresh_clone(clone):
    for sub in (".venv", ".build", ".cache"):
        assert not os.path.exists(os.path.join(clone, sub)), "the clone is not fresh: %s" % sub
    rc, out, secs = run_demo(clone, os.path.join(os.path.dirname(clone), "demo-fresh.log"))
    print("scripts/demo from a fresh clone: rc=%d in %.0f s" % (rc, secs))
    assert_converged(rc, out)
    # It built what it needed itself, in the clone.
    assert os.path.exists(os.path.join(clone, ".cache", "driverkit", "build", "lib",
                                       "libnvidia-cfg.so.1"))
    assert "building the lab rootfs" in out, "the demo did not build the lab rootfs itself"
    assert os.path.isdir(os.path.join(clone, ".cache", "lab", "rootfs", "base"))
    # And left no fleet up.
    netns = subprocess.run(["ip", "netns", "list"], stdout=subprocess.PIPE, text=True).stdout
    assert "gflab-" not in netns, netns


def test_second_run_from_warm_caches(clone):
    rc, out, secs = run_demo(clone, os.path.join(os.path.dirname(clone), "demo-warm.log"))
    print("scripts/demo again, warm caches: rc=%d in %.0f s" % (rc, secs))
    assert_converged(rc, out)
    assert "rootfs cached" in out
