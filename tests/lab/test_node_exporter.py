"""Debian's node_exporter on every lab host kind, and the lab's Prometheus helper (tests/lab/prom.py).

One fleet for the module, one host of each kind (h1 systemd, h2 sysvinit, h3 upstart, h4 upstart06, h5
trixie, h6 forky), taken down at the end.  On every host: node_exporter is a service of the host's own init
system (systemd's unit, the SysV script started by sysv-rc or by Upstart 0.6.5's rc job, the Upstart job on
Upstart 1.13), its textfile directory is Debian's default with the package's owner and mode, a .prom file
written there (a temporary file in the directory, then a rename, as a writer does) shows in a scrape over
the lab bridge with ``node_textfile_scrape_error 0``, and a file with a client-side timestamp, or one that
the exporter's user cannot read, makes it 1 (the whole file is skipped).  promtool (Debian 12's) accepts
the good file and rejects a bad one.  The exporter reads the files at each scrape; every wait here still
polls with a deadline.

Needs root and the lab (``lab up``); only one lab fits on a machine, so the fixture fails when lab hosts
are already up.
"""

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import HERE, REPO, lab, ok

import prom

KINDS = ("systemd", "sysvinit", "upstart", "upstart06", "trixie", "forky")
HOSTS = {"h%d" % (i + 1): kind for i, kind in enumerate(KINDS)}
DIR = prom.TEXTFILE_DIR
SYSTEMD_KINDS = ("systemd", "trixie", "forky")
# The upstream version of each suite's package (forky moves: read from the host's dpkg only).
PINNED = {"systemd": "1.5.0", "sysvinit": "1.5.0", "upstart": "1.5.0", "upstart06": "1.5.0", "trixie": "1.9.0"}


@pytest.fixture(scope="module")
def fleet(empty_lab):
    """{host: lab address} of a fleet with one host of every kind, each exporter answering."""
    t0 = time.monotonic()
    res = lab("up", "--hosts", str(len(KINDS)), "--kinds", ",".join(KINDS), "--gpus", "1")
    assert res.returncode == 0, res.stderr
    status = json.loads(lab("status", "--json").stdout)
    addresses = {h["host"]: h["ip"] for h in status["hosts"]}
    assert {h: k for h, k in ((h["host"], h["kind"]) for h in status["hosts"])} == HOSTS
    t1 = time.monotonic()
    for host, address in addresses.items():
        poll(address, lambda text: "node_textfile_scrape_error" in text, "%s's exporter answers" % host, 60)
    print("lab up (build if needed, %d hosts): %.1f s; every exporter answering %.1f s later"
          % (len(KINDS), t1 - t0, time.monotonic() - t1))
    return addresses


def poll(address, done, what, deadline=30):
    """Scrape ADDRESS every 0.2 s until DONE(text) holds; the text.  Fails after DEADLINE seconds."""
    end, last = time.monotonic() + deadline, None
    while True:
        try:
            text = prom.scrape(address, timeout=5)
            if done(text):
                return text
            last = "\n".join(line for line in text.splitlines() if "textfile" in line or "gpufleet_lab" in line)
        except prom.PromError as exc:
            last = str(exc)
        if time.monotonic() > end:
            pytest.fail("%s: not within %d s; last scrape:\n%s" % (what, deadline, last))
        time.sleep(0.2)


def scrape_error(text):
    """node_textfile_scrape_error's value (None when absent)."""
    return prom.series(text, "node_textfile_scrape_error").get(())


def write(host, name, text, mode="0644"):
    """Write TEXT as DIR/NAME on HOST as a writer does: a temporary file in the directory (a name the
    collector ignores: not *.prom), its mode, then a rename."""
    ok(host, "set -eu\ncd %s\ncat > .%s.tmp <<'GPUFLEET_EOF'\n%sGPUFLEET_EOF\nchmod %s .%s.tmp\nmv -f .%s.tmp %s\n"
       % (DIR, name, text, mode, name, name, name))


def remove(host, *names):
    ok(host, "cd %s && rm -f %s" % (DIR, " ".join(names)))


def good_file(host, nonce):
    return ("# HELP gpufleet_lab_probe A probe written by the lab's node_exporter test.\n"
            "# TYPE gpufleet_lab_probe gauge\n"
            'gpufleet_lab_probe{gpu="0",host="%s",note="a \\"quoted\\" \\\\ value"} %d\n'
            'gpufleet_lab_probe{gpu="1",host="%s",note=""} -1.5\n' % (host, nonce, host))


STAMPED = ("# HELP gpufleet_lab_stamped A probe with a client-side timestamp.\n"
           "# TYPE gpufleet_lab_stamped gauge\n"
           "gpufleet_lab_stamped 1 1700000000000\n")


# ---------------------------------------------------------------- the service

SERVICE = {
    # systemd: Debian's unit, enabled by the package's postinst.
    "systemd": "systemctl is-enabled prometheus-node-exporter; systemctl is-active prometheus-node-exporter\n"
               "pid=$(systemctl show -p MainPID --value prometheus-node-exporter)\n",
    # SysV: Debian's script, in /etc/rc2.d (sysv-rc's rc 2, or Upstart 0.6.5's rc job, runs it at boot).
    "sysv": "ls /etc/rc2.d | grep -x 'S[0-9]*prometheus-node-exporter' | sed 's/^S[0-9]*/S/'\n"
            "service prometheus-node-exporter status\n"
            "pid=$(cat /run/prometheus/prometheus-node-exporter.pid)\n",
    # Upstart 1.13: the lab's job; Debian's script is disabled (a K link only).
    "upstart": "ls /etc/rc2.d | grep prometheus-node-exporter | sed 's/^K[0-9]*/K/'\n"
               "initctl status prometheus-node-exporter | sed 's/, process [0-9]*$//'\n"
               "pid=$(initctl status prometheus-node-exporter | sed -n 's/.*, process \\([0-9]*\\)$/\\1/p')\n",
}
EXPECTED = {
    "systemd": ["enabled", "active"],
    "sysv": ["Sprometheus-node-exporter", "prometheus-node-exporter is running."],
    "upstart": ["Kprometheus-node-exporter", "prometheus-node-exporter start/running"],
}


def service_way(kind):
    return "systemd" if kind in SYSTEMD_KINDS else "upstart" if kind == "upstart" else "sysv"


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_node_exporter_is_a_service_of_the_hosts_init_system(fleet, host):
    """The init system names the process; it is the only exporter, runs as prometheus with Debian's
    /etc/default ARGS (empty: the defaults), and is the package's binary of the suite's version."""
    way = service_way(HOSTS[host])
    out = ok(host, "set -eu\n" + SERVICE[way] +
             'stat -c %U /proc/$pid; readlink /proc/$pid/exe; tr "\\0" " " < /proc/$pid/cmdline; echo\n'
             "pgrep -x prometheus-node | grep -vx $pid || echo only\n"
             ". /etc/default/prometheus-node-exporter; echo \"ARGS=$ARGS\"\n"
             "dpkg-query -W -f '${Version}\\n' prometheus-node-exporter\n").splitlines()
    assert out[:-1] == EXPECTED[way] + ["prometheus", "/usr/bin/prometheus-node-exporter",
                                        "/usr/bin/prometheus-node-exporter ", "only", "ARGS="], out
    upstream = out[-1].split(":", 1)[-1].split("-", 1)[0].split("+", 1)[0]
    assert upstream == PINNED.get(HOSTS[host], upstream)
    info = prom.series(prom.scrape(fleet[host]), "node_exporter_build_info")
    assert [dict(labels)["version"] for labels in info] == [upstream]


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_textfile_directory_is_debians_default_root_owned(fleet, host):
    """Debian's default directory (the binary's built-in default, quoted in 1.5's --help; the process gives no
    flag), root:root 0755 after the package's postinst, which gives prometheus the directory above it only."""
    out = ok(host, "prometheus-node-exporter --help 2>&1 | grep -o -- '--collector.textfile.directory=[^ ]*' | tr -d '\"'\n"
                   "stat -c '%n %U:%G %a' /var/lib/prometheus " + DIR).splitlines()
    assert out == ["--collector.textfile.directory=" + DIR, "/var/lib/prometheus prometheus:prometheus 755",
                   DIR + " root:root 755"]


# ---------------------------------------------------------------- the textfile collector

@pytest.mark.parametrize("host", sorted(HOSTS))
def test_a_prom_file_shows_in_the_scrape(fleet, host):
    """A file renamed into the directory is in the next scrape (node_exporter reads the files at each
    scrape) with its series, its mtime, and node_textfile_scrape_error 0; promtool accepts it as it lies
    on the host.  A stale temporary file beside it (a name not ending in .prom) is ignored.  Over the lab
    bridge, from the controller."""
    nonce = int(time.time() * 1000) % 1000000007
    name, stale = "gpufleet-lab-probe.prom", ".gpufleet-lab-probe.prom.tmp-stale"
    ok(host, "echo 'not { metrics' > %s/%s" % (DIR, stale))
    write(host, name, good_file(host, nonce))
    try:
        text = poll(fleet[host], lambda t: prom.series(t, "gpufleet_lab_probe").get(
            (("gpu", "0"), ("host", host), ("note", 'a "quoted" \\ value'))) == nonce,
            "%s: the probe's series" % host)
        assert prom.series(text, "gpufleet_lab_probe") == {
            (("gpu", "0"), ("host", host), ("note", 'a "quoted" \\ value')): nonce,
            (("gpu", "1"), ("host", host), ("note", "")): -1.5}
        assert scrape_error(text) == 0
        assert list(prom.series(text, "node_textfile_mtime_seconds")) == [(("file", "%s/%s" % (DIR, name)),)]
        rc, output = prom.check_metrics(ok(host, "cat %s/%s" % (DIR, name)))
        assert (rc, output) == (0, "")
    finally:
        remove(host, name, stale)
    text = poll(fleet[host], lambda t: not prom.series(t, "gpufleet_lab_probe"), "%s: the probe gone" % host)
    assert scrape_error(text) == 0 and prom.series(text, "node_textfile_mtime_seconds") == {}


BROKEN = {
    # node_exporter 1.5 (and trixie's 1.9, forky's 1.11): "textfile ... contains unsupported client-side
    # timestamps, skipping entire file".
    "timestamp": (STAMPED, "0644"),
    # What mkstemp gives a temporary file: the exporter (user prometheus) cannot open it ("permission denied").
    "mode-0600": (STAMPED.replace(" 1700000000000", ""), "0600"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
@pytest.mark.parametrize("host", sorted(HOSTS))
def test_a_file_the_exporter_cannot_use_sets_node_textfile_scrape_error(fleet, host, case):
    """The bad file is skipped whole (no series, no mtime), the good one beside it still shows, and
    node_textfile_scrape_error is 1 until the bad file goes."""
    content, mode = BROKEN[case]
    names = ("gpufleet-lab-good.prom", "gpufleet-lab-bad.prom")
    write(host, names[0], good_file(host, 7))
    write(host, names[1], content, mode)
    try:
        text = poll(fleet[host], lambda t: scrape_error(t) == 1 and prom.series(t, "gpufleet_lab_probe"),
                    "%s: node_textfile_scrape_error 1 (%s)" % (host, case))
        assert prom.series(text, "gpufleet_lab_stamped") == {}
        assert list(prom.series(text, "node_textfile_mtime_seconds")) == [(("file", "%s/%s" % (DIR, names[0])),)]
    finally:
        remove(host, *names)
    poll(fleet[host], lambda t: scrape_error(t) == 0 and not prom.series(t, "gpufleet_lab_probe"),
         "%s: node_textfile_scrape_error back to 0" % host)


# ---------------------------------------------------------------- promtool and the helper

def test_promtool_accepts_a_good_file_and_rejects_a_bad_one():
    """Debian 12's promtool 2.42 (``check metrics``): 0 for a clean file, 1 for one it cannot parse, 3 for
    lint problems.  It accepts a client-side timestamp, which node_exporter refuses (above): promtool
    passing is not enough, the scrape's node_textfile_scrape_error must be 0 too."""
    assert prom.check_metrics(good_file("h1", 1)) == (0, "")
    rc, output = prom.check_metrics('# HELP x y\n# TYPE x gauge\nx{gpu="0" 1\n')
    assert rc == 1 and "text format parsing error in line 3" in output
    rc, output = prom.check_metrics('gpufleet_lab_probe{gpu="0"} 1\n')
    assert (rc, output) == (3, "gpufleet_lab_probe no help text\n")
    assert prom.check_metrics(STAMPED) == (0, "")
    if not os.environ.get("GPUFLEET_PROMTOOL"):
        assert "2.42.0" in prom.promtool_version().get("promtool", "")


def test_series_reads_the_text_format():
    """Labels with escapes, commas and braces in values, spaces, a trailing comma, timestamps, +Inf, NaN;
    exactly the name asked for; malformed lines and a sample twice are errors."""
    text = ('# HELP a x\n# TYPE a gauge\na 1\na{b="1",c="x,}y"} +Inf\na{ c = "q\\"\\n\\\\" , b="2", } 3e2 17\n'
            "ab 5\nb_total NaN\n")
    assert prom.series(text, "a") == {(): 1.0, (("b", "1"), ("c", "x,}y")): float("inf"),
                                      (("b", "2"), ("c", 'q"\n\\')): 300.0}
    assert prom.series(text, "ab") == {(): 5.0} and prom.series(text, "nothing") == {}
    assert prom.series(text, "b_total")[()] != prom.series(text, "b_total")[()]  # NaN
    for bad in ("a{b=1} 1\n", "a{b=\"1\" 1\n", "a 1 2 3\n", "a\n", "a 1\na 2\n"):
        with pytest.raises(ValueError):
            prom.series(bad, "a")


def test_a_lab_address_is_not_scraped_without_the_lab_bridge(monkeypatch):
    """With the lab down, 10.250.0.x would go out by the default route: refused before any traffic."""
    monkeypatch.setattr(prom, "LAB_BRIDGE", "gflab-absent")
    with pytest.raises(prom.PromError, match="bridge gflab-absent is not up"):
        prom.scrape("10.250.0.11")


def test_the_cli_scrapes_and_checks(fleet, tmp_path):
    """What an Ansible verify task runs on the controller: `prom.py scrape ADDRESS --series NAME` (JSON) and
    `prom.py check FILE` (promtool's output and exit status)."""
    cli = [sys.executable, str(HERE / "prom.py")]
    res = subprocess.run(cli + ["scrape", fleet["h1"], "--series", "node_textfile_scrape_error"],
                         capture_output=True, text=True, timeout=60, cwd=str(REPO), check=False)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == {"node_textfile_scrape_error": [{"labels": {}, "value": 0}]}
    (tmp_path / "good.prom").write_text(good_file("h1", 1))
    (tmp_path / "bad.prom").write_text("gpufleet_lab_probe 1\n")
    res = [subprocess.run(cli + ["check", str(tmp_path / n)], capture_output=True, text=True, timeout=60,
                          check=False) for n in ("good.prom", "bad.prom")]
    assert [(r.returncode, r.stdout) for r in res] == [(0, ""), (3, "gpufleet_lab_probe no help text\n")]
