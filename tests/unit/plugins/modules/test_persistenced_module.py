# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""persistenced's refusals, run in-process on this machine: each fails before touching anything; and
state=stopped's check mode and idempotence, with its service replaced by a fake.

(The deployments themselves run on the lab's systemd, sysvinit and Upstart hosts: molecule/persistenced.)
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

from core_compat import patch_module_args

from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import detect as init_detect
from ansible_collections.gpufleet.nvidia.plugins.module_utils.persistenced import deploy
from ansible_collections.gpufleet.nvidia.plugins.modules import persistenced

SOURCE = '#!/usr/bin/env python\nprint("daemon")\n'


def run_module(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            persistenced.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def test_no_init_system_recognised(capsys, monkeypatch):
    real_detect = init_detect.detect

    def container(root, run_command):
        found = real_detect(root, run_command)
        found.update(init_system='unknown', reason='PID 1 is tini, a container entrypoint, not an init system')
        return found

    monkeypatch.setattr(init_detect, 'detect', container)
    rc, result = run_module(capsys, {'bundled_source': SOURCE})
    assert rc == 1
    assert 'no init system recognised' in result['msg'] and 'set init_system' in result['msg']
    assert os.uname()[1] in result['msg']


def test_missing_driver_daemon_fails_before_any_change(capsys, tmp_path):
    missing = str(tmp_path / 'nvidia-persistenced')
    rc, result = run_module(capsys, {'bundled_source': SOURCE, 'init_system': 'systemd', 'daemon': 'driver',
                                     'driver_path': missing, 'user': 'root'})
    assert rc == 1
    assert "NVIDIA's daemon %s is missing" % missing in result['msg'] and 'daemon: bundled' in result['msg']
    assert result['actions'] == []


def test_existing_user_with_another_primary_group_is_an_error(capsys):
    # "nobody" exists on Debian with primary group "nogroup"
    rc, result = run_module(capsys, {'bundled_source': SOURCE, 'init_system': 'sysvinit', 'user': 'nobody',
                                     'group': 'root'})
    assert rc == 1
    assert 'user nobody exists with primary group nogroup, not root' in result['msg']
    assert 'allow_other_primary_group' in result['msg']


def test_missing_user_without_create_user(capsys):
    rc, result = run_module(capsys, {'bundled_source': SOURCE, 'init_system': 'sysvinit',
                                     'user': 'gpufleet-no-such-user', 'create_user': False})
    assert rc == 1 and 'does not exist and create_user is false' in result['msg']


def test_unsafe_extra_args_are_refused(capsys):
    rc, result = run_module(capsys, {'bundled_source': SOURCE, 'init_system': 'systemd',
                                     'extra_args': ['--verbose; rm -rf /']})
    assert rc == 1 and 'unsafe in a service definition' in result['msg']


def test_called_without_the_action_plugin(capsys):
    rc, result = run_module(capsys, {'init_system': 'systemd'})
    assert rc == 1 and 'action plugin' in result['msg']


def test_an_existing_user_is_used_with_its_own_primary_group(capsys, tmp_path, monkeypatch):
    """user: nobody on Debian: no "nobody" group is created (its primary group is nogroup), and a
    shared account gets a warning. Check mode: nothing changes on this machine."""
    warnings = []
    monkeypatch.setattr(persistenced.AnsibleModule, 'warn', lambda self, msg: warnings.append(msg))
    rc, result = run_module(capsys, {'bundled_source': SOURCE, 'init_system': 'sysvinit', 'user': 'nobody',
                                     'state_file': str(tmp_path / 'gf' / 'persistence.json'),
                                     '_ansible_check_mode': True})
    assert rc == 0, result
    assert 'create_group' not in result['actions'] and 'create_user' not in result['actions']
    assert result['group'] == 'nogroup'
    assert any('nobody is an account shared with other services' in w for w in warnings)
    assert not (tmp_path / 'gf').exists()


@pytest.mark.parametrize('state_file,words', [
    ('/etc/persistence.json', 'directly in /etc'),
    ('/var/lib/gpufleet/../../../etc/persistence.json', 'normalised'),
])
def test_a_state_file_outside_a_dedicated_directory_fails_first(capsys, state_file, words):
    # check mode and an explicit group: should the check ever regress, this machine's /etc is still safe
    rc, result = run_module(capsys, {'bundled_source': SOURCE, 'init_system': 'sysvinit', 'user': 'nobody',
                                     'group': 'nogroup', 'state_file': state_file, '_ansible_check_mode': True})
    assert rc == 1 and words in result['msg'] and 'nothing was changed' in result['msg'], result
    assert result['actions'] == []


def test_a_missing_init_tool_fails_naming_it(capsys, tmp_path, monkeypatch):
    """An Upstart host whose initctl is gone: a clear failure, not a traceback. Check mode, root: nothing changes."""
    real_detect = init_detect.detect

    def without_initctl(root, run_command):
        found = real_detect(root, run_command)
        found['evidence']['tools'].pop('initctl', None)
        return found

    monkeypatch.setattr(init_detect, 'detect', without_initctl)
    rc, result = run_module(capsys, {'bundled_source': SOURCE, 'init_system': 'upstart', 'user': 'root',
                                     'state_file': str(tmp_path / 'gf' / 'persistence.json'),
                                     '_ansible_check_mode': True})
    assert rc == 1
    assert 'initctl is needed to manage nvidia-persistenced on this upstart host but was not found' in result['msg']
    assert os.uname()[1] in result['msg'] and not (tmp_path / 'gf').exists()


class FakeService(object):
    """The daemon's service as state=stopped sees it; nothing on this machine is touched."""

    def __init__(self):
        self.running = True
        self.calls = []

    def is_running(self):
        return self.running

    def pid(self):
        return 4321 if self.running else None

    def stop(self):
        self.calls.append('stop')
        self.running = False

    def logs(self):
        return ''


@pytest.fixture
def fake_service(tmp_path, monkeypatch):
    """persistenced with its service, service definition and /proc replaced (the unit: tmp_path/unit)."""
    service = FakeService()
    monkeypatch.setattr(deploy, 'persistence_service', lambda init, name, run, tools, together=None: service)
    monkeypatch.setattr(deploy.pd, 'unit_path', lambda init, name: str(tmp_path / 'unit'))
    monkeypatch.setattr(deploy.procs, 'open_file_holders', lambda prefixes: [])
    return service


def test_stopped_check_mode_then_stop_then_idempotent(capsys, tmp_path, fake_service):
    (tmp_path / 'unit').write_text('# Managed by gpufleet.nvidia (gpufleet.nvidia.persistenced)\n')
    args = {'state': 'stopped', 'init_system': 'systemd'}  # no bundled_source: stopped installs nothing
    rc, checked = run_module(capsys, dict(args, _ansible_check_mode=True, _ansible_diff=True))
    assert rc == 0, checked
    assert checked['changed'] and checked['actions'] == ['stop'] and checked['pid'] == 4321
    assert checked['diff']['before'] == 'running\n' and checked['diff']['after'] == 'stopped\n'
    assert fake_service.calls == [] and fake_service.running

    rc, stopped = run_module(capsys, args)
    assert rc == 0, stopped
    assert stopped['changed'] and stopped['actions'] == ['stop'] and fake_service.calls == ['stop']
    assert stopped['pid'] is None and stopped['device_holders'] == []
    assert stopped['unit_path'] == str(tmp_path / 'unit') and stopped['init_system'] == 'systemd'

    for again in (dict(args, _ansible_check_mode=True), args):
        rc, result = run_module(capsys, again)
        assert rc == 0 and not result['changed'] and result['actions'] == [], result
    assert fake_service.calls == ['stop']
    assert (tmp_path / 'unit').read_text() == '# Managed by gpufleet.nvidia (gpufleet.nvidia.persistenced)\n'


def test_stopped_without_the_service_fails_naming_it(capsys, tmp_path, fake_service):
    fake_service.running = False
    rc, result = run_module(capsys, {'state': 'stopped', 'init_system': 'sysvinit'})
    assert rc == 1 and result['actions'] == []
    assert 'the service nvidia-persistenced defined, but it is not installed (no %s)' % (tmp_path / 'unit') \
        in result['msg']
    assert os.uname()[1] in result['msg'] and fake_service.calls == []
