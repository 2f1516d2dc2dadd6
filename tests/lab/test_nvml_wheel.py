"""NVML without touching the host's Python: gpu_persistence on a Debian 12 lab host whose system Python refuses pip
(PEP 668: /usr/lib/python3.11/EXTERNALLY-MANAGED, as Debian ships it), with no nvidia-ml-py of its own and no
persistence daemon running, so NVML is needed.

Without gpu_persistence_nvml_wheel the role fails, saying what to do, and installs nothing. With a real wheel of
nvidia-ml-py from PyPI (downloaded once into .cache/wheels, the version requirements/dev.txt pins, as a site would
take it from its own index), the role copies it into the collection's root-only /usr/lib/gpufleet/python and the
module imports pynvml from it: the GPUs' modes are set through NVML (the driver kit's fake library), the host's own
Python still has no pynvml, and a second run changes nothing.
"""

import hashlib
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import CACHE, REPO, lab, ok

HOST = "h1"
PLAY = """
- name: Per-GPU persistence with no daemon answering
  hosts: gpu_nodes
  become: true
  gather_facts: false
  roles:
    - role: gpufleet.nvidia.gpu_persistence
      vars:
        gpu_persistence_mode: enabled
  post_tasks:
    - name: Keep the result on the controller
      ansible.builtin.copy:
        content: "{{ gpu_persistence_result | to_json }}"
        dest: "{{ results }}/{{ inventory_hostname }}.json"
        mode: "0600"
      delegate_to: localhost
      become: false
      changed_when: false
"""


def pinned():
    text = (REPO / "requirements" / "dev.txt").read_text()
    return re.search(r"^nvidia-ml-py==(\S+)", text, re.M).group(1)


@pytest.fixture(scope="module")
def wheel():
    """nvidia-ml-py's wheel from PyPI, the pinned version, cached."""
    version = pinned()
    where = CACHE.parent / "wheels"
    found = sorted(where.glob("nvidia_ml_py-%s-py3-none-any.whl" % version))
    if not found:
        where.mkdir(parents=True, exist_ok=True)
        run = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                              "-d", str(where), "nvidia-ml-py==%s" % version], capture_output=True, text=True,
                             timeout=300)
        assert run.returncode == 0, run.stdout + run.stderr
        found = sorted(where.glob("nvidia_ml_py-%s-py3-none-any.whl" % version))
    assert found, "pip download gave no wheel of nvidia-ml-py %s" % version
    return found[-1]


@pytest.fixture(scope="module")
def fleet(empty_lab, tmp_path_factory):
    up = lab("up", "--hosts", "1", "--kinds", "sysvinit", "--gpus", "3", timeout=900)
    assert up.returncode == 0, up.stderr
    work = tmp_path_factory.mktemp("nvmlwheel")
    assert lab("inventory", "-o", str(work / "inventory.yml")).returncode == 0
    (work / "play.yml").write_text(PLAY)
    # the host as a PEP 668 Debian 12 host without nvidia-ml-py: the lab's image has one (removed here); pip is
    # refused by the interpreter's EXTERNALLY-MANAGED marker; no persistence daemon runs (the lab starts none)
    ok(HOST, "rm -f /usr/lib/python3/dist-packages/pynvml.py; test -f /usr/lib/python3.11/EXTERNALLY-MANAGED; "
             "! pidof nvidia-persistenced; ! python3 -c 'import pynvml' 2>/dev/null")
    return work


def playbook(fleet, *extra):
    results = fleet / "results"
    results.mkdir(exist_ok=True)
    for old in results.iterdir():
        old.unlink()
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    run = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
                          str(fleet / "inventory.yml"), str(fleet / "play.yml"), "-e", "results=%s" % results]
                         + list(extra), capture_output=True, text=True, timeout=600, cwd=str(REPO), env=env)
    changed = dict((host, int(count)) for host, count in
                   re.findall(r"^(h\d+)\s+:\s+ok=\d+\s+changed=(\d+)", run.stdout, re.M))
    found = dict((path.stem, json.loads(path.read_text())) for path in results.iterdir())
    return run.returncode, changed, found, run.stdout + run.stderr


def test_nvml_from_the_sites_wheel_never_from_pip(fleet, wheel):
    rc, unused, found, out = playbook(fleet)
    assert rc != 0 and "gpu_persistence_nvml_wheel" in out and "nvidia-ml-py" in out, out
    assert ok(HOST, "ls /usr/lib/gpufleet/python 2>/dev/null | wc -l").strip() == "0"

    rc, changed, found, out = playbook(fleet, "-e", "gpu_persistence_nvml_wheel=%s" % wheel)
    assert rc == 0, out
    assert found[HOST]["backend"] == "nvml" and [gpu["after"] for gpu in found[HOST]["gpus"]] == ["enabled"] * 3
    placed = "/usr/lib/gpufleet/python/%s" % wheel.name
    assert ok(HOST, "stat -c '%a %U' " + placed).split() == ["644", "root"]
    assert ok(HOST, "sha256sum " + placed).split()[0] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    # nothing went into the host's Python: it still has no pynvml, and pip was never asked
    ok(HOST, "! python3 -c 'import pynvml' 2>/dev/null && "
             "! ls /usr/lib/python3/dist-packages /usr/local/lib/python3*/dist-packages 2>/dev/null | grep -i nvml")

    rc, changed, found, out = playbook(fleet, "-e", "gpu_persistence_nvml_wheel=%s" % wheel)
    assert rc == 0 and changed[HOST] == 0, out
