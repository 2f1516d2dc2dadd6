"""No other user can hold the lock root's configuration runs take.

containerd_runtime, crio_runtime and docker_runtime (and node_state, which runs
them in check mode) serialise their writers of one configuration directory with
an exclusive flock. A flock needs only an open descriptor, and anyone can open a
0755 directory such as /etc/containerd: on the code before this rule a stranger's
flock on the directory held every run for 120 s, then failed it, check mode
included. The lock is now a file in a directory only root can open
(``host.locks.LOCK_DIR``, 0700), so the stranger's lock on the directory holds nothing,
and root's own runs still wait for each other.

Each run here is a real child process with a limit well inside the 120 s the
lock waits, while the stranger (uid 4242) holds an exclusive flock on the
configuration directory, on its parent, and on the file itself.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import ATTACKER_PYTHON, COLLECTIONS

from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import locks as host_locks
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import HostFileError

CONTAINERD = shutil.which("containerd") or "/usr/bin/containerd"
LIMIT = 40  # seconds for one run: the lock waits 120 s for a holder
# Runs as the stranger: an exclusive flock on every path given, held until killed; says "held" once it has them.
HOLD = r'''
import fcntl, os, sys, time
fds = []
for path in sys.argv[1:]:
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    fds.append(fd)
print("held", flush=True)
while True:
    time.sleep(60)
'''
# One root run of an engine's converge, as the module runs it: prints the result as JSON.
RUN = textwrap.dedent(r'''
    import json, subprocess, sys
    sys.path.insert(0, sys.argv[1])
    engine, path, check = sys.argv[2], sys.argv[3], sys.argv[4] == 'check'

    def run(argv, data=None):
        proc = subprocess.run(argv, input=data, capture_output=True, text=True)
        return proc.returncode, proc.stdout, proc.stderr

    class NoService(object):
        evidence = {}
        def pid(self): return None
        def processes(self): return []
        def flags(self): return []

    if engine == 'docker':
        from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker import apply
        result = apply.converge(apply.Request(path=path, apply='none'), NoService(), api=None, check_mode=check)
    elif engine == 'containerd':
        from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import apply as capply
        from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import facts
        result = capply.Converge(capply.Request(path=path, apply='none'), NoService(),
                                facts.Tools(run, containerd=sys.argv[5])).run(check_mode=check)
    else:
        import os
        from ansible_collections.gpufleet.nvidia.plugins.module_utils.crio import apply
        class Version(object):
            def version(self): return (1, 29, 1)
        directory = os.path.dirname(path)
        request = apply.Request(path=path, config_path=os.path.join(os.path.dirname(directory), 'crio.conf'),
                                config_dir=directory, runtime_path='/bin/true', apply='none')
        result = apply.Converge(request, NoService(), Version(), find=lambda *a: (None, None, None)).run(check_mode=check)
    print(json.dumps(dict((key, result[key]) for key in ('changed', 'file_changed', 'msg'))))
''')
FILES = {"docker": ("docker", "daemon.json", "{}\n"),
         "containerd": ("containerd", "config.toml", "version = 2\n"),
         "crio": ("crio/crio.conf.d", "99-nvidia.conf", None)}


@pytest.fixture
def stranger_lock(stranger):
    """``hold(*paths)``: the stranger holds an exclusive flock on each path until the test ends."""
    holders = []

    def hold(*paths):
        proc = stranger.popen([ATTACKER_PYTHON, "-c", HOLD] + list(paths),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        holders.append(proc)
        line = proc.stdout.readline()
        assert line.strip() == "held", "the stranger could not lock %s: %s" % (paths, proc.stderr.read())
        return proc

    yield hold
    for proc in holders:
        proc.kill()
        proc.wait()


def engine_files(sandbox, engine):
    directory, name, text = FILES[engine]
    directory = os.path.join(sandbox, "etc", directory)
    os.makedirs(directory)
    path = os.path.join(directory, name)
    if text is not None:
        with open(path, "w") as handle:
            handle.write(text)
    return directory, path


def run_engine(engine, path, check):
    argv = [sys.executable, "-c", RUN, COLLECTIONS, engine, path, "check" if check else "apply", CONTAINERD]
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=LIMIT)
    except subprocess.TimeoutExpired:
        pytest.fail("the %s run was still waiting after %d s while the stranger held a lock on its directory"
                    % (engine, LIMIT), pytrace=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("check", [True, False], ids=["check mode", "apply"])
@pytest.mark.parametrize("engine", sorted(FILES))
def test_a_strangers_flock_on_the_configuration_holds_no_run(sandbox, stranger_lock, engine, check):
    directory, path = engine_files(sandbox, engine)
    if engine == "crio":
        shutil.copy(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "unit", "fixtures",
                                 "crio", "typical.crio.conf"), os.path.join(os.path.dirname(directory), "crio.conf"))
    held = [directory, os.path.dirname(directory)] + ([path] if os.path.exists(path) else [])
    stranger_lock(*held)
    before = open(path, "rb").read() if os.path.exists(path) else None
    result = run_engine(engine, path, check)
    assert result["file_changed"], result
    after = open(path, "rb").read() if os.path.exists(path) else None
    assert (after == before) if check else (after != before), result


def test_the_lock_directory_is_roots_alone(sandbox, stranger, monkeypatch):
    locks = os.path.join(sandbox, "locks")
    monkeypatch.setenv(host_locks.LOCK_DIR_VARIABLE, locks)
    directory, path = engine_files(sandbox, "docker")
    with host_locks.directory_lock(path):
        pass
    st = os.lstat(locks)
    assert (st.st_uid, oct(st.st_mode & 0o777)) == (0, oct(0o700))
    (name,) = os.listdir(locks)
    assert name == host_locks.lock_name(directory) and name.startswith("docker-")
    proc = stranger.python("import os, sys; os.open(sys.argv[1], os.O_RDONLY)", os.path.join(locks, name))
    assert proc.returncode != 0 and "Permission denied" in proc.stderr


@pytest.mark.parametrize("problem", ["a stranger's directory", "mode 0755", "a link"])
def test_a_lock_directory_others_can_open_is_refused(sandbox, stranger, monkeypatch, problem):
    locks = os.path.join(sandbox, "locks")
    if problem == "a link":
        os.symlink(stranger.owned_dir(sandbox, "mine"), locks)
    else:
        os.mkdir(locks, 0o755)
        if problem == "a stranger's directory":
            os.chown(locks, stranger.uid, stranger.gid)
            os.chmod(locks, 0o700)
    monkeypatch.setenv(host_locks.LOCK_DIR_VARIABLE, locks)
    with pytest.raises(HostFileError) as exc:
        with host_locks.directory_lock(os.path.join(sandbox, "daemon.json")):
            pass
    assert locks in str(exc.value)


def test_root_writers_still_wait_for_each_other(sandbox):
    path = os.path.join(sandbox, "daemon.json")
    with host_locks.directory_lock(path):
        with pytest.raises(HostFileError) as exc:
            with host_locks.directory_lock(path, timeout=0.3):
                pass
    assert "held the lock on %s" % sandbox in str(exc.value)
    with host_locks.directory_lock(path, timeout=0.3):
        pass
