"""gpu_health writes its metrics, as root, into node_exporter's textfile directory, which belongs to another user
(Debian's /var/lib/prometheus/node-exporter is the prometheus user's, and so is its parent).

That user swaps every temp file root creates there for a symbolic link to a root-only 0600 file, now and then the
metrics file's own name too, and swaps the directory itself for a link to a root-only directory, looping until the
deadline while root writes the metrics again and again with the module's own writer (``health.metrics.write``).
The root-only file keeps its mode, owner and bytes; nothing appears in the root-only directory; root's write either
lands in the textfile directory or is refused naming it.
"""

import json
import os
import stat
import subprocess
import time

from ansible_collections.gpufleet.nvidia.plugins.module_utils.health import metrics

from conftest import RACE_SECONDS

SECRET = b"root only\n"

# As the attacker, until argv[2]: every dot-name in the textfile directory (root's temp files) becomes a link to the
# secret; every 20th round the metrics file's own name too; every 7th round the directory itself is moved away and a
# link to the root-only vault put in its place (and moved back the round after). Touches argv[5] once a temp file was
# swapped and argv[6] once the directory was a link while root wrote.
ATTACK = r'''
import os, sys, time
textfile, end, secret, vault, marker, dir_marker = sys.argv[1], float(sys.argv[2]), *sys.argv[3:7]
final = os.path.join(textfile, "gpufleet_health.prom")
moved = textfile + ".away"
rounds = swaps = dir_swaps = 0
while time.time() < end:
    rounds += 1
    try:
        names = os.listdir(textfile)
    except OSError:
        names = []
    for name in names:
        if name.startswith("."):
            tmp = os.path.join(textfile, name)
            try:
                os.unlink(tmp)
                os.symlink(secret, tmp)
            except OSError:
                continue
            swaps += 1
            if swaps == 1:
                open(marker, "w").close()
    if rounds % 20 == 0:
        try:
            os.unlink(final)
            os.symlink(secret, final)
        except OSError:
            pass
    if rounds % 7 == 0 and not os.path.islink(textfile):
        try:
            os.rename(textfile, moved)
            os.symlink(vault, textfile)
            dir_swaps += 1
            time.sleep(0.002)
            if dir_swaps == 1:
                open(dir_marker, "w").close()
            os.unlink(textfile)
            os.rename(moved, textfile)
        except OSError:
            pass
print("rounds", rounds, "temp files swapped", swaps, "directory swapped", dir_swaps)
'''


def big_text():
    """Metrics large enough that writing them takes a while (the attacker's window)."""
    return "".join("gpufleet_gpu_info{gpu=\"%d\"} 1\n" % index for index in range(20000))


def test_root_never_writes_through_a_link_in_another_users_textfile_directory(sandbox, stranger, deadline):
    prometheus = stranger.owned_dir(sandbox, "prometheus")
    textfile = stranger.owned_dir(prometheus, "node-exporter")
    scratch = stranger.owned_dir(sandbox, "attacker")
    marker, dir_marker = os.path.join(scratch, "swapped"), os.path.join(scratch, "dir-swapped")
    vault = os.path.join(sandbox, "vault")
    os.mkdir(vault, 0o700)
    secret = os.path.join(vault, "secret")
    with open(secret, "wb") as handle:
        handle.write(SECRET)
    os.chmod(secret, 0o600)
    os.chmod(vault, 0o711)  # the attacker may name the vault and the secret, not read or change them
    text = big_text()
    end = time.time() + RACE_SECONDS + 120  # outlives root's loop
    attacker = stranger.python_popen(ATTACK, textfile, end, secret, vault, marker, dir_marker,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outcomes = {}
    changed = None
    started = time.monotonic()
    try:
        # Until the deadline, then on until the attacker has swapped a temp file and the directory (a busy machine
        # may schedule it late): a race that never happened proves nothing.
        for _ in deadline(RACE_SECONDS + 110):
            try:
                written = metrics.write(textfile, text)
                outcome = "written" if written else "no directory"
            except metrics.MetricsError as exc:
                outcome = "refused: " + str(exc).split(": ")[0]
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            st = os.lstat(secret)
            if stat.S_IMODE(st.st_mode) != 0o600 or (st.st_uid, st.st_gid) != (0, 0):
                changed = "mode %o, owner %d:%d" % (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
                break
            if sorted(os.listdir(vault)) != ["secret"]:
                break
            if time.monotonic() - started >= RACE_SECONDS and os.path.exists(marker) and os.path.exists(dir_marker):
                break
    finally:
        alive = attacker.poll() is None
        attacker.kill()
        out, err = attacker.communicate()
    print("root:", json.dumps(outcomes), "attacker:", out.strip(), err[-500:])
    assert changed is None, "root changed the root-only file through a link planted at its temp file: " + changed
    with open(secret, "rb") as handle:
        assert handle.read() == SECRET, "root wrote into the root-only file through a planted link"
    assert sorted(os.listdir(vault)) == ["secret"], "root wrote into the root-only directory through a planted link"
    assert alive, "the attacker died early, so nothing was attacked: %s" % err[-500:]
    assert os.path.exists(marker), "the attacker never swapped a temp file: the race was not run"
    assert os.path.exists(dir_marker), "the attacker never swapped the directory: the race was not run"
    assert outcomes.get("written"), outcomes
    for outcome in outcomes:
        assert outcome in ("written", "no directory") or outcome.startswith("refused: " + textfile), outcomes
