"""gpu_persistence's state file under bad input and failing writes, on fake GPU hosts.

Bad files (deep, huge, not an object, ``format_version: true``, a link, a FIFO) give
``failed`` naming the file and no traceback. Writes that fail for real (a read-only
mount, a full tmpfs, ``chattr +i`` on the file or its directory) give ``failed`` naming
the file, leave the old file byte-identical and leave no temp file. The failing mounts
are made inside the host's private mount namespace, and the checks run in there too.
"""

import json
import os
import subprocess
import sys
import tempfile

import pytest

import fakehost

COLLECTIONS = fakehost.COLLECTIONS_DIR
STATE_DIR = "/run/gpufleet"
STATE = STATE_DIR + "/persistence.json"
UUID0 = "GPU-0000a100-1111-2222-3333-000000000000"
GOOD = json.dumps({"format_version": 1, "default_mode": None,
                   "gpus": {UUID0: {"mode": "enabled", "pci_bus_id": "00000000:01:00.0"}}}, indent=2) + "\n"


def run_in_host(host, setup, args, check="", timeout=60):
    """In one private namespace of the host: ``setup`` (sh), the module, then ``check`` (sh).

    Returns (rc, result, check output)."""
    args = dict(args, _ansible_check_mode=False, _ansible_diff=False)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, dir=host.dir) as handle:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, handle)
    out = handle.name + ".out"
    script = ('set -e; %s; set +e; "$@" > %s 2>&1; echo "RC=$?" >> %s; echo "-- check"; %s'
              % (setup or "true", out, out, check or "true"))
    argv = ["sh", "-c", script, "sh", sys.executable, "-m",
            "ansible_collections.gpufleet.nvidia.plugins.modules.gpu_persistence", handle.name]
    env = dict(os.environ, PYTHONPATH=COLLECTIONS)
    proc = subprocess.run(fakehost.nsrun_argv(host.dir, argv), capture_output=True, text=True, timeout=timeout,
                          env=env)
    with open(out) as stream:
        text = stream.read()
    os.unlink(handle.name)
    os.unlink(out)
    assert "Traceback" not in text, text
    lines = [line for line in text.splitlines() if line.startswith("{")]
    assert lines, "no JSON from the module: %r %r" % (text, proc.stderr)
    rc = int(text.rsplit("RC=", 1)[1].split()[0])
    return rc, json.loads(lines[-1]), proc.stdout.split("-- check", 1)[-1]


def host_path(host, path):
    return os.path.join(host.dir, path.lstrip("/"))


def write_state(host, data):
    os.makedirs(host_path(host, STATE_DIR), exist_ok=True)
    with open(host_path(host, STATE), "wb") as handle:
        handle.write(data)


BAD = [
    ("deep", b"[" * 100000 + b"]" * 100000, "nested too deeply"),
    ("huge", b" " * (50 * 1024 * 1024) + b"{}", "more than a state file can be"),
    ("not an object", b"[1, 2, 3]\n", "must hold a JSON object"),
    ("format_version true", b'{"format_version": true, "gpus": {}}\n', "format_version True"),
    ("not UTF-8", b'{"format_version": 1, "gpus": {"\xff": {"mode": "enabled"}}}', "not UTF-8"),
]


@pytest.mark.parametrize("name,data,words", BAD, ids=[b[0] for b in BAD])
def test_a_bad_state_file_fails_naming_it(make_host, nvidia, name, data, words):
    host = make_host(gpus=2, nvidia=nvidia)
    host.start_daemon()
    write_state(host, data)
    rc, result, _ = run_in_host(host, "", dict(gpus=[0], mode="disabled", state_file=STATE))
    assert rc == 1 and result["failed"] is True, result
    assert STATE in result["msg"] and words in result["msg"], result["msg"]
    assert len(host.held()) == 2  # failed before any GPU changed
    with open(host_path(host, STATE), "rb") as handle:
        assert handle.read() == data


def test_a_fifo_at_the_state_file_fails_at_once(make_host, nvidia):
    host = make_host(gpus=1, nvidia=nvidia)
    host.start_daemon()
    os.makedirs(host_path(host, STATE_DIR))
    os.mkfifo(host_path(host, STATE))
    rc, result, _ = run_in_host(host, "", dict(gpus=[0], mode="disabled", state_file=STATE), timeout=30)
    assert rc == 1 and STATE in result["msg"] and "not a regular file" in result["msg"], result


# sh run inside the host before the module: make the state directory fail in one way.
FAILURES = {
    "read-only file system": ("mount --bind {d} {d} && mount -o remount,bind,ro {d}", "Read-only file system"),
    "no space left": ("mount -t tmpfs -o size=64k gfk {d} && printf '%s' \"$GOOD\" > {f} && "
                      "(dd if=/dev/zero of={d}/filler bs=4k 2>/dev/null || true)", "No space left on device"),
    "immutable file": ("chattr +i {f}", "Operation not permitted"),
    "immutable directory": ("chattr +i {d}", "Operation not permitted"),
}


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_a_failing_write_names_the_file_and_leaves_it_intact(make_host, nvidia, failure):
    host = make_host(gpus=2, nvidia=nvidia)
    host.start_daemon()
    write_state(host, GOOD.encode())
    setup, words = FAILURES[failure]
    setup = setup.format(d=STATE_DIR, f=STATE)
    os.environ["GOOD"] = GOOD
    try:
        rc, result, after = run_in_host(
            host, setup, dict(gpus=[0], mode="disabled", state_file=STATE),
            check="cat %s; echo '-- files'; ls -A %s; chattr -i %s %s 2>/dev/null; true" % (
                STATE, STATE_DIR, STATE, STATE_DIR))
    finally:
        del os.environ["GOOD"]
    assert rc == 1 and result["failed"] is True, result
    assert STATE in result["msg"] and words in result["msg"], result["msg"]
    content, files = after.split("-- files", 1)
    assert content.strip() == GOOD.strip(), "the state file changed: %r" % content
    leftovers = [name for name in files.split() if name.endswith(".tmp")]
    assert leftovers == [], "temp files left behind: %s" % leftovers
