"""The README's first command, run as a new user runs it.

A fresh clone in an empty temporary folder: no .venv, no .build, nothing
under .cache (no driver kit, no lab rootfs), then ``bash scripts/demo`` and
nothing else.  The demo must build everything it needs itself (bootstrap,
the driver kit, the lab rootfs, the lab's apt repository of NVIDIA's
toolkit), converge the lab fleet and report it converged.

One exception, to keep the suite in its time budget: when this checkout
already holds NVIDIA's toolkit programs built from the same source by the
same script (``.cache/toolkit/bin`` with a matching stamp: the kit layer
builds them from nothing earlier in the same run), they are copied into
the clone's ``.cache/toolkit`` before the first run, so the clone does not
compile the same Go source a second time (3 to 8 minutes on 2 cores).  The
demo still runs ``tests/toolkit/build`` (which finds them by their stamp)
and packages and serves them itself.  Without them (``scripts/test demo``
alone on a new machine) the clone builds them too.  GPUFLEET_DEMO_FROM_NOTHING=1
turns the exception off.

The other way round, when the demo passed: what the clone built from nothing and this checkout has not
built yet (the lab rootfs, Upstart, NVIDIA's toolkit) is handed over to this checkout's ``.cache`` (a
rename, same file system), so the layers after this one do not build it all a second time. The suite
runs this layer before ``kit`` and ``lab`` for that reason: on a fresh machine the demo builds every
piece once, from nothing, as a new user's first command does, and the rest of the run reuses it.  A second ``bash scripts/demo`` in the same clone then runs from
the warm caches.  Each run's wall time and the demo's own step timings are
printed (run pytest with -s to see them as they come).

When the working tree has uncommitted changes (a developer's machine), the
clone is made of the working tree's files (tracked and untracked, not
ignored) in a new repository, which is what ``git clone`` of a commit of
them would give; CI's checkout is clean and gets a real ``git clone``.
"""

import glob
import os
import re
import shutil
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


# What a passing demo hands over to this checkout, where this checkout lacks it.
HANDOVER = (os.path.join(".cache", "lab", "rootfs"), os.path.join(".cache", "lab", "upstart"),
            os.path.join(".cache", "toolkit"))
PASSED = []


def seed_toolkit_build(dest):
    """Copy this checkout's toolkit programs into the clone when their stamp is the clone's own."""
    if os.environ.get("GPUFLEET_DEMO_FROM_NOTHING") == "1":
        return False
    mine = os.path.join(REPO, ".cache", "toolkit")
    try:
        with open(os.path.join(mine, "stamp")) as handle:
            stamp = handle.read().strip()
    except OSError:
        return False
    # The stamp is the version, the tarball's and the build script's hashes: recompute it in the clone.
    wanted = subprocess.run(["bash", "-c", 'ver=$(sed -n "s/^ver=//p" tests/toolkit/build); '
                             'echo "$ver $(sha256sum tests/toolkit/src/nvidia-container-toolkit-$ver.tar.xz | cut -d" " -f1)'
                             ' $(sha256sum tests/toolkit/build | cut -d" " -f1)"'],
                            cwd=dest, stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    if stamp != wanted or not os.access(os.path.join(mine, "bin", "nvidia-ctk"), os.X_OK):
        return False
    target = os.path.join(dest, ".cache", "toolkit")
    os.makedirs(target)
    subprocess.run(["cp", "-a", os.path.join(mine, "bin"), os.path.join(mine, "stamp"), target + "/"], check=True)
    return True


@pytest.fixture(scope="module")
def clone():
    top = tempfile.mkdtemp(prefix="gfdemo", dir="/tmp")
    dest = os.path.join(top, "gpufleet")
    how = fresh_clone(dest)
    print("\nfresh clone: %s in %s" % (how, dest))
    for sub in (".venv", ".build", ".cache"):
        assert not os.path.exists(os.path.join(dest, sub)), "the clone is not fresh: %s" % sub
    if seed_toolkit_build(dest):
        print("NVIDIA's toolkit programs, built by this checkout from the same source and script, copied in")
    yield dest
    # Never leave a lab fleet up, whatever happened.
    subprocess.run([sys.executable, os.path.join(dest, "tests", "lab", "lab"), "down"],
                   cwd=dest, env=dict(user_env(), GPUFLEET_LAB_CACHE=os.path.join(dest, ".cache", "lab")),
                   check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if PASSED:
        hand_over(dest)
    subprocess.run(["rm", "-rf", "--one-file-system", top], check=False)


def hand_over(clone):
    """Move what the clone built into this checkout's .cache where this checkout has none of it."""
    for sub in HANDOVER:
        built, mine = os.path.join(clone, sub), os.path.join(REPO, sub)
        if os.path.isdir(built) and not os.path.lexists(mine):
            os.makedirs(os.path.dirname(mine), exist_ok=True)
            shutil.move(built, mine)
            print("handed over to this checkout: %s" % sub)


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
    rc, out, secs = run_demo(clone, os.path.join(os.path.dirname(clone), "demo-fresh.log"))
    print("scripts/demo from a fresh clone: rc=%d in %.0f s" % (rc, secs))
    assert_converged(rc, out)
    # It built what it needed itself, in the clone.
    assert os.path.exists(os.path.join(clone, ".cache", "driverkit", "build", "lib",
                                       "libnvidia-cfg.so.1"))
    assert "building the lab rootfs" in out, "the demo did not build the lab rootfs itself"
    assert os.path.isdir(os.path.join(clone, ".cache", "lab", "rootfs", "base"))
    # The lab's signed apt repository of NVIDIA's packages was made in the clone.
    assert glob.glob(os.path.join(clone, ".cache", "toolkit", "repo", "stable", "deb", "amd64",
                                  "nvidia-container-toolkit_*.deb")), "the demo made no toolkit repository"
    # And left no fleet up.
    netns = subprocess.run(["ip", "netns", "list"], stdout=subprocess.PIPE, text=True).stdout
    assert "gflab-" not in netns, netns
    PASSED.append(True)


def test_second_run_from_warm_caches(clone):
    rc, out, secs = run_demo(clone, os.path.join(os.path.dirname(clone), "demo-warm.log"))
    print("scripts/demo again, warm caches: rc=%d in %.0f s" % (rc, secs))
    assert_converged(rc, out)
    assert "rootfs cached" in out
