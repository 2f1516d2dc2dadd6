"""The controller writes the drift report (drift_report's action) into a directory another user can write.

A report directory shared with other users (uid 4242 here owns it) must not let them turn root's
write into a chmod or a write of another file: the attacker swaps every temp file root creates
there for a symbolic link to a root-only 0600 file, and now and then the report's own name too,
looping until the deadline while root writes the report again and again with the action's own
writer (``write_report``). The root-only file keeps its mode, owner and bytes every time.
"""

import json
import os
import stat
import subprocess
import time

from ansible_collections.gpufleet.nvidia.plugins.action.drift_report import write_report
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._drift import drift_report
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import HostFileError

from conftest import RACE_SECONDS

SECRET = b"root only\n"

# As the attacker, until argv[2] (a wall-clock time): every dot-name in the report directory (root's temp
# files) becomes a link to the secret; every 50th round the report's own name too. Touches argv[4] once a
# temp file was swapped.
ATTACK = r'''
import os, sys, time
reports, end, secret, marker = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
final = os.path.join(reports, "drift.json")
rounds = swaps = 0
while time.time() < end:
    rounds += 1
    for name in os.listdir(reports):
        if name.startswith("."):
            tmp = os.path.join(reports, name)
            try:
                os.unlink(tmp)
                os.symlink(secret, tmp)
            except OSError:
                continue
            swaps += 1
            if swaps == 1:
                open(marker, "w").close()
    if rounds % 50 == 0:
        try:
            os.unlink(final)
            os.symlink(secret, final)
        except OSError:
            pass
print("rounds", rounds, "temp files swapped", swaps)
'''


def big_report():
    """A fleet's report large enough that writing it takes a while (the attacker's window)."""
    state = {"converged": True, "drifted": [], "concerns": {"persistenced": {
        "converged": True, "failed": False, "result": {"init_system": "systemd", "daemon": "driver", "actions": []}}}}
    return drift_report(dict(("gpu-node-%05d.example" % index, state) for index in range(3000)))


def test_root_never_chmods_or_writes_through_a_link_swapped_in_for_its_temp_file(sandbox, stranger, deadline):
    reports = stranger.owned_dir(sandbox, "reports")
    scratch = stranger.owned_dir(sandbox, "attacker")
    marker = os.path.join(scratch, "swapped")
    vault = os.path.join(sandbox, "vault")
    os.mkdir(vault, 0o700)
    secret = os.path.join(vault, "secret")
    with open(secret, "wb") as handle:
        handle.write(SECRET)
    os.chmod(secret, 0o600)
    os.chmod(vault, 0o711)  # the attacker may name the secret, not read or change it
    path = os.path.join(reports, "drift.json")
    report = big_report()
    end = time.time() + RACE_SECONDS + 120  # outlives root's loop
    attacker = stranger.python_popen(ATTACK, reports, end, secret, marker,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outcomes = {}
    changed = None
    started = time.monotonic()
    try:
        # Until the deadline, then on until the attacker has swapped at least one temp file (a busy machine
        # may schedule it late): a race that never happened proves nothing.
        for _ in deadline(RACE_SECONDS + 110):
            try:
                write_report(path, report)
                outcome = "written"
            except HostFileError as exc:
                outcome = "refused: " + str(exc).split(": ")[0]
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            st = os.lstat(secret)
            if stat.S_IMODE(st.st_mode) != 0o600 or (st.st_uid, st.st_gid) != (0, 0):
                changed = "mode %o, owner %d:%d" % (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
                break
            if time.monotonic() - started >= RACE_SECONDS and os.path.exists(marker):
                break
    finally:
        alive = attacker.poll() is None
        attacker.kill()
        out, err = attacker.communicate()
    print("root:", json.dumps(outcomes), "attacker:", out.strip(), err[-500:])
    assert changed is None, "root changed the root-only file through a link planted at its temp file: " + changed
    with open(secret, "rb") as handle:
        assert handle.read() == SECRET, "root wrote into the root-only file through a planted link"
    assert sorted(os.listdir(vault)) == ["secret"]
    assert alive, "the attacker died early, so nothing was attacked: %s" % err[-500:]
    assert os.path.exists(marker), "the attacker never swapped a temp file: the race was not run"
    for outcome in outcomes:
        assert outcome == "written" or outcome.startswith("refused: " + path), outcomes
