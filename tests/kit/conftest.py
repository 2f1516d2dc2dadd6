"""Fixtures for the driver kit's tests: fake hosts, NVIDIA's daemon, pynvml probes.

Prerequisites are checked, never skipped: run ``tests/driverkit/setup`` first
and run the tests as root (they create private mount namespaces).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KIT = os.path.join(REPO, "tests", "driverkit")
COLLECTIONS = os.path.join(REPO, ".build", "collections")
for _path in (KIT, COLLECTIONS):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import fakehost  # noqa: E402
from fakehost import pid_alive as _pid_alive, wait_gone  # noqa: E402

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nvml_probe.py")
SYSTEM_PYTHON = "/usr/bin/python3"


def _missing_prerequisites():
    missing = []
    if os.geteuid() != 0:
        missing.append("the kit's tests need root (private mount namespaces)")
    for path in [os.path.join(fakehost.BUILD_LIB_DIR, lib) for lib in fakehost.FAKE_LIBS] + [
            fakehost.NUMA_SECCOMP, fakehost.NVIDIA_PERSISTENCED,
            os.path.join(fakehost.REAL_NVML_DIR, "libnvidia-ml.so.1")]:
        if not os.path.exists(path):
            missing.append("%s is missing" % path)
    for tool in ("unshare", "setpriv"):
        if not shutil.which(tool):
            missing.append("%s not found (util-linux)" % tool)
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        missing.append("%s (Debian's python3) is needed to run pynvml as nobody" % SYSTEM_PYTHON)
    try:
        import pynvml  # noqa: F401
    except ImportError:
        missing.append("pynvml is not importable (pip install nvidia-ml-py)")
    try:
        from ansible_collections.gpufleet.nvidia.plugins.module_utils import (  # noqa: F401
            _persistenced_rpc)
    except ImportError as exc:
        missing.append("the collection is not importable (%s); expected the symlink tree "
                       "%s" % (exc, COLLECTIONS))
    return missing


@pytest.fixture(scope="session", autouse=True)
def driverkit():
    missing = _missing_prerequisites()
    if missing:
        pytest.fail("driver kit not ready: %s; run tests/driverkit/setup as root"
                    % "; ".join(missing), pytrace=False)


class FakeHost:
    """A laid-out fake host in a short temp dir, with a syslog capture."""

    def __init__(self, description):
        self.dir = tempfile.mkdtemp(prefix="gfk", dir="/tmp")
        self.tree = fakehost.layout(self.dir, description)
        self.syslog = fakehost.SyslogCapture(self.dir)
        self.daemon_pids = []

    # -- the fake driver --------------------------------------------------
    @property
    def description(self):
        return fakehost.read_description(self.dir)

    def set_description(self, description):
        fakehost.write_description(self.dir, description)

    def inject(self, op, error, gpu=None):
        desc = self.description
        target = desc if gpu is None else desc["gpus"][gpu]
        target.setdefault("errors", {})[op] = error
        self.set_description(desc)

    def held(self):
        return fakehost.held_gpus(self.dir)

    def legacy(self):
        with open(self.tree.legacy_file) as handle:
            return dict((bdf, int(mode)) for bdf, mode in
                        (line.split() for line in handle if line.strip()))

    # -- NVIDIA's daemon --------------------------------------------------
    def start_daemon(self, *options, keep_sigpipe=False, check=True):
        argv = fakehost.nsrun_argv(self.dir, fakehost.persistenced_argv(
            self.dir, *options, keep_sigpipe=keep_sigpipe))
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        if check:
            assert proc.returncode == 0, (
                "nvidia-persistenced failed: rc=%d stdout=%r stderr=%r syslog=%r"
                % (proc.returncode, proc.stdout, proc.stderr, self.syslog.lines()))
        if proc.returncode == 0 and os.path.exists(self.tree.pid_file):
            self.daemon_pids.append(self.daemon_pid())
        return proc

    def wait_log(self, text, timeout=5.0):
        self.syslog.wait_for(text, timeout)

    def daemon_pid(self):
        with open(self.tree.pid_file) as handle:
            return int(handle.read().split()[0])

    def stop_daemon(self, sig=signal.SIGTERM):
        pid = self.daemon_pids.pop()
        os.kill(pid, sig)
        assert wait_gone(pid), "nvidia-persistenced %d did not exit on %s" % (pid, sig)
        return pid

    # -- pynvml -------------------------------------------------------------
    def nvml(self, code, user=None, lib_dir=None, namespace=True, env=None):
        """Run ``code`` (sets ``result``) with pynvml in the host; returns the probe's dict."""
        return run_probe(self, code, user=user, lib_dir=lib_dir, namespace=namespace, env=env)

    def close(self):
        leftovers = []
        while self.daemon_pids:
            pid = self.daemon_pids.pop()
            if _pid_alive(pid):
                os.kill(pid, signal.SIGTERM)
                if not wait_gone(pid, timeout=5):
                    leftovers.append(pid)
                    os.kill(pid, signal.SIGKILL)
                    wait_gone(pid)
        self.syslog.close()
        shutil.rmtree(self.dir)
        return leftovers


def run_probe(host, code, user=None, lib_dir=None, namespace=True, env=None):
    import pynvml
    pylib = os.path.join(host.dir, "pylib")
    if not os.path.isdir(pylib):
        os.makedirs(pylib)
        shutil.copy(pynvml.__file__, pylib)  # readable by nobody, unlike the venv
    python = SYSTEM_PYTHON if user else sys.executable
    argv = [python, PROBE, code]
    if lib_dir and namespace:  # ahead of the tree's lib/ (fake libraries)
        argv = ["env", "LD_LIBRARY_PATH=%s" % lib_dir] + argv
    if user:
        import pwd
        entry = pwd.getpwnam(user)
        argv = ["setpriv", "--reuid=%d" % entry.pw_uid, "--regid=%d" % entry.pw_gid,
                "--clear-groups"] + argv
    run_env = dict(os.environ, PYTHONPATH=pylib, LD_LIBRARY_PATH=lib_dir or "")
    run_env.update(env or {})
    if namespace:
        argv = fakehost.nsrun_argv(host.dir, argv)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=run_env)
    assert proc.returncode == 0, "probe failed rc=%d: %s" % (proc.returncode, proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def make_host():
    hosts = []

    def make(gpus=2, description=None):
        host = FakeHost(description or fakehost.example_description(gpus))
        hosts.append(host)
        return host

    yield make
    leftovers = []
    for host in hosts:
        leftovers += host.close()
    assert not leftovers, "daemons that ignored SIGTERM (killed): %s" % leftovers


@pytest.fixture
def host(make_host):
    return make_host()
