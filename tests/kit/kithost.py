"""The kit's fake host: error injection, NVIDIA's daemon and pynvml probes on it.

Built by the ``make_host``/``host`` fixtures (tests/driverkit/pytest_fakehost.py).
"""

import json
import os
import shutil
import signal
import subprocess
import sys

import fakehost
from fakehost import wait_gone

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nvml_probe.py")


class FakeHost(fakehost.TempHost):
    """A laid-out fake host in a short temp dir, with a syslog capture.

    ``nvidia`` names the NVIDIA daemon ``start_daemon`` runs (a key of
    ``fakehost.NVIDIA_DAEMONS``): a test that runs one takes the ``nvidia``
    fixture, so it runs against every version the kit has.
    """

    prefix = "gfk"

    def __init__(self, gpus=2, description=None, nvidia=None):
        super().__init__(gpus, description)
        self.nvidia = nvidia
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
    def daemon_argv(self, *options, keep_sigpipe=False):
        """NVIDIA's daemon ``self.nvidia`` for this host (not yet in its namespace)."""
        assert self.nvidia, ("this test runs NVIDIA's daemon: build its host with the `nvidia` fixture "
                             "(make_host(nvidia=nvidia)) so it runs against every version")
        return fakehost.persistenced_argv(self.dir, *options, keep_sigpipe=keep_sigpipe, nvidia=self.nvidia)

    @property
    def traits(self):
        """How this host's NVIDIA daemon differs from the others (``fakehost.NVIDIA_TRAITS``)."""
        return fakehost.NVIDIA_TRAITS[self.nvidia]

    def start_daemon(self, *options, keep_sigpipe=False, check=True):
        argv = fakehost.nsrun_argv(self.dir, self.daemon_argv(*options, keep_sigpipe=keep_sigpipe))
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        if check:
            assert proc.returncode == 0, (
                "nvidia-persistenced failed: rc=%d stdout=%r stderr=%r syslog=%r"
                % (proc.returncode, proc.stdout, proc.stderr, self.syslog.lines()))
        if proc.returncode == 0 and os.path.exists(self.tree.pid_file):
            self.daemon_pids.append(self.daemon_pid())
        return proc

    def daemon_pid(self):
        with open(self.tree.pid_file) as handle:
            return int(handle.read().split()[0])

    def stop_daemon(self, sig=signal.SIGTERM):
        pid = self.daemon_pids.pop()
        os.kill(pid, sig)
        assert wait_gone(pid), "nvidia-persistenced %d did not exit on %s" % (pid, sig)
        return pid

    def started_pids(self):
        """The daemons still listed, last started first; the list is emptied."""
        pids, self.daemon_pids = self.daemon_pids[::-1], []
        return pids

    # -- pynvml -------------------------------------------------------------
    def nvml(self, code, user=None, lib_dir=None, namespace=True, env=None):
        """Run ``code`` (sets ``result``) with pynvml in the host; returns the probe's dict."""
        return run_probe(self, code, user=user, lib_dir=lib_dir, namespace=namespace, env=env)


def run_probe(host, code, user=None, lib_dir=None, namespace=True, env=None):
    import pynvml
    pylib = os.path.join(host.dir, "pylib")
    if not os.path.isdir(pylib):
        os.makedirs(pylib)
        shutil.copy(pynvml.__file__, pylib)  # readable by nobody, unlike the venv
    python = fakehost.SYSTEM_PYTHON if user else sys.executable
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
