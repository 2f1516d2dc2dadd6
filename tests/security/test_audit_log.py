"""The audit trail (host.audit) is root's alone: another user can neither read nor write it, and root never writes it
through a link or into a directory another user can change.

The attacker owns a directory on the way to a log path and, looping until the deadline, swaps the log's directory
for a link to a root-only vault (holding a 0600 file named like the log) and back, while root appends again and
again with the modules' own writer. Every append is refused naming the attacker's directory, and the vault keeps its
bytes and its entries.
"""

import json
import os
import stat
import time

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import HostFileError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import audit

from conftest import DIRECTORY_SWAP as SWAP
from conftest import PRIVATE_FILE_PROBE as PROBE
from conftest import RACE_SECONDS


def test_another_user_can_neither_read_nor_write_the_log(sandbox, stranger):
    path = os.path.join(sandbox, "log", "gpufleet", "audit.jsonl")
    audit.append([{"change": 1}], path)
    probe = stranger.python(PROBE, path)
    assert probe.returncode == 0, probe.stderr
    found = json.loads(probe.stdout)
    assert found == {"read": 13, "append": 13, "list": 13}  # EACCES each time
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and os.stat(path).st_uid == 0


def test_root_never_writes_the_log_through_a_directory_another_user_controls(sandbox, stranger, deadline):
    home = stranger.owned_dir(sandbox, "home")
    logdir = stranger.owned_dir(home, "gpufleet")
    vault = os.path.join(sandbox, "vault")
    os.mkdir(vault, 0o700)
    secret = os.path.join(vault, "audit.jsonl")
    with open(secret, "w") as handle:
        handle.write("root only\n")
    os.chmod(secret, 0o600)
    path = os.path.join(logdir, "audit.jsonl")
    swapper = stranger.python_popen(SWAP, logdir, time.time() + RACE_SECONDS + 0.5, vault, stdout=-1, stderr=-1,
                                    text=True)
    refused = 0
    try:
        for _round in deadline():
            with pytest.raises(HostFileError) as caught:
                audit.append([{"change": _round}], path)
            assert home in str(caught.value)
            refused += 1
        out, err = swapper.communicate(timeout=30)
    finally:
        swapper.kill()
    print("appends refused:", refused, out.strip(), err.strip())
    assert refused > 10 and int(out.split()[-1]) > 10
    with open(secret) as handle:
        assert handle.read() == "root only\n"
    assert os.listdir(vault) == ["audit.jsonl"]
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
    if os.path.isdir(logdir) and not os.path.islink(logdir):
        assert os.listdir(logdir) == []
