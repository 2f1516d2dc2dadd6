#!/usr/bin/env python3
"""The Debian mirrors this machine's apt uses, for the lab and the driver kit.

Nothing in the repository names a package host: air-gapped GPU sites run
their own mirrors, and the lab must fetch from the same place the machine
does.  The mirrors come from apt's own view of its configuration
(``apt-get indextargets --no-release-info``, which reads sources.list,
sources.list.d/*.list and *.sources exactly as apt does, without needing
downloaded lists), matched by suite name:

  archive   the entry whose suite is the release codename (e.g. bookworm)
  security  the entry whose suite is <codename>-security (optional)

Overrides (environment): ``GPUFLEET_APT_MIRROR`` (archive URI),
``GPUFLEET_APT_SECURITY_MIRROR`` (security URI; empty = none), and
``GPUFLEET_APT_KEYRING`` (the keyring that signs them; default Debian's
archive keyring from the debian-archive-keyring package).

CLI:
  aptsource.py mirrors                      print {"archive": URI, "security": URI|null}
  aptsource.py sources COMPONENT...         print a deb822 sources file for those components
  aptsource.py sources --suite SUITE COMPONENT...   the same for another Debian suite on the
                                            same mirrors (e.g. trixie on a bookworm machine)
"""

import json
import os
import subprocess
import sys

DEFAULT_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


class MirrorError(Exception):
    pass


def codename(os_release="/etc/os-release"):
    with open(os_release) as handle:
        for line in handle:
            key, _, value = line.strip().partition("=")
            if key == "VERSION_CODENAME" and value:
                return value.strip('"')
    raise MirrorError("%s has no VERSION_CODENAME: set GPUFLEET_APT_MIRROR" % os_release)


def parse_indextargets(text):
    """(site, release) of each 'deb' target in ``apt-get indextargets`` output."""
    pairs = []
    for block in text.split("\n\n"):
        fields = {}
        for line in block.splitlines():
            key, sep, value = line.partition(": ")
            if sep:
                fields[key] = value.strip()
        if fields.get("Target-Of") == "deb" and fields.get("Site") and fields.get("Release"):
            pair = (fields["Site"].rstrip("/"), fields["Release"])
            if pair not in pairs:
                pairs.append(pair)
    return pairs


def pick(pairs, suite):
    """The archive and security sites for ``suite`` among ``pairs``."""
    archive = [site for site, release in pairs if release == suite]
    security = [site for site, release in pairs
                if release in (suite + "-security", suite + "/updates")]
    return (archive[0] if archive else None), (security[0] if security else None)


def configured_pairs():
    try:
        out = subprocess.run(["apt-get", "indextargets", "--no-release-info"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, check=False)
    except OSError as exc:
        raise MirrorError("cannot run apt-get indextargets (%s): set GPUFLEET_APT_MIRROR" % exc)
    if out.returncode != 0:
        raise MirrorError("apt-get indextargets failed: %s; set GPUFLEET_APT_MIRROR"
                          % out.stderr.strip())
    return parse_indextargets(out.stdout)


def mirrors(environ=None, pairs=None, suite=None):
    """{"archive": URI, "security": URI or None, "keyring": path}."""
    environ = os.environ if environ is None else environ
    archive = environ.get("GPUFLEET_APT_MIRROR") or None
    security = environ.get("GPUFLEET_APT_SECURITY_MIRROR")
    if archive is None or security is None:
        suite = suite or codename()
        found_archive, found_security = pick(configured_pairs() if pairs is None else pairs, suite)
        archive = archive or found_archive
        if security is None:
            security = found_security
    if not archive:
        raise MirrorError(
            "this machine's apt configuration has no entry for the Debian suite %r "
            "(apt-get indextargets lists none): add one to /etc/apt/sources.list.d/ or set "
            "GPUFLEET_APT_MIRROR to your Debian mirror's URI" % suite)
    return {"archive": archive.rstrip("/"), "security": (security or "").rstrip("/") or None,
            "keyring": environ.get("GPUFLEET_APT_KEYRING") or DEFAULT_KEYRING}


def deb822(found, suite, components):
    """A deb822 sources file for ``suite`` with ``components``."""
    comps = " ".join(components)
    stanzas = ["Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents: %s\nSigned-By: %s\n"
               % (found["archive"], suite, suite, comps, found["keyring"])]
    if found["security"]:
        stanzas.append("Types: deb\nURIs: %s\nSuites: %s-security\nComponents: %s\nSigned-By: %s\n"
                       % (found["security"], suite, comps, found["keyring"]))
    return "\n".join(stanzas)


def main(argv):
    suite = None
    if argv[:1] == ["sources"] and argv[1:2] == ["--suite"]:
        suite, argv = (argv[2] if len(argv) > 2 else ""), argv[:1] + argv[3:]
    if (not argv or argv[0] not in ("mirrors", "sources") or suite == ""
            or (argv[0] == "sources" and len(argv) < 2)):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        found = mirrors()
        if argv[0] == "mirrors":
            print(json.dumps(found))
        else:
            print("# Written by tests/driverkit/aptsource.py from this machine's apt configuration.")
            print(deb822(found, suite or codename(), argv[1:]), end="")
    except MirrorError as exc:
        print("aptsource: %s" % exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
