#!/usr/bin/env python3
"""Benchmark: playbooks/site.yml vs a conventional task-per-step baseline on lab fleets.

For each fleet size (default 4, 16 and 32 hosts, init-system kinds handed out in turn), the
benchmark brings up a fresh lab fleet (tests/lab) for each playbook, starts a canary container
on every host and installs the baseline's nvidia-smi stand-in (outside the timed runs), then runs
the playbook twice (first converge, then the no-op re-run) with the same Ansible settings for
both: forks = fleet size (capped), pipelining on, the lab's inventory. Measured per run:

* wall time of ansible-playbook, and the machine's CPU seconds (controller and lab hosts share
  this machine, so /proc/stat's busy time is the whole cost of the run);
* module invocations per host (callback_plugins/bench_count.py: task results that ran a module
  on the host, loop items one by one) and SSH round trips per host (ssh/sftp/scp processes the
  connection plugin started, counted by a logging wrapper);
* tasks reported changed;
* dockerd restarts (new "Daemon has completed initialization" lines in dockerd's log: journald
  on systemd hosts, /var/log/docker.log on SysV ones) and reloads (new "Got signal to reload
  configuration" lines), dockerd pid changes;
* hosts whose canary container is no longer running, hosts where dockerd lists the nvidia runtime,
  hosts where a persistence daemon runs.

It prints a table and writes docs/benchmark/results.md, results.json and fleet.png. It is a
measurement, not a test: it exits 0 unless a run could not be measured (or --strict and a target
is missed). Run as root from the repository root, with the lab built (tests/lab/README.md):

    .venv/bin/python tests/benchmark/fleet_bench.py [--sizes 4,16,32] [--gpus 4]

The lab is taken down before each fleet and after the last one.
"""

import argparse
import base64
import datetime
import json
import math
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "tests", "benchmark")
VENV_BIN = os.path.join(ROOT, ".venv", "bin")
LAB = [os.path.join(VENV_BIN, "python"), os.path.join(ROOT, "tests", "lab", "lab")]
INVENTORY = os.path.join(ROOT, ".cache", "lab", "inventory.yml")
PLAYBOOKS = {
    "site.yml": os.path.join(ROOT, "playbooks", "site.yml"),
    "baseline": os.path.join(HERE, "baseline", "site.yml"),
}
STAND_IN = os.path.join(HERE, "baseline", "files", "nvidia-smi")

# What molecule/site/prepare.yml does, plus the baseline's nvidia-smi stand-in (the driver
# package would have installed nvidia-smi on a real host, so it is not part of the timed runs).
PREPARE = """set -eu
base64 -d > /usr/local/bin/nvidia-smi <<'B64'
{stand_in}
B64
chmod 0755 /usr/local/bin/nvidia-smi
/usr/lib/gpufleet-lab/load-image gpufleet/busybox:lab > /dev/null
""" + "{canary}"

# A long-running container that must survive every run (it ignores SIGTERM).
CANARY = """i=0
until docker info > /dev/null 2>&1 || [ "$i" -ge 120 ]; do sleep 0.5; i=$((i + 1)); done
# A host that has just booted may refuse containers for a while (a cgroup v1 hierarchy not yet
# writable: "read-only file system", seen for more than 10 s): tries for 30 s, then the error.
for try in $(seq 1 15); do
    docker rm -f gpufleet-canary > /dev/null 2>&1 || true
    if docker run -d --name gpufleet-canary --network none gpufleet/busybox:lab /bin/busybox sleep 1000000 > /dev/null; then
        break
    fi
    [ "$try" -lt 15 ] || exit 1
    sleep 2
done
"""

PROBE = r"""
if [ -d /run/systemd/system ]; then journalctl --sync 2>/dev/null; log=$(journalctl -u docker -o cat --no-pager 2>/dev/null)
else log=$(cat /var/log/docker.log 2>/dev/null); fi
echo "pid=$(pidof dockerd || true)"
echo "starts=$(printf '%s\n' "$log" | grep -c 'Daemon has completed initialization')"
echo "reloads=$(printf '%s\n' "$log" | grep -c 'Got signal to reload configuration')"
echo "canary=$(docker inspect -f '{{.State.Running}}' gpufleet-canary 2>/dev/null || echo missing)"
echo "runtimes=$(docker info -f '{{range $k, $v := .Runtimes}}{{$k}} {{end}}' 2>/dev/null)"
p=$(cat /var/run/nvidia-persistenced/nvidia-persistenced.pid 2>/dev/null || true)
if [ -n "$p" ] && [ -d "/proc/$p" ]; then echo "persistenced=$p"; else echo "persistenced="; fi
"""

COUNTER = """#!/bin/sh
printf '%s %s\\n' "{tool}" "$*" >> "$BENCH_SSH_LOG"
exec {real} "$@"
"""

ANSIBLE_CFG = """[defaults]
inventory = {inventory}
forks = {forks}
host_key_checking = True
callbacks_enabled = bench_count
callback_plugins = {callbacks}
collections_path = {collections}
retry_files_enabled = False
nocolor = True

[ssh_connection]
pipelining = True
ssh_executable = {bin}/ssh
sftp_executable = {bin}/sftp
scp_executable = {bin}/scp
control_path_dir = {cp}
"""


def log(msg):
    sys.stderr.write("[%s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


def run_lab(*args):
    started = time.monotonic()
    proc = subprocess.run(LAB + list(args), cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError("lab %s failed (rc %d): %s" % (" ".join(args), proc.returncode, proc.stderr[-2000:]))
    return time.monotonic() - started


def load_inventory():
    with open(INVENTORY) as handle:
        inv = yaml.safe_load(handle)
    group = inv["all"]["children"]["gpu_nodes"]
    hosts = {name: {"ip": h["ansible_host"], "kind": h["lab_kind"], "gpus": len(h["lab_gpus"])}
             for name, h in group["hosts"].items()}
    return hosts, group["vars"]


def ssh(ip, hostvars, script):
    cmd = ["ssh", "-i", hostvars["ansible_ssh_private_key_file"], "-o", "BatchMode=yes",
           "-o", "ConnectTimeout=20", "-o", "ControlMaster=no"]
    cmd += hostvars["ansible_ssh_common_args"].split()
    cmd += ["root@" + ip, "sh -s"]
    proc = subprocess.run(cmd, input=script, capture_output=True, text=True, timeout=300)
    if proc.returncode:
        raise RuntimeError("ssh %s failed (rc %d): %s" % (ip, proc.returncode, proc.stderr[-1000:]))
    return proc.stdout


def on_all(hosts, hostvars, script):
    with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
        futures = {name: pool.submit(ssh, h["ip"], hostvars, script) for name, h in hosts.items()}
        return {name: f.result() for name, f in futures.items()}


def probe(hosts, hostvars):
    out = {}
    for name, text in on_all(hosts, hostvars, PROBE).items():
        fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
        out[name] = {"pid": fields.get("pid", ""), "starts": int(fields.get("starts") or 0),
                     "reloads": int(fields.get("reloads") or 0), "canary": fields.get("canary", ""),
                     "runtimes": fields.get("runtimes", "").split(),
                     "persistenced": fields.get("persistenced", "")}
    return out


def settle(limit=30.0, busy_below=0.15):
    """Wait (at most ``limit`` s) until the machine is nearly idle: freshly booted hosts are still busy."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        before = busy_cpu_seconds()
        time.sleep(0.5)
        if (busy_cpu_seconds() - before) / 0.5 / os.cpu_count() < busy_below:
            return
    log("the machine did not settle below %d%% busy in %d s" % (busy_below * 100, limit))


def busy_cpu_seconds():
    with open("/proc/stat") as handle:
        fields = [int(x) for x in handle.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def count_round_trips(path, hosts):
    ip_to_name = {h["ip"]: name for name, h in hosts.items()}
    counts = {name: 0 for name in hosts}
    if os.path.exists(path):
        with open(path) as handle:
            for line in handle:
                if " -O " in line:  # control-master housekeeping, not a round trip
                    continue
                match = re.search(r"10\.250\.0\.\d+", line)
                if match and match.group(0) in ip_to_name:
                    counts[ip_to_name[match.group(0)]] += 1
    return counts


def write_tools(workdir, forks):
    bindir = os.path.join(workdir, "bin")
    os.makedirs(bindir, exist_ok=True)
    for tool in ("ssh", "sftp", "scp"):
        path = os.path.join(bindir, tool)
        with open(path, "w") as handle:
            handle.write(COUNTER.format(tool=tool, real=shutil.which(tool) or "/usr/bin/" + tool))
        os.chmod(path, 0o755)
    cp_dir = os.path.join(workdir, "cp")
    os.makedirs(cp_dir, exist_ok=True)
    cfg = os.path.join(workdir, "ansible.cfg")
    with open(cfg, "w") as handle:
        handle.write(ANSIBLE_CFG.format(
            inventory=INVENTORY, forks=forks, callbacks=os.path.join(HERE, "callback_plugins"),
            collections=os.path.join(ROOT, ".build", "collections"), bin=bindir, cp=cp_dir))
    return cfg, cp_dir


def close_masters(cp_dir):
    for name in os.listdir(cp_dir):
        subprocess.run(["ssh", "-o", "ControlPath=" + os.path.join(cp_dir, name), "-O", "exit", "lab"],
                       capture_output=True, timeout=30)


def run_playbook(playbook, cfg, workdir, tag, hosts, extra=(), collections=None):
    count_out = os.path.join(workdir, tag + ".count.json")
    ssh_log = os.path.join(workdir, tag + ".ssh.log")
    env = dict(os.environ, ANSIBLE_CONFIG=cfg, BENCH_COUNT_OUT=count_out, BENCH_SSH_LOG=ssh_log,
               PATH=VENV_BIN + os.pathsep + os.environ.get("PATH", ""), ANSIBLE_FORCE_COLOR="0")
    if collections:  # another tree of the collection (--first-ref): it wins over ansible.cfg's path
        env["ANSIBLE_COLLECTIONS_PATH"] = collections
    cpu0 = busy_cpu_seconds()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    with open(os.path.join(workdir, tag + ".log"), "w") as out:
        proc = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), playbook] + list(extra), cwd=ROOT, env=env,
                              stdout=out, stderr=subprocess.STDOUT)
    wall = time.monotonic() - started
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = busy_cpu_seconds() - cpu0
    counts = {"hosts": {}, "tasks": []}
    if os.path.exists(count_out):
        with open(count_out) as handle:
            counts = json.load(handle)
    trips = count_round_trips(ssh_log, hosts)
    n = len(hosts)
    per_host = counts["hosts"]
    return {
        "rc": proc.returncode, "wall": wall, "machine_cpu": cpu,
        "controller_cpu": (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime),
        "modules_per_host": sum(h["modules"] for h in per_host.values()) / n,
        "round_trips_per_host": sum(trips.values()) / n,
        "changed": sum(h["changed"] for h in per_host.values()),
        "failed": sum(h["failed"] for h in per_host.values()),
        "task_seconds_per_host": _task_means(per_host, n),
        "tasks": counts["tasks"],
    }


def _task_means(per_host, n):
    totals = {}
    for data in per_host.values():
        for task, secs in data["tasks"].items():
            totals[task] = totals.get(task, 0.0) + secs
    return {task: round(secs / n, 3) for task, secs in sorted(totals.items(), key=lambda kv: -kv[1])}


def track(history, state):
    """Per host, restarts so far: new start lines in dockerd's log, at least the new pids seen.

    The pid floor covers a start line that reached the journal only after the probe (journald
    lags on a loaded machine; the line then shows up in the next probe and is not counted twice).
    """
    for name, now in state.items():
        seen = history.setdefault(name, {"first_starts": now["starts"], "pids": [now["pid"]], "restarts": 0})
        if now["pid"] not in seen["pids"]:
            seen["pids"].append(now["pid"])
        seen["restarts"] = max(now["starts"] - seen["first_starts"], len(seen["pids"]) - 1)
    return {name: h["restarts"] for name, h in history.items()}


def docker_delta(before, after, restarts_before, restarts_after):
    return {"restarts": sum(restarts_after[h] - restarts_before[h] for h in before),
            "reloads": sum(after[h]["reloads"] - before[h]["reloads"] for h in before),
            "pid_changed": sum(1 for h in before if before[h]["pid"] != after[h]["pid"])}


def bench_fleet(name, size, args, workroot):
    workdir = os.path.join(workroot, "%s-%d" % ("site" if name == "site.yml" else name, size))
    os.makedirs(workdir, exist_ok=True)
    up = run_lab("up", "--hosts", str(size), "--kinds", args.kinds, "--gpus", args.gpus, "--seed", args.seed)
    hosts, hostvars = load_inventory()
    log("%s, %d hosts: lab up in %.1f s; preparing canaries" % (name, size, up))
    with open(STAND_IN, "rb") as handle:
        stand_in = base64.encodebytes(handle.read()).decode()
    on_all(hosts, hostvars, PREPARE.format(stand_in=stand_in.strip(), canary=CANARY))
    cfg, cp_dir = write_tools(workdir, min(size, args.forks_cap))
    result = {"playbook": name, "hosts": size, "forks": min(size, args.forks_cap),
              "kinds": sorted({h["kind"] for h in hosts.values()})}
    try:
        history = {}
        state0 = probe(hosts, hostvars)
        restarts0 = track(history, state0)
        for tag in ("first", "rerun"):
            settle()
            log("%s, %d hosts: %s run" % (name, size, tag))
            run = run_playbook(PLAYBOOKS[name], cfg, workdir, tag, hosts)
            state1 = probe(hosts, hostvars)
            restarts1 = track(history, state1)
            run["docker"] = docker_delta(state0, state1, restarts0, restarts1)
            restarts0 = restarts1
            run["canary_down"] = sum(1 for h in state1.values() if h["canary"] != "true")
            run["nvidia_runtime"] = sum(1 for h in state1.values() if "nvidia" in h["runtimes"])
            run["persistenced"] = sum(1 for h in state1.values() if h["persistenced"])
            log("%s, %d hosts: %s run %.1f s rc %d, %d changed, docker %s, canaries down %d" % (
                name, size, tag, run["wall"], run["rc"], run["changed"], run["docker"], run["canary_down"]))
            result[tag] = run
            state0 = state1
    finally:
        started = time.monotonic()
        close_masters(cp_dir)
        try:  # a canary ignores SIGTERM, so dockerd's shutdown would wait 10 s for it
            on_all(hosts, hostvars, "docker rm -f gpufleet-canary > /dev/null 2>&1 || true")
        except RuntimeError as exc:
            log(str(exc))
        down = run_lab("down")
        log("%s, %d hosts: control masters and canaries gone in %.1f s, lab down in %.1f s" % (
            name, size, time.monotonic() - started - down, down))
    return result


# The paired mode's no-op variants, run in turn on one converged fleet: name -> (playbook, extra arguments).
PAIRED = {
    "site.yml": (PLAYBOOKS["site.yml"], []),
    "site.yml, every module": (PLAYBOOKS["site.yml"], ["-e", "gpu_node_evaluate_first=false"]),
    "baseline": (PLAYBOOKS["baseline"], []),
    "drift.yml": (os.path.join(ROOT, "playbooks", "drift.yml"), []),
    # not a target: one module round trip per host and nothing else, the least a converged host can cost
    "floor (one ping per host)": (os.path.join(HERE, "floor.yml"), []),
}
FLOOR = "floor (one ping per host)"
# --paired-variants' short keys -> PAIRED's names.
PAIRED_KEYS = {"site": "site.yml", "every": "site.yml, every module", "baseline": "baseline", "drift": "drift.yml",
               "floor": FLOOR}
# What each variant is, for the report's head.
PAIRED_ABOUT = {
    "site.yml": "`site.yml` (node_state first, a concern only where it drifted)",
    "site.yml, every module": "`site.yml, every module` (`-e gpu_node_evaluate_first=false`: every concern's module "
                              "every run, as site.yml did before node_state)",
    "baseline": "`baseline` (the task-per-step playbook)",
    "drift.yml": "`drift.yml` (the drift report)",
    FLOOR: "`floor (one ping per host)` (`tests/benchmark/floor.yml`, not a target: one module round trip per host and "
           "nothing else, the least a converged host can cost on this lab)",
}


def paired_variants(args, reference=None):
    """The paired mode's no-op variants for ``args``: name -> (playbook, extra arguments, collections path or None).
    ``--paired-variants``' choice in PAIRED's order, then, with ``--paired-ref`` (``reference``, as
    ``reference_tree`` returns it), that commit's site.yml and drift.yml, run on site.yml's hosts."""
    keys = args.paired_variants.split(",") if args.paired_variants else list(PAIRED_KEYS)
    chosen = set(PAIRED_KEYS[key] for key in keys)
    variants = dict((name, (playbook, list(extra), None)) for name, (playbook, extra) in PAIRED.items()
                    if name in chosen)
    if reference:
        label, site, collections = reference
        variants[label] = (site, [], collections)
        variants[label.replace("site.yml", "drift.yml", 1)] = (
            os.path.join(os.path.dirname(site), "drift.yml"), [], collections)
    return variants


def is_drift(name):
    """Whether the variant ``name`` is a drift.yml (today's or a reference commit's)."""
    return name == "drift.yml" or name.startswith("drift.yml at ")


def round_order(names, round_no):
    """Round ``round_no``'s order of the variants: it starts two variants further on each round and steps through
    the list by 1, 2, 3 ... (steps prime to the count): a plain rotation would keep every variant after the same
    one in every round (drift.yml after the baseline, say). With the five variants, in three rounds no variant
    runs after the same one twice."""
    count = len(names)
    steps = [step for step in range(1, count) if math.gcd(step, count) == 1] or [1]
    step = steps[round_no % len(steps)]
    start = (2 * round_no) % count
    return [names[(start + i * step) % count] for i in range(count)]


def reference_tree(commit, workroot):
    """The collection as it was at ``commit``, unpacked from ``git archive`` (the repository is left as it is):
    ``(label, its playbooks/site.yml, a collections path holding it)``."""
    sha = subprocess.run(["git", "-C", ROOT, "rev-parse", "--verify", commit + "^{commit}"], capture_output=True,
                         text=True, check=True).stdout.strip()
    base = os.path.join(workroot, "ref-" + sha[:12])
    src = os.path.join(base, "src")
    os.makedirs(src)
    archive = subprocess.run(["git", "-C", ROOT, "archive", sha], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
    namespace = os.path.join(base, "collections", "ansible_collections", "gpufleet")
    os.makedirs(namespace)
    os.symlink(src, os.path.join(namespace, "nvidia"))
    return "site.yml at %s" % sha[:7], os.path.join(src, "playbooks", "site.yml"), os.path.join(base, "collections")


def dealt_parts(hosts, count):
    """The lab's hosts in ``count`` parts of one size, each kind dealt out in turn so that every part gets
    about as many hosts of each kind."""
    ordered = sorted(hosts, key=lambda name: (hosts[name]["kind"], int(re.sub(r"\D", "", name) or 0)))
    return [ordered[i::count] for i in range(count)]


def bench_first_runs(size, args, workroot, reference):
    """First runs on fresh hosts, ``args.first_runs`` rounds: per round a fresh lab of one part of ``size`` hosts
    per variant (site.yml; site.yml running every module; with ``--first-ref``, the site.yml of that commit), each
    variant's first run on its own part, in the round's order (``round_order``), the parts handed to the variants
    in turn from round to round."""
    variants = [("site.yml", PLAYBOOKS["site.yml"], [], None),
                ("site.yml, every module", PLAYBOOKS["site.yml"], ["-e", "gpu_node_evaluate_first=false"], None)]
    if reference:
        variants.append((reference[0], reference[1], [], reference[2]))
    names = [v[0] for v in variants]
    result = {"hosts": size, "forks": min(size, args.forks_cap), "rounds": args.first_runs,
              "runs": dict((name, []) for name in names)}
    attempts = 0
    for round_no in range(args.first_runs):
        workdir = os.path.join(workroot, "first-runs-%d" % size, "r%d" % round_no)
        os.makedirs(workdir, exist_ok=True)
        # A lab that will not come up or take its canaries: that round once more on a fresh lab, then the error.
        for attempt in (1, 2):
            try:
                up = run_lab("up", "--hosts", str(len(variants) * size), "--kinds", args.kinds, "--gpus", args.gpus,
                             "--seed", args.seed)
                hosts, hostvars = load_inventory()
                with open(STAND_IN, "rb") as handle:
                    stand_in = base64.encodebytes(handle.read()).decode()
                on_all(hosts, hostvars, PREPARE.format(stand_in=stand_in.strip(), canary=CANARY))
                break
            except RuntimeError as exc:
                run_lab("down")
                attempts += 1
                log("first runs, %d hosts: round %d, lab not ready (try %d): %s" % (size, round_no + 1, attempt,
                                                                                   str(exc)[-300:]))
                if attempt == 2:
                    raise
        parts = dealt_parts(hosts, len(variants))
        log("first runs, %d hosts a part: round %d, lab of %d up in %.1f s" % (size, round_no + 1, len(hosts), up))
        cfg, cp_dir = write_tools(workdir, min(size, args.forks_cap))
        try:
            history = {}
            state0 = probe(hosts, hostvars)
            restarts0 = track(history, state0)
            for name in round_order(names, round_no):
                index = names.index(name)
                unused, playbook, extra, collections = variants[index]
                members = dict((n, hosts[n]) for n in parts[(index + round_no) % len(parts)])
                settle()
                run = run_playbook(playbook, cfg, workdir, re.sub(r"\W+", "-", name), members,
                                   ["--limit", ",".join(sorted(members))] + extra, collections=collections)
                state1 = probe(hosts, hostvars)
                restarts1 = track(history, state1)
                run["docker"] = docker_delta(dict((h, state0[h]) for h in members), state1, restarts0, restarts1)
                run["canary_down"] = sum(1 for h in members if state1[h]["canary"] != "true")
                run["kinds"] = dict((kind, sum(1 for h in members.values() if h["kind"] == kind))
                                    for kind in sorted({h["kind"] for h in members.values()}))
                run.pop("tasks")
                result["runs"][name].append(run)
                log("first runs, %d hosts: round %d %s %.1f s rc %d, docker %s, canaries down %d" % (
                    size, round_no + 1, name, run["wall"], run["rc"], run["docker"], run["canary_down"]))
                state0, restarts0 = state1, restarts1
        finally:
            close_masters(cp_dir)
            run_lab("down")
    result["labs_retried"] = attempts
    return result


def first_runs_report(results):
    """The first runs' table and verdicts (markdown lines), and whether the target is met everywhere."""
    lines = ["| hosts | variant | wall s, median (min-max) | s/host | vs site.yml (per-round ratio, median (min-max)) "
             "| controller CPU s/host | machine CPU s/host | modules/host | dockerd restarts | canaries down | rc |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    verdicts, ok_all = [], True
    for r in results:
        n, site = r["hosts"], r["runs"]["site.yml"]
        for name, runs in r["runs"].items():
            walls = [x["wall"] for x in runs]
            ratios = [x["wall"] / s["wall"] for x, s in zip(runs, site)]
            lines.append("| %d | %s | %s (%s-%s) | %s | %s | %s | %s | %s | %d | %d | %s |" % (
                n, name, fmt(median(walls)), fmt(min(walls)), fmt(max(walls)), fmt(median(walls) / n, 2),
                "-" if name == "site.yml" else "%sx (%s-%s)" % (fmt(median(ratios), 2), fmt(min(ratios), 2),
                                                                fmt(max(ratios), 2)),
                fmt(median([x["controller_cpu"] for x in runs]) / n, 2),
                fmt(median([x["machine_cpu"] for x in runs]) / n, 2), fmt(median([x["modules_per_host"] for x in runs])),
                sum(x["docker"]["restarts"] for x in runs), sum(x["canary_down"] for x in runs),
                ",".join(str(x["rc"]) for x in runs)))
            if name != "site.yml":
                # "no slower": site.yml's time over the other's, per round, median at most 1; a target against the
                # reference commit only
                slower = median([1 / ratio for ratio in ratios])
                if name.startswith("site.yml at "):
                    ok = slower <= 1.0
                    ok_all &= ok
                    verdict = ("met" if ok else "MISSED") + ": target <= 1"
                else:
                    verdict = "for reference, not a target: the same code with node_state left out"
                verdicts.append("- %d hosts: site.yml's first run takes %sx the time of %s's (%s)." % (
                    n, fmt(slower, 2), name, verdict))
        ok = all(x["docker"]["restarts"] == 0 and x["canary_down"] == 0 for x in site)
        ok_all &= ok
        verdicts.append("- %d hosts: site.yml's first runs: %d dockerd restarts, %d canaries down (%s; target 0)." % (
            n, sum(x["docker"]["restarts"] for x in site), sum(x["canary_down"] for x in site),
            "met" if ok else "MISSED"))
    return lines, verdicts, ok_all


def report_head(title, generated, command, started, finished):
    """The first lines of every report: its title, how it was made, the command, the date and the machine."""
    return ["# " + title, "", generated, "",
            "- Command: `%s`" % command,
            "- Date: %s to %s (UTC)" % (started.strftime("%Y-%m-%d %H:%M"), finished.strftime("%H:%M")),
            "- Machine: %s" % machine()]


def write_files(outdir, name, md, data):
    """``name``.md (the lines ``md``) and ``name``.json (``data``) in ``outdir``."""
    with open(os.path.join(outdir, name + ".md"), "w") as handle:
        handle.write("\n".join(md))
    with open(os.path.join(outdir, name + ".json"), "w") as handle:
        json.dump(data, handle, indent=1)


def write_first_runs(results, args, command, started, finished, outdir):
    table, verdicts, unused = first_runs_report(results)
    md = report_head("Fleet benchmark: first runs on fresh hosts",
                     "Generated by `tests/benchmark/fleet_bench.py --first-runs %d`." % args.first_runs,
                     command, started, finished) + [
          "- Per size N and round, a fresh lab of one part of N hosts per variant (kinds `%s` handed out in turn, each "
          "kind dealt out evenly over the parts, %s GPUs per host, seed %s; forks = N, cap %d), canaries started, "
          "then each variant's first run on its own part (`--limit`), in the round's order (as in the paired mode: no "
          "variant always first, last or after the same one); from round to round the variants take the parts in "
          "turn." % (args.kinds, args.gpus, args.seed, args.forks_cap),
          "- Variants: `site.yml` (node_state first: on a fresh host every concern drifted, so it runs them all after "
          "one more round trip); `site.yml, every module` (`-e gpu_node_evaluate_first=false`, the same code without "
          "node_state); %s." % (
              "`%s` (the collection's site.yml as it was at that commit, unpacked from `git archive`: the first run "
              "the target compares with)" % args.first_ref_label if args.first_ref else "no reference commit"), "",
          "## Results", ""] + table + [
          "", "*vs site.yml*: per round, the variant's wall time over site.yml's. *controller CPU* is the user+system "
          "CPU of ansible-playbook and its children; *machine CPU* the whole machine's busy time (controller and lab "
          "hosts share it).", "", "## Target: the first run no slower than before node_state", ""] + verdicts + [""]
    write_files(outdir, "first-runs", md, {"command": command, "started": started.isoformat(),
                                           "reference": args.first_ref, "results": results})


def bench_paired(size, args, workroot, reference=None):
    """One fresh lab of ``size`` hosts a part: the site part for site.yml and its variants (with ``--paired-ref``, the
    reference commit's site.yml and drift.yml too), with the baseline a baseline part (which would rewrite site.yml's
    units and daemon.json if they shared hosts), and up to ``--first-compare-max`` hosts with ``site.yml, every
    module`` a third part for that variant's first run. Each part's first run, then ``args.paired`` rounds of every
    no-op variant, each round in its own order (``round_order``), so that no variant always runs first, last or after
    the same variant.
    """
    variants = paired_variants(args, reference)
    workdir = os.path.join(workroot, "paired-%d" % size)
    os.makedirs(workdir, exist_ok=True)
    part_names = []
    if any(name != "baseline" for name in variants):
        part_names.append("site")
    if "baseline" in variants:
        part_names.append("baseline")
    # Up to --first-compare-max hosts, a third part of the lab has today's first run without node_state
    # (gpu_node_evaluate_first=false) on fresh hosts, to hold site.yml's first run against it.
    if "site.yml, every module" in variants and size <= args.first_compare_max:
        part_names.append("every module")
    up = run_lab("up", "--hosts", str(len(part_names) * size), "--kinds", args.kinds, "--gpus", args.gpus,
                 "--seed", args.seed)
    hosts, hostvars = load_inventory()
    names_sorted = sorted(hosts, key=lambda name: int(re.sub(r"\D", "", name) or 0))
    halves = dict((part, dict((n, hosts[n]) for n in names_sorted[i * size:(i + 1) * size]))
                  for i, part in enumerate(part_names))
    limit = dict((half, ["--limit", ",".join(sorted(members))]) for half, members in halves.items())
    log("paired, %d hosts a part (%s): lab of %d up in %.1f s; preparing canaries" % (
        size, ", ".join(part_names), len(hosts), up))
    with open(STAND_IN, "rb") as handle:
        stand_in = base64.encodebytes(handle.read()).decode()
    on_all(hosts, hostvars, PREPARE.format(stand_in=stand_in.strip(), canary=CANARY))
    cfg, cp_dir = write_tools(workdir, min(size, args.forks_cap))
    result = {"hosts": size, "forks": min(size, args.forks_cap), "rounds": args.paired,
              "kinds": {half: sorted({h["kind"] for h in members.values()}) for half, members in halves.items()},
              "parts": part_names, "reference": reference[0][len("site.yml at "):] if reference else None,
              "runs": dict((name, []) for name in variants)}
    try:
        history = {}
        state0 = probe(hosts, hostvars)
        restarts0 = track(history, state0)
        firsts = [("site", PLAYBOOKS["site.yml"], []), ("every module", PLAYBOOKS["site.yml"],
                                                       ["-e", "gpu_node_evaluate_first=false"]),
                  ("baseline", PLAYBOOKS["baseline"], [])]
        for half, playbook, extra in firsts:
            if half not in halves:
                continue
            members = halves[half]
            settle()
            first = run_playbook(playbook, cfg, workdir, "first-" + half.replace(" ", "-"), members,
                                 limit[half] + extra)
            state1 = probe(hosts, hostvars)
            restarts1 = track(history, state1)
            first["docker"] = docker_delta(dict((h, state0[h]) for h in members), state1, restarts0, restarts1)
            first["canary_down"] = sum(1 for h in members if state1[h]["canary"] != "true")
            first.pop("tasks")
            first.pop("task_seconds_per_host")
            result[{"site": "first", "baseline": "baseline_first", "every module": "every_module_first"}[half]] = first
            log("paired, %d hosts: %s's first run %.1f s rc %d, docker %s, canaries down %d" % (
                size, half, first["wall"], first["rc"], first["docker"], first["canary_down"]))
            state0, restarts0 = state1, restarts1
        # The baseline's restarts stopped its half's canaries: new ones, and the no-op rounds start.
        if "baseline" in halves:
            on_all(halves["baseline"], hostvars, CANARY)
        state1 = probe(hosts, hostvars)
        restarts1 = track(history, state1)
        names = list(variants)
        for round_no in range(args.paired):
            order = round_order(names, round_no)
            for name in order:
                playbook, extra, collections = variants[name]
                half = "baseline" if name == "baseline" else "site"
                settle()
                tag = "r%d-%s" % (round_no, name.replace(" ", "").replace(",", "-"))
                extra = extra + limit[half] + (["-e", "gpufleet_drift_report=%s" % os.path.join(workdir, tag + ".json")]
                                               if is_drift(name) else [])
                run = run_playbook(playbook, cfg, workdir, tag, halves[half], extra, collections=collections)
                run.pop("tasks")
                run.pop("task_seconds_per_host")
                result["runs"][name].append(run)
                log("paired, %d hosts: round %d %s %.1f s rc %d, %d changed" % (
                    size, round_no + 1, name, run["wall"], run["rc"], run["changed"]))
        state2 = probe(hosts, hostvars)
        restarts2 = track(history, state2)
        result["noop_docker"] = docker_delta(state1, state2, restarts1, restarts2)
        result["noop_canary_down"] = sum(1 for h in state2.values() if h["canary"] != "true")
    finally:
        close_masters(cp_dir)
        try:
            on_all(hosts, hostvars, "docker rm -f gpufleet-canary > /dev/null 2>&1 || true")
        except RuntimeError as exc:
            log(str(exc))
        run_lab("down")
    return result


def median(values):
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2.0


def spread(values, digits=2):
    return "%s (%s-%s)" % (fmt(median(values), digits), fmt(min(values), digits), fmt(max(values), digits))


def paired_table(results):
    rows = ["| hosts | variant | no-op wall s, median (min-max) | s/host | controller CPU s/host | machine CPU s/host "
            "| modules/host | SSH trips/host | changed | vs site.yml (per-round ratio, median (min-max)) |",
            "|" + "---|" * 10]
    for r in results:
        size, site = r["hosts"], r["runs"].get("site.yml")
        for name, runs in r["runs"].items():
            ratios = [other["wall"] / mine["wall"] for other, mine in zip(runs, site or [])]
            rows.append("| %d | %s | %s | %s | %s | %s | %s | %s | %d | %s |" % (
                size, name, spread([x["wall"] for x in runs], 1), fmt(median([x["wall"] for x in runs]) / size, 3),
                fmt(median([x["controller_cpu"] for x in runs]) / size, 3),
                fmt(median([x["machine_cpu"] for x in runs]) / size, 3), fmt(median([x["modules_per_host"] for x in runs])),
                fmt(median([x["round_trips_per_host"] for x in runs])), sum(x["changed"] for x in runs),
                "-" if name == "site.yml" else spread(ratios) + "x" if ratios else "site.yml not measured"))
    return "\n".join(rows)


def first_runs_table(results):
    rows = ["| hosts | first run on fresh hosts | wall s | dockerd restarts | canaries down |", "|---|---|---|---|---|"]
    for r in results:
        for key, name in (("first", "site.yml"), ("every_module_first", "site.yml, every module"),
                          ("baseline_first", "baseline")):
            if key in r:
                run = r[key]
                rows.append("| %d | %s | %s | %d | %d |" % (r["hosts"], name, fmt(run["wall"]),
                                                            run["docker"]["restarts"], run["canary_down"]))
    return "\n".join(rows)


# Issue 30's targets, a converged host against the floor (one ping per host) at 32 hosts: variant -> (the most its
# no-op wall time may be, in floor's, the most its controller CPU may be, None: no target).
ISSUE30 = {"site.yml": (1.5, 1.5), "drift.yml": (1.3, None)}
ISSUE30_SIZE = 32


def issue30_lines(r):
    """Issue 30's verdicts for one size (markdown lines), and whether they are met: today's site.yml and drift.yml
    against the floor (a target at ISSUE30_SIZE hosts); a reference commit's, the same ratios without a target."""
    runs, size = r["runs"], r["hosts"]
    head = ("- %d hosts, issue 30's targets (a converged host against the floor; *wall*: the median (min-max) of the "
            "per-round ratios of no-op wall times, the hosts being the same; *controller CPU*: the ratio of the medians "
            "of controller CPU s/host)" % size)
    if FLOOR not in runs:
        return [head + ": not measured (no floor variant)."], True
    floor = runs[FLOOR]
    floor_cpu = median([x["controller_cpu"] for x in floor]) / size
    lines, ok_all = [head + "; floor %.3f s/host wall, %.3f s/host controller CPU:" % (
        median([x["wall"] for x in floor]) / size, floor_cpu)], True
    for name in ("site.yml", "drift.yml"):
        wall_max, cpu_max = ISSUE30[name]
        for variant in [name] + sorted(v for v in runs if v.startswith(name + " at ")):
            if variant not in runs:
                lines.append("  - %s: not measured (target: wall <= %sx the floor's%s)." % (
                    name, wall_max, ", controller CPU <= %sx" % cpu_max if cpu_max else ""))
                continue
            mine = runs[variant]
            walls = [m["wall"] / f["wall"] for m, f in zip(mine, floor)]
            cpu = median([x["controller_cpu"] for x in mine]) / size
            target = variant == name and size == ISSUE30_SIZE
            ok_wall, ok_cpu = median(walls) <= wall_max, cpu_max is None or cpu / floor_cpu <= cpu_max

            def verdict(ok, limit):
                if limit is None:
                    return "no target"
                if variant != name:
                    return "for before/after, no target (today's: <= %sx)" % limit
                if not target:
                    return "target <= %sx at %d hosts, none at this size" % (limit, ISSUE30_SIZE)
                return "%s; target <= %sx" % ("met" if ok else "MISSED", limit)

            if target:
                ok_all &= ok_wall and ok_cpu
            lines.append("  - %s: wall %.3f s/host, %sx the floor's (%s); controller CPU %.3f s/host, %.2fx the floor's "
                         "(%s)." % (variant, median([x["wall"] for x in mine]) / size, spread(walls),
                                    verdict(ok_wall, wall_max), cpu, cpu / floor_cpu, verdict(ok_cpu, cpu_max)))
    return lines, ok_all


def paired_verdicts(results):
    lines, ok_all = [], True

    def ratio(r, name):
        return median([o["wall"] / m["wall"] for o, m in zip(r["runs"][name], r["runs"]["site.yml"])])

    for r in results:
        size, runs = r["hosts"], r["runs"]
        goal = size >= 16
        if "site.yml" not in runs:
            lines.append("- %d hosts: site.yml not measured (no verdict against the baseline, site.yml running every "
                         "module or drift.yml)." % size)
        else:
            faster = []
            if "baseline" in runs:
                faster.append(("the baseline", ratio(r, "baseline")))
            if "site.yml, every module" in runs:
                faster.append(("site.yml running every module", ratio(r, "site.yml, every module")))
            if len(faster) == 2:
                base, today = faster[0][1], faster[1][1]
                ok = (base >= 8 and today >= 2) if goal else True
                ok_all &= ok
                text = "no-op site.yml %.2fx faster than the baseline and %.2fx faster than site.yml running every " \
                       "module (%s)" % (base, today, ("met" if ok else "MISSED") + "; target >= 8x and >= 2x" if goal
                                        else "no target at this size")
            else:
                missing = [name for name in ("the baseline", "site.yml running every module")
                           if name not in dict(faster)]
                if faster:
                    text = "no-op site.yml %.2fx faster than %s (%s not measured: no verdict on the target >= 8x and " \
                           ">= 2x)" % (faster[0][1], faster[0][0], missing[0])
                else:
                    text = "no-op site.yml against the baseline and site.yml running every module: not measured (no " \
                           "verdict on the target >= 8x and >= 2x)"
            if "drift.yml" in runs:
                drift = ratio(r, "drift.yml")
                if size == 32:
                    ok_all &= drift <= 1.0
                text += "; drift.yml takes %.2fx site.yml's no-op time (target <= 1 at 32 hosts)" % drift
            else:
                text += "; drift.yml not measured"
            lines.append("- %d hosts: %s." % (size, text))
        touched = r["noop_docker"]["restarts"] + r["noop_docker"]["reloads"] + sum(
            x["changed"] for variant_runs in runs.values() for x in variant_runs)
        if FLOOR in runs and "site.yml" in runs:
            lines.append("  reference: site.yml's no-op run takes %.2fx the floor, one module round trip per host "
                         "and nothing else (%.1f s): the least a converged host can cost here." % (
                             1.0 / ratio(r, FLOOR), median([x["wall"] for x in runs[FLOOR]])))
        if "every_module_first" in r:
            mine, today_first = r["first"]["wall"], r["every_module_first"]["wall"]
            lines.append("  first run on fresh hosts: site.yml %.1f s, site.yml running every module %.1f s: %.2fx (one "
                         "run each, not a verdict: --first-runs measures the first-run target in rounds)." % (
                             mine, today_first, mine / today_first))
        if "first" in r:
            ok = touched == 0 and r["noop_canary_down"] == 0 and r["first"]["docker"]["restarts"] == 0 and \
                r["first"]["canary_down"] == 0
            lines.append("  first run %.1f s, %d dockerd restarts; no-op rounds: %d changes, restarts or reloads, "
                         "%d canaries down (%s; target 0, 0, 0)." % (r["first"]["wall"], r["first"]["docker"]["restarts"],
                                                                     touched, r["noop_canary_down"],
                                                                     "met" if ok else "MISSED"))
        else:
            ok = touched == 0 and r["noop_canary_down"] == 0
            lines.append("  no-op rounds: %d changes, restarts or reloads, %d canaries down (%s; target 0, 0)." % (
                touched, r["noop_canary_down"], "met" if ok else "MISSED"))
        ok_all &= ok
        if "site.yml" in runs or "drift.yml" in runs:
            more, ok = issue30_lines(r)
            lines += more
            ok_all &= ok
    with_site = [r for r in results if "site.yml" in r["runs"]]
    if len(with_site) > 1:
        per_host = [(r["hosts"], median([x["wall"] for x in r["runs"]["site.yml"]]) / r["hosts"]) for r in with_site]
        flat = per_host[-1][1] <= per_host[0][1] * 1.3
        ok_all &= flat
        lines.append("- site.yml no-op wall s/host: %s (%s; flat = within 1.3x of the smallest fleet)." % (
            " / ".join("%d: %.3f" % p for p in per_host), "met" if flat else "MISSED"))
    return lines, ok_all


def write_paired(results, args, command, started, finished, outdir):
    lines, unused = paired_verdicts(results)
    names = list(results[-1]["runs"])
    reference = results[-1].get("reference")
    refs = [name for name in names if " at " in name]
    if "baseline" in names:
        layout = ("- Per size N, one fresh lab of 2N hosts (kinds `%s` handed out in turn, %s GPUs per host, seed %s; "
                  "forks = N, cap %d) in two halves: site.yml and its variants run on the first N hosts, the baseline "
                  "on the other N (`--limit`), since the baseline rewrites the units and daemon.json site.yml manages. "
                  "Each half's first run, " % (args.kinds, args.gpus, args.seed, args.forks_cap))
    else:
        layout = ("- Per size N, one fresh lab of N hosts (kinds `%s` handed out in turn, %s GPUs per host, seed %s; "
                  "forks = N, cap %d), no baseline half: every variant runs on the same N hosts. site.yml's first run, "
                  % (args.kinds, args.gpus, args.seed, args.forks_cap))
    layout += ("then %d rounds of every no-op variant, each round in its own order (it starts two variants further on "
               "and steps through the list by 1, 2, 3 ...), so that no variant always runs first, last or after the same "
               "one." % args.paired)
    about = [PAIRED_ABOUT[name] for name in names if name in PAIRED_ABOUT]
    if refs:
        about.append("%s (the collection's playbooks, roles and plugins as they were at commit %s, unpacked from "
                     "`git archive` and found through ANSIBLE_COLLECTIONS_PATH, run on site.yml's converged hosts in the "
                     "same rounds: before and after, no target)" % (" and ".join("`%s`" % name for name in refs),
                                                                    reference))
    variants_text = "- Variants: %s." % "; ".join(about)
    if "site.yml, every module" in names:
        variants_text += (" Up to %d hosts a size, the lab has a third part of N fresh hosts for the first run of "
                          "`site.yml, every module`, against site.yml's own first run." % args.first_compare_max)
    md = report_head("Fleet benchmark, paired mode: no-op re-runs interleaved on one fleet",
                     "Generated by `tests/benchmark/fleet_bench.py --paired %d`." % args.paired,
                     command, started, finished) + [layout, variants_text, "",
          "## Results", "", paired_table(results), "", first_runs_table(results), "",
          "*controller CPU* is the user+system CPU of ansible-playbook and its children on the controller; "
          "*machine CPU* the whole machine's busy time (controller and lab hosts share it).", "",
          "## Targets (`targets.md`)", ""] + lines + [""]
    write_files(outdir, "paired", md, {"command": command, "started": started.isoformat(), "results": results})


def fmt(x, digits=1):
    return ("%%.%df" % digits) % x


def table(results):
    head = ("| hosts | playbook | first run s | first s/host | no-op re-run s | no-op s/host | no-op CPU s/host "
            "| modules/host first / no-op | SSH trips/host first / no-op | changed on re-run "
            "| dockerd restarts first / re-run | reloads first / re-run | canaries down |")
    rows = [head, "|" + "---|" * 13]
    for r in results:
        f, n, size = r["first"], r["rerun"], r["hosts"]
        rows.append("| %d | %s | %s | %s | %s | %s | %s | %s / %s | %s / %s | %d | %d / %d | %d / %d | %d/%d |" % (
            size, r["playbook"], fmt(f["wall"]), fmt(f["wall"] / size, 2), fmt(n["wall"]), fmt(n["wall"] / size, 2),
            fmt(n["machine_cpu"] / size, 2), fmt(f["modules_per_host"]), fmt(n["modules_per_host"]),
            fmt(f["round_trips_per_host"]), fmt(n["round_trips_per_host"]), n["changed"],
            f["docker"]["restarts"], n["docker"]["restarts"], f["docker"]["reloads"], n["docker"]["reloads"],
            n["canary_down"], size))
    return "\n".join(rows)


def verdicts(results):
    by = {(r["hosts"], r["playbook"]): r for r in results}
    sizes = sorted({r["hosts"] for r in results})
    lines = []
    ok_all = True
    for size in sizes:
        site, base = by.get((size, "site.yml")), by.get((size, "baseline"))
        if not (site and base):
            continue
        speed = base["rerun"]["wall"] / site["rerun"]["wall"]
        speed_first = base["first"]["wall"] / site["first"]["wall"]
        cpu_ratio = base["rerun"]["machine_cpu"] / max(site["rerun"]["machine_cpu"], 1e-9)
        ok = speed >= 4
        ok_all &= ok
        lines.append("- %d hosts: no-op re-run %.2fx faster than the baseline per host (%s; target >= 4x), "
                     "%.2fx less machine CPU; first run %.2fx faster." % (
                         size, speed, "met" if ok else "MISSED", cpu_ratio, speed_first))
    slopes = {name: slope([(r["hosts"], r["rerun"]["wall"]) for r in results if r["playbook"] == name])
              for name in ("site.yml", "baseline")}
    if slopes["site.yml"] and slopes["baseline"]:
        ratio = slopes["baseline"] / slopes["site.yml"]
        ok = ratio >= 4
        ok_all &= ok
        lines.append("- Marginal no-op cost per added host (least-squares slope of re-run wall time over fleet size, "
                     "which leaves out ansible-playbook's fixed start-up): site.yml %.2f s/host, baseline %.2f s/host, "
                     "%.2fx (%s; target >= 4x)." % (slopes["site.yml"], slopes["baseline"], ratio,
                                                   "met" if ok else "MISSED"))
    site_runs = [r for r in results if r["playbook"] == "site.yml"]
    restarts = sum(r[t]["docker"]["restarts"] for r in site_runs for t in ("first", "rerun"))
    rerun_touch = sum(r["rerun"]["changed"] + r["rerun"]["docker"]["reloads"] for r in site_runs)
    canaries = sum(r["rerun"]["canary_down"] for r in site_runs)
    ok = restarts == 0 and rerun_touch == 0 and canaries == 0
    ok_all &= ok
    lines.append("- site.yml: %d dockerd restarts over all fleets and runs, %d changes or reloads on re-runs, "
                 "%d canary containers down (%s; target 0, 0, 0)." % (restarts, rerun_touch, canaries,
                                                                       "met" if ok else "MISSED"))
    if len(site_runs) > 1:
        per_host = [(r["hosts"], r["rerun"]["wall"] / r["hosts"], r["rerun"]["machine_cpu"] / r["hosts"])
                    for r in sorted(site_runs, key=lambda r: r["hosts"])]
        walls = [w for _, w, _ in per_host]
        cpus = [c for _, _, c in per_host]
        flat = max(cpus) / min(cpus) <= 1.3 and walls[-1] <= walls[0] * 1.3
        ok_all &= flat
        lines.append("- site.yml no-op cost per host as the fleet grows: %s wall s/host, %s machine CPU s/host "
                     "(%s; flat = within 1.3x of the smallest fleet)." % (
                         " / ".join("%d: %.2f" % (n, w) for n, w, _ in per_host),
                         " / ".join("%d: %.2f" % (n, c) for n, _, c in per_host), "met" if flat else "MISSED"))
    return lines, ok_all


def slope(points):
    """Least-squares slope of y over x, or None with fewer than two distinct x."""
    if len({x for x, _ in points}) < 2:
        return None
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


def profile_lines(results):
    lines = []
    for r in results:
        if r["hosts"] != max(x["hosts"] for x in results):
            continue
        lines.append("**%s, %d hosts, no-op re-run** (%.1f s wall). *task wall*: from the task's start to its "
                     "last host's result; *s/host*: time from a host's worker start to its result, averaged over all the fleet's hosts (0 for a host that skipped the task; on this "
                     "2-core machine it includes waiting for a CPU):" % (r["playbook"], r["hosts"], r["rerun"]["wall"]))
        lines.append("")
        lines.append("| task | action | task wall s | s/host |")
        lines.append("|---|---|---|---|")
        per_host = r["rerun"]["task_seconds_per_host"]
        for task in r["rerun"]["tasks"]:
            lines.append("| %s | `%s` | %.2f | %s |" % (task["name"].replace("|", "/"), task["action"], task["wall"],
                                                      "%.3f" % per_host[task["name"]] if task["name"] in per_host
                                                      else "skipped"))
        lines.append("")
    return lines


def machine():
    cpu = "unknown"
    with open("/proc/cpuinfo") as handle:
        for line in handle:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as handle:
        mem_kib = int(handle.readline().split()[1])
    version = subprocess.run([os.path.join(VENV_BIN, "ansible"), "--version"], capture_output=True,
                             text=True).stdout.splitlines()[0]
    osname = platform.system()
    if os.path.exists("/etc/os-release"):
        with open("/etc/os-release") as handle:
            fields = dict(line.rstrip("\n").split("=", 1) for line in handle if "=" in line)
        osname = fields.get("PRETTY_NAME", osname).strip('"')
    return "%s, %s, %d cores (%s), %.0f GiB RAM, kernel %s; %s; Python %s" % (
        platform.node(), osname, os.cpu_count(), cpu, mem_kib / 1048576, platform.release(), version,
        platform.python_version())


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, tag, title in ((axes[0], "rerun", "No-op re-run"), (axes[1], "first", "First converge")):
        for name, style in (("site.yml", "o-"), ("baseline", "s--")):
            runs = sorted((r for r in results if r["playbook"] == name), key=lambda r: r["hosts"])
            if runs:
                ax.plot([r["hosts"] for r in runs], [r[tag]["wall"] for r in runs], style,
                        label="%s" % ("gpufleet site.yml" if name == "site.yml" else "task-per-step baseline"))
                for r in runs:
                    ax.annotate("%.1fs" % r[tag]["wall"], (r["hosts"], r[tag]["wall"]), textcoords="offset points",
                                xytext=(4, 4), fontsize=8)
        ax.set_title(title)
        ax.set_xlabel("hosts in the fleet (forks = hosts)")
        ax.set_ylabel("wall time (s)")
        ax.set_xticks(sorted({r["hosts"] for r in results}))
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("gpufleet.nvidia fleet benchmark (lab: simulated GPU hosts on one 2-core machine)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_report(results, args, command, started, finished, outdir):
    lines_v, _ = verdicts(results)
    md = report_head("Fleet benchmark: playbooks/site.yml vs a task-per-step baseline",
                     "Generated by `tests/benchmark/fleet_bench.py` (see `tests/benchmark/README.md` for what the "
                     "baseline is and how each number is measured).", command, started, finished) + [
          "- Fleets: a fresh lab fleet per playbook and size, kinds `%s` handed out in turn, %s GPUs per host, "
          "seed %s; forks = hosts (cap %d), pipelining on, the lab's inventory, no other settings." % (
              args.kinds, args.gpus, args.seed, args.forks_cap),
          "", "## Results", "", table(results), "",
          "Columns: wall times of `ansible-playbook`; *CPU s/host* is the whole machine's busy CPU time during the "
          "run (controller and lab hosts share it) divided by the host count; *modules/host* counts task results "
          "that ran a module on the host (loop items one by one); *SSH trips/host* counts ssh/sftp/scp processes "
          "the connection plugin started for the host; restarts and reloads are summed over the fleet; "
          "*canaries down* is the number of hosts whose canary container was no longer running after the re-run.",
          "", "## Targets (`targets.md`)", ""] + lines_v + ["", "## Where the time goes", ""] + \
        profile_lines(results) + ["![wall time per fleet size](fleet.png)", "",
                                  "Causes of the misses and the fixes they need: `analysis.md`.", ""]
    write_files(outdir, "results", md, {"command": command, "started": started.isoformat(), "results": results})
    plot(results, os.path.join(outdir, "fleet.png"))


def each_size(args, label, bench, write):
    """``bench(size)`` for each size of ``--sizes``, ``write(results so far)`` after each: the results, and whether a
    size could not be measured (a lab that would not come up: the sizes measured are still reported)."""
    results, broken = [], False
    try:
        for size in [int(s) for s in args.sizes.split(",")]:
            try:
                results.append(bench(size))
            except RuntimeError as exc:
                log("%s, %d hosts: not measured: %s" % (label, size, exc))
                broken = True
                continue
            write(results)
    finally:
        run_lab("down")
    return results, broken


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="4,16,32", help="fleet sizes, comma-separated (default 4,16,32)")
    parser.add_argument("--kinds", default="systemd,sysvinit,upstart")
    parser.add_argument("--gpus", default="4", help="GPUs per host, as lab up --gpus takes it (default 4)")
    parser.add_argument("--seed", default="1")
    parser.add_argument("--forks-cap", type=int, default=32)
    parser.add_argument("--playbooks", default="site.yml,baseline")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmark"))
    parser.add_argument("--work", default=os.path.join(ROOT, ".cache", "bench"),
                        help="logs, callback output and per-run ansible.cfg (default .cache/bench)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--first-compare-max", type=int, default=16, metavar="N",
                        help="paired mode: up to N hosts a size, a third part of the lab for the first run of site.yml "
                             "running every module, to compare first runs (default 16)")
    parser.add_argument("--paired", type=int, default=0, metavar="ROUNDS",
                        help="paired mode: per size one fleet, site.yml's first run, then ROUNDS rounds of the no-op "
                             "variants interleaved (writes paired.md and paired.json)")
    parser.add_argument("--paired-variants", metavar="KEYS",
                        help="paired mode: the no-op variants, a comma list of %s (default: all); without baseline "
                             "the lab has no baseline half, without every no third part" % ", ".join(PAIRED_KEYS))
    parser.add_argument("--paired-ref", metavar="COMMIT",
                        help="paired mode: also that commit's site.yml and drift.yml (its playbooks and collection), "
                             "on site.yml's hosts in the same rounds")
    parser.add_argument("--first-runs", type=int, default=0, metavar="ROUNDS",
                        help="first-run mode: per size ROUNDS rounds, each on a fresh lab, of the first run of site.yml, "
                             "of site.yml running every module and (--first-ref) of another commit's site.yml "
                             "(writes first-runs.md and first-runs.json)")
    parser.add_argument("--first-ref", metavar="COMMIT",
                        help="first-run mode: the commit whose site.yml's first run site.yml is held against")
    args = parser.parse_args()
    if args.paired_variants is not None:
        keys = [key.strip() for key in args.paired_variants.split(",") if key.strip()]
        unknown = [key for key in keys if key not in PAIRED_KEYS]
        if unknown or not keys:
            parser.error("--paired-variants: %s (choose from %s)" % (
                "unknown %s" % ", ".join(unknown) if unknown else "none given", ", ".join(PAIRED_KEYS)))
        args.paired_variants = ",".join(keys)
    if (args.paired_variants is not None or args.paired_ref) and not args.paired:
        parser.error("--paired-variants and --paired-ref need --paired")
    if os.geteuid() != 0:
        sys.exit("fleet_bench: run as root (the lab needs it)")
    command = " ".join([".venv/bin/python", os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)] + sys.argv[1:])
    started = datetime.datetime.now(datetime.timezone.utc)
    workroot = os.path.join(args.work, started.strftime("%Y%m%dT%H%M%S"))
    os.makedirs(workroot, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    results, broken = [], False
    run_lab("down")  # every fleet starts fresh
    if args.first_runs:
        reference = reference_tree(args.first_ref, workroot) if args.first_ref else None
        args.first_ref_label = reference[0] if reference else None
        results, broken = each_size(
            args, "first runs", lambda size: bench_first_runs(size, args, workroot, reference),
            lambda done: write_first_runs(done, args, command, started, datetime.datetime.now(datetime.timezone.utc),
                                          args.out))
        if not results:
            return 1
        table, verdicts, ok = first_runs_report(results)
        print("\n".join(table + [""] + verdicts))
        write_first_runs(results, args, command, started, datetime.datetime.now(datetime.timezone.utc), args.out)
        broken = broken or any(x["rc"] != 0 for r in results for runs in r["runs"].values() for x in runs)
        return 1 if broken or (args.strict and not ok) else 0
    if args.paired:
        reference = reference_tree(args.paired_ref, workroot) if args.paired_ref else None
        results, broken = each_size(
            args, "paired", lambda size: bench_paired(size, args, workroot, reference),
            lambda done: write_paired(done, args, command, started, datetime.datetime.now(datetime.timezone.utc),
                                      args.out))
        if not results:
            return 1
        finished = datetime.datetime.now(datetime.timezone.utc)
        print(paired_table(results))
        lines, ok = paired_verdicts(results)
        print("\n".join(lines))
        write_paired(results, args, command, started, finished, args.out)
        broken = broken or any(x["rc"] != 0 for r in results for runs in r["runs"].values() for x in runs) or any(
            r["first"]["rc"] != 0 for r in results if "first" in r)
        return 1 if broken or (args.strict and not ok) else 0
    try:
        for size in [int(s) for s in args.sizes.split(",")]:
            for name in args.playbooks.split(","):
                result = bench_fleet(name, size, args, workroot)
                broken |= any(result[t]["rc"] != 0 for t in ("first", "rerun"))
                results.append(result)
    finally:
        try:
            run_lab("down")
        except RuntimeError as exc:
            log(str(exc))
    finished = datetime.datetime.now(datetime.timezone.utc)
    print(table(results))
    lines, ok = verdicts(results)
    print("\n".join(lines))
    write_report(results, args, command, started, finished, args.out)
    log("wrote %s/results.md, results.json, fleet.png; logs in %s" % (args.out, workroot))
    if broken:
        log("a playbook run failed: see the logs")
        return 1
    return 1 if (args.strict and not ok) else 0


if __name__ == "__main__":
    sys.exit(main())
