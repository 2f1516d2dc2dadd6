"""The container_toolkit role with real apt on lab hosts, against the lab's signed toolkit repository.

Needs the repository `lab up` serves on the bridge and the inventory variables that name it
(`lab_toolkit_repo_url`, `lab_toolkit_repo_key_file`, `lab_toolkit_version`). One systemd and one
SysV host: check mode changes nothing; the first run installs both packages at the version, held,
from the collection's deb822 source and key, refreshing that source's index alone (the host's
other package lists untouched); a second run changes nothing; node_state (gpu_node's evaluate
entry point) finds the hosts converged, and drifted after a hand-made unhold, which the next run
fixes; absent lets go, removes the packages, our key and our source, and nothing else.
"""

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO, lab, ok

HOSTS = ("h1", "h2")
PACKAGES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base")
KEY = "/etc/apt/keyrings/gpufleet-nvidia-container-toolkit.asc"
SOURCE = "/etc/apt/sources.list.d/gpufleet-nvidia-container-toolkit.sources"
# The role's variables from the lab inventory's (both plays).
VARS = """
    container_toolkit_version: "{{ lab_toolkit_version }}"
    container_toolkit_repo_url: "{{ lab_toolkit_repo_url }}"
    container_toolkit_repo_key: "{{ lookup('ansible.builtin.file', lab_toolkit_repo_key_file) }}"
"""
PLAY = """
- name: The toolkit role
  hosts: gpu_nodes
  become: true
  gather_facts: false
  vars:
%(vars)s  roles:
    - gpufleet.nvidia.container_toolkit
  post_tasks:
    - name: Keep the result on the controller
      ansible.builtin.copy:
        content: "{{ container_toolkit_result | to_json }}"
        dest: "{{ results }}/{{ inventory_hostname }}.json"
        mode: "0600"
      delegate_to: localhost
      become: false
      changed_when: false
      check_mode: false  # the result is written in --check runs too
""" % {"vars": VARS.lstrip("\n")}
EVALUATE = """
- name: gpu_node's evaluation, the toolkit alone
  hosts: gpu_nodes
  become: true
  gather_facts: false
  vars:
%(vars)s    gpu_node_container_toolkit: true
    gpu_node_device_links: false
    gpu_node_persistenced: false
    gpu_node_gpu_persistence: false
    gpu_node_container_runtime: false
  tasks:
    - name: Evaluate
      ansible.builtin.import_role:
        name: gpufleet.nvidia.gpu_node
        tasks_from: evaluate
    - name: Keep the verdict on the controller
      ansible.builtin.copy:
        content: "{{ gpu_node_state.concerns.container_toolkit | to_json }}"
        dest: "{{ results }}/{{ inventory_hostname }}.json"
        mode: "0600"
      delegate_to: localhost
      become: false
      changed_when: false
      check_mode: false  # the result is written in --check runs too
""" % {"vars": VARS.lstrip("\n")}


@pytest.fixture(scope="module")
def fleet(empty_lab, tmp_path_factory):
    up = lab("up", "--hosts", "2", "--kinds", "systemd,sysvinit", timeout=900)
    assert up.returncode == 0, up.stderr
    work = tmp_path_factory.mktemp("toolkit")
    inventory = work / "inventory.yml"
    assert lab("inventory", "-o", str(inventory)).returncode == 0
    text = inventory.read_text()
    assert "lab_toolkit_repo_url" in text, "the lab serves no toolkit repository (lab_toolkit_repo_url)"
    (work / "role.yml").write_text(PLAY)
    (work / "evaluate.yml").write_text(EVALUATE)
    return work


def playbook(fleet, name, *extra):
    """(rc, {host: changed count}, {host: result}, output) of one ansible-playbook run."""
    results = fleet / ("results-%s" % name)
    results.mkdir(exist_ok=True)
    for old in results.iterdir():
        old.unlink()
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    run = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
                          str(fleet / "inventory.yml"), str(fleet / ("%s.yml" % name)), "-e",
                          "results=%s" % results] + list(extra),
                         capture_output=True, text=True, timeout=900, cwd=str(REPO), env=env)
    changed = dict((host, int(count)) for host, count in
                   re.findall(r"^(h\d+)\s+:\s+ok=\d+\s+changed=(\d+)", run.stdout, re.M))
    found = dict((path.stem, json.loads(path.read_text())) for path in results.iterdir())
    return run.returncode, changed, found, run.stdout + run.stderr


def packages(host):
    out = ok(host, "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n' %s 2>/dev/null; true"
             % " ".join(PACKAGES))
    return dict((line.split()[0], line.split()[1:]) for line in out.splitlines() if line.strip())


def other_lists(host):
    # apt's own bookkeeping (lock, partial/, auxfiles/) appears with any update; index files are per source.
    return sorted(name for name in ok(host, "ls /var/lib/apt/lists").split() if "toolkit" not in name
                  and "10.250.0" not in name and name not in ("lock", "partial", "auxfiles"))


def test_the_role_installs_holds_and_is_idempotent_then_removes(fleet):
    version = re.search(r'"lab_toolkit_version": "([^"]+)"', (fleet / "inventory.yml").read_text()).group(1)
    lists = dict((host, other_lists(host)) for host in HOSTS)

    rc, changed, found, out = playbook(fleet, "role", "--check", "--diff")
    assert rc == 0, out
    assert all(changed[h] > 0 for h in HOSTS) and all(packages(h) == {} for h in HOSTS), out
    assert all(found[h]["actions"][:2] == ["write_key", "write_source"] for h in HOSTS), found

    rc, changed, found, out = playbook(fleet, "role")
    assert rc == 0, out
    for host in HOSTS:
        assert found[host]["converged"] is True and found[host]["installed"] == dict.fromkeys(PACKAGES, version)
        assert found[host]["held"] == dict.fromkeys(PACKAGES, True)
        assert packages(host) == dict((p, [version, "hi"]) for p in PACKAGES)
        assert ok(host, "stat -c '%a %U' " + KEY).split() == ["644", "root"]
        assert "Signed-By: %s" % KEY in ok(host, "cat " + SOURCE)
        assert other_lists(host) == lists[host]  # only our source's index was refreshed
        ok(host, "test -x /usr/bin/nvidia-ctk && test -x /usr/bin/nvidia-container-runtime-hook")

    rc, changed, found, out = playbook(fleet, "role")
    assert rc == 0 and changed == dict.fromkeys(HOSTS, 0), out
    assert all(found[h]["actions"] == [] for h in HOSTS)

    rc, changed, found, out = playbook(fleet, "evaluate")
    assert rc == 0 and all(found[h]["converged"] for h in HOSTS), out
    ok("h1", "apt-mark unhold nvidia-container-toolkit")
    rc, changed, found, out = playbook(fleet, "evaluate")
    assert found["h1"]["converged"] is False and found["h1"]["changes"] == "nvidia-container-toolkit is not held"
    assert found["h2"]["converged"] is True
    rc, changed, found, out = playbook(fleet, "role")
    assert rc == 0 and changed["h1"] > 0 and changed["h2"] == 0 and found["h1"]["actions"] == ["hold"], out

    rc, changed, found, out = playbook(fleet, "role", "-e", "container_toolkit_state=absent")
    assert rc == 0, out
    for host in HOSTS:
        assert found[host]["installed"] == dict.fromkeys(PACKAGES) and found[host]["converged"] is True
        assert all(status[1][1] != "i" for status in packages(host).values())  # rc (config files) or gone
        ok(host, "test ! -e %s && test ! -e %s && test -d /etc/apt/keyrings" % (KEY, SOURCE))
    rc, changed, found, out = playbook(fleet, "role", "-e", "container_toolkit_state=absent")
    assert rc == 0 and changed == dict.fromkeys(HOSTS, 0), out


# ansible.builtin.deb822_repository, with the role's own source: issue 46 asked that the role use it unless a test
# shows what it loses. This is that test (docs/container-toolkit.md, "Why copy and not deb822_repository").
DEB822 = """
- name: The same source through ansible.builtin.deb822_repository
  hosts: gpu_nodes
  become: true
  gather_facts: false
  tasks:
    - name: The toolkit's source, signed by the collection's key file
      ansible.builtin.deb822_repository:
        name: gpufleet-nvidia-container-toolkit
        types: deb
        uris: "{{ lab_toolkit_repo_url }}"
        suites: /
        signed_by: /etc/apt/keyrings/gpufleet-nvidia-container-toolkit.asc
"""


def test_deb822_repository_needs_python3_debian_even_in_check_mode(fleet):
    # A GPU node needs no python3-debian for the role (copy); the builtin needs it on the host for every run, check
    # mode included, where it fails rather than install it.
    for host in HOSTS:
        assert "python3-debian" not in ok(host, "dpkg-query -W -f '${Package}\\n' 'python3-debian*' 2>/dev/null; true")
    (fleet / "deb822.yml").write_text(DEB822)
    rc, changed, found, out = playbook(fleet, "deb822", "--check")
    assert rc != 0, out
    for host in HOSTS:
        assert re.search(r"fatal: \[%s\].*python3-debian must be installed to use check mode" % host, out), out
        ok(host, "test ! -e /etc/apt/sources.list.d/gpufleet-nvidia-container-toolkit.sources")
