#!/usr/bin/env python3
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_state on converged lab hosts, this tree against another commit: the same verdicts, and the host CPU per run.

    .venv/bin/python tests/lab/lab up --hosts 3 --kinds systemd,sysvinit,upstart
    .venv/bin/ansible-playbook -i .cache/lab/inventory.yml playbooks/site.yml      # converge the lab
    .venv/bin/python tests/benchmark/node_state_cpu.py --ref COMMIT [--runs 12]
    .venv/bin/python tests/benchmark/node_state_cpu.py --health [--runs 12]   # this tree, gpu_health off and on

For each tree, ``playbooks/drift.yml`` runs once with Ansible's remote files kept (no pipelining), which leaves each
host its node_state payload (the AnsiballZ file, options included) and writes the drift report; the two reports'
verdicts (per host: converged, drifted, run, and per concern converged and what would change) must be equal. Then
each host runs the two payloads and the ping module's (``tests/benchmark/floor.yml``'s, kept the same way) in turn,
``--runs`` times each, and the host CPU of each run (user + system, the payload's process and its children, from
``getrusage`` on the host) is printed: median and spread per host, and each tree's against the ping module's.
Compare only numbers taken together: this machine's speed changes through the day.

With ``--health`` the two payloads are this tree's, one made with ``gpu_node_gpu_health: false`` and one with the
default (on): the verdicts must be the same but for gpu_health's own, and the table's last column is what health
adds to one run, in milliseconds of host CPU.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fleet_bench  # noqa: E402  (the lab's inventory, ssh and reference trees)

MEASURE = r"""
import json, resource, subprocess, sys
times = []
for path in sys.argv[1:]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    times.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
print(json.dumps(times))
"""


def drift(tag, workdir, collections, extra=()):
    """Run drift.yml keeping node_state's payload under /root/.ansible/bench-TAG on each host; the report."""
    report = os.path.join(workdir, tag + ".json")
    env = dict(os.environ, ANSIBLE_KEEP_REMOTE_FILES="1", ANSIBLE_PIPELINING="False",
               ANSIBLE_REMOTE_TMP="/root/.ansible/bench-%s" % tag, ANSIBLE_COLLECTIONS_PATH=collections,
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([os.path.join(fleet_bench.VENV_BIN, "ansible-playbook"), "-i", fleet_bench.INVENTORY,
                           os.path.join(fleet_bench.ROOT, "playbooks", "drift.yml"),
                           "-e", "gpufleet_drift_report=%s" % report] + list(extra),
                          cwd=workdir, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode:
        sys.exit("drift.yml (%s) failed:\n%s" % (tag, proc.stdout[-3000:] + proc.stderr[-2000:]))
    with open(report) as handle:
        return json.load(handle)


def keep_ping(workdir):
    """Run the floor (tests/benchmark/floor.yml: ansible.builtin.ping with become) keeping its payload under
    /root/.ansible/bench-ping on each host: the ping module's own cost on the host, measured in the same rounds."""
    env = dict(os.environ, ANSIBLE_KEEP_REMOTE_FILES="1", ANSIBLE_PIPELINING="False",
               ANSIBLE_REMOTE_TMP="/root/.ansible/bench-ping", ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([os.path.join(fleet_bench.VENV_BIN, "ansible-playbook"), "-i", fleet_bench.INVENTORY,
                           os.path.join(fleet_bench.HERE, "floor.yml")], cwd=workdir, env=env, capture_output=True,
                          text=True, timeout=900)
    if proc.returncode:
        sys.exit("floor.yml failed:\n%s" % (proc.stdout[-3000:] + proc.stderr[-2000:]))


def verdicts(report, without_health=False):
    """What drift.yml's report says of each host (its rows hold no timings); ``without_health``: its health aside."""
    return dict((row["host"], dict((key, value) for key, value in row.items()
                                   if not (without_health and key == "health")))
                for row in report.get("hosts", []))


def node_verdict(result, without_health=False):
    """node_state's own verdict in a payload's output: converged, drifted, run, and each concern's verdict and what
    would change (its timings and raw results aside); ``without_health``: gpu_health's aside."""
    concerns = dict((name, {"converged": verdict.get("converged"), "failed": verdict.get("failed"),
                            "changes": verdict.get("changes")})
                    for name, verdict in result.get("concerns", {}).items()
                    if not (without_health and name == "gpu_health"))
    evaluated = [name for name in result.get("evaluated") or [] if not (without_health and name == "gpu_health")]
    return {"converged": result.get("converged"), "drifted": result.get("drifted"), "run": result.get("run"),
            "evaluated": evaluated, "engine_list": result.get("engine_list"), "concerns": concerns}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ref", help="the commit to compare with (the tree before)")
    parser.add_argument("--health", action="store_true", help="compare this tree with gpu_health off and on")
    parser.add_argument("--runs", type=int, default=12)
    args = parser.parse_args()
    if bool(args.ref) == args.health:
        parser.error("give --ref COMMIT or --health")
    hosts, hostvars = fleet_bench.load_inventory()
    workdir = tempfile.mkdtemp(prefix="node-state-cpu-")
    head = os.path.join(fleet_bench.ROOT, ".build", "collections")
    if args.health:
        label = "health off"
        reports = {"ref": drift("ref", workdir, head, ["-e", "gpu_node_gpu_health=false"]),
                   "head": drift("head", workdir, head)}
    else:
        label = args.ref[:7]
        unused_label, unused_site, ref_collections = fleet_bench.reference_tree(args.ref, workdir)
        reports = dict((tag, drift(tag, workdir, collections))
                       for tag, collections in (("ref", ref_collections), ("head", head)))

    keep_ping(workdir)

    def verdicts_of(tag):
        return verdicts(reports[tag], args.health)
    same = verdicts_of("ref") == verdicts_of("head")
    print("verdicts (drift.yml's report, timings aside): %s" % ("identical" if same else "DIFFERENT"))
    for host in sorted(verdicts(reports["head"])):
        print("  %s: %s" % (host, json.dumps(verdicts(reports["head"])[host], sort_keys=True)))
    if not same:
        print("  before: %s" % json.dumps(verdicts(reports["ref"]), sort_keys=True))
    table, checked = [], []
    for name, host in sorted(hosts.items()):
        paths = fleet_bench.ssh(host["ip"], hostvars, "ls /root/.ansible/bench-ref/*/AnsiballZ_node_state.py "
                                "/root/.ansible/bench-head/*/AnsiballZ_node_state.py "
                                "/root/.ansible/bench-ping/*/AnsiballZ_ping.py").split()
        ref_path = [p for p in paths if "/bench-ref/" in p][0]
        head_path = [p for p in paths if "/bench-head/" in p][0]
        ping_path = [p for p in paths if "/bench-ping/" in p][0]
        answers = [node_verdict(json.loads(fleet_bench.ssh(host["ip"], hostvars, "python3 %s" % path)), args.health)
                   for path in (ref_path, head_path)]
        same = same and answers[0] == answers[1]
        checked.append("  %s: %s %s" % (name, "identical" if answers[0] == answers[1] else "DIFFERENT",
                                        json.dumps(answers[1], sort_keys=True)))
        order = [ref_path, head_path, ping_path] * args.runs
        out = fleet_bench.ssh(host["ip"], hostvars, "python3 - %s <<'EOF'\n%sEOF\n" % (" ".join(order), MEASURE))
        times = json.loads(out)
        ref_times, head_times, ping_times = times[0::3], times[1::3], times[2::3]
        ref_median, head_median = statistics.median(ref_times), statistics.median(head_times)
        ping_median = statistics.median(ping_times)
        table.append("| %s | %s | %.3f [%.3f-%.3f] | %.3f [%.3f-%.3f] | %.3f | %+.1f | %.3f [%.3f-%.3f] | %.2f | %.2f |"
                     % (name, host["kind"], ref_median, min(ref_times), max(ref_times), head_median, min(head_times),
                        max(head_times), head_median / ref_median, 1000 * (head_median - ref_median), ping_median,
                        min(ping_times), max(ping_times), ref_median / ping_median, head_median / ping_median))
    print("node_state's own verdicts, each host's payload of both trees run once:")
    print("\n".join(checked))
    print("host CPU of one node_state run, s (median [min-max] of %d runs each, in turn)" % args.runs)
    print("| host | kind | %s | HEAD | ratio | HEAD - %s, ms | ping module | %s / ping | HEAD / ping |"
          % (label, label, label))
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(table))
    fleet_bench.on_all(hosts, hostvars, "rm -rf /root/.ansible/bench-ref /root/.ansible/bench-head "
                                        "/root/.ansible/bench-ping")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
