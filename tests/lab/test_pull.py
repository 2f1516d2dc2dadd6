"""Pull mode on the lab: every node converges itself with ansible-pull from a git repository the controller serves.

Three Debian 12 hosts, one per init system (systemd 252, SysV, Upstart 1.13.2). The controller serves a site
repository (``git daemon`` on the lab's bridge: ``local.yml`` importing gpufleet.nvidia.site, ``group_vars`` with
the lab's settings, and this checkout's collection built and installed under ``collections/``, as a site vendors
it) and a wheelhouse (ansible-core and its dependencies from PyPI, cached). The ``gpufleet.nvidia.pull`` role,
pushed once (in check mode first: it says what it would do and changes nothing; then twice, the second run
changing nothing), installs on each node ansible-core into the collection's virtual environment from that
wheelhouse, the program and its systemd timer (systemd) or cron job (SysV, Upstart), every minute with a 15 s
splay, commits required to carry a good signature of the site's key (made here with gpg).

Then, with nothing but the timers and cron jobs running the nodes:
- the first signed commit: each node's first run that started after the push applied it (outcome changed or ok),
  its drift metrics, last-run time and GPU health verdict served by the node's own node_exporter;
- a signed commit whose playbook does not parse: refused by every node, the reason logged, nothing changed (the
  node's docker configuration byte for byte, dockerd's pid);
- an unsigned commit: refused by every node (git's signature check), nothing changed;
- a signed commit changing a setting: applied by every node on its first run after the push;
- no two runs of a node overlapped (their start and end times), and two runs started at once on a node: one ran,
  the other said the lock was held;
- a drifted node (dockerd's runtime taken out of its configuration): the next run puts it back and its metrics say
  which concern drifted;
- ``pull_state: absent`` removes the timer or cron job, the program, its state and the environment; a second run
  changes nothing.

What each step measured (wall time from a push to every node applying it, each run's duration) is printed.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import REPO, lab, ok, sh

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prom  # noqa: E402
from pullsite import ANSIBLE_CORE, GATEWAY, ROLE_PLAY, new_site, role_vars  # noqa: E402

HOSTS = ("h1", "h2", "h3")
KINDS = "systemd,sysvinit,upstart"
STATE = "/var/lib/gpufleet-pull"
TEXTFILE = "/var/lib/prometheus/node-exporter"
SPLAY = 15
INTERVAL = 1
# What one phase may take at most: the interval, the splay, a run in progress and the applying run, on a busy
# machine; a phase that ends sooner ends sooner.
PHASE = 900


def ansible_playbook(play, inventory, workdir, extra, *options):
    path = os.path.join(workdir, "play.yml")
    with open(path, "w") as handle:
        handle.write(play)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".build" / "collections"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_STDOUT_CALLBACK="default")
    extra_file = os.path.join(workdir, "extra.json")
    with open(extra_file, "w") as handle:
        json.dump(extra, handle)
    argv = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", inventory, path, "-e", "@" + extra_file]
    return subprocess.run(argv + list(options), capture_output=True, text=True, timeout=1800, env=env, cwd=workdir)


def recap(output):
    return dict((m.group(1), (int(m.group(2)), int(m.group(3))))
                for m in re.finditer(r"^(\S+)\s+:\s+ok=\d+\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)",
                                     output, re.M))


def state(host):
    text = ok(host, "cat %s/last-run.json 2>/dev/null || echo null" % STATE)
    return json.loads(text)


def wait_for(predicate, what, deadline=PHASE):
    """Poll every host until ``predicate(host, state)`` holds for each; {host: state}."""
    end = time.monotonic() + deadline
    done = {}
    while True:
        for host in HOSTS:
            if host not in done:
                found = state(host)
                if found and predicate(host, found):
                    done[host] = found
        if len(done) == len(HOSTS):
            return done
        if time.monotonic() > end:
            logs = {h: sh(h, "tail -n 30 /var/log/gpufleet/pull.log").stdout for h in HOSTS if h not in done}
            pytest.fail("%s: not on %s after %d s; their logs' ends:\n%s" % (
                what, sorted(set(HOSTS) - set(done)), deadline, json.dumps(logs, indent=1)))
        time.sleep(3)


def first_run_after(found, pushed):
    runs = [run for run in found.get("history", []) if run["started"] >= pushed]
    return runs[0] if runs else None


def fingerprint(host):
    """The node's docker configuration's SHA-256 and dockerd's pid."""
    return ok(host, "sha256sum /etc/docker/daemon.json; cat /var/run/docker.pid 2>/dev/null || "
                    "pidof dockerd || true")


@pytest.fixture(scope="module")
def fleet(empty_lab):
    up = lab("up", "--hosts", str(len(HOSTS)), "--kinds", KINDS, timeout=1800)
    assert up.returncode == 0, up.stderr[-3000:]
    serve = lab("pull-serve", timeout=1800)
    assert serve.returncode == 0, serve.stdout + serve.stderr
    workdir = tempfile.mkdtemp(prefix="gpufleet-pull-")
    inventory = os.path.join(workdir, "inventory.yml")
    res = lab("inventory", "--output", inventory)
    assert res.returncode == 0, res.stderr
    try:
        yield workdir, inventory
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def test_pull_mode(fleet):
    workdir, inventory = fleet
    site, key, first, pushed = new_site(workdir)
    measured = {}

    role = role_vars(key, INTERVAL, SPLAY)
    # check mode on fresh hosts: it says what it would do and changes nothing
    check = ansible_playbook(ROLE_PLAY, inventory, workdir, role, "--check")
    assert check.returncode == 0, check.stdout[-6000:] + check.stderr[-3000:]
    assert all(changed > 0 for changed, _failed in recap(check.stdout).values()), check.stdout[-4000:]
    for host in HOSTS:
        left = ok(host, "ls -d /usr/sbin/gpufleet-pull /opt/gpufleet-pull /var/lib/gpufleet-pull "
                        "/etc/systemd/system/gpufleet-pull.timer /etc/cron.d/gpufleet-pull 2>/dev/null; true")
        assert left.strip() == "", (host, left)
    started = time.monotonic()
    run = ansible_playbook(ROLE_PLAY, inventory, workdir, role)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    measured["role, first run (s)"] = round(time.monotonic() - started, 1)
    installed = time.time()
    again = ansible_playbook(ROLE_PLAY, inventory, workdir, role)
    assert again.returncode == 0, again.stdout[-4000:]
    assert all(changed == 0 for changed, _failed in recap(again.stdout).values()), again.stdout[-4000:]
    for host in HOSTS:
        schedule = ok(host, "ls /etc/systemd/system/gpufleet-pull.timer /etc/cron.d/gpufleet-pull 2>/dev/null; "
                            "/opt/gpufleet-pull/venv/bin/ansible-pull --version | head -1")
        assert ("gpufleet-pull.timer" in schedule) == (host == "h1"), schedule
        assert ("/etc/cron.d/gpufleet-pull" in schedule) == (host != "h1"), schedule
        assert ANSIBLE_CORE.split("==")[1] in schedule
        assert ok(host, "python3 -c 'import ansible' 2>&1 || echo none").strip().endswith("none"), \
            "ansible-core went into the system Python"

    # 1. The first commit, by the timers and cron jobs alone.
    done = wait_for(lambda h, s: s.get("applied") == first, "the first commit applied")
    for host, found in done.items():
        applying = first_run_after(found, installed)
        assert applying is not None and applying["outcome"] in ("changed", "ok"), found
        assert found["drift"] and "docker" in found["drift"] and "persistenced" in found["drift"], found
        measured["%s: first commit, install to applied (s)" % host] = round(found["ended"] - installed, 1)
        measured["%s: first run (s)" % host] = round(applying["ended"] - applying["started"], 1)
        text = prom.scrape(GATEWAY.rsplit(".", 1)[0] + ".%d" % (10 + int(host[1:])))
        samples = list(prom.series(text, "gpufleet_last_run_timestamp_seconds").values())
        # node_exporter serves the textfile the runs write (a later run may have written it again since)
        assert len(samples) == 1 and samples[0] >= found["ended"] - 1e-3, (host, samples, found["ended"])
        rc, out = prom.check_metrics(ok(host, "cat %s/gpufleet_pull.prom" % TEXTFILE))
        assert rc == 0, out
        # the run's GPU health verdict, by the health checks' own writer (gpu_health in site.yml), beside it
        verdict = prom.series(text, "gpufleet_health_verdict")
        assert verdict and sum(verdict.values()) == 1, (host, verdict)
    before = dict((host, fingerprint(host)) for host in HOSTS)

    # 2. A signed commit whose playbook does not parse: refused everywhere, nothing changed.
    site.write("local.yml", "- import_playbook: gpufleet.nvidia.site\n  hosts: [unclosed\n")
    broken, pushed = site.commit("a broken playbook")
    done = wait_for(lambda h, s: (first_run_after(s, pushed) or {}).get("outcome") is not None,
                    "the broken commit's run")
    for host, found in done.items():
        assert first_run_after(found, pushed)["outcome"] == "refused", found
        assert "could not be parsed" in found["reason"] or found["outcome"] != "refused", found
        assert found["applied"] == first and found["fetched"] == broken
        assert fingerprint(host) == before[host]
        assert "could not be parsed" in ok(host, "cat /var/log/gpufleet/pull.log")

    # 3. An unsigned commit (a valid playbook): refused everywhere by git's signature check.
    site.write("local.yml", "- import_playbook: gpufleet.nvidia.site\n")
    unsigned, pushed = site.commit("not signed", signed=False)
    done = wait_for(lambda h, s: (first_run_after(s, pushed) or {}).get("outcome") is not None,
                    "the unsigned commit's run")
    for host, found in done.items():
        assert first_run_after(found, pushed)["outcome"] == "refused", found
        assert found["applied"] == first
        assert fingerprint(host) == before[host]
    for host in HOSTS:
        assert "Failed to verify GPG signature" in ok(host, "cat /var/log/gpufleet/pull.log"), host

    # 4. A signed commit changing a setting: every node applies it on its first run after the push.
    site.write("group_vars/gpu_nodes.yml", json.dumps(dict(site.settings, gpufleet_pull_marker=1), indent=1))
    good, pushed = site.commit("signed again")
    done = wait_for(lambda h, s: s.get("applied") == good, "the signed commit applied")
    for host, found in done.items():
        applying = first_run_after(found, pushed)
        assert applying["fetched"] == good and applying["outcome"] in ("ok", "changed"), found
        measured["%s: signed commit, push to applied (s)" % host] = round(applying["ended"] - pushed, 1)

    # 5. Runs never overlap: the history, and two runs started at once.
    out = ok("h2", "(/usr/sbin/gpufleet-pull --now --converge & /usr/sbin/gpufleet-pull --now --converge & wait)"
                   " 2>&1", timeout=900)
    assert "holds the lock" in out, out
    for host in HOSTS:
        history = state(host)["history"]
        for earlier, later in zip(history, history[1:]):
            assert earlier["ended"] <= later["started"], (host, earlier, later)

    # 6. Drift: dockerd's nvidia runtime taken out of its configuration; the next run puts it back.
    ok("h3", "python3 - <<'EOF'\nimport json\np='/etc/docker/daemon.json'\nd=json.load(open(p))\n"
             "d.get('runtimes', {}).pop('nvidia', None)\nopen(p,'w').write(json.dumps(d))\nEOF")
    ok("h3", "/usr/sbin/gpufleet-pull --now --converge >/dev/null 2>&1 || true", timeout=900)
    found = state("h3")
    assert found["outcome"] == "changed" and found["drift"]["docker"] is True, found
    assert "nvidia" in json.loads(ok("h3", "cat /etc/docker/daemon.json"))["runtimes"]
    metrics = ok("h3", "cat %s/gpufleet_pull.prom" % TEXTFILE)
    assert 'gpufleet_concern_drifted{concern="docker"} 1' in metrics, metrics

    # 7. Removal.
    gone = ansible_playbook(ROLE_PLAY, inventory, workdir, dict(role, pull_state="absent"))
    assert gone.returncode == 0, gone.stdout[-4000:]
    for host in HOSTS:
        left = ok(host, "ls -d /etc/systemd/system/gpufleet-pull.timer /etc/cron.d/gpufleet-pull /usr/sbin/"
                        "gpufleet-pull %s /opt/gpufleet-pull/venv %s/gpufleet_pull.prom 2>/dev/null; true"
                        % (STATE, TEXTFILE))
        assert left.strip() == "", (host, left)
    again = ansible_playbook(ROLE_PLAY, inventory, workdir, dict(role, pull_state="absent"))
    assert all(changed == 0 for changed, _failed in recap(again.stdout).values()), again.stdout[-4000:]
    print("\npull mode, measured:\n" + "\n".join("  %s: %s" % item for item in sorted(measured.items())))
