# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The init_system_info module run in-process on this machine."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpufleet.nvidia.plugins.modules import init_system_info


def run_module(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            init_system_info.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def test_module_reports_this_machine(capsys):
    rc, result = run_module(capsys, {'_ansible_check_mode': True})
    assert rc == 0
    assert result['changed'] is False
    assert result['init_system'] in ('systemd', 'upstart', 'sysvinit', 'unknown')
    with open('/proc/1/comm') as handle:
        assert result['evidence']['pid1_comm'] == handle.read().strip()
    assert result['reason']


def test_module_rejects_unknown_options(capsys):
    rc, result = run_module(capsys, {'bogus': 1})
    assert rc == 1
    assert result['failed'] is True
    assert 'bogus' in result['msg']
