#!/usr/bin/env python3
"""Prometheus on the lab: promtool, a node_exporter scrape, one metric's samples.

Every lab host runs Debian's own ``prometheus-node-exporter`` (tests/lab/README.md, "node_exporter"): its
textfile collector reads ``/var/lib/prometheus/node-exporter/*.prom`` and it answers on port 9100 of the host's
lab address.  This module is what the lab tests and the molecule scenarios check it with:

  promtool()                       the path of Debian 12's promtool, fetched and unpacked on first use
  check_metrics(text)              (rc, output) of ``promtool check metrics`` with TEXT on stdin
  scrape(address, port, timeout)   the text of http://ADDRESS:PORT/metrics (from the controller, no proxy;
                                   a lab address is refused while the lab's bridge is down)
  series(text, name)               {labels: value} of one metric name; labels is a tuple of (name, value)
                                   pairs sorted by name, () for none: ``{(("gpu", "0"),): 1.0}``

promtool comes from Debian 12's ``prometheus`` package, which is never installed here: its .deb is fetched
with an apt configuration of its own (the machine's mirror, found by tests/driverkit/aptsource.py as the
driver kit finds it; GPUFLEET_APT_MIRROR overrides), private lists, ``apt-get download``, and its
``usr/bin/promtool`` unpacked with ``dpkg-deb`` into .cache/prometheus/ (GPUFLEET_PROM_CACHE moves it).
/etc/apt is not touched.  A stamp records the recipe and the version: later calls start nothing.  The first
fetch needs the mirror and root (apt's sandbox user is root, as in tests/driverkit/setup).
GPUFLEET_PROMTOOL names a promtool to use instead.

CLI (for an Ansible verify playbook, delegated to localhost):
  prom.py promtool                         print promtool's path (fetching it first if needed)
  prom.py check FILE|-                     promtool check metrics on FILE (-: stdin): its output, its exit status
  prom.py scrape ADDRESS [--port 9100] [--timeout 10] [--series NAME]...
                                           print the scrape; with --series, a JSON object
                                           {NAME: [{"labels": {...}, "value": V}, ...]} instead
  prom.py series FILE|- NAME...            the same JSON object for a file of metrics
"""

import argparse
import contextlib
import fcntl
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CACHE = Path(os.environ.get("GPUFLEET_PROM_CACHE", REPO / ".cache" / "prometheus"))
SUITE = "bookworm"
PACKAGE = "prometheus"
# What is unpacked: promtool and the package's licence.
MEMBERS = ["./usr/bin/promtool", "./usr/share/doc/prometheus/copyright"]
RECIPE = {"recipe": 1, "suite": SUITE, "package": PACKAGE, "members": MEMBERS}
ROOT = CACHE / "root"
STAMP = CACHE / "promtool.stamp"
NODE_EXPORTER_PORT = 9100
# The lab's network and bridge (tests/lab/lab: BRIDGE, NET_PREFIX).
LAB_NET = ipaddress.ip_network("10.250.0.0/24")
LAB_BRIDGE = "gflab0"
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
# The text format node_exporter is asked for (client_golang negotiates; this one every version serves).
ACCEPT = "text/plain;version=0.0.4"


class PromError(Exception):
    pass


# ---------------------------------------------------------------- promtool

def _stamp():
    try:
        return json.loads(STAMP.read_text())
    except (OSError, ValueError):
        return None


def _cached():
    """promtool's path when the stamp matches the recipe and the binary is there, else None."""
    stamp = _stamp()
    tool = ROOT / "usr/bin/promtool"
    if stamp and {k: stamp.get(k) for k in RECIPE} == RECIPE and os.access(tool, os.X_OK):
        return str(tool)
    return None


def _sources():
    """A deb822 sources file for Debian 12's main, on this machine's mirror (tests/driverkit/aptsource.py)."""
    sys.path.insert(0, str(REPO / "tests" / "driverkit"))
    try:
        import aptsource  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.pop(0)
    try:
        found = aptsource.mirrors()
    except aptsource.MirrorError as exc:
        raise PromError(str(exc))
    return "# Written by tests/lab/prom.py from this machine's apt configuration.\n" + \
        aptsource.deb822(found, SUITE, ["main"])


def _step(cmd, logname, **kw):
    log = CACHE / logname
    with open(log, "w") as out:
        res = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, text=True, check=False, **kw)
    if res.returncode != 0:
        raise PromError("%s failed (rc=%d); see %s" % (" ".join(cmd[:2]), res.returncode, log))


def _build():
    """Fetch Debian 12's prometheus .deb with a private apt configuration and unpack promtool into ROOT."""
    for tool in ("apt-get", "dpkg-deb", "tar"):
        if not shutil.which(tool):
            raise PromError("%s not found (it comes with Debian's apt and dpkg)" % tool)
    sources, lists, debs = CACHE / "gpufleet-prometheus.sources", CACHE / "lists", CACHE / "debs"
    sources.write_text(_sources())
    apt = ["apt-get", "-q", "-o", "Dir::Etc::SourceList=%s" % sources, "-o", "Dir::Etc::SourceParts=/dev/null",
           "-o", "Dir::State::Lists=%s" % lists, "-o", "Dir::Cache::pkgcache=", "-o", "Dir::Cache::srcpkgcache=",
           "-o", "APT::Sandbox::User=root"]
    (lists / "partial").mkdir(parents=True, exist_ok=True)
    shutil.rmtree(debs, ignore_errors=True)
    debs.mkdir()
    _step(apt + ["update"], "apt-update.log")
    _step(apt + ["download", PACKAGE], "apt-download.log", cwd=str(debs))
    found = sorted(debs.glob(PACKAGE + "_*.deb"))
    if len(found) != 1:
        raise PromError("apt-get download %s left %s in %s" % (PACKAGE, [p.name for p in found], debs))
    deb = found[0]
    version = subprocess.run(["dpkg-deb", "-f", str(deb), "Version"], capture_output=True, text=True,
                             check=True).stdout.strip()
    new = CACHE / "root.new"
    shutil.rmtree(new, ignore_errors=True)
    new.mkdir()
    fsys = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
    untar = subprocess.run(["tar", "-x", "-C", str(new)] + MEMBERS, stdin=fsys.stdout, capture_output=True,
                           text=True, check=False)
    fsys.stdout.close()
    if fsys.wait() != 0 or untar.returncode != 0:
        raise PromError("unpacking %s failed: %s" % (deb, untar.stderr.strip()))
    tool = new / "usr/bin/promtool"
    res = subprocess.run([str(tool), "--version"], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise PromError("%s --version failed: %s" % (tool, (res.stdout + res.stderr).strip()))
    shutil.rmtree(ROOT, ignore_errors=True)
    new.rename(ROOT)
    # The lists (tens of MB) and the .deb served the build only.
    shutil.rmtree(lists, ignore_errors=True)
    shutil.rmtree(debs, ignore_errors=True)
    STAMP.write_text(json.dumps(dict(RECIPE, version=version, deb=deb.name, promtool=res.stdout.splitlines()[0]),
                                indent=1) + "\n")


def promtool():
    """The path of promtool: GPUFLEET_PROMTOOL, or Debian 12's, unpacked into the cache on first use."""
    if os.environ.get("GPUFLEET_PROMTOOL"):
        return os.environ["GPUFLEET_PROMTOOL"]
    tool = _cached()
    if tool:
        return tool
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        tool = _cached()  # another process may have built it meanwhile
        if not tool:
            with contextlib.suppress(FileNotFoundError):
                STAMP.unlink()
            _build()
            tool = _cached()
    if not tool:
        raise PromError("promtool missing from %s after the build" % ROOT)
    return tool


def promtool_version():
    """What the stamp says of the unpacked promtool (package version, its --version line); {} when none."""
    stamp = _stamp() or {}
    return {k: stamp[k] for k in ("version", "promtool") if k in stamp}


def check_metrics(text, timeout=60):
    """(exit status, output) of ``promtool check metrics`` with TEXT on its stdin.  Prometheus 2.42's promtool
    exits 0 for a clean file, 1 when it cannot parse it, 3 for lint problems (a missing HELP, a counter
    without _total, ...): a file the writer means as clean must give 0."""
    res = subprocess.run([promtool(), "check", "metrics"], input=text, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False)
    return res.returncode, res.stdout


# ---------------------------------------------------------------- scrape

def scrape(address, port=NODE_EXPORTER_PORT, timeout=10):
    """The /metrics text of the exporter at ADDRESS:PORT.  No proxy: lab addresses are on the machine's
    private bridge, where a proxy from the environment could not reach.  A lab address while the bridge is
    not there (the lab is down) is refused here: the request would otherwise leave by the default route."""
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(address) in LAB_NET and not Path("/sys/class/net", LAB_BRIDGE).exists():
            raise PromError("%s is a lab address, but the lab's bridge %s is not up (is the lab down?)"
                            % (address, LAB_BRIDGE))
    host = "[%s]" % address if ":" in address else address
    request = urllib.request.Request("http://%s:%d/metrics" % (host, port), headers={"Accept": ACCEPT})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout) as response:
            return response.read().decode("utf-8")
    except (urllib.error.URLError, OSError) as exc:
        raise PromError("scrape of %s:%d failed: %s" % (address, port, exc))


# ---------------------------------------------------------------- the text format

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _unescape(value):
    return re.sub(r"\\.", lambda m: _UNESCAPE.get(m.group(0), m.group(0)), value)


def parse_sample(line):
    """(name, labels, value, timestamp or None) of one sample line of the text format (0.0.4)."""
    m = _NAME.match(line)
    if not m:
        raise ValueError("not a sample line: %r" % line)
    name, pos, labels = m.group(0), m.end(), []
    if line[pos:pos + 1] == "{":
        pos += 1
        while True:
            if line[pos:].lstrip().startswith("}"):
                pos = line.index("}", pos) + 1
                break
            lm = _LABEL.match(line, pos)
            if not lm:
                raise ValueError("bad labels in %r" % line)
            labels.append((lm.group(1), _unescape(lm.group(2))))
            pos = lm.end()
            if line[pos:pos + 1] == ",":
                pos += 1
            elif line[pos:pos + 1] != "}":
                raise ValueError("bad labels in %r" % line)
    rest = line[pos:].split()
    if not 1 <= len(rest) <= 2 or (line[pos:pos + 1] not in (" ", "\t")):
        raise ValueError("bad value in %r" % line)
    value = float(rest[0])
    timestamp = int(rest[1]) if len(rest) == 2 else None
    names = [k for k, _ in labels]
    if len(set(names)) != len(names):
        raise ValueError("a label twice in %r" % line)
    return name, tuple(sorted(labels)), value, timestamp


def series(text, name):
    """{labels: value} of the samples of metric NAME (exactly that name: a histogram's NAME_bucket is its own)
    in TEXT; labels is a tuple of (label, value) pairs sorted by label, () for none.  {} when there is none."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or not line.startswith(name):
            continue
        sample, labels, value, _ = parse_sample(line)
        if sample != name:
            continue
        if labels in out:
            raise ValueError("%s%s twice" % (name, dict(labels)))
        out[labels] = value
    return out


def series_json(text, names):
    """{NAME: [{"labels": {...}, "value": V}, ...]} for the CLI (sorted by labels)."""
    return {n: [{"labels": dict(labels), "value": value} for labels, value in sorted(series(text, n).items())]
            for n in names}


# ---------------------------------------------------------------- CLI

def _read(path):
    return sys.stdin.read() if path == "-" else Path(path).read_text()


def main(argv=None):
    parser = argparse.ArgumentParser(prog="prom.py", description="Prometheus on the gpufleet lab: promtool, "
                                     "a node_exporter scrape, one metric's samples.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("promtool", help="print promtool's path (fetching Debian 12's first if needed)")
    p = sub.add_parser("check", help="promtool check metrics on FILE (-: stdin)")
    p.add_argument("file")
    p = sub.add_parser("scrape", help="GET http://ADDRESS:PORT/metrics")
    p.add_argument("address")
    p.add_argument("--port", type=int, default=NODE_EXPORTER_PORT)
    p.add_argument("--timeout", type=float, default=10)
    p.add_argument("--series", action="append", metavar="NAME", help="print these metrics' samples as JSON")
    p = sub.add_parser("series", help="one metric's samples in FILE (-: stdin) as JSON")
    p.add_argument("file")
    p.add_argument("names", nargs="+", metavar="NAME")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "promtool":
            print(promtool())
        elif args.cmd == "check":
            rc, output = check_metrics(_read(args.file))
            sys.stdout.write(output)
            return rc
        elif args.cmd == "scrape":
            text = scrape(args.address, args.port, args.timeout)
            if args.series:
                print(json.dumps(series_json(text, args.series), indent=1, sort_keys=True))
            else:
                sys.stdout.write(text)
        else:
            print(json.dumps(series_json(_read(args.file), args.names), indent=1, sort_keys=True))
    except (PromError, ValueError, OSError) as exc:
        print("prom.py: %s" % exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
