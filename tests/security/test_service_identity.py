"""A stranger's process is never taken for containerd, CRI-O or dockerd.

Any local user can start a program called ``containerd`` or ``crio`` with the
arguments root's daemon would have. Root's modules restart, signal and report
on the service's process, so they must find it the way the init system does
(systemd's MainPID, Upstart's ``initctl status``, a root-owned pid file) and
accept it only when it is a root process of our PID namespace running the
expected executable, a file only root can change; only when the init system
has no record of the service are root's processes running that executable
taken, and the result says so.

The attacker here is a real process of uid 4242: a script named ``containerd``
or ``crio`` with the arguments of root's daemon, started before the module
runs. On the code before this rule, containerd_runtime restarted containerd
twice, rolled back and failed; crio_runtime sent the stranger SIGHUP and
reported "crio was reloaded", or failed naming the stranger's files.
"""

import os
import shutil
import signal
import subprocess
import time

import pytest

from conftest import ATTACKER_PYTHON

from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import procs as host_procs
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import module as concerns_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.containerd import CONCERN as CONTAINERD_CONCERN
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.crio import CONCERN as CRIO_CONCERN
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.docker import CONCERN as DOCKER_CONCERN
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init.service import Service

CONTAINERD = shutil.which("containerd") or "/usr/bin/containerd"
CRIO_FIXTURE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "unit", "fixtures", "crio", "typical.crio.conf")
# The stranger's daemon: Python started through a link named after the daemon (its process is named after
# the link: comm), reading this program from stdin ("-") and given root's daemon's arguments after it. It
# records every SIGHUP it gets in a file of its own.
STRANGER_DAEMON = """
import signal, time
signal.signal(signal.SIGHUP, lambda *unused: open(%r, "a").write("hup\\n"))
while True:
    time.sleep(0.1)
"""


class Failed(Exception):
    pass


class Module(object):
    """What a concern's run uses of its AnsibleModule; commands run for real, as root."""

    def __init__(self, concern, params, bins, check_mode=False):
        self.params = dict((name, spec.get("default")) for name, spec in concern.spec.items())
        self.params.update(params)
        self.bins = bins
        self.check_mode = check_mode
        self._diff = False
        self.warnings = []

    def run_command(self, argv, environ_update=None, data=None):
        try:
            proc = subprocess.run(argv, input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  timeout=60, env=dict(os.environ, **(environ_update or {})))
        except OSError as exc:
            return 127, "", str(exc)
        return proc.returncode, proc.stdout, proc.stderr

    def get_bin_path(self, name, required=False, opt_dirs=None):
        return self.bins.get(name) or shutil.which(name)

    def fail_json(self, **result):
        raise Failed(result.get("msg"))

    def warn(self, warning):
        self.warnings.append(warning)

    def selinux_enabled(self):
        return False


@pytest.fixture
def sysv_host(monkeypatch):
    """The host's init system, as the modules see it: SysV, with no script or pid file for the service."""
    monkeypatch.setattr(concerns_module, "init_system", lambda module, run, chosen="auto": ("sysvinit", {}, {}))


def wait_for(predicate, what, seconds=20.0):
    end = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > end:
            pytest.fail("timed out waiting for %s" % what, pytrace=False)
        time.sleep(0.02)


@pytest.fixture
def stranger_daemon(stranger, sandbox):
    """``start(name, *args) -> (pid, hup_file)``: the stranger's program ``name`` running with ``args``."""
    started = []
    home = stranger.owned_dir(sandbox, "stranger")

    def start(name, *args):
        program = os.path.join(home, name)
        os.symlink(ATTACKER_PYTHON, program)
        hup = program + ".hup"
        proc = stranger.popen([program, "-"] + list(args), stdin=subprocess.PIPE, text=True, start_new_session=True)
        proc.stdin.write(STRANGER_DAEMON % hup)
        proc.stdin.close()
        started.append(proc)
        wait_for(lambda: host_procs.process_name(proc.pid) == name and host_procs.process_argv(proc.pid)[1:] == ["-"] + list(args),
                 "the stranger's %s" % name)
        return proc.pid, hup

    yield start
    for proc in started:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run_concern(concern, params, bins=None, check_mode=False):
    module = Module(concern, params, bins or {}, check_mode=check_mode)
    return concern.run(module), module.warnings


# ---------------------------------------------------------------- containerd

def test_a_strangers_containerd_is_not_restarted_or_reported(sysv_host, sandbox, stranger_daemon):
    config = os.path.join(sandbox, "etc", "containerd", "config.toml")
    os.makedirs(os.path.dirname(config))
    with open(config, "w") as handle:
        handle.write("version = 2\n")
    pid, unused_hup = stranger_daemon("containerd", "--config", config)
    params = dict(path=config, service_name="gfsec-containerd", apply_timeout=5)
    try:
        result, unused_warnings = run_concern(CONTAINERD_CONCERN, params, {"containerd": CONTAINERD})
    except Failed as exc:
        pytest.fail("containerd_runtime failed because of the stranger's process %d: %s" % (pid, exc), pytrace=False)
    assert result["containerd_pid_before"] is None, result
    assert result["action"] == "deferred", result
    assert result["containerd_found_by"] is None
    assert "containerd is not running" in result["msg"]
    # Converged now: the next run still says containerd is not running.
    result, unused_warnings = run_concern(CONTAINERD_CONCERN, params, {"containerd": CONTAINERD})
    assert (result["action"], result["containerd_pid_before"], result["changed"]) == ("none", None, False), result


# ---------------------------------------------------------------- CRI-O

@pytest.fixture
def crio_host(sandbox):
    """A CRI-O host's files in the sandbox, and a root-owned ``crio`` that says it is 1.29.1."""
    etc = os.path.join(sandbox, "etc", "crio")
    os.makedirs(os.path.join(etc, "crio.conf.d"))
    shutil.copy(CRIO_FIXTURE, os.path.join(etc, "crio.conf"))
    bindir = os.path.join(sandbox, "bin")
    os.mkdir(bindir)
    crio = os.path.join(bindir, "crio")
    with open(crio, "w") as handle:
        handle.write("#!/bin/sh\necho 'crio version 1.29.1'\n")
    os.chmod(crio, 0o755)
    return etc, crio


@pytest.mark.parametrize("files", ["the same files", "other files"])
def test_a_strangers_crio_gets_no_sighup_and_fails_no_run(sysv_host, crio_host, stranger_daemon, files):
    etc, crio = crio_host
    config, dropins = os.path.join(etc, "crio.conf"), os.path.join(etc, "crio.conf.d")
    args = ("--config", config, "--config-dir", dropins) if files == "the same files" else \
        ("--config-dir", "/srv/elsewhere")
    pid, hup = stranger_daemon("crio", *args)
    params = dict(path=os.path.join(dropins, "99-nvidia.conf"), config_path=config, config_dir=dropins,
                  runtime_path="/bin/true", apply="reload", service_name="gfsec-crio", apply_timeout=5)
    try:
        result, unused_warnings = run_concern(CRIO_CONCERN, params, {"crio": crio})
    except Failed as exc:
        pytest.fail("crio_runtime failed because of the stranger's process %d: %s" % (pid, exc), pytrace=False)
    assert not os.path.exists(hup), "root sent SIGHUP to the stranger's process %d" % pid
    assert result["crio_pid_before"] is None, result
    assert result["action"] == "deferred", result
    assert "reloaded" not in result["msg"] and "crio is not running" in result["msg"], result["msg"]


# ---------------------------------------------------------------- dockerd

def test_a_strangers_dockerd_is_not_signalled_or_asked(sysv_host, sandbox, stranger_daemon):
    config = os.path.join(sandbox, "etc", "docker", "daemon.json")
    os.makedirs(os.path.dirname(config))
    with open(config, "w") as handle:
        handle.write("{}\n")
    socket_path = os.path.join(sandbox, "docker.sock")
    pid, hup = stranger_daemon("dockerd", "--config-file", config, "-H", "unix://" + socket_path)
    params = dict(path=config, runtime_path="/bin/true", docker_host="unix://" + socket_path,
                  service_name="gfsec-docker", apply="reload", apply_timeout=5)
    try:
        result, unused_warnings = run_concern(DOCKER_CONCERN, params)
    except Failed as exc:
        pytest.fail("docker_runtime failed because of the stranger's process %d: %s" % (pid, exc), pytrace=False)
    assert not os.path.exists(hup), "root sent SIGHUP to the stranger's process %d" % pid
    assert (result["dockerd_pid_before"], result["action"]) == (None, "deferred"), result
    assert "dockerd is not running" in result["msg"], result["msg"]


# ---------------------------------------------------------------- Service.processes itself

@pytest.fixture
def engine(sandbox):
    """A root-owned executable (a copy of sleep) standing for the engine's daemon, and a root process of it."""
    bindir = os.path.join(sandbox, "sbin")
    os.mkdir(bindir)
    program = os.path.join(bindir, "engined")
    shutil.copy("/bin/sleep", program)
    os.chmod(program, 0o755)
    procs = []

    def start(argv_prefix=()):
        proc = subprocess.Popen(list(argv_prefix) + [program, "600"])
        procs.append(proc)
        return proc

    yield program, start
    for proc in procs:
        proc.kill()
        proc.wait()


def service(init_system, program, pid_files=(), answers=None):
    def run(argv):
        return (answers or {}).get(argv[0], (1, "", "no such service"))
    tools = {"systemctl": "systemctl", "initctl": "initctl"}
    return Service(init_system, "gfsec-engine", run, tools, executable=program, pid_files=pid_files,
                   script_dir="/nonexistent")


def pid_file(path, pid, owner=0):
    with open(path, "w") as handle:
        handle.write("%d\n" % pid)
    os.chown(path, owner, owner)
    return path


def test_the_init_systems_word_is_taken_only_for_roots_process_of_the_executable(sandbox, engine, stranger):
    program, start = engine
    root_proc = start()
    strangers = stranger.popen([program, "600"])
    try:
        wait_for(lambda: host_procs.process_argv(strangers.pid)[:1] == [program], "the stranger's copy of the engine")
        wait_for(lambda: host_procs.process_argv(root_proc.pid)[:1] == [program], "root's engine")
        show = "LoadState=loaded\nMainPID=%d\n"
        systemd = service("systemd", program, answers={"systemctl": (0, show % root_proc.pid, "")})
        assert systemd.processes() == [root_proc.pid]
        assert systemd.evidence[root_proc.pid] == "systemd (MainPID of gfsec-engine)"
        # systemd names the stranger's process (it runs the very same file): not root's, refused.
        systemd = service("systemd", program, answers={"systemctl": (0, show % strangers.pid, "")})
        assert systemd.processes() == [] and systemd.pid() is None
        assert systemd.refused.startswith("systemd (MainPID of gfsec-engine) names process %d, but it does not run as "
                                          "root" % strangers.pid), systemd.refused
        # systemd says the service is stopped: no look through /proc for one.
        assert service("systemd", program, answers={"systemctl": (0, show % 0, "")}).processes() == []
        upstart = service("upstart", program,
                          answers={"initctl": (0, "gfsec-engine start/running, process %d\n" % root_proc.pid, "")})
        assert upstart.processes() == [root_proc.pid]
        # SysV: a pid file of root's counts, the stranger's pid file (naming root's process) does not.
        root_file = pid_file(os.path.join(sandbox, "root.pid"), root_proc.pid)
        sysv = service("sysvinit", program, pid_files=[root_file])
        assert sysv.processes() == [root_proc.pid]
        assert sysv.evidence[root_proc.pid] == "the root-owned pid file %s" % root_file
        sysv = service("sysvinit", program, pid_files=[pid_file(os.path.join(sandbox, "root-names-stranger.pid"),
                                                                strangers.pid)])
        assert sysv.processes() == []
        forged = pid_file(os.path.join(sandbox, "forged.pid"), root_proc.pid, owner=stranger.uid)
        sysv = service("sysvinit", program, pid_files=[forged])
        # No record at all: root's processes of the executable, said so; never the stranger's.
        assert sysv.processes() == [root_proc.pid]
        assert "has no record of gfsec-engine" in sysv.evidence[root_proc.pid]
    finally:
        strangers.kill()
        strangers.wait()


def test_a_script_or_a_copy_under_the_name_is_not_the_executable(sandbox, engine):
    program, start = engine
    copy = os.path.join(sandbox, "engined")
    shutil.copy(program, copy)
    proc = subprocess.Popen([copy, "600"])
    try:
        wait_for(lambda: host_procs.process_argv(proc.pid)[:1] == [copy], "the copy")
        assert host_procs.process_name(proc.pid) == "engined"
        assert host_procs.not_root_running(proc.pid, program) == "it runs %s, not %s" % (copy, program)
        assert host_procs.pids_running(program) == []
    finally:
        proc.kill()
        proc.wait()


def test_a_containers_daemon_in_another_pid_namespace_is_not_ours(engine):
    program, start = engine
    holder = start(["unshare", "--pid", "--fork", "--kill-child"])
    wait_for(lambda: any(host_procs.process_argv(pid)[:1] == [program] for pid in children(holder.pid)),
             "the engine in its own PID namespace")
    inner = [pid for pid in children(holder.pid) if host_procs.process_argv(pid)[:1] == [program]][0]
    assert "another PID namespace" in host_procs.not_root_running(inner, program)
    assert inner not in host_procs.pids_running(program)


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as handle:
            return [int(child) for child in handle.read().split()]
    except OSError:
        return []


def test_an_executable_another_user_can_change_is_refused(sandbox, engine, stranger):
    program, start = engine
    proc = start()
    wait_for(lambda: host_procs.process_argv(proc.pid)[:1] == [program], "root's engine")
    assert host_procs.not_root_running(proc.pid, program) is None
    os.chown(program, stranger.uid, stranger.gid)
    assert "not a regular file owned by root" in host_procs.not_root_running(proc.pid, program)
    os.chown(program, 0, 0)
    os.chmod(program, 0o777)
    assert "not a regular file owned by root" in host_procs.not_root_running(proc.pid, program)
