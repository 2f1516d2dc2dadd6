"""Real Upstart on lab hosts: the upstart (1.13.2) and upstart06 (0.6.5)
kinds boot it as PID 1.  One fleet (h1 upstart, h2 upstart06) is brought
up for the whole module and taken down at the end.

Needs root, the lab's apt packages and the driver kit (tests/driverkit/setup),
as `lab up` does.  Only one lab can run on a machine: the fixture fails when
lab hosts are already up rather than take them over.
"""

import json
import os
import subprocess
import time

import pytest

from conftest import CACHE, REPO, lab, ok

VERSIONS = {"h1": "1.13.2", "h2": "0.6.5"}


@pytest.fixture(scope="module")
def fleet(empty_lab):
    t0 = time.monotonic()
    res = lab("up", "--hosts", "2", "--kinds", "upstart,upstart06", "--gpus", "2")
    assert res.returncode == 0, res.stderr
    print("lab up (build if needed, boot 2 hosts): %.1f s" % (time.monotonic() - t0))


@pytest.mark.parametrize("host", ["h1", "h2"])
def test_pid1_is_real_upstart_of_its_version(fleet, host):
    out = ok(host, "cat /proc/1/comm; readlink /proc/1/exe; initctl version; "
                   "initctl --version | head -1; runlevel")
    version = VERSIONS[host]
    assert out.splitlines() == ["init", "/usr/sbin/init", "init (upstart %s)" % version,
                                "initctl (upstart %s)" % version, "N 2"]


@pytest.mark.parametrize("host", ["h1", "h2"])
def test_boot_ran_the_jobs_and_the_rc_scripts(fleet, host):
    out = ok(host, "status ssh; status rc; status lab-ready; test -e /run/gpufleet-lab/booted && echo booted; "
                   "pgrep -x rsyslogd >/dev/null && echo rsyslog; ls /dev/nvidia0 /dev/nvidia1")
    lines = out.splitlines()
    assert lines[0].startswith("ssh start/running, process ")
    assert lines[1:3] == ["rc stop/waiting", "lab-ready stop/waiting"]
    assert lines[3:] == ["booted", "rsyslog", "/dev/nvidia0", "/dev/nvidia1"]


JOB_PROBE = r"""
set -u
cat > /etc/init/probe.conf <<'J'
description "lab probe: a daemon with a pre-stop stanza"
start on runlevel [2345]
stop on runlevel [!2345]
pre-stop exec true
exec sleep 100000
J
cat > /etc/init/probe2.conf <<'J'
description "lab probe: no pre-stop"
exec sleep 100001
J
initctl reload-configuration
pid() { status "$1" | sed -n 's/.*process \([0-9]*\)$/\1/p'; }
start probe >/dev/null; a=$(pid probe)
restart probe >/dev/null; b=$(pid probe)
echo "pre-stop restart keeps pid: $([ -n "$a" ] && [ "$a" = "$b" ] && echo yes || echo "no ($a $b)")"
start probe2 >/dev/null; c=$(pid probe2)
restart probe2 >/dev/null; d=$(pid probe2)
echo "plain restart new pid: $([ -n "$c" ] && [ -n "$d" ] && [ "$c" != "$d" ] && echo yes || echo "no ($c $d)")"
start probe2 2>&1; echo "start running rc=$?"
reload probe2; sleep 0.3; status probe2
stop probe2 2>&1; echo "stop stopped rc=$?"
status nosuchjob 2>&1; echo "unknown rc=$?"
stop probe >/dev/null
"""


@pytest.mark.parametrize("host", ["h1", "h2"])
def test_job_control_as_real_upstart_does_it(fleet, host):
    out = ok(host, JOB_PROBE).splitlines()
    assert out == [
        "pre-stop restart keeps pid: yes",
        "plain restart new pid: yes",
        "start: Job is already running: probe2",
        "start running rc=1",
        # reload = SIGHUP, which ends sleep: the job stops (no respawn stanza)
        "probe2 stop/waiting",
        "stop: Unknown instance: ",
        "stop stopped rc=1",
        "status: Unknown job: nosuchjob",
        "unknown rc=1",
    ]


def test_dockerd_is_an_upstart_job_on_1_13(fleet):
    out = ok("h1", "status docker; test -e /etc/rc2.d/S01docker || ls /etc/rc2.d | grep -c '^S..docker' ; "
                   "/etc/init.d/docker restart 2>&1; echo \"sysv rc=$?\"", timeout=120)
    lines = out.splitlines()
    assert lines[0].startswith("docker start/running, process ")
    assert lines[1] == "0"
    # as Ubuntu 14.04's script: it refuses when Upstart manages docker
    assert "managed via upstart" in lines[2] and lines[3] == "sysv rc=1"


def test_dockerd_is_a_sysv_service_on_0_6_5(fleet):
    out = ok("h2", "status docker 2>&1; /etc/init.d/docker status; pgrep -x dockerd >/dev/null && echo dockerd")
    assert out.splitlines() == ["status: Unknown job: docker", "Docker is running.", "dockerd"]


@pytest.mark.parametrize("host", ["h1", "h2"])
def test_dockerd_runs_containers(fleet, host):
    out = ok(host, "docker import /usr/share/gpufleet-lab/busybox-rootfs.tar lab/busybox >/dev/null && "
                   "docker run --rm --network none lab/busybox sh -c 'echo from-a-container'", timeout=120)
    assert out.strip() == "from-a-container"


@pytest.mark.parametrize("host", ["h1", "h2"])
def test_init_system_info_reports_upstart_and_its_version(fleet, host):
    inventory = CACHE / "inventory.yml"
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".build" / "collections"))
    res = subprocess.run(["ansible", "-i", str(inventory), host, "-o", "-m", "gpufleet.nvidia.init_system_info"],
                         capture_output=True, text=True, timeout=120, env=env, cwd=str(REPO))
    line = [l for l in res.stdout.splitlines() if l.startswith(host + " |")]
    assert res.returncode == 0 and line, res.stdout + res.stderr
    result = json.loads(line[0].split(" => ", 1)[1])
    assert result["init_system"] == "upstart"
    assert result["version"] == VERSIONS[host]
    assert result["evidence"]["init_daemon_version"] == "init (upstart %s)" % VERSIONS[host]


OVERRIDE = r"""
cat > /etc/init/probe3.conf <<'J'
start on runlevel [2345]
exec sleep 100003
J
echo manual > /etc/init/probe3.override
"""


def test_reboot_brings_the_hosts_back_and_override_files_differ(fleet):
    for host in ("h1", "h2"):
        ok(host, OVERRIDE)
    t0 = time.monotonic()
    res = lab("reboot", "h1", "h2")
    assert res.returncode == 0, res.stderr
    print("lab reboot of both: %.1f s" % (time.monotonic() - t0))
    for host in ("h1", "h2"):
        out = ok(host, "initctl version; runlevel; status ssh; pgrep -x dockerd >/dev/null && echo dockerd; "
                       "status probe3", timeout=120).splitlines()
        assert out[0] == "init (upstart %s)" % VERSIONS[host]
        assert out[1] == "N 2"
        assert out[2].startswith("ssh start/running")
        assert out[3] == "dockerd"
        # 1.x reads JOB.override ("manual": not started at boot); 0.6.5 has
        # no override files at all and starts the job.
        if host == "h1":
            assert out[4] == "probe3 stop/waiting"
        else:
            assert out[4].startswith("probe3 start/running, process ")
