# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The init_system_info module run in-process on this machine."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.nvidia.plugins.modules import init_system_info


def test_module_reports_this_machine(call_module):
    rc, result = call_module(init_system_info.main, {'_ansible_check_mode': True})
    assert rc == 0
    assert result['changed'] is False
    assert result['init_system'] in ('systemd', 'upstart', 'sysvinit', 'unknown')
    with open('/proc/1/comm') as handle:
        assert result['evidence']['pid1_comm'] == handle.read().strip()
    assert result['reason']


def test_module_rejects_unknown_options(call_module):
    rc, result = call_module(init_system_info.main, {'bogus': 1})
    assert rc == 1
    assert result['failed'] is True
    assert 'bogus' in result['msg']
