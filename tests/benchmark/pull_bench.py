#!/usr/bin/env python3
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pull mode at scale on the lab: what a fleet pass costs the controller, and what one pull run costs a node.

    .venv/bin/python tests/benchmark/pull_bench.py --hosts 32 --out docs/benchmark/pull-32

A fresh lab of ``--hosts`` Debian 12 hosts (``--kinds`` in turn: systemd, SysV and Upstart), the lab's git daemon
and wheelhouse (``lab pull-serve``), a site repository (tests/lab/pullsite.py: local.yml importing
gpufleet.nvidia.site, the lab's settings, this checkout's collection; signed commits), and the gpufleet.nvidia.pull
role pushed once to every host: every ``--interval`` minutes, splay ``--splay`` s, ``--only-if-changed``, commits
verified. Then:

1. The first pass: how long until every host applied the first commit (each host's first run converges it).
2. A fleet pass: a commit (a setting no concern reads), and until every host applied it: the wall time, the CPU of
   the controller's git daemon and what it ran (``git upload-pack`` per fetch: the daemon's own and reaped
   children's CPU, from /proc), which is all the controller does in pull mode, and the whole machine's busy CPU
   (the hosts share it). Each host's applying run must be its first run started after the push.
3. One converged pull run against the floor, on one host of each init system: ``gpufleet-pull --now --converge``
   (the checkout, then site.yml applied to the node, nothing to change) and ``ansible-playbook`` of
   ``ansible.builtin.ping`` on the node itself (the collection's ansible-core, the node's inventory, ``-c local``),
   ``--runs`` times each in turn, the timers stopped meanwhile: wall time and CPU (user + system of the run and its
   children, ``getrusage`` on the host), medians; and an ``unchanged`` run (``--only-if-changed`` with no new
   commit: the checkout alone), the steady cost between commits.

Writes ``pull.md`` and ``pull.json`` in ``--out``. Compare only numbers taken together: this machine's speed
changes through the day.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))
import fleet_bench  # noqa: E402  (the lab's inventory, ssh, the machine's description)
from pullsite import ROLE_PLAY, new_site, role_vars  # noqa: E402

STATE_JSON = os.path.join(ROOT, ".cache", "lab", "state.json")
PING_PLAY = """- name: One module round trip, on the node itself
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Ping
      ansible.builtin.ping:
"""
# On the host: run each command line in turn, --runs times, and print [[wall, cpu], ...] per command.
MEASURE = r"""
import json, resource, subprocess, sys, time
commands = json.loads(sys.argv[1])
runs = int(sys.argv[2])
out = [[] for _ in commands]
for _ in range(runs):
    for index, argv in enumerate(commands):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.monotonic()
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        wall = time.monotonic() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        if proc.returncode:
            sys.stderr.write(proc.stdout.decode()[-3000:])
            sys.exit("%s exited %d" % (argv, proc.returncode))
        out[index].append([wall, cpu])
print(json.dumps(out))
"""


def log(msg):
    fleet_bench.log(msg)


def git_daemon_cpu():
    """CPU seconds of the lab's git daemon and the children it reaped (upload-pack for every fetch)."""
    with open(STATE_JSON) as handle:
        state = json.load(handle)
    pids = [rec["proc"]["pid"] for key, rec in state.items()
            if key.startswith("pull") and isinstance(rec, dict) and isinstance(rec.get("proc"), dict)
            and "git" in key]
    total = 0.0
    for pid in pids:
        for proc in [pid] + children(pid):
            try:
                with open("/proc/%d/stat" % proc) as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return total


def children(pid):
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as handle:
                    if int(handle.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
                        found.extend(children(int(entry)))
            except OSError:
                continue
    return found


def states(hosts, hostvars):
    out = fleet_bench.on_all(hosts, hostvars, "cat /var/lib/gpufleet-pull/last-run.json 2>/dev/null || echo null")
    return {name: json.loads(text) for name, text in out.items()}


def first_after(state, pushed):
    runs = [run for run in (state or {}).get("history", []) if run["started"] >= pushed]
    return runs[0] if runs else None


def wait_applied(hosts, hostvars, commit, pushed, deadline):
    end = time.monotonic() + deadline
    while True:
        found = states(hosts, hostvars)
        done = {name: s for name, s in found.items() if s and s.get("applied") == commit}
        if len(done) == len(hosts):
            return done
        if time.monotonic() > end:
            raise RuntimeError("not applied after %d s on %s" % (deadline, sorted(set(hosts) - set(done))))
        time.sleep(5)


def median(values):
    return statistics.median(values) if values else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=32)
    parser.add_argument("--kinds", default="systemd,sysvinit,upstart")
    parser.add_argument("--interval", type=int, default=2)
    parser.add_argument("--splay", type=int, default=60)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmark", "pull-32"))
    parser.add_argument("--keep", action="store_true", help="leave the lab up")
    args = parser.parse_args()
    command = "tests/benchmark/pull_bench.py " + " ".join(sys.argv[1:])
    started_at = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    results = {"hosts": args.hosts, "interval_min": args.interval, "splay_s": args.splay}
    workdir = tempfile.mkdtemp(prefix="gpufleet-pull-bench-")
    log("lab up: %d hosts" % args.hosts)
    fleet_bench.run_lab("down")
    fleet_bench.run_lab("up", "--hosts", str(args.hosts), "--kinds", args.kinds)
    fleet_bench.run_lab("pull-serve")
    fleet_bench.run_lab("inventory")
    hosts, hostvars = fleet_bench.load_inventory()
    try:
        site, key, first, pushed = new_site(workdir)
        role = role_vars(key, args.interval, args.splay)
        with open(os.path.join(workdir, "extra.json"), "w") as handle:
            json.dump(role, handle)
        with open(os.path.join(workdir, "role.yml"), "w") as handle:
            handle.write(ROLE_PLAY)
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".build", "collections"),
                   ANSIBLE_NOCOLOR="1", ANSIBLE_FORKS=str(min(args.hosts, 32)), ANSIBLE_PIPELINING="True")
        log("the pull role on every host")
        start = time.monotonic()
        proc = subprocess.run([os.path.join(fleet_bench.VENV_BIN, "ansible-playbook"), "-i", fleet_bench.INVENTORY,
                               os.path.join(workdir, "role.yml"), "-e", "@" + os.path.join(workdir, "extra.json")],
                              capture_output=True, text=True, env=env, cwd=workdir)
        if proc.returncode:
            raise RuntimeError("the pull role failed:\n" + proc.stdout[-5000:])
        installed = time.time()
        results["role_push_s"] = round(time.monotonic() - start, 1)

        log("first pass: every host applies the first commit")
        done = wait_applied(hosts, hostvars, first, installed, 3600)
        results["first_pass_s"] = round(max(s["ended"] for s in done.values()) - installed, 1)
        results["first_runs_s"] = sorted(round(first_after(s, installed)["ended"] - first_after(s, installed)
                                               ["started"], 1) for s in done.values())

        fleet_bench.settle(120)
        log("a fleet pass: one commit")
        site.write("group_vars/gpu_nodes.yml", json.dumps(dict(site.settings, gpufleet_pull_marker=1), indent=1))
        git_before, busy_before = git_daemon_cpu(), fleet_bench.busy_cpu_seconds()
        commit, pushed = site.commit("a fleet pass")
        done = wait_applied(hosts, hostvars, commit, pushed, 3600)
        git_after, busy_after = git_daemon_cpu(), fleet_bench.busy_cpu_seconds()
        late = [name for name, s in done.items() if (first_after(s, pushed) or {}).get("fetched") != commit]
        results["pass"] = {
            "wall_s": round(max(s["ended"] for s in done.values()) - pushed, 1),
            "git_daemon_cpu_s": round(git_after - git_before, 2),
            "machine_busy_cpu_s": round(busy_after - busy_before, 1),
            "applied_by_first_run_after_push": len(done) - len(late), "late": late,
            "runs_s": sorted(round(first_after(s, pushed)["ended"] - first_after(s, pushed)["started"], 1)
                             for s in done.values()),
        }

        log("one converged pull run against a local ping, one host per init system")
        picked = {}
        for name in sorted(hosts, key=lambda n: int(n[1:])):
            picked.setdefault(hosts[name]["kind"], name)
        stop = ("systemctl stop gpufleet-pull.timer 2>/dev/null; rm -f /etc/cron.d/gpufleet-pull; "
                "while pgrep -f /usr/sbin/gpufleet-pull >/dev/null; do sleep 1; done\n")
        fleet_bench.on_all(hosts, hostvars, stop)
        fleet_bench.settle(120)
        per_host = {}
        for kind, name in sorted(picked.items()):
            script = ("cat > /root/ping.yml <<'EOF'\n%sEOF\n" % PING_PLAY
                      + "cat > /root/measure.py <<'EOF'\n%sEOF\n" % MEASURE
                      + "cd /root && python3 /root/measure.py '%s' %d\n" % (json.dumps([
                          ["/usr/sbin/gpufleet-pull", "--now", "--converge"],
                          ["/usr/sbin/gpufleet-pull", "--now"],
                          ["env", "LC_ALL=C.UTF-8", "ANSIBLE_NOCOLOR=1", "/opt/gpufleet-pull/venv/bin/ansible-playbook",
                           "-i", "/var/lib/gpufleet-pull/inventory.json", "--limit", name, "/root/ping.yml"]]),
                          args.runs))
            measured = json.loads(fleet_bench.ssh(hosts[name]["ip"], hostvars, script).strip().splitlines()[-1])
            converge, unchanged, ping = measured
            per_host[name] = {
                "kind": kind,
                "converged_run": {"wall_s": median([w for w, _c in converge]), "cpu_s": median([c for _w, c in converge])},
                "unchanged_run": {"wall_s": median([w for w, _c in unchanged]), "cpu_s": median([c for _w, c in unchanged])},
                "ping_playbook": {"wall_s": median([w for w, _c in ping]), "cpu_s": median([c for _w, c in ping])},
                "raw": measured,
            }
            for key in ("converged_run", "unchanged_run"):
                per_host[name][key]["wall_x_ping"] = round(per_host[name][key]["wall_s"] / per_host[name]
                                                           ["ping_playbook"]["wall_s"], 2)
                per_host[name][key]["cpu_x_ping"] = round(per_host[name][key]["cpu_s"] / per_host[name]
                                                          ["ping_playbook"]["cpu_s"], 2)
        results["per_node"] = per_host
    finally:
        if not args.keep:
            fleet_bench.run_lab("down")
    results["machine"] = fleet_bench.machine()
    results["date"] = "%s to %s (UTC)" % (started_at, time.strftime("%H:%M", time.gmtime()))
    results["command"] = command
    write(results, args.out)


def write(results, out):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "pull.json"), "w") as handle:
        json.dump(results, handle, indent=1, sort_keys=True)
    p = results["pass"]
    lines = ["# Pull mode at %d hosts" % results["hosts"], "",
             "Generated by `tests/benchmark/pull_bench.py`.", "",
             "- Command: `.venv/bin/python %s`" % results["command"],
             "- Date: %s" % results["date"], "- Machine: %s" % results["machine"],
             "- Every host: the gpufleet.nvidia.pull role (ansible-core 2.19.14 from the lab's wheelhouse), every %d "
             "min, splay %d s, `--only-if-changed`, commits verified (signed with a key of the site's)."
             % (results["interval_min"], results["splay_s"]), "",
             "## The fleet", "",
             "| what | value |", "|---|---|",
             "| the role pushed to every host (ansible-core into its venv, program, timer or cron job) | %.1f s |"
             % results["role_push_s"],
             "| first pass: until every host applied the first commit (each converging itself from fresh) | %.1f s |"
             % results["first_pass_s"],
             "| a first run, per host: median (min-max) | %.1f s (%.1f-%.1f) |" % (
                 median(results["first_runs_s"]), min(results["first_runs_s"]), max(results["first_runs_s"])),
             "| a fleet pass after a commit: until every host applied it | %.1f s |" % p["wall_s"],
             "| hosts that applied it on their first run started after the push | %d of %d |"
             % (p["applied_by_first_run_after_push"], results["hosts"]),
             "| the controller's CPU for the pass (its git daemon and the upload-packs it ran) | %.2f s (%.3f s a host) |"
             % (p["git_daemon_cpu_s"], p["git_daemon_cpu_s"] / results["hosts"]),
             "| the whole machine's busy CPU meanwhile (the hosts' runs share it) | %.1f s |" % p["machine_busy_cpu_s"],
             "", "## One node: a pull run against a local ping", "",
             "Medians of the runs, each taken in turn on the node; CPU is user + system of the command and its "
             "children on the node.", "",
             "| host | init | converged pull run wall s / CPU s | x ping (wall / CPU) | unchanged run (no new commit) "
             "wall s / CPU s | x ping | ansible-playbook ping, local: wall s / CPU s |",
             "|---|---|---|---|---|---|---|"]
    for name, r in sorted(results["per_node"].items()):
        c, u, g = r["converged_run"], r["unchanged_run"], r["ping_playbook"]
        lines.append("| %s | %s | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f |" % (
            name, r["kind"], c["wall_s"], c["cpu_s"], c["wall_x_ping"], c["cpu_x_ping"], u["wall_s"], u["cpu_s"],
            u["wall_x_ping"], u["cpu_x_ping"], g["wall_s"], g["cpu_s"]))
    with open(os.path.join(out, "pull.md"), "w") as handle:
        handle.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
