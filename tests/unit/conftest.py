# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every unit test shares: the unit tests' own helpers (core_compat, role_templates) importable from every
test directory below, and the modules' lock files in a private directory, never the machine's /run."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)


@pytest.fixture(scope='session', autouse=True)
def private_lock_dir(tmp_path_factory):
    """``_host.LOCK_DIR`` (/run/gpufleet-locks) for this session: a private 0700 directory, for every module
    run in-process or as a child process."""
    path = str(tmp_path_factory.mktemp('gpufleet-locks'))
    os.chmod(path, 0o700)
    os.environ['GPUFLEET_LOCK_DIR'] = path
    yield path
    os.environ.pop('GPUFLEET_LOCK_DIR', None)
