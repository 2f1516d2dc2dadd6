"""Pytest fixtures shared by the suites that run on fake hosts (tests/kit, tests/daemon, tests/security).

A suite's conftest.py puts tests/driverkit on ``sys.path`` (one line) and
imports from here; importing this puts the built collection on ``sys.path``
too. It gets:

``require(suite, missing)``
    Fail every test of ``suite`` with one message when ``missing`` (from
    ``fakehost.missing_prerequisites``, whose parameters say what the suite
    needs) is not empty. Prerequisites are checked, never skipped: call it
    from a session-scoped autouse fixture.

``make_host`` / ``host``
    ``make_host(gpus=2, description=None, **options)`` builds a ``host_class``
    (a ``fakehost.TempHost``; a suite overrides the ``host_class`` fixture with
    its subclass, which takes the ``options``) and closes every host it built
    when the test ends: their daemons are stopped by pid, their /tmp dirs
    removed, and the test fails if a daemon had to be killed. ``host`` is one
    2-GPU host.

``nvidia``
    Which of NVIDIA's daemons (``fakehost.NVIDIA_DAEMONS``) a test runs: a
    test that takes it runs once with each, ids ``nvidia535`` and ``nvidia550``.
"""

import pytest

import fakehost

fakehost.use_collection()


def require(suite, missing):
    if missing:
        pytest.fail("%s not ready: %s" % (suite, "; ".join(missing)), pytrace=False)


@pytest.fixture
def host_class():
    """The class ``make_host`` builds; a suite's conftest overrides this."""
    return fakehost.TempHost


@pytest.fixture
def make_host(host_class):
    hosts = []

    def make(gpus=2, description=None, **options):
        made = host_class(gpus=gpus, description=description, **options)
        hosts.append(made)
        return made

    yield make
    stubborn = []
    for made in hosts:
        stubborn += made.close()
    assert not stubborn, "daemons that ignored SIGTERM (killed): %s" % stubborn


@pytest.fixture
def host(make_host):
    return make_host()


@pytest.fixture(params=sorted(fakehost.NVIDIA_DAEMONS))
def nvidia(request):
    return request.param
