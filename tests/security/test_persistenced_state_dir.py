"""persistenced (root) hands the state file's directory to the service user.

It must hand over only a directory that is dedicated to the state file and that the
collection created: never a system or home directory, never one reached through ``..``
or a link, never one that someone else owns or could swap. Each test runs the real
module (``python -m ...persistenced args.json``) as Ansible would, in a private mount
namespace whose init-script, unit and /run directories are empty tmpfs mounts, so the
machine's own init system is never touched; ``bundled_path`` points below a regular
file, so a run that got past the state directory stops at the next step.

The service user is ``nobody`` (group ``nogroup``), the attacker in the race.
"""

import grp
import json
import os
import pwd
import stat
import subprocess
import sys
import tempfile
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(REPO, ".build", "collections")
ATTACKER_PYTHON = "/usr/bin/python3"  # the venv's interpreter lives under root-only /root
SOURCE = '#!/usr/bin/env python\nprint("daemon")\n'
# Emptied (tmpfs) inside the namespace: whatever a run gets to write there vanishes with it.
SCRATCH = ["/etc/init.d", "/etc/init", "/etc/systemd/system", "/etc/rc0.d", "/etc/rc1.d", "/etc/rc2.d",
           "/etc/rc3.d", "/etc/rc4.d", "/etc/rc5.d", "/etc/rc6.d", "/etc/rcS.d", "/run", "/usr/local/sbin"]


def run_persistenced(sandbox, state_file, extra_mounts=(), after="", **args):
    """Run the module in a private mount namespace; returns (result dict, output of ``after``)."""
    stopper = os.path.join(sandbox, "not-a-directory")
    if not os.path.exists(stopper):
        open(stopper, "w").close()
    module_args = dict(bundled_source=SOURCE, init_system="sysvinit", user="nobody", group="nogroup",
                       create_user=False, state_file=state_file,
                       bundled_path=os.path.join(stopper, "gpufleet-persistenced"))
    module_args.update(args)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, dir=sandbox) as handle:
        json.dump({"ANSIBLE_MODULE_ARGS": module_args}, handle)
    mounts = " && ".join("{ [ ! -d %s ] || mount -t tmpfs -o mode=0755 gfsec %s; }" % (d, d)
                         for d in SCRATCH + list(extra_mounts))
    script = ('%s && "$@" > "$OUT" 2>&1; %s' % (mounts, after or "true"))
    out = handle.name + ".out"
    env = dict(os.environ, PYTHONPATH=COLLECTIONS, OUT=out)
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh",
                           sys.executable, "-m", "ansible_collections.gpufleet.nvidia.plugins.modules.persistenced",
                           handle.name], capture_output=True, text=True, timeout=120, env=env)
    with open(out) as stream:
        text = stream.read()
    os.unlink(handle.name)
    os.unlink(out)
    lines = [line for line in text.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"traceback": text}
    return result, proc.stdout + proc.stderr


def owner(path):
    st = os.lstat(path)
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


def victim_dir(sandbox, name="victim"):
    path = os.path.join(sandbox, name)
    os.mkdir(path, 0o755)
    with open(os.path.join(path, "precious"), "w") as handle:
        handle.write("root's\n")
    return path


NOBODY = pwd.getpwnam("nobody").pw_uid


def test_dotdot_cannot_hand_over_another_directory(sandbox):
    victim = victim_dir(sandbox)
    os.mkdir(os.path.join(sandbox, "state"))
    result, _ = run_persistenced(sandbox, os.path.join(sandbox, "state", "..", "victim", "persistence.json"))
    assert owner(victim) == (0, 0, 0o755), "the victim directory was handed to nobody: %s" % result
    assert result.get("failed") is True and "normalised" in result["msg"] and "nothing was changed" in result["msg"]


@pytest.mark.parametrize("system_dir", ["/srv", "/opt", "/var/lib", "/home", "/mnt"])
def test_a_system_directory_is_never_handed_over(sandbox, system_dir):
    # an empty tmpfs stands in for the system directory inside the namespace; its owner is read in there
    result, after = run_persistenced(sandbox, system_dir + "/persistence.json", extra_mounts=[system_dir],
                                     after="stat -c 'OWNER %%u:%%g' %s" % system_dir)
    assert "OWNER 0:0" in after, "%s was handed to nobody: %s %s" % (system_dir, after, result)
    assert result.get("failed") is True and system_dir in result["msg"], result


def test_a_directory_owned_by_another_user_is_refused(sandbox, stranger):
    theirs = os.path.join(sandbox, "theirs")
    os.mkdir(theirs, 0o700)
    os.chown(theirs, stranger.uid, stranger.gid)
    result, _ = run_persistenced(sandbox, os.path.join(theirs, "persistence.json"))
    assert owner(theirs) == (stranger.uid, stranger.gid, 0o700), result
    assert result.get("failed") is True and "uid %d" % stranger.uid in result["msg"], result


def test_an_existing_root_directory_we_did_not_create_is_not_handed_over(sandbox):
    admin = victim_dir(sandbox, "admin")
    result, _ = run_persistenced(sandbox, os.path.join(admin, "persistence.json"))
    assert owner(admin) == (0, 0, 0o755), result
    assert result.get("failed") is True and "was not created by gpufleet.nvidia" in result["msg"], result


def test_a_symlinked_state_directory_is_refused(sandbox):
    victim = victim_dir(sandbox)
    os.symlink(victim, os.path.join(sandbox, "state"))
    result, _ = run_persistenced(sandbox, os.path.join(sandbox, "state", "persistence.json"))
    assert owner(victim) == (0, 0, 0o755), result
    assert result.get("failed") is True and "symbolic link" in result["msg"], result


# The service user owns the parent of the state directory and flips the state directory between
# a link to a root directory and nothing, while root runs the module again and again.
SWAP = r'''
import os, sys, time
parent, victim, end = sys.argv[1], sys.argv[2], float(sys.argv[3])
link = os.path.join(parent, "state")
n = 0
while time.time() < end:
    n += 1
    try:
        os.symlink(victim, link)
    except OSError:
        pass
    time.sleep(0.0005)
    try:
        os.unlink(link)
    except OSError:
        try:
            os.rmdir(link)  # a real directory root made in between (ours to remove: we own the parent)
        except OSError:
            pass
print(n)
'''


def test_a_state_directory_the_service_user_can_swap_is_refused(sandbox, service_user, deadline):
    victim = victim_dir(sandbox)
    parent = os.path.join(sandbox, "pub")
    os.mkdir(parent, 0o755)
    os.chown(parent, service_user.uid, service_user.gid)
    end = time.time() + float(os.environ.get("GPUFLEET_SECURITY_SECONDS", "4")) + 30
    attacker = service_user.popen([ATTACKER_PYTHON, "-c", SWAP, parent, victim, str(end)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    runs = []
    try:
        for _ in deadline():
            result, _out = run_persistenced(sandbox, os.path.join(parent, "state", "persistence.json"))
            runs.append(result.get("msg", "")[:160] or str(result)[:160])
            if owner(victim)[0] != 0:
                break
    finally:
        alive = attacker.poll() is None
        attacker.kill()
        out, err = attacker.communicate()
    assert owner(victim) == (0, 0, 0o755), "root handed %s to nobody through a swapped link: %s" % (victim, runs)
    assert alive, "the attacker died early: %s" % err
    assert runs and all("owned by nobody" in msg for msg in runs), runs


def test_our_own_directory_is_created_marked_and_handed_over_and_a_rerun_keeps_it(sandbox):
    """The positive path: a missing directory is made, marked and handed over; a second run accepts it."""
    state_dir = os.path.join(sandbox, "gpufleet")
    for _ in range(2):
        result, _ = run_persistenced(sandbox, os.path.join(state_dir, "persistence.json"))
        # the run stops at the bundled program (below a regular file), after the state directory
        assert "cannot write %s" % os.path.join(sandbox, "not-a-directory") in result.get("msg", ""), result
        assert owner(state_dir) == (NOBODY, grp.getgrnam("nogroup").gr_gid, 0o755)
        marker = os.lstat(os.path.join(state_dir, ".gpufleet-state-dir"))
        assert stat.S_ISREG(marker.st_mode) and marker.st_uid == 0
