# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the in-process module tests share."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest

from core_compat import patch_module_args


@pytest.fixture
def call_module(capsys):
    """``call_module(main, args) -> (rc, result)``: run a module's ``main`` in-process, as Ansible would."""
    def call(main, args):
        with patch_module_args(args):
            with pytest.raises(SystemExit) as exc:
                main()
        return exc.value.code, json.loads(capsys.readouterr().out)
    return call
