"""Fixtures for the driver kit's tests: fake hosts, NVIDIA's daemon, pynvml probes.

Prerequisites are checked, never skipped: run ``tests/driverkit/setup`` first
and run the tests as root (they create private mount namespaces). The shared
fixtures (``make_host``, ``host``) come from tests/driverkit/pytest_fakehost.py;
the host is ``kithost.FakeHost``. A test that runs NVIDIA's daemon takes
``nvidia`` and builds its host with ``make_host(nvidia=nvidia)``, and so runs
against each version in the kit (ids ``nvidia535``, ``nvidia550``).
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "driverkit"))

import fakehost  # noqa: E402
import kithost  # noqa: E402
from pytest_fakehost import host, make_host, nvidia, require  # noqa: E402,F401  (fixtures)


@pytest.fixture(scope="session", autouse=True)
def driverkit():
    require("the driver kit's tests", fakehost.missing_prerequisites(
        real_nvml=True, pynvml=True, system_python="it runs pynvml as nobody",
        collection=["gpu.rpc"]))


@pytest.fixture
def host_class():
    return kithost.FakeHost
