#!/usr/bin/env python3
"""Newer container engines from Debian's own archive, for the dockerd and containerd layers (tests only).

Fleets run dockerd 26-28 and containerd 1.7-2.x; this machine (Debian 12) has dockerd 20.10 and
containerd 1.6. Debian's trixie (stable) and forky (testing) suites have the newer ones, on the same
mirror this machine's apt uses (``tests/driverkit/aptsource.py``; ``GPUFLEET_APT_MIRROR`` overrides).
Their runc needs a newer glibc than Debian 12's, so an engine is a whole minimal Debian userland:
``debootstrap --variant=minbase`` of the suite with ``docker.io``, ``containerd``, ``runc`` and
``tini``, cached in ``.cache/engines/<suite>/root``. Nothing is installed on this machine.

A test daemon runs an engine by binding its ``/usr`` over ``/usr`` inside the daemon's private mount
namespace (``tests/privatedaemon.py``): dockerd, containerd, their shims, runc, ``ctr`` and the
``docker`` CLI are then the suite's own, with its glibc, as on a host of that release.

  engines                the engines this machine can test, as JSON
  engines setup SUITE... build (cached) the named engines' roots; bookworm is this machine's own
  engines versions SUITE the versions of an engine's programs, as JSON

Which engine a test run uses: ``GPUFLEET_ENGINE`` (``bookworm``, the default, ``trixie`` or ``forky``).
trixie's upstream versions are pinned (``PINNED``: a build that finds others fails, naming them); forky's
move, so each run records what it ran (``versions``) rather than pinning one.
"""

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CACHE = os.environ.get("GPUFLEET_ENGINES_CACHE") or os.path.join(REPO, ".cache", "engines")
sys.path.insert(0, os.path.join(REPO, "tests", "driverkit"))
import aptsource  # noqa: E402

HOST = "bookworm"
# suite -> debootstrap script (bookworm's debootstrap has no forky script; sid's fits testing).
SUITES = {"trixie": "trixie", "forky": "sid"}
# python3: what Ansible runs on a host (and the libraries this machine's own Python needs in the namespace).
PACKAGES = ["docker.io", "docker-cli", "containerd", "runc", "tini", "ca-certificates", "python3"]
RECIPE = 3
PROGRAMS = {
    "dockerd": ["/usr/sbin/dockerd", "--version"],
    "containerd": ["/usr/bin/containerd", "--version"],
    "runc": ["/usr/sbin/runc", "--version"],
}
PACKAGE_OF = {"dockerd": "docker.io", "containerd": "containerd", "runc": "runc"}
# The upstream versions a stable suite is pinned to (Debian's revision may move with a point release); a build that
# finds others fails, naming them. forky (testing) moves on purpose: its versions are recorded, not pinned.
PINNED = {"trixie": {"docker.io": "26.1.5", "containerd": "1.7.24", "runc": "1.1.15"}}


class EngineError(Exception):
    pass


def current():
    """The engine this run tests: ``GPUFLEET_ENGINE`` (default: this machine's own, bookworm)."""
    name = os.environ.get("GPUFLEET_ENGINE") or HOST
    if name != HOST and name not in SUITES:
        raise EngineError("GPUFLEET_ENGINE=%s: known engines are %s" % (name, ", ".join([HOST] + sorted(SUITES))))
    return name


def root(name=None):
    """The engine's root (its /usr is bound over /usr), or None for this machine's own engine."""
    name = name or current()
    if name == HOST:
        return None
    path = os.path.join(CACHE, name, "root")
    if not ready(name):
        raise EngineError("engine %s is not built: run tests/engines/engines.py setup %s" % (name, name))
    return path


def stamp(name):
    return json.dumps([RECIPE, name, SUITES[name], PACKAGES])


def ready(name):
    try:
        with open(os.path.join(CACHE, name, "stamp")) as handle:
            return handle.read().strip() == stamp(name)
    except OSError:
        return False


def setup(name, log=sys.stderr):
    if name not in SUITES:
        raise EngineError("unknown engine %s (known: %s)" % (name, ", ".join(sorted(SUITES))))
    os.makedirs(os.path.join(CACHE, name), exist_ok=True)
    with open(os.path.join(CACHE, name, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready(name):
            print("engines: %s cached (%s)" % (name, describe(name)), file=log)
            return
        try:
            found = aptsource.mirrors()
        except aptsource.MirrorError as exc:
            raise EngineError(str(exc))
        tmp = os.path.join(CACHE, name, "root.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        started = time.monotonic()
        build_log = os.path.join(CACHE, name, "build.log")
        print("engines: debootstrap %s from %s (log: %s)" % (name, found["archive"], build_log), file=log)
        script = os.path.join("/usr/share/debootstrap/scripts", SUITES[name])
        with open(build_log, "w") as out:
            proc = subprocess.run(
                ["debootstrap", "--variant=minbase", "--keyring=" + found["keyring"],
                 "--include=" + ",".join(PACKAGES), name, tmp, found["archive"], script],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=False)
        if proc.returncode != 0:
            raise EngineError("debootstrap %s failed (rc %d); see %s" % (name, proc.returncode, build_log))
        found_versions = package_versions(tmp)
        moved = ["%s %s (pinned: %s)" % (package, found_versions.get(package), want)
                 for package, want in sorted(PINNED.get(name, {}).items())
                 if upstream(found_versions.get(package)) != want]
        if moved:
            raise EngineError("%s's packages moved: %s. Run the dockerd and containerd layers on them, then update "
                              "PINNED in tests/engines/engines.py and docs/platforms.md's Engines tested table"
                              % (name, ", ".join(moved)))
        final = os.path.join(CACHE, name, "root")
        shutil.rmtree(final, ignore_errors=True)
        os.rename(tmp, final)
        with open(os.path.join(CACHE, name, "versions.json"), "w") as handle:
            json.dump(found_versions, handle, indent=1, sort_keys=True)
        with open(os.path.join(CACHE, name, "stamp"), "w") as handle:
            handle.write(stamp(name) + "\n")
        print("engines: %s built in %.0f s (%s)" % (name, time.monotonic() - started, describe(name)), file=log)


def package_versions(path):
    out = subprocess.run(["dpkg-query", "--admindir=%s/var/lib/dpkg" % path, "-W", "-f", "${Package} ${Version}\n"]
                         + [PACKAGE_OF[p] for p in PROGRAMS] + ["libc6", "libseccomp2"],
                         stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if line)


def versions(name=None):
    """{package: version} of an engine (this machine's dpkg database for bookworm)."""
    name = name or current()
    if name == HOST:
        return package_versions("/")
    root(name)
    with open(os.path.join(CACHE, name, "versions.json")) as handle:
        return json.load(handle)


def upstream(version):
    """The upstream part of a Debian version: ``1:26.1.5+dfsg1-9+deb13u1`` -> ``26.1.5``."""
    if not version:
        return None
    for mark in ("+", "~", "-"):
        version = version.split(":", 1)[-1].split(mark, 1)[0]
    return version


def major(program, name=None):
    """The major version of ``program`` (dockerd, containerd, runc) in an engine, from its package's version."""
    version = versions(name)[PACKAGE_OF[program]]
    return int(version.split(":", 1)[-1].split(".", 1)[0])


def describe(name=None):
    found = versions(name)
    return ", ".join("%s %s" % (prog, found.get(PACKAGE_OF[prog], "?")) for prog in PROGRAMS)


def main(argv):
    try:
        if not argv:
            print(json.dumps({name: ready(name) for name in sorted(SUITES)}))
        elif argv[0] == "setup" and len(argv) > 1:
            for name in argv[1:]:
                if name != HOST:
                    setup(name)
        elif argv[0] == "versions" and len(argv) == 2:
            print(json.dumps(versions(argv[1]), sort_keys=True))
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except EngineError as exc:
        print("engines: %s" % exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
