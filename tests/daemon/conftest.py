"""Fixtures for the persistence daemon tests: fake hosts and both daemons.

Prerequisites are checked, never skipped: run ``tests/driverkit/setup`` first
and run the tests as root (they create private mount namespaces). Every host
lives in a short /tmp dir that is removed, with its daemons stopped by pid,
when the test ends (``make_host``/``host`` from tests/driverkit/pytest_fakehost.py,
building ``harness.Host``).
"""

import pytest

import harness
from pytest_fakehost import host, make_host, nvidia, require  # noqa: F401  (fixtures; harness put tests/driverkit on sys.path)


@pytest.fixture(scope="session", autouse=True)
def prerequisites():
    require("the daemon tests", harness.missing_prerequisites())


@pytest.fixture
def host_class():
    return harness.Host


@pytest.fixture(params=harness.DAEMON_NAMES)
def name(request):
    """Which daemon: NVIDIA's real binary (nvidia535, nvidia550) or files/gpufleet-persistenced (ours)."""
    return request.param


@pytest.fixture
def daemon(name, host):
    """The daemon ``name`` running on a 2-GPU host, both GPUs enabled."""
    daemon = harness.make_daemon(name, host)
    daemon.start()
    return daemon


@pytest.fixture
def ours(host):
    """Our daemon (--verbose) on a 2-GPU host."""
    daemon = harness.OurDaemon(host)
    daemon.start("--verbose")
    return daemon
