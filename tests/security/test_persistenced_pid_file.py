"""Root reads the daemon's pid file, in the run directory the service user owns.

The modules (persistenced's service checks, gpu_info's and gpu_persistence's daemon
identity) must not hang on a FIFO the service user puts there, nor read another file
through a link. Each read runs in a child process with a timeout, so a hang fails the
test instead of the run. (The init scripts' own reads are attacked in
tests/kit/test_mod_persistenced_sysv.py.)
"""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(REPO, ".build", "collections")
READERS = {
    "persistenced": "from ansible_collections.gpufleet.nvidia.plugins.module_utils.persistenced import rules as m\n"
                    "print(m.pid_alive(sys.argv[1] + '/nvidia-persistenced.pid'))\n",
    "gpu_info": "from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import backends as m\n"
                "print(m.daemon_identity(sys.argv[1])['pid'])\n",
}


def read_as_root(reader, run_dir):
    code = "import sys\nsys.path.insert(0, %r)\n%s" % (COLLECTIONS, READERS[reader])
    try:
        proc = subprocess.run([sys.executable, "-c", code, run_dir], capture_output=True, text=True, timeout=15)
    except subprocess.TimeoutExpired:
        pytest.fail("%s's pid file read (root) hung on what the service user planted" % reader)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.fixture
def run_dir(sandbox, service_user):
    path = os.path.join(sandbox, "nvidia-persistenced")
    os.mkdir(path, 0o755)
    os.chown(path, service_user.uid, service_user.gid)  # as the service definitions hand it over
    return path


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_fifo_at_the_pid_file_does_not_hang_root(run_dir, service_user, reader):
    service_user.run(["mkfifo", os.path.join(run_dir, "nvidia-persistenced.pid")], check=True)
    assert read_as_root(reader, run_dir) == "None"


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_pid_file_link_is_not_followed(sandbox, run_dir, service_user, reader):
    # a root-only file that holds the pid of a process named like a persistence daemon
    decoy = subprocess.Popen(["bash", "-c", "exec -a /usr/bin/nvidia-persistenced sleep 60"])
    try:
        vault = os.path.join(sandbox, "vault")
        os.mkdir(vault, 0o711)
        secret = os.path.join(vault, "pid")
        with open(secret, "w") as handle:
            handle.write("%d\n" % decoy.pid)
        os.chmod(secret, 0o600)
        service_user.run(["ln", "-s", secret, os.path.join(run_dir, "nvidia-persistenced.pid")], check=True)
        assert read_as_root(reader, run_dir) == "None"
    finally:
        decoy.kill()
        decoy.wait()
