"""Root (gpu_persistence) updates the per-GPU state file in the service user's directory.

The service user (``nobody`` here) owns that directory, as persistenced leaves it, and
attacks every path root touches in it: the ``.lock`` file, the temp file and the state
file itself, with symbolic links, hard links and FIFOs, planted before and during root's
writes, looping until the deadline. Root runs the collection's own writer
(``gpu.state.update``, what the module calls) in a loop meanwhile.

Victims live in a root-only vault next to the state directory: a root-only secret that
must keep its mode, owner and bytes, and a path that must never come to exist.
"""

import json
import os
import stat
import subprocess
import sys
import time

import pytest

COLLECTIONS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                           ".build", "collections")
from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import state
from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import state_dir as gpu_state_dir

# The venv's interpreter lives under root-only /root: attacker code runs under Debian's python3.
ATTACKER_PYTHON = "/usr/bin/python3"
UUID = "GPU-0000a100-1111-2222-3333-000000000000"
SECRET = b'{"format_version": "TOPSECRET-root-only"}\n'

# Runs as the service user until the deadline (a wall-clock time in argv[2]): plants links at the
# lock path, at every temp file root creates, and now and then at the state file itself.
ATTACK = r'''
import os, sys, time
state_dir, end, vault, targets = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
path = os.path.join(state_dir, "persistence.json")
lock = path + ".lock"
mine = os.path.join(state_dir, "mine")
open(mine, "w").close()
created = os.path.join(vault, "created-by-root")
secret = os.path.join(vault, "secret")
n = 0
while time.time() < end:
    n += 1
    for target in ((lock,) if targets == "all" else ()):
        try:
            os.unlink(target)
        except OSError:
            pass
        try:
            if n % 3 == 0:
                os.link(mine, target)          # a hard link to a file of ours
            else:
                os.symlink(created, target)    # root's O_CREAT would create this
        except OSError:
            pass
    try:
        names = os.listdir(state_dir)
    except OSError:
        names = []
    for name in names:
        if name.endswith(".tmp") or ".tmp" in name:
            tmp = os.path.join(state_dir, name)
            try:
                os.unlink(tmp)
                os.symlink(secret, tmp)        # root's chmod/chown by path would hit the secret
            except OSError:
                pass
    if n % 50 == 0 and targets == "all":
        try:
            os.unlink(path)
            os.symlink(secret, path)
        except OSError:
            pass
print(n)
'''


def make_layout(sandbox, service_user):
    state_dir = os.path.join(sandbox, "state")
    os.mkdir(state_dir, 0o755)
    os.chown(state_dir, service_user.uid, service_user.gid)  # as persistenced hands it over
    vault = os.path.join(sandbox, "vault")
    os.mkdir(vault, 0o700)
    secret = os.path.join(vault, "secret")
    with open(secret, "wb") as handle:
        handle.write(SECRET)
    os.chmod(secret, 0o600)
    os.chmod(vault, 0o711)  # the attacker may name paths in it, not list or write it
    return state_dir, vault, secret


def assert_vault_intact(vault, secret):
    assert not os.path.lexists(os.path.join(vault, "created-by-root")), "root created a file through a planted link"
    st = os.lstat(secret)
    assert stat.S_IMODE(st.st_mode) == 0o600, "root chmodded the secret through a planted link: %o" % st.st_mode
    assert (st.st_uid, st.st_gid) == (0, 0), "root chowned the secret through a planted link"
    with open(secret, "rb") as handle:
        assert handle.read() == SECRET, "root wrote into the secret through a planted link"
    assert sorted(os.listdir(vault)) == ["secret"]


@pytest.mark.parametrize("targets", ["all", "temp-only"])
def test_links_planted_at_lock_temp_and_state_during_root_updates(sandbox, service_user, deadline, targets):
    """``all``: lock (symlink or hard link), temp files and the state file; ``temp-only``: the temp
    files alone, so that root's writes mostly get through and the chmod/chown race is exercised."""
    state_dir, vault, secret = make_layout(sandbox, service_user)
    path = os.path.join(state_dir, "persistence.json")
    end = time.time() + float(os.environ.get("GPUFLEET_SECURITY_SECONDS", "4")) + 10  # outlives root's loop
    attacker = service_user.popen([ATTACKER_PYTHON, "-c", ATTACK, state_dir, str(end), vault, targets],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    waited_until = time.monotonic() + 60  # the attacker runs (its first file is there) before root's first write
    while not os.path.exists(os.path.join(state_dir, "mine")):
        assert attacker.poll() is None and time.monotonic() < waited_until, "the attacker did not start"
        time.sleep(0.01)
    outcomes = {}
    try:
        for count in deadline():
            mode = "enabled" if count % 2 else "disabled"
            try:
                state.update(path, lambda st, m=mode: state.with_modes(st, {UUID: ("00000000:01:00.0", m)}))
                outcome = "written"
            except gpu_state_dir.StateError as exc:
                outcome = "refused: " + str(exc).split(":")[0]
            except Exception as exc:  # today's code: whatever a followed link does
                outcome = "%s: %s" % (type(exc).__name__, exc)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            st = os.lstat(secret)
            if os.path.lexists(os.path.join(vault, "created-by-root")) or stat.S_IMODE(st.st_mode) != 0o600 \
                    or st.st_uid != 0:
                break
    finally:
        alive = attacker.poll() is None
        attacker.kill()
        out, err = attacker.communicate()
    print("root outcomes:", json.dumps(outcomes, indent=1), "attacker:", out.strip(), err[-500:])
    assert_vault_intact(vault, secret)
    assert alive, "the attacker died early, so nothing was attacked: %s" % err[-500:]
    # every refusal names a file in the state directory
    for outcome in outcomes:
        assert outcome == "written" or outcome.startswith("refused: "), outcomes


def test_a_state_file_link_is_neither_read_nor_written_through(sandbox, service_user):
    """Root must not read a root-only file through a link (its content would reach the error)."""
    state_dir, vault, secret = make_layout(sandbox, service_user)
    path = os.path.join(state_dir, "persistence.json")
    service_user.run(["ln", "-s", secret, path], check=True)
    with pytest.raises(Exception) as exc:
        state.update(path, lambda st: state.with_modes(st, {UUID: ("00000000:01:00.0", "enabled")}))
    assert "TOPSECRET" not in str(exc.value), "root read the secret through the link: %s" % exc.value
    assert isinstance(exc.value, gpu_state_dir.StateError) and path in str(exc.value) and "symbolic link" in str(exc.value)
    assert_vault_intact(vault, secret)
    assert os.path.islink(path)


@pytest.mark.parametrize("where", ["persistence.json", "persistence.json.lock"])
def test_a_fifo_planted_by_the_service_user_does_not_hang_root(sandbox, service_user, where):
    state_dir, vault, secret = make_layout(sandbox, service_user)
    path = os.path.join(state_dir, "persistence.json")
    service_user.run(["mkfifo", os.path.join(state_dir, where)], check=True)
    # In a child process: a root writer stuck on the FIFO must not hang this test run.
    code = ("import sys\nsys.path.insert(0, %r)\n"
            "from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import state\n"
            "from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import state_dir as gpu_state_dir\n"
            "try:\n"
            "    state.update(%r, lambda st: state.with_modes(st, {%r: ('b', 'enabled')}))\n"
            "    print('written')\n"
            "except gpu_state_dir.StateError as exc:\n"
            "    print('refused', exc)\n" % (COLLECTIONS, path, UUID))
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=15)
    except subprocess.TimeoutExpired:
        pytest.fail("root's state file update hung on a FIFO the service user planted at %s" % where)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("refused") and "not a regular file" in proc.stdout, proc.stdout
    assert_vault_intact(vault, secret)


def test_a_hard_linked_lock_or_state_file_is_refused(sandbox, service_user):
    """fs.protected_hardlinks keeps nobody from linking root's files on this machine, but not on every
    host: root plants the links here, standing in for a host without that protection."""
    state_dir, vault, secret = make_layout(sandbox, service_user)
    path = os.path.join(state_dir, "persistence.json")
    for name in ("persistence.json.lock", "persistence.json"):
        planted = os.path.join(state_dir, name)
        os.link(secret, planted)
        with pytest.raises(gpu_state_dir.StateError) as exc:
            state.update(path, lambda st: state.with_modes(st, {UUID: ("00000000:01:00.0", "enabled")}))
        assert "hard links" in str(exc.value) and planted in str(exc.value)
        assert "TOPSECRET" not in str(exc.value)
        os.unlink(planted)
    assert_vault_intact(vault, secret)


def test_root_updates_still_work_beside_a_racing_reader(sandbox, service_user, deadline):
    """The hardening keeps the normal path: with the service user only reading, every update lands."""
    state_dir = make_layout(sandbox, service_user)[0]
    path = os.path.join(state_dir, "persistence.json")
    written = 0
    for count in deadline(1.0):
        mode = "enabled" if count % 2 else "disabled"
        before, after = state.update(path, lambda st, m=mode: state.with_modes(st, {UUID: ("b", m)}))
        written += before != after
    st = os.lstat(path)
    assert written > 0 and stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644
    assert st.st_uid == service_user.uid  # the directory's owner keeps owning what is in it
    assert sorted(n for n in os.listdir(state_dir) if n.endswith(".tmp")) == []
    proc = service_user.run([ATTACKER_PYTHON, "-c", "import json,sys; print(json.load(open(sys.argv[1]))['gpus']"
                             "[%r]['mode'])" % UUID, path])
    assert proc.returncode == 0 and proc.stdout.strip() in ("enabled", "disabled"), proc.stderr


def test_no_other_user_can_hold_the_state_lock(sandbox, service_user, stranger):
    """A shared flock needs only a read-only descriptor: a lock file others can open
    would let any local user stall every writer. The lock is the owner's alone, also
    one an older release left 0644."""
    state_dir, _vault, _secret = make_layout(sandbox, service_user)
    path = os.path.join(state_dir, "persistence.json")
    lock = path + ".lock"
    with open(lock, "w"):
        pass
    os.chmod(lock, 0o644)
    os.chown(lock, service_user.uid, service_user.gid)
    state.update(path, lambda current: current)
    assert stat.S_IMODE(os.stat(lock).st_mode) == 0o600
    held = stranger.python("import fcntl, sys; fcntl.flock(open(sys.argv[1]), fcntl.LOCK_SH)", lock)
    assert held.returncode != 0 and "PermissionError" in held.stderr, held.stderr
    os.unlink(lock)
    state.update(path, lambda current: current)  # a new lock file is the owner's alone from the start
    assert stat.S_IMODE(os.stat(lock).st_mode) == 0o600
