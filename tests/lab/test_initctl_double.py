"""Tests of the lab's initctl TEST DOUBLE (tests/lab/upstart/initctl).

The double stands in for Upstart 1.5 on the lab's "upstart" hosts; these
tests pin the behaviour the collection relies on.  They run anywhere (no
root, no lab): job files, state and logs live in a temporary directory.
"""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

INITCTL = Path(__file__).resolve().parent / "upstart" / "initctl"


@pytest.fixture()
def upstart(tmp_path):
    conf = tmp_path / "init"
    conf.mkdir()
    env = dict(os.environ,
               UPSTART_DOUBLE_CONF_DIR=str(conf),
               UPSTART_DOUBLE_RUN_DIR=str(tmp_path / "run"),
               UPSTART_DOUBLE_LOG_DIR=str(tmp_path / "log"))

    class Upstart:
        dir = tmp_path

        @staticmethod
        def job(name, text):
            (conf / (name + ".conf")).write_text(textwrap.dedent(text))

        @staticmethod
        def run(*args, prog="initctl"):
            argv0 = str(INITCTL) if prog == "initctl" else prog
            if prog != "initctl":
                link = tmp_path / "bin" / prog
                link.parent.mkdir(exist_ok=True)
                if not link.exists():
                    link.symlink_to(INITCTL)
                argv0 = str(link)
            return subprocess.run([sys.executable, argv0] + list(args), env=env,
                                  capture_output=True, text=True, timeout=60)

    yield Upstart
    # Stop whatever is still running (by the pids the double recorded).
    for job in conf.glob("*.conf"):
        Upstart.run("stop", job.stem)


def main_pid(up, name):
    out = up.run("status", name).stdout
    return int(out.rsplit("process ", 1)[1]) if "process" in out else None


def test_version(upstart):
    assert upstart.run("version").stdout == "init (upstart 1.5)\n"
    assert upstart.run("--version").stdout.startswith("initctl (upstart 1.5)\n")
    assert upstart.run("--version", prog="init").stdout == "init (upstart 1.5)\n"


def test_start_status_stop(upstart):
    upstart.job("sleeper", """\
        description "sleeps"
        respawn
        exec sleep 1000
        """)
    assert upstart.run("status", "sleeper").stdout == "sleeper stop/waiting\n"
    res = upstart.run("start", "sleeper")
    assert res.returncode == 0
    pid = main_pid(upstart, "sleeper")
    assert res.stdout == "sleeper start/running, process %d\n" % pid
    again = upstart.run("start", "sleeper")
    assert again.returncode == 1
    assert again.stderr == "initctl: Job is already running: sleeper\n"
    assert upstart.run("status", prog="status").returncode == 1
    res = upstart.run("sleeper", prog="stop")
    assert (res.returncode, res.stdout) == (0, "sleeper stop/waiting\n")
    assert not Path("/proc/%d" % pid).exists() or \
        Path("/proc/%d/stat" % pid).read_text().split()[2] == "Z"
    res = upstart.run("stop", "sleeper")
    assert (res.returncode, res.stderr) == (1, "initctl: Unknown instance: \n")


def test_unknown_job(upstart):
    res = upstart.run("start", "nope")
    assert (res.returncode, res.stderr) == (1, "initctl: Unknown job: nope\n")
    res = upstart.run("nope", prog="status")
    assert (res.returncode, res.stderr) == (1, "status: Unknown job: nope\n")


def test_expect_fork_tracks_the_forked_child(upstart):
    upstart.job("forker", """\
        expect fork
        exec sh -c 'sleep 1001 & echo $! > %s/child.pid; exit 0'
        """ % upstart.dir)
    assert upstart.run("start", "forker").returncode == 0
    child = int((upstart.dir / "child.pid").read_text())
    assert main_pid(upstart, "forker") == child
    upstart.run("restart", "forker")
    assert main_pid(upstart, "forker") == int((upstart.dir / "child.pid").read_text()) != child


def test_restart_runs_stop_and_start_scripts(upstart):
    upstart.job("svc", """\
        env GREETING=hello
        pre-start script
            echo "pre-start $GREETING" >> %(d)s/trace
        end script
        post-stop exec sh -c 'echo post-stop >> %(d)s/trace'
        exec sleep 1000
        """ % {"d": upstart.dir})
    upstart.run("start", "svc")
    first = main_pid(upstart, "svc")
    res = upstart.run("restart", "svc")
    assert res.returncode == 0 and res.stdout.startswith("svc start/running, process ")
    assert main_pid(upstart, "svc") != first
    assert (upstart.dir / "trace").read_text() == "pre-start hello\npost-stop\npre-start hello\n"


def test_pre_start_stop_cancels(upstart):
    upstart.job("cancelled", """\
        pre-start script
            stop; exit 0
        end script
        exec sleep 1000
        """)
    res = upstart.run("start", "cancelled")
    assert res.returncode == 1
    assert upstart.run("status", "cancelled").stdout == "cancelled stop/waiting\n"


def test_task_waits_and_respawn_limit(upstart):
    upstart.job("once", """\
        task
        exec sh -c 'echo ran > %s/once'
        """ % upstart.dir)
    res = upstart.run("start", "once")
    assert (res.returncode, res.stdout) == (0, "once stop/waiting\n")
    assert (upstart.dir / "once").read_text() == "ran\n"
    upstart.job("flappy", """\
        respawn
        respawn limit 3 5
        exec sh -c 'sleep 0.1; exit 1'
        """)
    upstart.run("start", "flappy")
    deadline = time.monotonic() + 10
    while upstart.run("status", "flappy").stdout != "flappy stop/waiting\n":
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_emit_starts_and_stops_jobs(upstart):
    upstart.job("ssh", """\
        start on runlevel [2345]
        stop on runlevel [!2345]
        exec sleep 1000
        """)
    upstart.job("later", """\
        start on started ssh
        exec sleep 1000
        """)
    assert upstart.run("emit", "runlevel", "RUNLEVEL=2").returncode == 0
    listing = upstart.run("list").stdout.splitlines()
    assert listing[0].startswith("later start/running, process ")
    assert listing[1].startswith("ssh start/running, process ")
    upstart.run("emit", "runlevel", "RUNLEVEL=0")
    assert upstart.run("status", "ssh").stdout == "ssh stop/waiting\n"


def test_reload_sends_sighup(upstart):
    upstart.job("hup", """\
        exec sh -c 'trap "echo hup >> %s/hup" HUP; while :; do sleep 0.05; done'
        """ % upstart.dir)
    upstart.run("start", "hup")
    assert upstart.run("reload", "hup").returncode == 0
    deadline = time.monotonic() + 5
    while not (upstart.dir / "hup").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_supervisor_death_means_stopped(upstart):
    upstart.job("orphan", "exec sleep 1000\n")
    upstart.run("start", "orphan")
    pid = main_pid(upstart, "orphan")
    import json
    state = json.loads((upstart.dir / "run" / "orphan.state").read_text())
    os.kill(state["supervisor"], signal.SIGKILL)
    time.sleep(0.2)
    assert upstart.run("status", "orphan").stdout == "orphan stop/waiting\n"
    os.kill(pid, signal.SIGKILL)
