"""NVIDIA's container toolkit (1.20.0, built from source by tests/toolkit/build) on the fake driver.

Real programs on a fake host tree in a private mount namespace (fakehost.nsrun, with the tree's
ld.so.cache): ``nvidia-ctk cdi generate`` reads the fake NVML and the device nodes and writes a CDI spec;
NVIDIA's ``nvidia-container-runtime`` in its default mode (auto, which is jit-cdi on an NVML host) edits a
runc bundle and runc starts the container; the container lists its /dev. The kernel has no NVIDIA driver:
the nodes the runtime injects exist in the container with the driver's major:minor, and opening one fails
(ENXIO), as it does on the host. What this proves is device selection and injection, not GPU access.
"""

import json
import os
import shutil
import subprocess
import time

import pytest
import yaml

import fakehost
from test_mod_gpu_persistence import run_module

TOOLKIT_BIN = os.path.join(fakehost.REPO_DIR, ".cache", "toolkit", "bin")
PROGRAMS = ("nvidia-ctk", "nvidia-container-runtime", "nvidia-cdi-hook")
PATH = ":".join((TOOLKIT_BIN, "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"))
GPUS = 3


@pytest.fixture(scope="module", autouse=True)
def toolkit():
    missing = ["%s is missing (run tests/toolkit/build)" % os.path.join(TOOLKIT_BIN, p)
               for p in PROGRAMS if not os.access(os.path.join(TOOLKIT_BIN, p), os.X_OK)]
    missing += ["%s not found" % tool for tool in ("runc", "busybox", "ldconfig") if not shutil.which(tool)]
    assert not missing, "; ".join(missing)


@pytest.fixture
def gpu_host(make_host):
    """Three GPUs: two A100s (MIG-capable, MIG disabled) and an L40S (no MIG), with the tree's ld.so.cache."""
    desc = fakehost.example_description(GPUS)
    desc["gpus"][2]["name"] = "NVIDIA L40S"
    host = make_host(description=desc)
    fakehost.ld_cache(host.dir)
    return host


def nsrun(host, argv, xdg=None):
    env = dict(os.environ, PATH=PATH)
    if xdg:
        env["XDG_CONFIG_HOME"] = xdg  # the runtime's config.toml
    return fakehost.nsrun(host.dir, argv, env=env, capture_output=True, text=True, timeout=120)


def test_cdi_generate_names_every_fake_gpu(gpu_host):
    spec_file = os.path.join(gpu_host.dir, "nvidia.yaml")
    proc = nsrun(gpu_host, ["nvidia-ctk", "cdi", "generate", "--output", spec_file])
    assert proc.returncode == 0, proc.stderr
    with open(spec_file) as handle:
        spec = yaml.safe_load(handle)
    uuids = [gpu["uuid"] for gpu in gpu_host.description["gpus"]]
    assert spec["kind"] == "nvidia.com/gpu"
    devices = dict((d["name"], [(n["path"], n.get("major"), n.get("minor", 0))
                                for n in d["containerEdits"]["deviceNodes"]]) for d in spec["devices"])
    nodes = [("/dev/nvidia%d" % i, 195, i) for i in range(GPUS)]
    expected = dict((str(i), [nodes[i]]) for i in range(GPUS))
    expected.update((uuids[i], [nodes[i]]) for i in range(GPUS))
    expected["all"] = nodes
    assert devices == expected
    common = spec["containerEdits"]
    uvm = fakehost.uvm_major(fakehost._kernel_devices()[0])
    assert sorted((n["path"], n["major"], n.get("minor", 0)) for n in common["deviceNodes"]) == [
        ("/dev/nvidia-modeset", 195, 254), ("/dev/nvidia-uvm", uvm, 0), ("/dev/nvidia-uvm-tools", uvm, 1),
        ("/dev/nvidiactl", 195, 255)]
    lib = gpu_host.tree.lib_dir
    assert sorted(m["hostPath"] for m in common["mounts"]) == [
        os.path.join(lib, "libcuda.so.535.171.04"), os.path.join(lib, "libnvidia-ml.so.535.171.04")]
    hook_args = [" ".join(h["args"]) for h in common["hooks"]]
    assert "nvidia-cdi-hook enable-cuda-compat --host-driver-version=535.171.04" in hook_args


def make_bundle(host, name, visible):
    """A runc bundle whose busybox (rootfs with /etc, which the runtime's ldcache hook needs) lists /dev."""
    bundle = os.path.join(host.dir, name)
    rootfs = os.path.join(bundle, "rootfs")
    for sub in ("bin", "etc", "proc", "sys", "dev", "tmp"):
        os.makedirs(os.path.join(rootfs, sub))
    shutil.copy(shutil.which("busybox"), os.path.join(rootfs, "bin", "busybox"))
    subprocess.run(["runc", "spec"], cwd=bundle, check=True)
    with open(os.path.join(bundle, "config.json")) as handle:
        config = json.load(handle)
    config["process"].update(terminal=False, args=[
        "/bin/busybox", "sh", "-c",
        "cd /dev && for n in nvidia*; do busybox stat -c '%n %t %T %F' $n; done > /devices.txt;"
        " busybox cat /dev/nvidia0 2>/open.txt; :"])
    config["process"]["env"].append("NVIDIA_VISIBLE_DEVICES=" + visible)
    config["root"]["readonly"] = False
    with open(os.path.join(bundle, "config.json"), "w") as handle:
        json.dump(config, handle)
    xdg = os.path.join(host.dir, name + "-xdg", "nvidia-container-runtime")
    os.makedirs(xdg)
    default = subprocess.run([os.path.join(TOOLKIT_BIN, "nvidia-ctk"), "config", "default"],
                             capture_output=True, text=True, check=True).stdout
    with open(os.path.join(xdg, "config.toml"), "w") as handle:
        handle.write(default.replace('#debug = "/var/log/nvidia-container-runtime.log"',
                                     'debug = "%s"' % os.path.join(host.dir, name + "-runtime.log"))
                     .replace('log-level = "info"', 'log-level = "debug"'))
    return bundle, os.path.dirname(xdg)


# Runs in the host: the runtime edits config.json (create), runc runs the container to its end.
RUN = r"""
set -eu
id=$1 bundle=$2
nvidia-container-runtime create --bundle "$bundle" "$id" </dev/null
runc start "$id"
for i in $(seq 600); do
    state=$(runc state "$id" | sed -n 's/.*"status": "\([a-z]*\)".*/\1/p')
    [ "$state" = stopped ] && break
    sleep 0.1
done
runc delete --force "$id"
echo "state=$state"
"""


def run_container(host, visible):
    name = "container"
    bundle, xdg = make_bundle(host, name, visible)
    cid = "gfk-" + os.path.basename(host.dir)
    proc = nsrun(host, ["sh", "-c", RUN, "run", cid, bundle], xdg=xdg)
    assert proc.returncode == 0 and "state=stopped" in proc.stdout, (proc.stdout, proc.stderr)
    seen = {}
    with open(os.path.join(bundle, "rootfs", "devices.txt")) as handle:
        for line in handle:  # "name major(hex) minor(hex) file type"
            name, major, minor, kind = line.rstrip("\n").split(" ", 3)
            seen[name] = (int(major, 16), int(minor, 16), kind)
    with open(os.path.join(bundle, "rootfs", "open.txt")) as handle:
        opened = handle.read()
    with open(os.path.join(bundle, "config.json")) as handle:
        env = json.load(handle)["process"]["env"]
    return seen, opened, env


@pytest.mark.parametrize("visible, gpus", [("all", [0, 1, 2]), ("1", [1]), ("uuid1", [1]), ("0,2", [0, 2])])
def test_runtime_injects_exactly_the_selected_gpus(gpu_host, visible, gpus):
    if visible == "uuid1":
        visible = gpu_host.description["gpus"][1]["uuid"]
    seen, opened, env = run_container(gpu_host, visible)
    uvm = fakehost.uvm_major(fakehost._kernel_devices()[0])
    expected = {"nvidiactl": (195, 255), "nvidia-modeset": (195, 254), "nvidia-uvm": (uvm, 0),
                "nvidia-uvm-tools": (uvm, 1)}
    expected.update(("nvidia%d" % i, (195, i)) for i in gpus)
    assert seen == dict((name, nums + ("character special file",)) for name, nums in expected.items())
    # The runtime rewrote the request in the spec (the edits are made), and no kernel driver answers.
    assert "NVIDIA_VISIBLE_DEVICES=void" in env
    if 0 in gpus:
        assert "No such device or address" in opened, opened


def dev_char(host):
    """{MAJOR:MINOR: node name} of the links in the host's /dev/char."""
    char = host.tree.path("/dev/char")
    return dict((name, os.path.basename(os.readlink(os.path.join(char, name)))) for name in os.listdir(char))


def test_device_links_makes_the_links_nvidia_ctk_makes(gpu_host):
    """The collection's device_links and NVIDIA's `nvidia-ctk system create-dev-char-symlinks` on the same
    character devices: the same /dev/char entries (ours relative like udev's, NVIDIA's absolute)."""
    rc, result = run_module(gpu_host, "device_links", boot=False, report_containers=False)
    assert rc == 0 and result["changed"], result
    ours = dev_char(gpu_host)
    uvm = fakehost.uvm_major(fakehost._kernel_devices()[0])
    assert ours == {"195:0": "nvidia0", "195:1": "nvidia1", "195:2": "nvidia2", "195:254": "nvidia-modeset",
                    "195:255": "nvidiactl", "%d:0" % uvm: "nvidia-uvm", "%d:1" % uvm: "nvidia-uvm-tools"}
    assert os.readlink(gpu_host.tree.path("/dev/char/195:0")) == "../nvidia0"
    shutil.rmtree(gpu_host.tree.path("/dev/char"))
    os.mkdir(gpu_host.tree.path("/dev/char"))
    proc = nsrun(gpu_host, ["nvidia-ctk", "system", "create-dev-char-symlinks"])
    assert proc.returncode == 0, proc.stderr
    assert dev_char(gpu_host) == ours
    assert os.readlink(gpu_host.tree.path("/dev/char/195:0")) == "/dev/nvidia0"


def test_an_entry_in_the_way_nvidia_ctk_warns_and_exits_0_device_links_reports_it(gpu_host):
    """Side by side (docs/device-links.md): with /dev/char/195:1 already a link to a disk, NVIDIA's command leaves it,
    writes a warning and exits 0, so nothing tells the caller that GPU 1 has no link; device_links leaves it too and
    says so in its result (conflicts), so node_state calls the node drifted. Neither replaces the entry."""
    char = gpu_host.tree.path("/dev/char")
    shutil.rmtree(char, ignore_errors=True)  # a fresh host has none yet
    os.mkdir(char)
    os.symlink("../sda", os.path.join(char, "195:1"))
    proc = nsrun(gpu_host, ["nvidia-ctk", "system", "create-dev-char-symlinks"])
    assert proc.returncode == 0 and "Could not create symlink" in proc.stderr + proc.stdout, proc.stderr
    assert os.readlink(os.path.join(char, "195:1")) == "../sda"
    assert os.readlink(os.path.join(char, "195:0")) == "/dev/nvidia0"
    shutil.rmtree(char)
    os.mkdir(char)
    os.symlink("../sda", os.path.join(char, "195:1"))
    rc, result = run_module(gpu_host, "device_links", boot=False, report_containers=False)
    assert rc == 0 and os.readlink(os.path.join(char, "195:1")) == "../sda"
    assert [c["link"] for c in result["conflicts"]] == ["/dev/char/195:1"], result
    assert "not a link to ../nvidia1" in result["conflicts"][0]["problem"]


@pytest.mark.parametrize("table", ["nvidia-container-runtime", "NVIDIA-CONTAINER-RUNTIME", "Nvidia-Container-Runtime"])
def test_every_spelling_of_the_mode_the_runtime_reads_is_refused_by_runtime_mode_but_its_own(tmp_path, table):
    """NVIDIA's runtime (go-toml v1) reads its config keys in more than one spelling; runtime_mode's reader refuses
    every spelling the runtime takes but the documented one, so the two never read one file differently. The
    runtime's mode is read from its own trace log ("Running with config"), written before it looks at the bundle.
    Measured on 1.20.0: the table and the key are read as written and in upper case, not in mixed case."""
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import mode as cdi_mode
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import DocumentError
    seen = {}
    for key in ("mode", "MODE", "Mode"):
        log = tmp_path / ("log-%s-%s" % (table, key))
        config = tmp_path / "config.toml"
        text = '[%s]\ndebug = "%s"\nlog-level = "trace"\n%s = "cdi"\n' % (table, log, key)
        config.write_text(text)
        subprocess.run([os.path.join(TOOLKIT_BIN, "nvidia-container-runtime"), "create", "--bundle",
                        str(tmp_path / "no-bundle"), "x"], capture_output=True, timeout=60, check=False,
                       env=dict(os.environ, NVIDIA_CTK_CONFIG_FILE_PATH=str(config)))
        if log.exists():  # the table was read: its debug key too
            trace = log.read_text()
            assert "Running with config" in trace, trace[-2000:]
            runtime_reads = " Mode:cdi " in trace
        else:  # the runtime read none of the table (its debug key is in it)
            runtime_reads = False
        try:
            cdi_mode.loads(text, str(config))
            ours = "read"
        except DocumentError as exc:
            assert "written in another case" in str(exc) and str(config) in str(exc), str(exc)
            ours = "refused"
        seen[key] = (runtime_reads, ours)
    for key, (runtime_reads, ours) in seen.items():
        if (table, key) == ("nvidia-container-runtime", "mode"):
            assert seen[key] == (True, "read"), seen
        elif runtime_reads:
            assert ours == "refused", seen
    if table == "nvidia-container-runtime":
        assert seen["MODE"][0], "the runtime no longer reads MODE: %s" % seen  # what the refusal is for


def test_a_spec_made_while_the_persistence_daemon_was_stopped_is_stale_once_it_runs(gpu_host):
    # nvidia-ctk mounts the daemon's socket only when it exists as it generates (NVIDIA's own behaviour, measured
    # here with its real generator): the spec of a stop/start flow lacks it or names one that is gone
    import socket
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import spec as cdi_spec
    run_dir = os.path.join(gpu_host.dir, "run", "nvidia-persistenced")
    os.makedirs(run_dir, exist_ok=True)
    specs = {}
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(os.path.join(run_dir, "socket"))
        listener.listen(1)
        for name in ("running", "stopped"):
            if name == "stopped":
                listener.close()
                os.unlink(os.path.join(run_dir, "socket"))
            spec_file = os.path.join(gpu_host.dir, "%s.yaml" % name)
            proc = nsrun(gpu_host, ["nvidia-ctk", "cdi", "generate", "--output", spec_file])
            assert proc.returncode == 0, proc.stderr
            with open(spec_file) as handle:
                specs[name] = handle.read()
    finally:
        listener.close()
    running, stopped = (cdi_spec.parse_yaml_spec(specs[name]) for name in ("running", "stopped"))
    assert len(running["sockets"]) == 1 and running["sockets"][0].endswith("/nvidia-persistenced/socket")
    assert stopped["sockets"] == [] and running["devices"] == stopped["devices"]
    socket_path = running["sockets"][0]
    assert cdi_spec.differences(stopped, running) == [
        "%s exists now and the spec does not mount it (made while its daemon was stopped)" % socket_path]
    assert cdi_spec.differences(running, stopped) == [
        "the spec mounts %s, which is gone (its daemon stopped or removed)" % socket_path]
    # the same from the outline read without PyYAML
    outline = dict((name, cdi_spec.outline_yaml(specs[name])) for name in specs)
    assert outline["running"]["sockets"] == [socket_path] and outline["stopped"]["sockets"] == []
    assert cdi_spec.differences(outline["stopped"], outline["running"]) == cdi_spec.differences(stopped, running)
