"""The controller treats what a host returns as untrusted data (playbooks/drift.yml, for real).

A compromised GPU node answers the controller with whatever JSON it likes. Here the node's Python
interpreter is a script that ignores the module it is sent and prints a hostile answer
(``ansible_python_interpreter`` on a local-connection inventory host), so the real ansible-playbook
runs the real playbooks/drift.yml, unmodified, and the answer goes through Ansible's own result
handling: its facts become the node's host variables, its values reach the report.

The hostile node, first in the inventory (the report task runs once, in the first host's context),
returns ``ansible_facts: {gpufleet_drift_report: <a path it chose>}`` and a result that is forged
(messages with newlines that look like the next row, ANSI escapes, a template) or malformed. An
honest-looking node answers a converged result. The report must be written where the controller
said (the inventory's ``all`` vars, or the default in the run's directory) and nowhere else, have
both hosts, the honest one unaffected, and the hostile one failed with its text escaped.
"""

import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DRIFT = os.path.join(ROOT, "playbooks", "drift.yml")
SITE = os.path.join(ROOT, "playbooks", "site.yml")
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")

FORGED = "gone\nhonest  converged  systemd  driver ok  -  -\r\x1b[2K\x1b[1A{{ 7 * 7 }}"
ESCAPED = "gone\\nhonest  converged  systemd  driver ok  -  -\\r\\x1b[2K\\x1b[1A{{ 7 * 7 }}"

HONEST = {
    "changed": False, "converged": True, "drifted": [], "run": [], "evaluated": ["persistenced"],
    "engine_list": [], "engines_found": None,
    "concerns": {"persistenced": {"converged": True, "failed": False, "changes": "",
                                  "result": {"init_system": "systemd", "daemon": "driver", "actions": []}}}}

HOSTILE = {
    # A well-shaped result whose failed concern carries a forged message.
    "forged": dict(HONEST, converged=False, drifted=["persistenced"], run=["persistenced"], concerns={
        "persistenced": {"converged": False, "failed": True, "changes": "", "result": {"msg": FORGED}}}),
    # A result of the wrong shape.
    "malformed": dict(HONEST, concerns="x"),
    # A failed module run: its message reaches the report through the playbook's rescue.
    "failed": {"failed": True, "msg": FORGED},
}


def write_node(directory, name, answer):
    """A node whose interpreter prints ``answer`` (JSON), whatever module it is sent."""
    answer_file = os.path.join(directory, name + ".json")
    with open(answer_file, "w") as handle:
        json.dump(answer, handle)
    python = os.path.join(directory, name + "-python")
    with open(python, "w") as handle:
        handle.write("#!/bin/sh\nexec cat %s\n" % answer_file)
    os.chmod(python, 0o755)
    return "%s ansible_connection=local ansible_python_interpreter=%s" % (name, python)


def run_playbook(tmp_path, inventory, playbook, cwd):
    collections = os.path.join(ROOT, ".build", "collections")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections, ANSIBLE_NOCOLOR="1", ANSIBLE_STDOUT_CALLBACK="default",
               ANSIBLE_RETRY_FILES_ENABLED="false", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
               ANSIBLE_REMOTE_TEMP=str(tmp_path / "tmp"), PWD=str(cwd))
    argv = [ANSIBLE_PLAYBOOK, "-i", str(inventory), "-e", "ansible_become=false", playbook]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, cwd=str(cwd), check=False)
    return proc.returncode, proc.stdout + proc.stderr


def run_drift(tmp_path, hostile, configured):
    chosen = str(tmp_path / "chosen-by-the-node.json")
    work = tmp_path / "run"
    work.mkdir()
    answer = dict(HOSTILE[hostile], ansible_facts={"gpufleet_drift_report": chosen})
    inventory = tmp_path / "inventory.ini"
    lines = ["[gpu_nodes]", write_node(str(tmp_path), "hostile", answer), write_node(str(tmp_path), "honest", HONEST)]
    if configured:
        lines += ["[all:vars]", "gpufleet_drift_report=%s" % (tmp_path / "configured.json")]
    inventory.write_text("\n".join(lines) + "\n")
    rc, out = run_playbook(tmp_path, inventory, DRIFT, work)
    report = str(tmp_path / "configured.json") if configured else str(work / "gpufleet-drift.json")
    return rc, out, report, chosen


def printed_lines(out, task):
    """The lines a debug task printed, as the default callback prints them (a JSON list of strings)."""
    block = out.split("TASK [%s]" % task, 1)[1].split("PLAY RECAP", 1)[0]
    return [json.loads('"%s"' % line) for line in re.findall(r'^ {8}"(.*)",?$', block, re.M)]


@pytest.mark.parametrize("configured", [True, False], ids=["inventory-all-vars", "default-path"])
@pytest.mark.parametrize("hostile", sorted(HOSTILE))
def test_a_hostile_node_neither_picks_the_report_path_nor_breaks_the_report(tmp_path, hostile, configured):
    rc, out, report_path, chosen = run_drift(tmp_path, hostile, configured)
    assert rc == (2 if hostile == "failed" else 0), out
    assert not os.path.lexists(chosen), "the node chose the controller file the report was written to:\n" + out
    assert os.path.isfile(report_path), out
    with open(report_path) as handle:
        report = json.load(handle)
    rows = dict((row["host"], row) for row in report["hosts"])
    assert sorted(rows) == ["honest", "hostile"], out
    assert rows["honest"]["status"] == "converged" and rows["honest"]["daemon"] == "driver ok"
    assert rows["hostile"]["status"] == "failed", out
    if hostile == "malformed":
        assert rows["hostile"]["errors"] == {"host": "its node_state result was malformed (concerns is a string, not a "
                                                     "mapping); nothing in it was used"}
    else:
        concern = "persistenced" if hostile == "forged" else "host"
        assert rows["hostile"]["errors"][concern].endswith(ESCAPED), rows["hostile"]
    table = printed_lines(out, "The fleet's drift, one row per host")
    assert table == report["table"] + ["counts: converged=1 failed=1"], out
    assert len(table) == 1 + 2 + 1 + 1, table  # the header, a row per host, the hostile host's error, the counts
    assert all(line.isprintable() for line in table), table
    assert table[1].split()[:2] == ["honest", "converged"] and table[2].split()[:2] == ["hostile", "failed"]


# playbooks/site.yml with the real gpu_node role: node_state's answer says the node is converged, so the role
# publishes gpu_node_result from it and the fleet summary prints it.
CONVERGED = dict(HONEST, concerns=dict(HONEST["concerns"], docker={
    "converged": True, "failed": False, "changes": "", "result": {"runtimes": {"nvidia": {}}, "action": "none"}}),
    engine_list=["docker"], evaluated=["persistenced", "docker"])
SITE_HOSTILE = {
    "forged": dict(CONVERGED, concerns={"persistenced": {"converged": True, "failed": False, "changes": "", "result": {
        "init_system": FORGED, "daemon": "driver", "pid": 7}}}),
    "malformed": dict(CONVERGED, concerns={"docker": {"converged": True, "failed": False, "changes": "", "result": {
        "runtimes": ["nvidia"], "action": "none"}}}),
}
HONEST_LINE = ("honest ok found=converged init=systemd daemon=driver(pid none) gpus=n/a docker_runtimes=nvidia "
               "docker_action=none nvidia_run=n/a")


@pytest.mark.parametrize("hostile", sorted(SITE_HOSTILE))
def test_a_hostile_node_does_not_break_the_fleet_summary(tmp_path, hostile):
    inventory = tmp_path / "inventory.ini"
    inventory.write_text("[gpu_nodes]\n%s\n%s\n" % (write_node(str(tmp_path), "hostile", SITE_HOSTILE[hostile]),
                                                    write_node(str(tmp_path), "honest", CONVERGED)))
    rc, out = run_playbook(tmp_path, inventory, SITE, tmp_path)
    assert rc == 0, out
    lines = printed_lines(out, "Summarise the fleet")
    assert len(lines) == 2 and all(line.isprintable() for line in lines), out
    assert lines[1] == HONEST_LINE, out
    if hostile == "forged":
        assert lines[0].startswith("hostile ok found=converged init=%s daemon=driver(pid 7) " % ESCAPED), out
    else:
        assert lines[0] == ("hostile failed: its gpu_node_result was malformed (container_runtime.runtimes is a list, "
                            "not a mapping); nothing in it was used"), out
