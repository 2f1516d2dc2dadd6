"""scripts/bootstrap starts no service on the machine it runs on.

Debian's maintainer scripts start a package's daemon (docker.io: dockerd,
which rewrites iptables and takes /var/run/docker.sock) unless
/usr/sbin/policy-rc.d says no (exit 101); invoke-rc.d and deb-systemd-invoke
both call it as ``policy-rc.d <service> <action>``.  Each test runs the real
bootstrap in a private mount namespace whose /usr/sbin is an overlay (so the
machine's own policy-rc.d can be hidden or replaced there and nothing on the
machine changes), with stand-ins for ``dpkg-query`` (every package missing)
and ``apt-get`` that ask the policy exactly as a maintainer script would and
record the answer.
"""

import os
import signal
import subprocess
import tempfile
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POLICY = "/usr/sbin/policy-rc.d"

APT_GET = """#!/bin/sh
# apt-get stand-in: record what a maintainer script would be told, then act as asked.
log=$GPUFLEET_TEST_LOG
if [ "$1" = install ]; then
    if [ -e %(policy)s ]; then
        %(policy)s docker start; echo "policy=$?" >> "$log"
    else
        echo "policy=absent" >> "$log"
    fi
    case "$GPUFLEET_TEST_APT" in
        fail) exit 100 ;;
        hang) echo hanging >> "$log"; sleep 60 ;;
    esac
fi
exit 0
""" % {"policy": POLICY}

DPKG_QUERY = "#!/bin/sh\nexit 1\n"  # every package: not installed


@pytest.fixture
def world():
    """A work dir with the stand-ins and an overlay upper dir for /usr/sbin."""
    work = tempfile.mkdtemp(prefix="gfboot")
    stubs = os.path.join(work, "bin")
    os.makedirs(stubs)
    for name, text in (("apt-get", APT_GET), ("dpkg-query", DPKG_QUERY)):
        with open(os.path.join(stubs, name), "w") as handle:
            handle.write(text)
        os.chmod(os.path.join(stubs, name), 0o755)
    for sub in ("upper", "work"):
        os.makedirs(os.path.join(work, sub))
    yield work
    subprocess.run(["rm", "-rf", work], check=False)


def hide_policy(world):
    """In the overlay, /usr/sbin/policy-rc.d does not exist (a whiteout)."""
    os.mknod(os.path.join(world, "upper", "policy-rc.d"), 0o600 | 0o020000, os.makedev(0, 0))


def own_policy(world, text):
    path = os.path.join(world, "upper", "policy-rc.d")
    with open(path, "w") as handle:
        handle.write(text)
    os.chmod(path, 0o755)


SCRIPT = r"""
set -u
mount -t overlay overlay -o "lowerdir=/usr/sbin,upperdir=$W/upper,workdir=$W/work" /usr/sbin || exit 90
PATH="$W/bin:$PATH" setsid bash "$REPO/scripts/bootstrap" > "$W/bootstrap.out" 2>&1 &
pid=$!
echo "$pid" > "$W/bootstrap.pid"
wait "$pid"; echo "bootstrap=$?" >> "$W/log"
if [ -e /usr/sbin/policy-rc.d ]; then echo "after=present" >> "$W/log"; else echo "after=absent" >> "$W/log"; fi
"""


def run_bootstrap(world, apt="ok", interrupt=False):
    env = dict(os.environ, W=world, REPO=REPO, GPUFLEET_TEST_APT=apt,
               GPUFLEET_TEST_LOG=os.path.join(world, "log"))
    proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "--",
                             "bash", "-c", SCRIPT], env=env)
    if interrupt:
        deadline = time.monotonic() + 60
        log = os.path.join(world, "log")
        while not (os.path.exists(log) and "hanging" in open(log).read()):
            assert time.monotonic() < deadline, "bootstrap never reached apt-get install"
            time.sleep(0.1)
        # As a terminal's Ctrl-C or a CI timeout does: the whole process group.
        os.killpg(int(open(os.path.join(world, "bootstrap.pid")).read()), signal.SIGTERM)
    assert proc.wait(timeout=300) == 0
    with open(os.path.join(world, "log")) as handle:
        lines = handle.read().split()
    return dict(line.split("=", 1) for line in lines if "=" in line), \
        open(os.path.join(world, "bootstrap.out")).read()


def test_control_without_a_policy_nothing_forbids_starts(world):
    """The setting the other tests defend against: with no policy-rc.d (the
    stand-in run alone, without bootstrap), a maintainer script is not told no."""
    hide_policy(world)
    env = dict(os.environ, GPUFLEET_TEST_LOG=os.path.join(world, "log"), GPUFLEET_TEST_APT="ok")
    subprocess.run(["unshare", "--mount", "--propagation", "private", "--", "bash", "-c",
                    'mount -t overlay overlay -o "lowerdir=/usr/sbin,upperdir=%s/upper,workdir=%s/work" '
                    '/usr/sbin && "%s/bin/apt-get" install docker.io' % (world, world, world)],
                   env=env, check=True)
    assert open(os.path.join(world, "log")).read().split() == ["policy=absent"]


def test_no_policy_bootstrap_forbids_starts_and_removes_its_own(world):
    hide_policy(world)
    result, out = run_bootstrap(world)
    assert result["policy"] == "101", out
    assert result["bootstrap"] == "0", out
    assert result["after"] == "absent", out
    assert "no service starts" in out


def test_failed_install_still_removes_the_policy(world):
    hide_policy(world)
    result, out = run_bootstrap(world, apt="fail")
    assert result["policy"] == "101", out
    assert result["bootstrap"] != "0", out
    assert result["after"] == "absent", out


def test_interrupted_install_still_removes_the_policy(world):
    hide_policy(world)
    result, out = run_bootstrap(world, apt="hang", interrupt=True)
    assert result["policy"] == "101", out
    assert result["bootstrap"] != "0", out
    assert result["after"] == "absent", out


def test_the_machines_own_policy_is_left_as_it_is(world):
    text = "#!/bin/sh\n# the site's own policy\nexit 101\n"
    own_policy(world, text)
    result, out = run_bootstrap(world)
    assert result["policy"] == "101", out
    assert result["after"] == "present", out
    with open(os.path.join(world, "upper", "policy-rc.d")) as handle:
        assert handle.read() == text
