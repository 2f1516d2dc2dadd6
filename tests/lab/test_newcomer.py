"""A newcomer, as the README tells one: a fresh directory outside the repository with only a requirements.yml, an
inventory and the README's own playbook; the collection installed from the tarball built from this checkout (the
README's commented tarball entry), nothing of the repository on any path Ansible reads; then the collection's
playbook by its name (gpufleet.nvidia.site) and the README's playbook, against two lab hosts (systemd and SysV).
"""

import os
import re
import subprocess
import sys

import pytest

from conftest import REPO, lab

BIN = os.path.dirname(sys.executable)


def readme_blocks(kind):
    text = (REPO / "README.md").read_text()
    return re.findall(r"```%s\n(.*?)```" % kind, text, re.S)


def clean_env(work):
    """The environment of a newcomer's shell: none of the suite's Ansible or Python paths into this repository."""
    env = dict((key, value) for key, value in os.environ.items()
               if not key.startswith("ANSIBLE_") and key not in ("PYTHONPATH", "MOLECULE_PROJECT_DIRECTORY"))
    env.update(ANSIBLE_CONFIG=str(work / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    return env


def run(work, *argv, timeout=900):
    res = subprocess.run([os.path.join(BIN, argv[0])] + list(argv[1:]), cwd=str(work), env=clean_env(work),
                         capture_output=True, text=True, timeout=timeout)
    return res.returncode, res.stdout + res.stderr


@pytest.fixture(scope="module")
def newcomer(empty_lab, tmp_path_factory):
    work = tmp_path_factory.mktemp("newcomer")
    build = tmp_path_factory.mktemp("build")
    rc, out = run(build, "ansible-galaxy", "collection", "build", "--output-path", str(build), str(REPO))
    assert rc == 0, out
    [tarball] = sorted(build.glob("gpufleet-nvidia-*.tar.gz"))
    # The README's requirements.yml, its tarball entry taken instead of the git one (which names the site's server).
    [requirements] = [block for block in readme_blocks("yaml") if block.startswith("collections:")]
    entry = re.search(r"# or a built tarball:\n  # - name: (\S+)\n  #   type: file", requirements)
    assert entry, "the README's requirements.yml has no commented tarball entry:\n" + requirements
    (work / "requirements.yml").write_text("collections:\n  - name: %s\n    type: file\n" % tarball)
    (work / "ansible.cfg").write_text("[defaults]\ncollections_path = ./collections\n")
    rc, out = run(work, "ansible-galaxy", "collection", "install", "-r", "requirements.yml")
    assert rc == 0, out
    assert (work / "collections/ansible_collections/gpufleet/nvidia/MANIFEST.json").is_file(), out
    up = lab("up", "--hosts", "2", "--kinds", "systemd,sysvinit", "--gpus", "2", timeout=900)
    assert up.returncode == 0, up.stderr
    assert lab("inventory", "--format", "ini", "-o", str(work / "inventory")).returncode == 0
    # the README's own play targets gpu_workers: the lab's gpu_nodes are that group too
    with open(str(work / "inventory"), "a") as handle:
        handle.write("\n[gpu_workers:children]\ngpu_nodes\n")
    [play] = [block for block in readme_blocks("yaml") if "include_role" in block]
    (work / "playbook.yml").write_text("---\n" + play)
    assert sorted(path.name for path in work.iterdir()) == [
        "ansible.cfg", "collections", "inventory", "playbook.yml", "requirements.yml"]
    return work


def test_the_readme_works_for_a_newcomer(newcomer):
    rc, out = run(newcomer, "ansible-galaxy", "collection", "list", "gpufleet.nvidia")
    assert rc == 0 and str(newcomer / "collections" / "ansible_collections") in out, out
    rc, out = run(newcomer, "ansible-playbook", "-i", "inventory", "gpufleet.nvidia.site")
    assert rc == 0, out
    assert re.search(r'"h1 ok found=', out) and re.search(r'"h2 ok found=', out), out
    # the collection that ran is the installed copy: no path to the repository's collection in what Ansible printed
    # (the tools themselves may live in the checkout's .venv, whose warnings name it)
    for inside in ("plugins", "roles", "playbooks", ".build"):
        assert str(REPO / inside) not in out, out
    rc, out = run(newcomer, "ansible-playbook", "-i", "inventory", "playbook.yml")
    assert rc == 0, out
    for host in ("h1", "h2"):
        assert re.search(r"^%s\s+:\s+ok=\d+\s+changed=0" % host, out, re.M), out
