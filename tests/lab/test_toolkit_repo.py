"""NVIDIA's container toolkit as Debian packages in the lab's signed apt repository.

Unit level (no lab): tests/toolkit/package builds the two packages NVIDIA's repository has,
with NVIDIA's names, relations, file list and maintainer scripts, into a flat repository
whose index is signed by the lab key; it rebuilds only when an input changes.  The programs
there are stand-ins (copies of /bin/true): what is checked is the packaging.

Lab level (root, real apt on real lab hosts, one systemd and one SysV host): the repository
that `lab up` serves on the bridge installs both packages at 1.20.0-1 with a private apt
configuration; the files are there, the postinst wrote config.toml, NVIDIA's nvidia-ctk runs;
a copy of the repository signed by another key, and one whose Packages file was changed after
signing, are refused by apt.
"""

import gzip
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, lab, ok

PACKAGE_TOOL = REPO / "tests" / "toolkit" / "package"
VERSION = "1.20.0-1"
BASE, TOOLKIT = "nvidia-container-toolkit-base", "nvidia-container-toolkit"
BASE_FILES = {
    "./usr/bin/nvidia-container-runtime": "-rwxr-xr-x",
    "./usr/bin/nvidia-ctk": "-rwxr-xr-x",
    "./usr/bin/nvidia-cdi-hook": "-rwxr-xr-x",
    "./lib/systemd/system/nvidia-cdi-refresh.service": "-rw-r--r--",
    "./lib/systemd/system/nvidia-cdi-refresh.path": "-rw-r--r--",
    "./etc/nvidia-container-toolkit/nvidia-cdi-refresh.env": "-rw-r--r--",
    "./usr/share/doc/nvidia-container-toolkit-base/copyright": "-rw-r--r--",
}
TOOLKIT_FILES = {
    "./usr/bin/nvidia-container-runtime-hook": "-rwxr-xr-x",
    "./usr/share/doc/nvidia-container-toolkit/copyright": "-rw-r--r--",
}


@pytest.fixture(scope="module")
def package():
    loader = importlib.machinery.SourceFileLoader("gpufleet_toolkit_package", str(PACKAGE_TOOL))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def built(package, tmp_path_factory):
    """A repository built from stand-in programs: (out dir, bin dir)."""
    out = tmp_path_factory.mktemp("toolkit")
    bins = out / "bin"
    bins.mkdir()
    for name in package.programs():
        shutil.copy2("/bin/true", bins / name)
    assert package.publish(bins, out) is True
    return out, bins


def suite(out):
    return out / "repo" / "stable" / "deb" / "amd64"


def deb(out, name):
    return suite(out) / ("%s_%s_amd64.deb" % (name, VERSION))


def dpkg_deb(*args):
    return subprocess.run(["dpkg-deb"] + [str(a) for a in args], capture_output=True, text=True,
                          check=True).stdout


def fields(path):
    """The control file of the package at PATH as {field: value} (continuation lines kept)."""
    found, last = {}, None
    for line in dpkg_deb("-f", path).splitlines():
        if line.startswith(" ") and last:
            found[last] += "\n" + line
        else:
            last, value = line.split(": ", 1)
            found[last] = value
    return found


def contents(path):
    """{path: mode} of the package's files (directories left out), all owned by root."""
    files = {}
    for line in dpkg_deb("-c", path).splitlines():
        mode, owner, _size, _day, _time, name = line.split(None, 5)
        assert owner == "root/root", line
        if not mode.startswith("d"):
            files[name] = mode
    return files


def control_member(path, member, tmp_path):
    target = tmp_path / Path(path).name
    if not target.exists():
        subprocess.run(["dpkg-deb", "-e", str(path), str(target)], check=True)
    file = target / member
    return file.read_text() if file.exists() else None


def test_the_two_packages_have_nvidias_names_relations_and_files(built):
    out, _ = built
    base, toolkit = fields(deb(out, BASE)), fields(deb(out, TOOLKIT))
    for f, name in ((base, BASE), (toolkit, TOOLKIT)):
        assert (f["Package"], f["Version"], f["Architecture"]) == (name, VERSION, "amd64")
        assert f["Source"] == "nvidia-container-toolkit"
        assert f["Maintainer"] == "gpufleet lab <lab@gpufleet.invalid>"  # the lab's metadata, not NVIDIA's
        assert "not a package made by NVIDIA" in f["Description"]
        assert int(f["Installed-Size"]) > 0
    assert "Depends" not in base and "Pre-Depends" not in base
    assert toolkit["Depends"] == "nvidia-container-toolkit-base (= %s)" % VERSION
    assert "libnvidia-container-tools" in toolkit["Description"]  # the omitted dependency, said
    assert base["Breaks"] == ("nvidia-container-runtime (<= 3.5.0-1), nvidia-container-runtime-hook, "
                              "nvidia-container-toolkit (<= 1.10.0-1)")
    assert base["Replaces"] == toolkit["Replaces"] == toolkit["Breaks"] == \
        "nvidia-container-runtime (<= 3.5.0-1), nvidia-container-runtime-hook"
    assert contents(deb(out, BASE)) == BASE_FILES
    assert contents(deb(out, TOOLKIT)) == TOOLKIT_FILES


def test_maintainer_scripts_are_nvidias(built, tmp_path):
    out, _ = built
    base, toolkit = deb(out, BASE), deb(out, TOOLKIT)
    assert control_member(base, "conffiles", tmp_path) == "/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env\n"
    assert control_member(toolkit, "conffiles", tmp_path) is None
    postinst = control_member(base, "postinst", tmp_path)
    assert ("/usr/bin/nvidia-ctk --quiet config --config-file=/etc/nvidia-container-runtime/config.toml "
            "--in-place") in postinst
    # debhelper's part of NVIDIA's (compat 9, dh --with systemd, the maintscript)
    assert 'deb-systemd-helper enable "$unit"' in postinst
    assert "deb-systemd-invoke start nvidia-cdi-refresh.path nvidia-cdi-refresh.service" in postinst
    for script in ("preinst", "postinst", "prerm", "postrm"):
        text = control_member(base, script, tmp_path)
        assert ("dpkg-maintscript-helper rm_conffile /etc/systemd/system/nvidia-cdi-refresh.service "
                "1.20.0-1~ nvidia-container-toolkit-base") in text, script
    assert "deb-systemd-invoke stop nvidia-cdi-refresh.path nvidia-cdi-refresh.service" in \
        control_member(base, "prerm", tmp_path)
    assert 'ln -s "$hook" "$link"' in control_member(toolkit, "postinst", tmp_path)
    assert 'rm "$link"' in control_member(toolkit, "postrm", tmp_path)
    assert control_member(toolkit, "preinst", tmp_path) is None
    for path in (base, toolkit):
        for script in ("preinst", "postinst", "prerm", "postrm"):
            member = tmp_path / path.name / script
            if member.exists():
                assert os.access(member, os.X_OK), member
                subprocess.run(["sh", "-n", str(member)], check=True)


def test_the_unit_files_are_nvidias_own(built, package):
    out, _ = built
    staged = out / "unpacked"
    subprocess.run(["dpkg-deb", "-x", str(deb(out, BASE)), str(staged)], check=True)
    sources, _ = package.tarball_files(package.TARBALL, package.source_paths())
    for unit in ("nvidia-cdi-refresh.service", "nvidia-cdi-refresh.path"):
        assert (staged / "lib/systemd/system" / unit).read_bytes() == sources["deployments/systemd/" + unit]
    assert b"Apache License" in (staged / "usr/share/doc" / BASE / "copyright").read_bytes()


def test_the_repository_is_flat_indexed_and_signed(built, tmp_path):
    out, _ = built
    d = suite(out)
    packages = (d / "Packages").read_text()
    assert gzip.decompress((d / "Packages.gz").read_bytes()).decode() == packages
    stanzas = {s.split("\n", 1)[0]: s for s in packages.strip().split("\n\n")}
    assert set(stanzas) == {"Package: " + BASE, "Package: " + TOOLKIT}
    for name in (BASE, TOOLKIT):
        stanza = stanzas["Package: " + name]
        assert "\nFilename: ./%s_%s_amd64.deb\n" % (name, VERSION) in stanza
        assert "\nSHA256: %s\n" % hashlib.sha256(deb(out, name).read_bytes()).hexdigest() in stanza
    release = (d / "Release").read_text()
    for index in ("Packages", "Packages.gz"):
        data = (d / index).read_bytes()
        assert " %s %16d %s\n" % (hashlib.sha256(data).hexdigest(), len(data), index) in release
    keyring = tmp_path / "lab.gpg"
    keyring.write_bytes(subprocess.run(["gpg", "--dearmor"], input=(out / "repo-key.asc").read_bytes(),
                                       capture_output=True, check=True).stdout)
    for argv in ([d / "InRelease"], [d / "Release.gpg", d / "Release"]):
        res = subprocess.run(["gpgv", "--keyring", str(keyring)] + [str(a) for a in argv],
                             capture_output=True, text=True)
        assert res.returncode == 0 and "Good signature" in res.stderr, res.stderr
    assert (out / "repo" / "gpgkey").read_bytes() == (out / "repo-key.asc").read_bytes()
    assert oct((out / "gnupg").stat().st_mode & 0o777) == "0o700"


def test_cached_until_an_input_changes_with_the_same_key(built, package):
    out, bins = built
    before = {p.name: p.stat().st_mtime_ns for p in suite(out).iterdir()}
    key = (out / "repo-key.asc").read_bytes()
    assert package.publish(bins, out) is False
    assert {p.name: p.stat().st_mtime_ns for p in suite(out).iterdir()} == before
    base_deb = deb(out, BASE).read_bytes()
    assert package.publish(bins, out, force=True) is True
    assert deb(out, BASE).read_bytes() == base_deb  # reproducible: same inputs, same package
    shutil.copy2("/bin/false", bins / "nvidia-ctk")  # another program
    packages = (suite(out) / "Packages").read_text()
    assert package.publish(bins, out) is True
    assert (suite(out) / "Packages").read_text() != packages
    assert (out / "repo-key.asc").read_bytes() == key
    assert not any(p.name.startswith("S.gpg-agent") for p in (out / "gnupg").iterdir())


# ---------------------------------------------------------------- on lab hosts

HOSTS = {"h1": "systemd", "h2": "sysvinit"}
# apt's verdict on an altered copy; then what apt would install from it (nothing, when refused).
REFUSED = "apt update && echo UPDATED || echo \"update failed: rc=$?\"\necho '== policy'\npolicy nvidia-container-toolkit\n"
APT = r"""
set -eu
d=/tmp/toolkit-apt-$NAME
rm -rf "$d"; mkdir -p "$d/lists/partial"
printf '%s\n' "$KEY" > "$d/key.asc"
echo "deb [signed-by=$d/key.asc] $URL /" > "$d/sources.list"
O="-o Dir::Etc::SourceList=$d/sources.list -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists=$d/lists"
apt() { apt-get $O -o Acquire::Retries=0 "$@"; }
policy() { apt-cache $O policy "$@"; }
"""


def apt_on(host, name, url, key, script, timeout=300):
    """SCRIPT on HOST after APT's private apt configuration (NAME, URL, armored KEY) is set up."""
    head = "NAME=%s\nURL='%s'\nKEY='%s'\n" % (name, url, key.strip())
    return subprocess.run([sys.executable, str(REPO / "tests/lab/lab"), "ssh", host, "sh -s"],
                          input=head + APT + script, capture_output=True, text=True, timeout=timeout,
                          cwd=str(REPO))


@pytest.fixture(scope="module")
def lab_hosts(empty_lab):
    res = lab("up", "--hosts", str(len(HOSTS)), "--kinds", ",".join(HOSTS.values()), "--gpus", "1")
    assert res.returncode == 0, res.stderr
    inventory = (REPO / ".cache" / "lab" / "inventory.yml").read_text()
    common = json.loads(inventory.split("\n", 1)[1])["all"]["children"]["gpu_nodes"]["vars"]
    return common


def test_the_lab_serves_the_repository_on_the_bridge_only(lab_hosts, package):
    assert lab_hosts["lab_toolkit_repo_url"] == "http://10.250.0.1:8765/stable/deb/$(ARCH)"
    assert lab_hosts["lab_toolkit_version"] == VERSION
    key_file = Path(lab_hosts["lab_toolkit_repo_key_file"])
    assert key_file == REPO / ".cache" / "toolkit" / "repo-key.asc" and "PGP PUBLIC KEY" in key_file.read_text()
    state = json.loads((REPO / ".cache" / "lab" / "state.json").read_text())
    pid = state["toolkit_repo"]["proc"]["pid"]
    status = Path("/proc/%d/status" % pid).read_text()
    assert [l.split()[1] for l in status.splitlines() if l.startswith(("Uid:", "Gid:"))] == ["65534", "65534"]
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", 8765), timeout=2).close()
    # the route from a host to the controller's bridge address, and the file over it
    for host in HOSTS:
        assert "dev eth0" in ok(host, "ip route get 10.250.0.1")
        assert ok(host, "curl -sf http://10.250.0.1:8765/stable/deb/amd64/Release | head -1") == \
            "Origin: gpufleet-lab\n"
    assert package.VERSION == VERSION


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_apt_installs_both_packages_from_the_lab_repository(lab_hosts, host):
    key = Path(lab_hosts["lab_toolkit_repo_key_file"]).read_text()
    url = lab_hosts["lab_toolkit_repo_url"]
    res = apt_on(host, "lab", url, key, """
apt update
echo "== candidate"; policy nvidia-container-toolkit
DEBIAN_FRONTEND=noninteractive apt install -y nvidia-container-toolkit=%(v)s nvidia-container-toolkit-base=%(v)s
echo "== versions"; dpkg-query -W -f '${Package} ${Version} ${Status}\\n' nvidia-container-toolkit nvidia-container-toolkit-base
echo "== files"; for f in /usr/bin/nvidia-container-runtime /usr/bin/nvidia-ctk /usr/bin/nvidia-cdi-hook \
  /usr/bin/nvidia-container-runtime-hook /lib/systemd/system/nvidia-cdi-refresh.service \
  /lib/systemd/system/nvidia-cdi-refresh.path /etc/nvidia-container-toolkit/nvidia-cdi-refresh.env; do
  [ -f "$f" ] && echo "$f"; done
echo "== link"; readlink /usr/bin/nvidia-container-toolkit
echo "== config"; dpkg -S /etc/nvidia-container-runtime/config.toml 2>&1 | sed 's/^dpkg-query: //'
grep -c '^\\[nvidia-container-runtime\\]$' /etc/nvidia-container-runtime/config.toml
echo "== version"; nvidia-ctk --version | head -1
echo "== units"; ls /etc/systemd/system/multi-user.target.wants/ | grep nvidia-cdi
if [ -d /run/systemd/system ]; then systemctl is-active nvidia-cdi-refresh.path; fi
""" % {"v": VERSION})
    assert res.returncode == 0, res.stdout + res.stderr
    sections = dict(part.split("\n", 1) for part in res.stdout.split("== ")[1:])
    # apt's view before the install: the version from the served repository, and where from
    assert "Candidate: %s\n" % VERSION in sections["candidate"], sections["candidate"]
    assert " http://10.250.0.1:8765/stable/deb/amd64  Packages" in sections["candidate"]
    assert sections["versions"].splitlines() == [
        "nvidia-container-toolkit %s install ok installed" % VERSION,
        "nvidia-container-toolkit-base %s install ok installed" % VERSION]
    assert len(sections["files"].splitlines()) == 7, sections["files"]
    assert sections["link"].strip() == "/usr/bin/nvidia-container-runtime-hook"
    # config.toml belongs to no package: the base package's postinst wrote it with nvidia-ctk
    assert sections["config"].splitlines() == [
        "no path found matching pattern /etc/nvidia-container-runtime/config.toml", "1"]
    assert sections["version"].strip() == "NVIDIA Container Toolkit CLI version 1.20.0"
    units = sections["units"].split()
    assert units[:2] == ["nvidia-cdi-refresh.path", "nvidia-cdi-refresh.service"]
    if HOSTS[host] == "systemd":
        assert units[2:] == ["active"]  # started by the postinst, as debhelper's part of NVIDIA's does


@pytest.fixture(scope="module")
def other_server(lab_hosts, tmp_path_factory):
    """A second server on the bridge (started here, stopped by its PID) for altered copies."""
    root = tmp_path_factory.mktemp("altered")
    with socket.socket() as s:
        s.bind(("10.250.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "10.250.0.1", "--directory",
                             str(root), str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("10.250.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert proc.poll() is None, "the second server died"
                subprocess.run(["sleep", "0.05"], check=True)
        yield root, "http://10.250.0.1:%d" % port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def altered_copy(root, name):
    """A copy of the lab's repository under ROOT/NAME; its suite directory."""
    src = REPO / ".cache" / "toolkit" / "repo" / "stable" / "deb" / "amd64"
    dst = root / name / "stable" / "deb" / "amd64"
    shutil.copytree(src, dst)
    return dst


def apt_verdict(lab_hosts, base_url, name):
    """apt update on h1 from the altered copy NAME with the lab key: its output, once refused."""
    key = Path(lab_hosts["lab_toolkit_repo_key_file"]).read_text()
    res = apt_on("h1", name, "%s/%s/stable/deb/$(ARCH)" % (base_url, name), key, REFUSED)
    out = res.stdout + res.stderr
    assert res.returncode == 0 and "update failed: rc=100" in out, out
    assert base_url not in res.stdout.split("== policy")[1], out  # nothing from it reached apt's lists
    return out


def test_apt_refuses_a_repository_signed_by_another_key(lab_hosts, other_server, package, tmp_path):
    root, base_url = other_server
    d = altered_copy(root, "other-key")
    home = tmp_path / "gnupg"
    package.ensure_key(home, tmp_path / "other.asc")  # another lab-only key, made for this test
    for f in ("InRelease", "Release.gpg"):
        (d / f).unlink()
    package.write_index(d, home)
    out = apt_verdict(lab_hosts, base_url, "other-key")
    assert "NO_PUBKEY" in out and "is not signed" in out, out


def test_apt_refuses_a_packages_file_changed_after_signing(lab_hosts, other_server):
    root, base_url = other_server
    d = altered_copy(root, "tampered")
    packages = (d / "Packages").read_text()
    real = [l for l in packages.splitlines() if l.startswith("SHA256: ")][0]
    forged = packages.replace(real, "SHA256: " + "0" * 64)  # same size, another package's hash
    assert forged != packages and len(forged) == len(packages)
    (d / "Packages").write_text(forged)
    with gzip.open(d / "Packages.gz", "wb") as f:
        f.write(forged.encode())
    out = apt_verdict(lab_hosts, base_url, "tampered")
    assert "Hash Sum mismatch" in out or "File has unexpected size" in out, out
