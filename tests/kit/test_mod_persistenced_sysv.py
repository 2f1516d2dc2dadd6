"""The SysV init script that gpufleet.nvidia.persistenced writes, run for real by dash
in fake GPU hosts, driving NVIDIA's real nvidia-persistenced (535 and 550) and the bundled daemon.

LSB exit codes: start/stop/restart 0 on success (also when already in that
state), status 0 running / 1 dead with a pid file / 3 stopped, 2 for a bad action.
A supervisor (the bundled program's --supervise) starts the daemon again after a crash.
"""

import json
import os
import stat
import signal
import subprocess
import time

import pytest

import fakehost
from fakehost import wait_gone

from ansible_collections.gpufleet.nvidia.plugins.module_utils.persistenced import rules as pd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import rpc

STATE = "/run/gpufleet/persistence.json"


def write_exec(path, text):
    with open(path, "w") as handle:
        handle.write(text)
    os.chmod(path, 0o755)


# What the script runs: each of NVIDIA's daemons in the kit (the module's "driver" kind), the bundled one.
DAEMONS = sorted(fakehost.NVIDIA_DAEMONS) + ["bundled"]


def daemon_host(make_host, daemon, gpus):
    """A host whose script runs ``daemon`` (one of DAEMONS)."""
    return make_host(gpus=gpus, nvidia=None if daemon == "bundled" else daemon)


def install_script(host):
    """Render the script as the module would, with the daemon paths of this fake host: NVIDIA's
    daemon ``host.nvidia``, or the bundled one on a host without one."""
    kind = "driver" if host.nvidia else "bundled"
    bin_dir = os.path.join(host.dir, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    bundled = os.path.join(bin_dir, "gpufleet-persistenced")
    script = os.path.join(fakehost.REPO_DIR, "files", "gpufleet-persistenced")
    write_exec(bundled, "#!/bin/sh\nexec /usr/bin/python3 %s \"$@\"\n" % script)
    if kind == "driver":
        daemon = os.path.join(bin_dir, "nvidia-persistenced")
        write_exec(daemon, "#!/bin/sh\nexec %s \"$@\"\n" % " ".join(host.daemon_argv()))
    else:
        daemon = bundled
    params = dict(service_name="nvidia-persistenced", user="nobody", group="nogroup", persistence_mode=True,
                  uvm_persistence_mode=None, verbose=True, nvidia_cfg_path=None, extra_args=[], state_file=STATE,
                  bundled_path=bundled, driver_path=daemon)
    script = os.path.join(host.dir, "nvidia-persistenced.init")
    write_exec(script, pd.render("sysvinit", params, daemon, kind))
    return script


def service(host, script, action):
    proc = subprocess.run(fakehost.nsrun_argv(host.dir, ["/bin/dash", script, action]),
                          capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout + proc.stderr


def pid_of(host):
    with open(host.tree.pid_file) as handle:
        return int(handle.read().split()[0])


def supervisor_pid(host):
    with open(os.path.join(host.dir, "run", "nvidia-persistenced.supervisor.pid")) as handle:
        return int(handle.read().split()[0])


def wait_for(predicate, what, seconds=60):
    """Wait until ``predicate()`` is true (a deadline for a busy machine, not a sleep)."""
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "no %s within %d s" % (what, seconds)
        time.sleep(0.05)


def modes(host, count):
    with rpc.PersistencedClient(host.tree.socket) as client:
        return [client.get_persistence_mode("0000:%02x:00.0" % (i + 1)) for i in range(count)]


@pytest.mark.parametrize("daemon", DAEMONS)
def test_lsb_life_cycle(make_host, daemon):
    host = daemon_host(make_host, daemon, gpus=4)
    script = install_script(host)
    os.makedirs(os.path.join(host.dir, "run", "gpufleet"))
    with open(os.path.join(host.dir, "run", "gpufleet", "persistence.json"), "w") as handle:
        json.dump({"format_version": 1, "default_mode": None, "gpus": {
            "GPU-0000a101-1111-2222-3333-000000000001": {"mode": "disabled", "pci_bus_id": "00000000:02:00.0"},
            "GPU-0000a103-1111-2222-3333-000000000003": {"mode": "disabled", "pci_bus_id": "00000000:04:00.0"}}},
            handle)

    assert service(host, script, "status")[0] == 3
    rc, out = service(host, script, "stop")
    assert rc == 0, out  # stopping a stopped service succeeds

    rc, out = service(host, script, "start")
    assert rc == 0, out
    pid = pid_of(host)
    host.daemon_pids.append(pid)
    run_dir = os.stat(host.tree.run_dir)
    assert stat.S_IMODE(run_dir.st_mode) == 0o755
    assert run_dir.st_uid == 65534  # handed to the service user
    with open("/proc/%d/status" % pid) as handle:
        uid_line = [line for line in handle if line.startswith("Uid:")][0]
    assert uid_line.split()[1:] == ["65534"] * 4
    # each GPU's saved mode is back right after start (NVIDIA's: by the script's post-start step)
    assert modes(host, 4) == [1, 0, 1, 0]

    rc, out = service(host, script, "status")
    assert rc == 0 and "is running (pid %d)" % pid in out
    rc, out = service(host, script, "start")
    assert rc == 0 and "already running" in out and pid_of(host) == pid

    rc, out = service(host, script, "restart")
    assert rc == 0, out
    assert wait_gone(pid)
    new_pid = pid_of(host)
    host.daemon_pids[-1] = new_pid
    assert new_pid != pid
    assert modes(host, 4) == [1, 0, 1, 0]

    rc, out = service(host, script, "reload")
    assert rc == (3 if host.nvidia else 0), out

    rc, out = service(host, script, "stop")
    assert rc == 0, out
    assert wait_gone(new_pid)
    host.daemon_pids.pop()
    assert not os.path.exists(host.tree.run_dir)  # cleaned up on stop, though the daemon ran as nobody
    assert service(host, script, "status")[0] == 3


def test_status_with_a_stale_pid_file_is_1(make_host):
    host = make_host(gpus=1)
    script = install_script(host)
    os.makedirs(host.tree.run_dir)
    with open(host.tree.pid_file, "w") as handle:
        handle.write("999999\n")
    rc, out = service(host, script, "status")
    assert rc == 1 and "not running but" in out
    rc, out = service(host, script, "start")  # a stale pid file does not block a start
    assert rc == 0, out
    host.daemon_pids.append(pid_of(host))


def test_missing_daemon_is_lsb_5(make_host):
    host = make_host(gpus=1)
    script = install_script(host)
    os.unlink(os.path.join(host.dir, "bin", "gpufleet-persistenced"))
    rc, out = service(host, script, "start")
    assert rc == 5 and "is not installed" in out


def test_failed_start_is_reported(make_host):
    host = make_host(gpus=1)
    script = install_script(host)
    import shutil
    shutil.rmtree(os.path.join(host.dir, "proc", "driver", "nvidia", "gpus"))
    rc, out = service(host, script, "start")
    assert rc == 1
    assert "failed to initialize" in out and "NVIDIA kernel driver loaded" in out


# ---- the service user attacks what the script does as root -------------------------------------

def as_nobody_in_host(host, shell):
    """Run ``shell`` as nobody inside the host (where /run is the host's)."""
    argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
            "--bounding-set=-all", "--no-new-privs", "--", "sh", "-c", shell]
    proc = subprocess.run(fakehost.nsrun_argv(host.dir, argv), capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def started_then_killed(host):
    """Install the script, start the daemon through it, then let the service user kill
    it (SIGKILL: no cleanup), as it always can; the run directory stays the user's.
    The supervisor goes first (SIGKILL too), so that the script's own start comes next."""
    script = install_script(host)
    rc, out = service(host, script, "start")
    assert rc == 0, out
    supervisor = supervisor_pid(host)
    os.kill(supervisor, signal.SIGKILL)
    assert wait_gone(supervisor)
    pid = pid_of(host)
    host.daemon_pids.append(pid)  # cleaned up by the fixture should the kill fail
    as_nobody_in_host(host, "kill -KILL %d" % pid)
    assert wait_gone(pid)
    host.daemon_pids.remove(pid)
    return script


@pytest.mark.parametrize("daemon", DAEMONS)
def test_a_pid_file_link_left_by_the_service_user_is_not_followed_at_the_next_start(make_host, daemon):
    host = daemon_host(make_host, daemon, gpus=1)
    vault = os.path.join(host.dir, "vault")
    os.mkdir(vault, 0o711)  # root's: nobody can name a path in it, not create one
    victim = os.path.join(vault, "created-by-root")
    script = started_then_killed(host)
    as_nobody_in_host(host, "rm -f /run/nvidia-persistenced/nvidia-persistenced.pid && "
                            "ln -s %s /run/nvidia-persistenced/nvidia-persistenced.pid" % victim)
    rc, out = service(host, script, "start")
    if rc == 0 and os.path.isfile(host.tree.pid_file):
        host.daemon_pids.append(pid_of(host))
    assert not os.path.lexists(victim), "root created %s through the planted pid file link: %s" % (victim, out)
    assert rc == 0, out
    assert not os.path.islink(host.tree.pid_file)


def test_a_fifo_at_the_pid_file_does_not_hang_the_script(make_host):
    host = make_host(gpus=1)
    script = started_then_killed(host)
    as_nobody_in_host(host, "rm -f /run/nvidia-persistenced/nvidia-persistenced.pid && "
                            "mkfifo /run/nvidia-persistenced/nvidia-persistenced.pid")
    try:
        rc, out = service(host, script, "status")
    except subprocess.TimeoutExpired:
        pytest.fail("the init script (root) hung reading a FIFO the service user put at the pid file")
    assert rc == 1 and "not running" in out, out


def test_a_forged_pid_file_cannot_make_root_signal_another_process(make_host):
    host = make_host(gpus=1)
    script = started_then_killed(host)
    # a root process whose name says "persistenced" (an admin's editor on the script, say)
    decoy = subprocess.Popen(["bash", "-c", "exec -a /usr/bin/nvidia-persistenced sleep 120"])
    try:
        as_nobody_in_host(host, "rm -f /run/nvidia-persistenced/nvidia-persistenced.pid && "
                                "echo %d > /run/nvidia-persistenced/nvidia-persistenced.pid" % decoy.pid)
        rc, out = service(host, script, "stop")
        assert rc == 0, out
        assert decoy.poll() is None, "root killed pid %d, a root process, named in a pid file nobody wrote" % (
            decoy.pid)
    finally:
        decoy.kill()
        decoy.wait()


# ---- the supervisor: a crashed daemon comes back ------------------------------------------------

def write_saved_modes(host):
    """GPUs 1 and 3 (of 4) saved disabled: NVIDIA's daemon starts them enabled, the re-apply disables them."""
    os.makedirs(os.path.join(host.dir, "run", "gpufleet"))
    with open(os.path.join(host.dir, "run", "gpufleet", "persistence.json"), "w") as handle:
        json.dump({"format_version": 1, "default_mode": None, "gpus": {
            "GPU-0000a101-1111-2222-3333-000000000001": {"mode": "disabled", "pci_bus_id": "00000000:02:00.0"},
            "GPU-0000a103-1111-2222-3333-000000000003": {"mode": "disabled", "pci_bus_id": "00000000:04:00.0"}}},
            handle)


def live_pid(host):
    """The daemon's pid when its pid file names a live process, else None."""
    try:
        pid = pid_of(host)
    except (OSError, ValueError, IndexError):
        return None
    return pid if fakehost.pid_alive(pid) else None


def answers_modes(host, count):
    try:
        return modes(host, count)
    except (OSError, rpc.PersistencedError):
        return None


def processes_in(namespace):
    """{pid: start time} of the live processes in the mount namespace ``namespace``. Read while a process
    of the service holds that namespace: once it is gone, the kernel may give its number to another."""
    found = {}
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and os.readlink("/proc/%s/ns/mnt" % name) == namespace \
                    and fakehost.pid_alive(int(name)):
                found[int(name)] = started_at(int(name))
        except OSError:
            pass
    return found


def started_at(pid):
    with open("/proc/%d/stat" % pid) as handle:
        return handle.read().rsplit(")", 1)[1].split()[19]


def still_running(processes):
    """Those of ``processes`` that still run (the same process: its pid and start time)."""
    left = []
    for pid, start in processes.items():
        try:
            if fakehost.pid_alive(pid) and started_at(pid) == start:
                left.append(pid)
        except OSError:
            pass
    return left


@pytest.mark.parametrize("daemon", DAEMONS)
def test_a_killed_daemon_comes_back_with_its_modes_and_stop_leaves_nothing(make_host, daemon):
    host = daemon_host(make_host, daemon, gpus=4)
    script = install_script(host)
    write_saved_modes(host)
    rc, out = service(host, script, "start")
    assert rc == 0, out
    supervisor, pid = supervisor_pid(host), pid_of(host)
    host.daemon_pids += [pid, supervisor]  # the fixture stops the supervisor first, should the test fail
    namespace = os.readlink("/proc/%d/ns/mnt" % supervisor)
    with open("/proc/%d/status" % supervisor) as handle:
        assert [line.split()[1] for line in handle if line.startswith("Uid:")] == ["0"]
    rc, out = service(host, script, "status")
    assert rc == 0 and "is running (pid %d)" % pid in out, out

    for round_ in range(2):
        os.kill(pid, signal.SIGKILL)
        assert wait_gone(pid)
        wait_for(lambda: live_pid(host) not in (None, pid), "restarted daemon (round %d)" % round_)
        pid = live_pid(host)
        host.daemon_pids.insert(0, pid)
        # the restart re-applied each GPU's saved mode (NVIDIA's daemon started them all enabled)
        wait_for(lambda: answers_modes(host, 4) == [1, 0, 1, 0], "saved modes restored (round %d)" % round_)
        assert fakehost.pid_alive(supervisor)
    host.syslog.wait_for("was killed by signal 9; starting it again in 2 s")

    service_processes = processes_in(namespace)  # the supervisor, the daemon, anything they started
    assert supervisor in service_processes and pid in service_processes
    rc, out = service(host, script, "stop")
    assert rc == 0, out
    assert wait_gone(supervisor) and wait_gone(pid)
    host.daemon_pids = []
    assert still_running(service_processes) == [], "left running: %s" % still_running(service_processes)
    assert not os.path.exists(host.tree.run_dir)
    assert service(host, script, "status")[0] == 3


def test_restarts_stop_at_the_limit(make_host):
    """A daemon that dies and cannot start again is tried 5 times (2 s apart), then left down."""
    host = make_host(gpus=1)
    script = install_script(host)
    rc, out = service(host, script, "start")
    assert rc == 0, out
    supervisor, pid = supervisor_pid(host), pid_of(host)
    host.daemon_pids += [pid, supervisor]
    import shutil
    shutil.rmtree(os.path.join(host.dir, "proc", "driver", "nvidia", "gpus"))  # every start fails now
    os.kill(pid, signal.SIGKILL)
    assert wait_gone(supervisor, timeout=120), "the supervisor kept restarting a daemon that cannot start"
    host.daemon_pids = []
    lines = [line for line in host.syslog.lines() if "starting it again" in line]
    assert len(lines) == 5, lines
    host.syslog.wait_for("restarted 5 times within 60 s: giving up")
    rc, out = service(host, script, "status")
    assert rc in (1, 3) and "not running" in out, out
