"""The lab's pull-mode infrastructure (tests/lab/lab, "Pull mode" in tests/lab/README.md).

Unit level (no root, no network): the URLs, pip's options, the wheelhouse's spec and stamp, the
Requires-Python check.

Lab level (root, the lab, PyPI reachable the first time): one Debian 12 host of every kind (h1 systemd,
h2 sysvinit, h3 upstart, h4 upstart06).  cron runs at boot on each (a file in /etc/cron.d runs within a
minute); `lab pull-serve` serves the wheelhouse and the git repositories on the bridge, and is idempotent;
from a host, a venv gets ansible-core from the wheelhouse, a bare repository made after the daemon started is
cloned, a commit pushed into it afterwards is pulled, a push to the daemon is refused; `lab down` stops both
servers.  Only one lab fits on a machine, so the fixture fails when lab hosts are already up.
"""

import importlib.machinery
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import HERE, lab as lab_cli, ok, sh

KINDS = ("systemd", "sysvinit", "upstart", "upstart06")
HOSTS = {"h%d" % (i + 1): kind for i, kind in enumerate(KINDS)}
REPO_NAME = "pull-infra-test.git"


@pytest.fixture(scope="module")
def lab():
    loader = importlib.machinery.SourceFileLoader("gpufleet_lab", str(HERE / "lab"))
    spec = importlib.util.spec_from_loader("gpufleet_lab", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


# ---------------------------------------------------------------- unit level

def test_urls_and_pip_args(lab):
    assert lab.pull_wheelhouse_url() == "http://10.250.0.1:8766/"
    assert lab.pull_git_url("site.git") == "git://10.250.0.1/site.git"
    assert lab.pull_git_url() == "git://10.250.0.1/"
    assert lab.pull_pip_args() == ["--no-index", "--trusted-host", "10.250.0.1",
                                   "--find-links", "http://10.250.0.1:8766/"]
    assert lab.PULL_GIT_DIR == lab.PULL / "git" and lab.PULL_WHEELHOUSE == lab.PULL / "wheelhouse"


def test_wheelhouse_spec_pins_ansible_core_for_the_hosts_python(lab):
    spec = lab.pull_wheelhouse_spec()
    assert spec["requirements"] == ["ansible-core==" + lab.PULL_ANSIBLE_CORE_VERSION]
    assert lab.PULL_ANSIBLE_CORE_VERSION.startswith("2.19.")
    opts = spec["options"]
    assert "--only-binary=:all:" in opts
    assert opts[opts.index("--python-version") + 1] == "3.11"
    assert opts[opts.index("--abi") + 1] == "cp311"


def test_requires_python_check(lab):
    assert lab._requires_python_ok(">=3.11", "3.11")
    assert not lab._requires_python_ok(">=3.12", "3.11")
    assert lab._requires_python_ok(None, "3.11")


def test_wheel_metadata_and_stamp(lab, tmp_path, monkeypatch):
    house = tmp_path / "wheelhouse"
    house.mkdir()
    version = lab.PULL_ANSIBLE_CORE_VERSION
    whl = house / ("ansible_core-%s-py3-none-any.whl" % version)
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("ansible_core-%s.dist-info/METADATA" % version,
                   "Metadata-Version: 2.1\nName: ansible-core\nVersion: %s\nRequires-Python: >=3.11\n" % version)
    assert lab.wheel_metadata(whl)["Requires-Python"] == ">=3.11"
    monkeypatch.setattr(lab, "PULL_WHEELHOUSE", house)
    monkeypatch.setattr(lab, "PULL_WHEELHOUSE_STAMP", tmp_path / "wheelhouse.stamp")
    assert not lab.pull_wheelhouse_ready()
    (tmp_path / "wheelhouse.stamp").write_text(json.dumps(lab.pull_wheelhouse_spec(), sort_keys=True) + "\n")
    assert lab.pull_wheelhouse_ready()
    monkeypatch.setattr(lab, "PULL_ANSIBLE_CORE_VERSION", "2.19.0")
    assert not lab.pull_wheelhouse_ready()  # a changed spec downloads again


# ---------------------------------------------------------------- lab level

def git(*args, cwd=None):
    env = dict(os.environ, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null", GIT_AUTHOR_NAME="lab",
               GIT_AUTHOR_EMAIL="lab@lab", GIT_COMMITTER_NAME="lab", GIT_COMMITTER_EMAIL="lab@lab")
    res = subprocess.run(["git"] + list(args), cwd=cwd, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def listening(port):
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("10.250.0.1", port)) == 0


@pytest.fixture(scope="module")
def fleet(empty_lab, lab):
    res = lab_cli("up", "--hosts", str(len(HOSTS)), "--kinds", ",".join(KINDS), "--gpus", "1")
    assert res.returncode == 0, res.stderr
    status = json.loads(lab_cli("status", "--json").stdout)
    assert {h["host"]: h["kind"] for h in status["hosts"]} == HOSTS
    return HOSTS


@pytest.fixture(scope="module")
def served(fleet, lab, tmp_path_factory):
    """`lab pull-serve`; a bare repository made after it, with one commit; (its name, a work tree)."""
    t0 = time.monotonic()
    res = lab_cli("pull-serve")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == [lab.pull_wheelhouse_url(), lab.pull_git_url()]
    print("pull-serve: %.1f s" % (time.monotonic() - t0))
    bare = lab.PULL_GIT_DIR / REPO_NAME
    shutil.rmtree(bare, ignore_errors=True)
    work = tmp_path_factory.mktemp("work")
    git("init", "-q", "--bare", "-b", "main", str(bare))
    git("init", "-q", "-b", "main", str(work))
    (work / "site.yml").write_text("- hosts: localhost\n")
    git("add", "site.yml", cwd=work)
    git("commit", "-q", "-m", "first", cwd=work)
    git("push", "-q", str(bare), "main", cwd=work)
    yield work
    shutil.rmtree(bare, ignore_errors=True)


def test_cron_runs_at_boot_on_every_kind(fleet):
    for host in fleet:
        ok(host, "rm -f /tmp/cron-ran; echo '* * * * * root touch /tmp/cron-ran' > /etc/cron.d/x")
    deadline = time.monotonic() + 75
    waiting = set(fleet)
    while waiting and time.monotonic() < deadline:
        waiting = {h for h in waiting if sh(h, "test -e /tmp/cron-ran").returncode != 0}
        time.sleep(2)
    for host in fleet:
        sh(host, "rm -f /etc/cron.d/x /tmp/cron-ran")
    assert not waiting, "cron ran nothing within 75 s on %s" % sorted(waiting)


def test_pull_serve_is_idempotent(served, lab):
    before = {k: lab.load_state()[k]["proc"] for k in ("pull_wheelhouse", "pull_git")}
    res = lab_cli("pull-serve", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["ansible_core"] == lab.PULL_ANSIBLE_CORE_VERSION
    assert {k: lab.load_state()[k]["proc"] for k in before} == before


def test_pip_installs_ansible_core_from_the_wheelhouse(served, lab, fleet):
    script = ("rm -rf /opt/pull-venv && python3 -m venv /opt/pull-venv && /opt/pull-venv/bin/pip install -q "
              "--disable-pip-version-check %s ansible-core && /opt/pull-venv/bin/ansible-pull --version 2>/dev/null"
              % " ".join(lab.pull_pip_args()))

    def install(host):
        t0 = time.monotonic()
        return host, ok(host, script, timeout=300), time.monotonic() - t0

    with ThreadPoolExecutor(len(fleet)) as pool:
        for host, out, took in pool.map(install, fleet):
            print("%s: venv and pip install %.1f s" % (host, took))
            assert out.splitlines()[0] == "ansible-pull [core %s]" % lab.PULL_ANSIBLE_CORE_VERSION, out


def test_git_clone_pull_and_no_push(served, lab, fleet):
    url = lab.pull_git_url(REPO_NAME)
    for host in fleet:
        ok(host, "rm -rf /root/pull-clone && git clone -q %s /root/pull-clone" % url)
    git("commit", "-q", "--allow-empty", "-m", "second", cwd=served)
    git("push", "-q", str(lab.PULL_GIT_DIR / REPO_NAME), "main", cwd=served)
    head = git("rev-parse", "HEAD", cwd=served)
    for host in fleet:
        out = ok(host, "git -C /root/pull-clone pull -q --ff-only && git -C /root/pull-clone rev-parse HEAD")
        assert out.strip() == head, host
    res = sh("h1", "cd /root/pull-clone && git -c user.name=x -c user.email=x@x commit -q --allow-empty -m x "
                   "&& git push origin main")
    assert res.returncode != 0 and "service not enabled" in res.stderr, res.stderr


def test_down_stops_both_servers(served, lab):
    assert listening(lab.PULL_WHEELHOUSE_PORT) and listening(lab.PULL_GIT_PORT)
    recs = [lab.load_state()[k]["proc"] for k in ("pull_wheelhouse", "pull_git")]
    res = lab_cli("down")
    assert res.returncode == 0, res.stderr
    assert not any(lab.alive(r) for r in recs)
    assert "pull_git" not in lab.load_state()
