"""Maintenance on a SysV fake host (persistenced state=stopped, then present): the init script the module
writes stops the daemon, after which nothing holds the GPUs, and starts it again, after which every GPU
is back at the mode gpu_persistence recorded for it; NVIDIA's real daemons (535, 550) and the bundled one.

The module's own stopped run (plan, verify, report) is in the unit tests and on the lab's four init
systems (molecule/persistenced); here the daemons and the script are real.
"""

import os

import pytest

from fakehost import wait_gone
from test_mod_gpu_persistence import STATE, run_module
from test_mod_persistenced_sysv import DAEMONS, daemon_host, install_script, modes, pid_of, service

from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import procs
from ansible_collections.gpufleet.nvidia.plugins.module_utils.persistenced import rules as pd

RECORDED = [{"gpu": 0, "mode": "enabled"}, {"gpu": 1, "mode": "disabled"},
            {"gpu": 2, "mode": "disabled"}, {"gpu": 3, "mode": "enabled"}]
EXPECTED = [1, 0, 0, 1]
ENABLED_BUS_IDS = {"0000:01:00.0", "0000:04:00.0"}


def holders_of_host_devices(host):
    """{pid: device names} of every process on this machine holding one of this fake host's /dev/nvidia*
    files, matched by inode (other tests' fake hosts have device files of the same names). No kernel driver
    answers the character devices: a daemon holds the fake driver's stand-in for each (fakehost)."""
    ours = {}
    for name in os.listdir(os.path.dirname(host.tree.stand_in("x"))):
        st = os.stat(host.tree.stand_in(name))
        ours[(st.st_dev, st.st_ino)] = name
    found = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir("/proc/%s/fd" % entry)
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.stat("/proc/%s/fd/%s" % (entry, fd))  # the test may stat what it finds; the module never does
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in ours:
                found.setdefault(int(entry), set()).add(ours[(st.st_dev, st.st_ino)])
    return dict((pid, sorted(names)) for pid, names in found.items())


def device_files_held_by(pid):
    """The NVIDIA device files ``pid`` holds, as persistenced's stopped run reads them from /proc."""
    for holder in procs.open_file_holders((pd.DEVICE_PREFIX,)):
        if holder["pid"] == pid:
            return holder["paths"]
    return []


def assert_gpus_held_as_recorded(host, pid):
    """NVIDIA's daemon holds a GPU through libnvidia-cfg (the fake logs each open and close), the bundled
    one through its /dev/nvidiaN descriptor: either way exactly the enabled GPUs."""
    assert modes(host, 4) == EXPECTED
    assert host.held() == (ENABLED_BUS_IDS if host.nvidia else set())
    assert device_files_held_by(pid) == ["/dev/nvidia0", "/dev/nvidia3"]
    assert holders_of_host_devices(host) == {pid: ["nvidia0", "nvidia3"]}


@pytest.mark.parametrize("daemon", DAEMONS)
def test_stop_releases_every_gpu_and_start_brings_back_each_recorded_mode(make_host, daemon):
    host = daemon_host(make_host, daemon, gpus=4)
    script = install_script(host)
    os.makedirs(os.path.join(host.dir, "run", "gpufleet"))
    rc, out = service(host, script, "start")
    assert rc == 0, out
    pid = pid_of(host)
    host.daemon_pids.append(pid)

    rc, result = run_module(host, "gpu_persistence", modes=RECORDED, state_file=STATE)
    assert rc == 0 and result["changed"] is True, result
    assert_gpus_held_as_recorded(host, pid)
    state_path = os.path.join(host.dir, "run", "gpufleet", "persistence.json")
    with open(state_path, "rb") as handle:
        recorded = handle.read()

    # stopped: the daemon is gone, and no process holds a GPU or a device file of this host
    rc, out = service(host, script, "stop")
    assert rc == 0, out
    assert wait_gone(pid)
    host.daemon_pids.pop()
    assert host.held() == set(), "libnvidia-cfg opens without a close after stop"
    assert holders_of_host_devices(host) == {}
    assert device_files_held_by(pid) == []
    assert not os.path.exists(host.tree.run_dir)
    with open(state_path, "rb") as handle:
        assert handle.read() == recorded  # the state file is kept as it was

    # present: the same service starts the daemon again and each GPU gets its own recorded mode back
    rc, out = service(host, script, "start")
    assert rc == 0, out
    new_pid = pid_of(host)
    host.daemon_pids.append(new_pid)
    assert new_pid != pid
    assert_gpus_held_as_recorded(host, new_pid)
