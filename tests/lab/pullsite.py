"""The site repository of the lab's pull-mode tests and benchmark: made here, served by the lab's git daemon.

A work tree in a temporary directory with ``local.yml`` (``- import_playbook: gpufleet.nvidia.site``),
``group_vars/gpu_nodes.yml`` (the lab inventory's settings, the toolkit repository's key inline) and this
checkout's collection built and installed under ``collections/`` (as a site vendors the collection it runs); each
commit, signed with a key made here (gpg) or not, is pushed to ``.cache/pull/git/site.git``, which ``lab
pull-serve`` serves as ``git://GATEWAY/site.git``.
"""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
LAB = [sys.executable, str(HERE / "lab")]
GATEWAY = "10.250.0.1"
GIT_DIR = REPO / ".cache" / "pull" / "git"
REPO_URL = "git://%s/site.git" % GATEWAY
WHEELHOUSE = "http://%s:8766/" % GATEWAY
ANSIBLE_CORE = "ansible-core==2.19.14"
# The gpufleet.nvidia.pull role on every lab host, its variables given with -e.
ROLE_PLAY = """
- name: Pull mode
  hosts: gpu_nodes
  become: true
  gather_facts: false
  roles:
    - role: gpufleet.nvidia.pull
"""


def role_vars(key, interval, splay, **more):
    """The role's variables on the lab: the lab's git daemon and wheelhouse, signed commits required."""
    found = dict(pull_url=REPO_URL, pull_pip_find_links=WHEELHOUSE, pull_pip_trusted_hosts=[GATEWAY],
                 pull_ansible_core=ANSIBLE_CORE, pull_interval=interval, pull_splay=splay, pull_boot_delay=5,
                 pull_only_if_changed=True, pull_verify_commit=True, pull_gpg_keys=[key])
    found.update(more)
    return found


def lab(*args, timeout=600):
    return subprocess.run(LAB + list(args), capture_output=True, text=True, timeout=timeout, cwd=str(REPO))


def git(workdir, *args, env=None):
    res = subprocess.run(["git", "-C", workdir] + list(args), capture_output=True, text=True, timeout=300,
                         env=env)
    assert res.returncode == 0, "git %s: %s%s" % (args, res.stdout, res.stderr)
    return res.stdout.strip()


class Site(object):
    """The site repository: a work tree here, pushed to the bare repository the lab's git daemon serves."""

    def __init__(self, workdir, gnupg):
        self.tree = os.path.join(workdir, "site")
        self.gnupg = gnupg
        self.env = dict(os.environ, GNUPGHOME=gnupg, GIT_AUTHOR_NAME="site", GIT_AUTHOR_EMAIL="site@lab.invalid",
                        GIT_COMMITTER_NAME="site", GIT_COMMITTER_EMAIL="site@lab.invalid")
        self.bare = GIT_DIR / "site.git"

    def write(self, path, text):
        with open(os.path.join(self.tree, path), "w") as handle:
            handle.write(text)

    def commit(self, message, signed=True):
        git(self.tree, "add", "-A", env=self.env)
        git(self.tree, "commit", "-q", "-m", message, *(["-S"] if signed else ["--no-gpg-sign"]), env=self.env)
        head = git(self.tree, "rev-parse", "HEAD")
        git(self.tree, "push", "-q", str(self.bare), "HEAD:main", env=self.env)
        return head, time.time()


def make_key(gnupg):
    os.makedirs(gnupg, mode=0o700)
    res = subprocess.run(["gpg", "--batch", "--homedir", gnupg, "--passphrase", "", "--quick-gen-key",
                          "gpufleet lab site <site@lab.invalid>", "ed25519", "sign", "never"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    out = subprocess.run(["gpg", "--batch", "--homedir", gnupg, "--armor", "--export"], capture_output=True,
                         text=True, timeout=60)
    return out.stdout


def collection_into(tree, workdir):
    """This checkout's collection, built and installed under the repository's collections/ (as a site vendors it)."""
    build = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-galaxy"), "collection", "build", "--force",
                            "--output-path", workdir, str(REPO)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr
    tarball = re.search(r"(/\S+\.tar\.gz)", build.stdout).group(1)
    inst = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-galaxy"), "collection", "install", "--force",
                           "-p", os.path.join(tree, "collections"), tarball], capture_output=True, text=True,
                          timeout=600)
    assert inst.returncode == 0, inst.stderr


def lab_vars():
    """The lab inventory's settings a site.yml run needs on a node, with the toolkit repository's key inline (a
    controller's file is not on the node)."""
    text = lab("inventory", "--format", "yaml", "--output", "-").stdout
    inventory = json.loads(text.split("\n", 1)[1])
    common = inventory["all"]["children"]["gpu_nodes"]["vars"]
    found = {}
    for key, value in common.items():
        if key.startswith("ansible_") or key == "lab_toolkit_repo_key_file":
            continue
        found[key] = value
    with open(common["lab_toolkit_repo_key_file"]) as handle:
        found["container_toolkit_repo_key"] = handle.read()
    return found


def new_site(workdir, signed=True):
    """A fresh site repository (the bare one replaced) with its first commit: ``(site, key, commit, pushed at)``."""
    import shutil
    gnupg = os.path.join(workdir, "gnupg")
    key = make_key(gnupg)
    site = Site(workdir, gnupg)
    if site.bare.exists():
        shutil.rmtree(str(site.bare))
    GIT_DIR.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(site.bare)], check=True)
    os.makedirs(os.path.join(site.tree, "group_vars"))
    git(site.tree, "init", "-q", "-b", "main")
    site.write("local.yml", "- import_playbook: gpufleet.nvidia.site\n")
    site.settings = lab_vars()
    site.write("group_vars/gpu_nodes.yml", json.dumps(site.settings, indent=1))
    collection_into(site.tree, workdir)
    commit, pushed = site.commit("the fleet, first", signed=signed)
    return site, key, commit, pushed
