"""tests/driverkit/aptsource.py: the Debian mirrors come from the machine's apt
configuration (or the environment), never from the repository."""

import os
import subprocess
import sys

import pytest

KIT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "driverkit")
sys.path.insert(0, KIT)
import aptsource  # noqa: E402

INDEXTARGETS = """MetaKey: main/binary-amd64/Packages
Site: http://mirror.site.invalid/debian
Release: bookworm
Target-Of: deb

MetaKey: main/binary-amd64/Packages
Site: http://mirror.site.invalid/debian
Release: bookworm-updates
Target-Of: deb

MetaKey: main/source/Sources
Site: http://src.site.invalid/debian
Release: bookworm
Target-Of: deb-src

MetaKey: main/binary-amd64/Packages
Site: http://security.site.invalid/debian-security/
Release: bookworm-security
Target-Of: deb

MetaKey: main/binary-amd64/Packages
Site: http://vendor.site.invalid/apt
Release: nodistro
Target-Of: deb
"""


def test_parse_and_pick_by_suite_name():
    pairs = aptsource.parse_indextargets(INDEXTARGETS)
    assert ("http://src.site.invalid/debian", "bookworm") not in pairs  # deb-src ignored
    assert aptsource.pick(pairs, "bookworm") == (
        "http://mirror.site.invalid/debian", "http://security.site.invalid/debian-security")


def test_security_entry_is_optional():
    pairs = [("http://mirror.site.invalid/debian", "bookworm")]
    found = aptsource.mirrors(environ={}, pairs=pairs, suite="bookworm")
    assert found["security"] is None
    text = aptsource.deb822(found, "bookworm", ["main", "contrib"])
    assert "security" not in text
    assert "URIs: http://mirror.site.invalid/debian\nSuites: bookworm bookworm-updates\n" in text


def test_environment_overrides_the_machine():
    pairs = aptsource.parse_indextargets(INDEXTARGETS)
    env = {"GPUFLEET_APT_MIRROR": "http://airgap.site.invalid/debian/",
           "GPUFLEET_APT_SECURITY_MIRROR": "", "GPUFLEET_APT_KEYRING": "/etc/site.gpg"}
    assert aptsource.mirrors(environ=env, pairs=pairs, suite="bookworm") == {
        "archive": "http://airgap.site.invalid/debian", "security": None, "keyring": "/etc/site.gpg"}


def test_no_entry_for_the_suite_is_a_clear_error():
    with pytest.raises(aptsource.MirrorError) as err:
        aptsource.mirrors(environ={}, pairs=[("http://vendor.site.invalid/apt", "nodistro")],
                          suite="bookworm")
    assert "GPUFLEET_APT_MIRROR" in str(err.value) and "bookworm" in str(err.value)


def test_the_machines_own_configuration_is_what_apt_uses():
    """Against this machine's real apt: the mirror found is one apt itself lists."""
    out = subprocess.run(["apt-get", "indextargets", "--no-release-info",
                          "--format", "$(SITE) $(RELEASE)"],
                         stdout=subprocess.PIPE, text=True, check=True).stdout.split("\n")
    found = aptsource.mirrors(environ={})
    suite = aptsource.codename()
    assert "%s %s" % (found["archive"], suite) in [line.rstrip() for line in out]
