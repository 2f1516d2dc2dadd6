"""Fixtures for the persistence daemon tests: fake hosts and both daemons.

Prerequisites are checked, never skipped: run ``tests/driverkit/setup`` first
and run the tests as root (they create private mount namespaces). Every host
lives in a short /tmp dir that is removed, with its daemons stopped by pid,
when the test ends.
"""

import pytest

import harness


@pytest.fixture(scope="session", autouse=True)
def prerequisites():
    missing = harness.missing_prerequisites()
    if missing:
        pytest.fail("daemon tests not ready: %s" % "; ".join(missing), pytrace=False)


@pytest.fixture
def make_host():
    hosts = []

    def make(gpus=2, description=None):
        host = harness.Host(gpus=gpus, description=description)
        hosts.append(host)
        return host

    yield make
    stubborn = []
    for host in hosts:
        stubborn += host.close()
    assert not stubborn, "daemons that ignored SIGTERM (killed): %s" % stubborn


@pytest.fixture
def host(make_host):
    return make_host()


@pytest.fixture(params=["nvidia", "ours"])
def kind(request):
    """Which daemon: NVIDIA's real 535 binary or files/gpufleet-persistenced."""
    return request.param


@pytest.fixture
def daemon(kind, host):
    """The daemon ``kind`` running on a 2-GPU host, both GPUs enabled."""
    daemon = harness.DAEMONS[kind](host)
    daemon.start()
    return daemon


@pytest.fixture
def ours(host):
    """Our daemon (--verbose) on a 2-GPU host."""
    daemon = harness.OurDaemon(host)
    daemon.start("--verbose")
    return daemon
