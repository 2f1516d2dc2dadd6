"""Tests of the lab CLI's pure parts (no root, no hosts): GPU descriptions,
mount plans and inventories.  Bringing hosts up is covered by
molecule/default (root, Debian 12)."""

import importlib.machinery
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

LAB_PATH = Path(__file__).resolve().parent / "lab"


@pytest.fixture(scope="module")
def lab():
    loader = importlib.machinery.SourceFileLoader("gpufleet_lab", str(LAB_PATH))
    spec = importlib.util.spec_from_loader("gpufleet_lab", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_gpu_description_is_reproducible_and_in_range(lab):
    a = lab.gpu_description("h1", "1-8", "seed")
    assert a == lab.gpu_description("h1", "1-8", "seed")
    assert a != lab.gpu_description("h1", "1-8", "other")
    for name in ("h%d" % i for i in range(1, 40)):
        desc = lab.gpu_description(name, "2-3", "s")
        gpus = desc["gpus"]
        assert 2 <= len(gpus) <= 3
        assert len({g["name"] for g in gpus}) == 1
        assert len({g["uuid"] for g in gpus}) == len(gpus)
        assert [g["minor"] for g in gpus] == list(range(len(gpus)))
        for g in gpus:
            assert g["uuid"].startswith("GPU-") and len(g["uuid"]) == 40
            assert g["pci_bus_id"] == "00000000:%02X:00.0" % g["pci"]["bus"]
    assert len(lab.gpu_description("h9", "8", "s")["gpus"]) == 8


@pytest.mark.parametrize("spec", ["0", "9", "3-2", "1-9", "x", ""])
def test_bad_gpu_specs(lab, spec):
    with pytest.raises(lab.LabError):
        lab.parse_gpus(spec)


def test_mount_plan_binds_the_first_directory_the_kernel_lacks(lab, tmp_path):
    tree = tmp_path / "sys"
    (tree / "bus/pci/drivers/nvidia/0000:18:00.0").mkdir(parents=True)
    real = tmp_path / "real-sys"
    (real / "bus/pci/drivers/serial").mkdir(parents=True)
    inside = Path("/var/lib/gpufleet-lab/gpu/sys")
    plan = lab.mount_plan(tree, real, inside)
    assert plan == [(inside / "bus/pci/drivers", real / "bus/pci/drivers")]


def test_inventories(lab, tmp_path):
    state = {"hosts": {
        "h1": {"kind": "systemd", "ip": "10.250.0.11",
               "gpus": lab.gpu_description("h1", "2", "s")},
        "h2": {"kind": "upstart", "ip": "10.250.0.12",
               "gpus": lab.gpu_description("h2", "1", "s")},
    }}
    yml = tmp_path / "inv.yml"
    lab.write_inventory(state, yml, "yaml")
    data = json.loads(yml.read_text().split("\n", 1)[1])
    children = data["all"]["children"]
    assert set(children["gpu_nodes"]["hosts"]) == {"h1", "h2"}
    assert children["gpu_nodes"]["hosts"]["h2"]["lab_kind"] == "upstart"
    assert children["gpu_nodes"]["vars"]["ansible_python_interpreter"] == "/usr/bin/python3"
    assert list(children["systemd"]["hosts"]) == ["h1"]
    assert children["sysvinit"]["hosts"] == {}
    ini = tmp_path / "inv.ini"
    lab.write_inventory(state, ini, "ini")
    text = ini.read_text()
    assert "[gpu_nodes]\nh1 ansible_host=10.250.0.11 lab_kind=systemd" in text
    assert "\n[upstart]\nh2\n" in text


def test_both_inventory_formats_give_ansible_the_same_variables(lab, tmp_path):
    """What Ansible reads from each format (ansible-inventory), the toolkit's settings included: the same
    values and types (the INI parser reads a Python literal, a quoted template stays a template)."""
    state = {"hosts": {"h1": {"kind": "systemd", "ip": "10.250.0.11", "gpus": lab.gpu_description("h1", "2", "s")}}}
    seen = {}
    for fmt, name in (("yaml", "inv.yml"), ("ini", "inv.ini")):
        lab.write_inventory(state, tmp_path / name, fmt)
        out = subprocess.run([str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(tmp_path / name),
                              "--host", "h1"], check=True, capture_output=True, text=True).stdout
        seen[fmt] = json.loads(out)
    wanted = ("gpu_node_container_toolkit", "container_toolkit_repo_url", "container_toolkit_repo_key",
              "container_toolkit_version", "lab_toolkit_repo_url", "lab_toolkit_version", "ansible_ssh_common_args")
    assert {k: seen["ini"][k] for k in wanted} == {k: seen["yaml"][k] for k in wanted}
    assert seen["ini"]["gpu_node_container_toolkit"] is True
    assert seen["ini"]["container_toolkit_repo_key"] == '{{ lookup("file", lab_toolkit_repo_key_file) }}'


def inventory_groups(lab, state, tmp_path):
    """The groups of the YAML inventory `lab` writes for ``state``."""
    yml = tmp_path / "inv.yml"
    lab.write_inventory(state, yml, "yaml")
    return json.loads(yml.read_text().split("\n", 1)[1])["all"]["children"]


def test_inventory_groups_every_upstart_kind_under_upstart(lab, tmp_path):
    kinds = ["upstart", "upstart06", "sysvinit"]
    state = {"hosts": {"h%d" % (i + 1): {"kind": k, "ip": "10.250.0.%d" % (11 + i),
                                         "gpus": lab.gpu_description("h1", "1", "s")}
                       for i, k in enumerate(kinds)}}
    children = inventory_groups(lab, state, tmp_path)
    assert list(children["upstart"]["hosts"]) == ["h1", "h2"]
    assert list(children["upstart06"]["hosts"]) == ["h2"]
    assert list(children["sysvinit"]["hosts"]) == ["h3"]
    hosts = children["gpu_nodes"]["hosts"]
    assert [hosts[h]["lab_init_system"] for h in ("h1", "h2", "h3")] == ["upstart", "upstart", "sysvinit"]
    assert [hosts[h]["lab_kind"] for h in ("h1", "h2", "h3")] == ["upstart", "upstart06", "sysvinit"]


def test_upstart_build_hash_follows_sources_and_recipe(lab, monkeypatch):
    before = lab.upstart_hash()
    assert before == lab.upstart_hash()
    monkeypatch.setattr(lab, "UPSTART_BUILD", lab.UPSTART_BUILD + "\n# changed\n")
    assert lab.upstart_hash() != before
    layer = lab.upstart_layer_hash("upstart")
    assert layer != lab.upstart_layer_hash("upstart06")


def test_a_host_that_ran_out_of_inotify_instances_is_explained(lab, tmp_path):
    console = tmp_path / "console.log"
    console.write_text("Welcome to Debian GNU/Linux 12 (bookworm)!\n"
                       "Failed to create control group inotify object: Too many open files\n"
                       "Failed to allocate manager object: Too many open files\n")
    hint = lab.boot_hint(console)
    assert "fs.inotify.max_user_instances" in hint and "--kinds" in hint and "tests/lab/README.md" in hint
    # any other death, or no console at all, gets no guess
    console.write_text("Failed to mount /proc: Permission denied\n")
    assert lab.boot_hint(console) == ""
    assert lab.boot_hint(tmp_path / "missing.log") == ""


def test_trixie_hosts_are_systemd_hosts_of_their_own_rootfs_always_on_cgroup_v2(lab, tmp_path):
    """A Debian 13 host: the systemd init system, its own cached rootfs and stamp, the 550 driver of its
    NVIDIA daemon, and cgroup v2 whatever --cgroup says."""
    assert lab.KIND_SPECS["trixie"][:2] == ("systemd", "systemd")
    assert lab.kind_root("trixie") == lab.ROOTFS / "trixie" and lab.kind_root("systemd") == lab.BASE
    assert lab.suites_of(["systemd", "sysvinit"]) == [] and lab.suites_of(None) == ["forky", "trixie"]
    assert lab.suite_hash("trixie") != lab.base_hash() and "docker-cli" in lab.TRIXIE_PACKAGES
    assert lab.gpu_description("h5", "2", "s", "trixie")["driver_version"] == "550.163.01"
    assert lab.gpu_description("h5", "2", "s")["driver_version"] == lab.DRIVER_VERSION
    v1, v2 = (type("Args", (), {"cgroup": c})() for c in ("v1", "v2"))
    assert [lab.cgroup_of("trixie", a) for a in (v1, v2)] == ["v2", "v2"]
    assert [lab.cgroup_of("systemd", a) for a in (v1, v2)] == ["v1", "v2"]
    assert lab.BOOTED_CHECK["trixie"] == lab.BOOTED_CHECK["systemd"]
    state = {"hosts": {"h1": {"kind": "systemd", "ip": "10.250.0.11", "gpus": lab.gpu_description("h1", "1", "s")},
                       "h2": {"kind": "trixie", "ip": "10.250.0.12", "cgroup": "v2",
                              "gpus": lab.gpu_description("h2", "1", "s", "trixie")}}}
    children = inventory_groups(lab, state, tmp_path)
    assert list(children["systemd"]["hosts"]) == ["h1", "h2"] and list(children["trixie"]["hosts"]) == ["h2"]
    hosts = children["gpu_nodes"]["hosts"]
    assert [(hosts[h]["lab_suite"], hosts[h]["lab_cgroup"]) for h in ("h1", "h2")] == \
        [("bookworm", "v1"), ("trixie", "v2")]


def test_forky_hosts_are_testing_systemd_hosts_of_their_own_rootfs_always_on_cgroup_v2(lab, tmp_path, monkeypatch):
    """A Debian testing host: like trixie (systemd, its own rootfs and stamp, cgroup v2 whatever --cgroup says:
    systemd 258 has no cgroup v1), debootstrapped with sid's script, its versions recorded rather than pinned, and
    the fake driver following the NVIDIA daemon its rootfs really has."""
    assert lab.KIND_SPECS["forky"][:2] == ("systemd", "systemd")
    assert lab.kind_suite("forky") == "forky" and lab.kind_root("forky") == lab.ROOTFS / "forky"
    assert lab.suites_of(["forky"]) == ["forky"] and lab.suites_of(["trixie", "forky"]) == ["forky", "trixie"]
    assert len({lab.suite_hash(s) for s in ("bookworm", "trixie", "forky")}) == 3
    assert "docker-cli" in lab.FORKY_PACKAGES and lab.DEBOOTSTRAP_SCRIPT.get("forky") == "sid"
    assert "forky" in lab.MOVING_SUITES and "trixie" not in lab.MOVING_SUITES
    v1, v2 = (type("Args", (), {"cgroup": c})() for c in ("v1", "v2"))
    assert [lab.cgroup_of("forky", a) for a in (v1, v2)] == ["v2", "v2"]
    assert lab.BOOTED_CHECK["forky"] == lab.BOOTED_CHECK["systemd"]
    # the driver: SUITE_DRIVER_VERSION while the rootfs's daemon is that version (or not built) ...
    monkeypatch.setattr(lab, "suite_versions", lambda suite, root=None: {})
    assert lab.gpu_description("h6", "2", "s", "forky")["driver_version"] == lab.SUITE_DRIVER_VERSION["forky"]
    monkeypatch.setattr(lab, "suite_versions", lambda suite, root=None: {"nvidia-persistenced": "550.163.01-1"})
    assert lab.gpu_description("h6", "2", "s", "forky")["driver_version"] == "550.163.01"
    # ... and the daemon's own when testing moved it; trixie (stable) keeps its table entry
    monkeypatch.setattr(lab, "suite_versions", lambda suite, root=None: {"nvidia-persistenced": "580.95.05-1"})
    assert lab.gpu_description("h6", "2", "s", "forky")["driver_version"] == "580.95.05"
    assert lab.gpu_description("h5", "2", "s", "trixie")["driver_version"] == "550.163.01"
    assert lab.upstream_version("1:26.1.5+dfsg1-9+deb13u1") == "26.1.5" and lab.upstream_version(None) is None
    state = {"hosts": {"h5": {"kind": "trixie", "ip": "10.250.0.15", "cgroup": "v2",
                              "gpus": lab.gpu_description("h5", "1", "s", "trixie")},
                       "h6": {"kind": "forky", "ip": "10.250.0.16", "cgroup": "v2",
                              "gpus": lab.gpu_description("h6", "1", "s", "forky")}}}
    children = inventory_groups(lab, state, tmp_path)
    assert list(children["systemd"]["hosts"]) == ["h5", "h6"] and list(children["forky"]["hosts"]) == ["h6"]
    hosts = children["gpu_nodes"]["hosts"]
    assert (hosts["h6"]["lab_suite"], hosts["h6"]["lab_cgroup"], hosts["h6"]["lab_init_system"]) == \
        ("forky", "v2", "systemd")


def test_suite_versions_reads_the_rootfs_dpkg_database(lab, tmp_path):
    """What `lab build` prints and `lab status` shows: the rootfs's own dpkg database, the interpreter python3
    names included; nothing for a rootfs not built."""
    assert lab.suite_versions("forky", tmp_path / "none") == {}
    dpkg = tmp_path / "var/lib/dpkg"
    (dpkg / "info").mkdir(parents=True)
    (dpkg / "updates").mkdir()
    (dpkg / "status").write_text("".join(
        "Package: %s\nStatus: install ok installed\nArchitecture: amd64\nVersion: %s\nMaintainer: x\n"
        "Description: x\n\n" % pv for pv in (("systemd", "262-1"), ("python3", "3.14.7-3"),
                                             ("python3.14", "3.14.8-1"), ("zsh", "5.9-8"))))
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/python3").symlink_to("python3.14")
    found = lab.suite_versions("forky", tmp_path)
    assert found == {"systemd": "262-1", "python3": "3.14.7-3", "python3.14": "3.14.8-1"}
    assert lab.describe_versions(found) == "systemd 262-1, python3 3.14.7-3, python3.14 3.14.8-1"
