"""The rollback store (host.rollback) is root's alone: another user can neither read, write nor list it, root never
saves a record through a link or into a directory another user can change, and a restore never writes back through
a place another user took over since the run.

The attacker owns a directory on the way to a store and, looping until the deadline, swaps the store for a link to a
root-only vault (holding a 0600 file named like the run's file) and back, while root saves again and again with the
modules' own writer: every save is refused naming the attacker's directory, and the vault keeps its bytes.
"""

import json
import os
import stat
import time

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import HostFileError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import rollback

from conftest import DIRECTORY_SWAP as SWAP
from conftest import PRIVATE_FILE_PROBE as PROBE
from conftest import RACE_SECONDS

RUN = "ctl-20261205T170000Z-4242"


# As the attacker: put a link named argv[1] to argv[2] (a file of root's the attacker wants written).
PLANT = r'''
import os, sys
try:
    os.symlink(sys.argv[2], sys.argv[1])
    print("planted")
except OSError as exc:
    print("refused", exc.errno)
'''


def changed(sandbox, name, before=b"{}\n", after=b'{"runtimes": {}}\n'):
    """A root file ``name`` in the sandbox that a run changed from ``before`` to ``after``: its path and the run's
    result."""
    path = os.path.join(sandbox, name)
    with open(path, "wb") as handle:
        handle.write(after)
    return path, {"changed": True, "action": "restart",
                  "diff": {"before": before.decode(), "after": after.decode(), "before_header": path, "after_header": path}}


def vault_with(sandbox, name, text="root only\n"):
    vault = os.path.join(sandbox, "vault")
    os.mkdir(vault, 0o700)
    secret = os.path.join(vault, name)
    with open(secret, "w") as handle:
        handle.write(text)
    os.chmod(secret, 0o600)
    return vault, secret


def test_another_user_can_neither_read_nor_write_the_store(sandbox, stranger):
    store = os.path.join(sandbox, "lib", "gpufleet-rollback")
    path, result = changed(sandbox, "daemon.json")
    rollback.save(RUN, "docker", "docker_runtime", result, {"service_name": "docker"}, store)
    run_file = os.path.join(store, rollback.run_file(RUN))
    probe = stranger.python(PROBE, run_file)
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout) == {"read": 13, "append": 13, "list": 13}  # EACCES each time
    assert stat.S_IMODE(os.stat(run_file).st_mode) == 0o600 and os.stat(run_file).st_uid == 0
    assert stat.S_IMODE(os.stat(store).st_mode) == 0o700 and os.stat(store).st_uid == 0


def test_a_link_planted_in_a_store_others_can_write_is_refused_and_never_followed(sandbox, stranger):
    vault, secret = vault_with(sandbox, "shadow")
    store = os.path.join(sandbox, "store")
    os.mkdir(store)
    os.chown(store, 0, stranger.gid)
    os.chmod(store, 0o770)  # a group-writable store: its group may plant what it likes
    planted = stranger.python(PLANT, os.path.join(store, rollback.run_file(RUN)), secret)
    assert planted.stdout.strip() == "planted", planted.stderr
    path, result = changed(sandbox, "daemon.json")
    with pytest.raises(HostFileError, match="refusing to use the directory %s: it is owned by uid 0 with mode 0770"
                       % store):
        rollback.save(RUN, "docker", "docker_runtime", result, {}, store)
    os.chmod(store, 0o700)  # made root's alone, the link still there: never followed
    with pytest.raises(HostFileError, match="link or anything but a regular file in its place is never followed"):
        rollback.save(RUN, "docker", "docker_runtime", result, {}, store)
    with pytest.raises(HostFileError, match="never followed"):
        rollback.restore(RUN, store, None)
    with open(secret) as handle:
        assert handle.read() == "root only\n"
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600 and os.listdir(vault) == ["shadow"]


def test_root_never_saves_through_a_store_another_user_controls(sandbox, stranger, deadline):
    home = stranger.owned_dir(sandbox, "home")
    store = stranger.owned_dir(home, "gpufleet-rollback")
    vault, secret = vault_with(sandbox, rollback.run_file(RUN))
    path, result = changed(sandbox, "daemon.json")
    swapper = stranger.python_popen(SWAP, store, time.time() + RACE_SECONDS + 0.5, vault, stdout=-1, stderr=-1,
                                    text=True)
    refused = 0
    try:
        for _round in deadline():
            with pytest.raises(HostFileError) as caught:
                rollback.save(RUN, "docker", "docker_runtime", result, {}, store)
            assert home in str(caught.value)
            refused += 1
        out, err = swapper.communicate(timeout=30)
    finally:
        swapper.kill()
    print("saves refused:", refused, out.strip(), err.strip())
    assert refused > 10 and int(out.split()[-1]) > 10
    with open(secret) as handle:
        assert handle.read() == "root only\n"
    assert os.listdir(vault) == [rollback.run_file(RUN)]
    if os.path.isdir(store) and not os.path.islink(store):
        assert os.listdir(store) == []


def test_a_restore_never_writes_back_through_a_place_another_user_took_over(sandbox, stranger):
    vault, secret = vault_with(sandbox, "shadow")
    store = os.path.join(sandbox, "store")
    config = os.path.join(sandbox, "etc")
    os.mkdir(config, 0o755)
    path, result = changed(config, "daemon.json")
    assert rollback.save(RUN, "docker", "docker_runtime", result, {}, store)["files"][0]["path"] == path
    # since the run, the file's directory went to another user, who put a link to root's vault in the file's place
    os.chown(config, stranger.uid, stranger.gid)
    os.unlink(path)
    planted = stranger.python(PLANT, path, secret)
    assert planted.stdout.strip() == "planted", planted.stderr
    restored = rollback.restore(RUN, store, None)
    assert restored["changed"] is False and restored["restored"] == [] and restored["removed"] == []
    (conflict,) = restored["conflicts"]
    assert conflict["path"] == path and "refusing to use the directory %s" % config in conflict["problem"]
    with open(secret) as handle:
        assert handle.read() == "root only\n"
    assert os.path.islink(path) and os.listdir(vault) == ["shadow"]
