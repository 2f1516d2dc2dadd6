"""What the lab's own tests share: the lab CLI, running scripts on a host, and one lab at a time.

Only one lab fits on a machine: ``empty_lab`` fails when lab hosts are
already up rather than take them over, and takes the lab down at the end of
the module that used it. Needs root, as ``lab up`` does.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
LAB = [sys.executable, str(HERE / "lab")]
CACHE = Path(os.environ.get("GPUFLEET_LAB_CACHE", REPO / ".cache" / "lab"))


def lab(*args, timeout=600):
    """Run the lab CLI; the CompletedProcess."""
    return subprocess.run(LAB + list(args), capture_output=True, text=True, timeout=timeout, cwd=str(REPO))


def sh(host, script, timeout=60):
    """Run SCRIPT as root on HOST over the lab's ssh; the CompletedProcess."""
    return subprocess.run(LAB + ["ssh", host, "sh -s"], input=script, capture_output=True,
                          text=True, timeout=timeout, cwd=str(REPO))


def ok(host, script, timeout=60):
    """SCRIPT's output on HOST; fails the test, with both outputs, when it exits non-zero."""
    res = sh(host, script, timeout)
    assert res.returncode == 0, "%s: rc=%d\n%s\n%s" % (host, res.returncode, res.stdout, res.stderr)
    return res.stdout


@pytest.fixture(scope="module")
def empty_lab():
    """A machine with no lab host up, for this module's own hosts; the lab goes down at the end."""
    if os.geteuid() != 0:
        pytest.fail("the lab tests need root (lab up)")
    status = json.loads(lab("status", "--json").stdout or "{}")
    up = [h["host"] for h in status.get("hosts", []) if h["state"] == "up"]
    if up:
        pytest.fail("lab hosts %s are up (another run?): only one lab fits on a machine" % up)
    try:
        yield
    finally:
        down = lab("down")
        assert down.returncode == 0, down.stderr
