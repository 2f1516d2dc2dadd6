"""Workload safety on a real systemd host: `systemctl daemon-reload` and running GPU containers.

With dockerd's systemd cgroup driver, a reload makes systemd re-apply every
container scope's device rules, and it drops the NVIDIA nodes it cannot map
back to a /dev/char link: a running container's device files go from ENXIO
(allowed; the node has no driver here) to EPERM. One lab systemd host per
cgroup mode (v1, then v2 with the unified hierarchy), each in this order:

(a) control: no links, a running container loses its devices at the reload
    (the test fails if it does not: the reproduction must be live);
(b) the collection's ``device_links`` through Ansible: it reports the exposed
    container, installs the udev rule and the boot unit; a container started
    afterwards keeps its devices through a reload;
(c) cgroupfs driver: nothing is lost, with or without links.

The device nodes are made in the host's own /dev (``mknod c 195 0`` / ``c 195
255`` in place of the kit's bind-mounted nodes, all of which are removed first:
the links are then exactly those two). Needs root and the lab
(``lab up``); only one lab fits on a machine, so the fixture fails when lab
hosts are already up.
"""

import json
import os
import subprocess
import time

import pytest

from conftest import CACHE, REPO, lab
from conftest import ok as on_host

HOST = "h1"
ALLOWED, DENIED = "No such device or address", "Operation not permitted"
RULE = "/etc/udev/rules.d/71-gpufleet-nvidia-dev-char.rules"
UNIT = "/etc/systemd/system/gpufleet-dev-char-links.service"


def ok(script, timeout=120):
    """SCRIPT's output on the systemd host, run under ``set -eu``."""
    return on_host(HOST, "set -eu\n" + script, timeout)


@pytest.fixture(params=["v1", "v2"])
def systemd_host(request, empty_lab):
    t0 = time.monotonic()
    res = lab("up", "--hosts", "1", "--kinds", "systemd", "--gpus", "2", "--cgroup", request.param)
    assert res.returncode == 0, res.stderr
    print("lab up (systemd, cgroup %s): %.1f s" % (request.param, time.monotonic() - t0))
    return request.param


# Nodes of the host's own in place of the kit's, no /dev/char links for them, and a probe:
# a container that opens each node every 0.2 s and prints the error (ENXIO: allowed, EPERM: denied).
SETUP = r"""
for n in nvidia0 nvidia1 nvidiactl nvidia-modeset nvidia-uvm nvidia-uvm-tools; do mountpoint -q /dev/$n && umount /dev/$n; rm -f /dev/$n; done
mknod -m 666 /dev/nvidia0 c 195 0; mknod -m 666 /dev/nvidiactl c 195 255
rm -f /dev/char/195:*
docker import /usr/share/gpufleet-lab/busybox-rootfs.tar lab/busybox >/dev/null
"""

DRIVER = r"""
python3 - "$1" <<'P'
import json, sys
p = '/etc/docker/daemon.json'; d = json.load(open(p))
d['exec-opts'] = ['native.cgroupdriver=%s' % sys.argv[1]]
json.dump(d, open(p, 'w'))
P
systemctl restart docker
docker info -f '{{.CgroupDriver}} {{.CgroupVersion}}'
"""

PROBES = r"""
probe() {
  docker run -d --name "$1" --network none --device /dev/nvidia0 --device /dev/nvidiactl lab/busybox \
    sh -c 'while :; do for d in /dev/nvidia0 /dev/nvidiactl; do head -c0 $d 2>&1; done; sleep 0.2; done' >/dev/null
}
last() { echo "$1: $(docker logs --tail 2 "$1" 2>&1 | sed 's/^.*: //' | sort -u | tr '\n' '|')"; }
"""


def errors(out):
    """{container: set of errno texts} from `last` lines."""
    found = {}
    for line in out.splitlines():
        if ": " in line and line.split(": ", 1)[0] in ("pa", "pb", "pc", "pd"):
            name, rest = line.split(": ", 1)
            found[name] = set(part for part in rest.split("|") if part)
    return found


def driver(name):
    return ok("set -- %s\n%s" % (name, DRIVER), timeout=120).split()


def run_device_links(check=False):
    """The module's result on the lab host, through Ansible; ``shown``: the warnings Ansible printed."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".build" / "collections"),
               ANSIBLE_DEPRECATION_WARNINGS="0")
    argv = ["ansible", "-i", str(CACHE / "inventory.yml"), HOST, "-m", "gpufleet.nvidia.device_links"]
    res = subprocess.run(argv + (["--check"] if check else []), capture_output=True, text=True, timeout=180,
                         env=env, cwd=str(REPO))
    assert res.returncode == 0 and " => " in res.stdout, res.stdout + res.stderr
    result = json.loads(res.stdout.split(" => ", 1)[1])
    result["shown"] = " ".join(res.stderr.split())  # Ansible wraps long warnings
    return result


def test_daemon_reload_keeps_devices_only_with_the_links(systemd_host):
    t0 = time.monotonic()
    ok(SETUP)
    assert driver("systemd") == ["systemd", systemd_host[1:]]
    # (a) control: no links; the running container loses its devices at the reload.
    out = ok(PROBES + "probe pa; sleep 1; last pa; systemctl daemon-reload; sleep 1; last pa")
    before, after = out.splitlines()[0], out.splitlines()[1]
    assert errors(before)["pa"] == {ALLOWED}, out
    assert errors(after)["pa"] == {DENIED}, "the control did not lose its devices: the test proves nothing\n" + out
    t_control = time.monotonic()

    # (b) the collection's run: links, boot pieces, the exposed container reported (never touched).
    checked = run_device_links(check=True)
    assert checked["changed"] and checked["actions"][0] == "create_links"
    assert ok("ls /dev/char/ | grep -c '^195:' || true").strip() == "0"
    result = run_device_links()
    assert result["actions"] == ["create_links", "write_script", "write_udev_rule", "write_unit", "enable"]
    assert result["links"] == [{"link": "/dev/char/195:0", "target": "../nvidia0"},
                               {"link": "/dev/char/195:255", "target": "../nvidiactl"}]
    assert result["cgroup_driver"] == "systemd"
    assert [c["name"] for c in result["exposed_containers"]] == ["pa"]
    assert "container pa (" in result["shown"] and "Restart it to be safe" in result["shown"], result["shown"]
    assert ok("readlink /dev/char/195:0 /dev/char/195:255").split() == ["../nvidia0", "../nvidiactl"]
    assert ok("docker inspect -f '{{.State.Running}}' pa").strip() == "true"  # left alone
    out = ok(PROBES + "probe pb; sleep 1; last pb; systemctl daemon-reload; sleep 1; last pb; last pa")
    lines = out.splitlines()
    assert errors(lines[0])["pb"] == {ALLOWED}, out
    assert errors(lines[1])["pb"] == {ALLOWED}, "a container started after the links lost its devices\n" + out
    assert errors(lines[2])["pa"] == {DENIED}, out
    # the boot pieces as files (nspawn runs no udevd), and the unit enabled before the engines
    files = ok("cat %s; echo ===; systemctl is-enabled gpufleet-dev-char-links; "
               "systemctl show -p Before gpufleet-dev-char-links" % RULE)
    rule, state = files.split("===\n")
    assert 'ACTION=="add", DEVPATH=="/bus/pci/drivers/nvidia", RUN+="/usr/local/sbin/gpufleet-dev-char-links"' in rule
    assert 'KERNEL=="nvidia|nvidia_uvm|nvidia_modeset"' in rule
    assert state.splitlines()[0] == "enabled"
    assert {"docker.service", "containerd.service"} <= set(state.splitlines()[1].split("=", 1)[1].split())
    # the boot unit makes the links again (as at boot): remove them, start it, they are back
    ok("rm /dev/char/195:0 /dev/char/195:255; systemctl restart gpufleet-dev-char-links")
    assert ok("readlink /dev/char/195:0 /dev/char/195:255").split() == ["../nvidia0", "../nvidiactl"]
    t_links = time.monotonic()

    # (c) cgroupfs: no loss without links (pc) or with them (pd).
    ok("docker rm -f pa pb >/dev/null")
    assert driver("cgroupfs")[0] == "cgroupfs"
    out = ok(PROBES + "mv /dev/char/195:0 /dev/char/195:255 /tmp/; probe pc; "
             "mv /tmp/195:0 /tmp/195:255 /dev/char/; probe pd; sleep 1; last pc; last pd; "
             "systemctl daemon-reload; sleep 1; last pc; last pd; docker rm -f pc pd >/dev/null")
    lines = out.splitlines()
    for line in lines:
        assert list(errors(line).values()) == [{ALLOWED}], "cgroupfs lost devices:\n" + out
    assert len(lines) == 4
    result = run_device_links()  # converged: nothing to do, and with cgroupfs nothing is exposed
    assert result["cgroup_driver"] == "cgroupfs" and result["exposed_containers"] == []
    assert not result["changed"] and result["actions"] == []
    print("cgroup %s: control %.1f s, with links %.1f s, cgroupfs %.1f s"
          % (systemd_host, t_control - t0, t_links - t_control, time.monotonic() - t_links))
