# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the persistenced module does: the present, absent and stopped plans, decided from facts alone, and the
one dispatch (Deployer.apply) that carries out any of them, with a fake init system."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import itertools

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.persistenced import rules as pd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.persistenced import deploy
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import RunFailed

OURS = '# Managed by gpufleet.nvidia (gpufleet.nvidia.persistenced) for nvidia-persistenced.\n[Unit]\n'
THEIRS = '#!/bin/sh\n# NVIDIA sample script\n'


# --------------------------------------------------------------------------
# present
# --------------------------------------------------------------------------

def facts(**overrides):
    base = dict(unit='U', binary='B', running=True, enabled=True, user_exists=True, group_exists=True,
                state_dir_ok=True, run_dir_ok=True)
    base.update(overrides)
    return base


DESIRED = dict(unit='U', binary='B', binary_is_daemon=False, create_user=True, create_group=True)


@pytest.mark.parametrize('current,actions', [
    (facts(), []),
    (facts(running=False), ['start']),
    (facts(unit=None, binary=None, running=False, enabled=False, user_exists=False, group_exists=False,
           state_dir_ok=False),
     ['create_group', 'create_user', 'state_dir', 'install_binary', 'write_unit', 'reload_init', 'enable', 'start']),
    (facts(unit='# Managed by gpufleet.nvidia\nold'), ['write_unit', 'reload_init', 'restart']),
    (facts(unit=THEIRS), ['backup_unit', 'write_unit', 'reload_init', 'restart']),
    (facts(binary='old'), ['install_binary']),  # NVIDIA's daemon runs: the helper changed, no restart
    (facts(enabled=False), ['enable']),
    (facts(run_dir_ok=False), ['restart']),
])
def test_plan(current, actions):
    assert pd.plan_present(current, DESIRED) == actions


def test_plan_restarts_a_running_bundled_daemon_whose_program_changed():
    desired = dict(DESIRED, binary_is_daemon=True)
    assert pd.plan_present(facts(binary='old'), desired) == ['install_binary', 'restart']


def test_plan_for_root_creates_no_account():
    desired = dict(DESIRED, create_user=False, create_group=False)
    assert pd.plan_present(facts(user_exists=False, group_exists=False), desired) == []


# --------------------------------------------------------------------------
# absent
# --------------------------------------------------------------------------

def host(**overrides):
    """A host where everything this module installs is in place and running."""
    base = dict(init_system='systemd', unit=OURS, running=True, enabled=True, run_dir_exists=True,
                binary_exists=True, user_exists=True, group_exists=True, state_dir_owned=True)
    base.update(overrides)
    return base


KEEP_USER = dict(remove_user=False, user='nvidia-persistenced', group='nvidia-persistenced')
REMOVE_USER = dict(KEEP_USER, remove_user=True)


@pytest.mark.parametrize('current,desired,actions', [
    (host(), KEEP_USER, ['stop', 'disable', 'remove_unit', 'reload_init', 'remove_binary']),
    (host(enabled=False), KEEP_USER, ['stop', 'remove_unit', 'reload_init', 'remove_binary']),
    (host(running=False), KEEP_USER, ['disable', 'remove_unit', 'reload_init', 'remove_binary']),
    # the state directory goes back to root before its owner's uid is freed
    (host(), REMOVE_USER, ['stop', 'disable', 'remove_unit', 'reload_init', 'remove_binary', 'reclaim_state_dir',
                           'remove_user', 'remove_group']),
    (host(state_dir_owned=False), REMOVE_USER, ['stop', 'disable', 'remove_unit', 'reload_init', 'remove_binary',
                                                'remove_user', 'remove_group']),
    # userdel took the private group along, or it never existed
    (host(group_exists=False), REMOVE_USER, ['stop', 'disable', 'remove_unit', 'reload_init', 'remove_binary',
                                             'reclaim_state_dir', 'remove_user']),
    # the user is gone already: its group may still be there; nothing can be its state directory
    (host(user_exists=False, state_dir_owned=False), REMOVE_USER,
     ['stop', 'disable', 'remove_unit', 'reload_init', 'remove_binary', 'remove_group']),
    # a run directory is removed only on Upstart, whose job has no post-stop
    (host(init_system='upstart'), KEEP_USER, ['stop', 'disable', 'remove_unit', 'reload_init', 'remove_run_dir',
                                              'remove_binary']),
    (host(init_system='upstart', run_dir_exists=False), KEEP_USER,
     ['stop', 'disable', 'remove_unit', 'reload_init', 'remove_binary']),
    (host(init_system='sysvinit', binary_exists=False), KEEP_USER, ['stop', 'disable', 'remove_unit', 'reload_init']),
])
def test_absent_plan(current, desired, actions):
    assert pd.plan_absent(current, desired) == actions


def test_absent_leaves_a_service_definition_that_is_not_ours_and_its_daemon():
    assert pd.plan_absent(host(unit=THEIRS), KEEP_USER) == ['remove_binary']


def test_absent_stops_a_daemon_left_without_a_definition():
    assert pd.plan_absent(host(unit=None, enabled=False), KEEP_USER) == ['stop', 'remove_binary']


def test_absent_never_removes_root():
    desired = dict(remove_user=True, user='root', group='root')
    assert pd.plan_absent(host(), desired) == ['stop', 'disable', 'remove_unit', 'reload_init', 'remove_binary']
    # a service user whose group is root: the user goes, the group stays
    desired = dict(remove_user=True, user='nvidia-persistenced', group='root')
    assert pd.plan_absent(host(), desired)[-2:] == ['reclaim_state_dir', 'remove_user']


def test_absent_on_a_clean_host_does_nothing():
    clean = host(unit=None, running=False, enabled=False, run_dir_exists=False, binary_exists=False,
                 user_exists=False, group_exists=False, state_dir_owned=False)
    assert pd.plan_absent(clean, REMOVE_USER) == []


# --------------------------------------------------------------------------
# stopped
# --------------------------------------------------------------------------

WHERE = dict(service='nvidia-persistenced', unit_path='/etc/init.d/nvidia-persistenced')


@pytest.mark.parametrize('unit', [OURS, THEIRS])
@pytest.mark.parametrize('running', [True, False])
def test_stopped_plan_only_ever_stops(unit, running):
    """Every installed case: the definition, its start at boot, the program and the state file are not
    touched, so state=present brings the same daemon back; a stopped daemon needs nothing (idempotent)."""
    assert pd.plan_stopped(dict(unit=unit, running=running), WHERE) == (['stop'] if running else [])


@pytest.mark.parametrize('running', [True, False])
def test_stopped_plan_refuses_a_service_that_is_not_installed(running):
    with pytest.raises(pd.ConfigError) as exc:
        pd.plan_stopped(dict(unit=None, running=running), WHERE)
    assert str(exc.value) == ('state=stopped keeps the service nvidia-persistenced defined, but it is not installed '
                              '(no /etc/init.d/nvidia-persistenced): deploy it with state=present first; nothing '
                              'was changed')


# --------------------------------------------------------------------------
# One dispatch for every state
# --------------------------------------------------------------------------

def every_fact_combination(template):
    keys = sorted(key for key, value in template.items() if isinstance(value, bool))
    for values in itertools.product((False, True), repeat=len(keys)):
        yield dict(template, **dict(zip(keys, values)))


def test_every_planned_action_has_one_handler():
    planned = set()
    for unit in (None, OURS, THEIRS):
        for binary in (None, 'old', 'B'):
            for current in every_fact_combination(facts(unit=unit, binary=binary)):
                for desired in every_fact_combination(dict(DESIRED, unit=OURS)):
                    planned.update(pd.plan_present(current, desired))
        for init in ('systemd', 'sysvinit', 'upstart'):
            for current in every_fact_combination(host(unit=unit, init_system=init)):
                planned.update(pd.plan_absent(current, REMOVE_USER))
        if unit is not None:
            for running in (False, True):
                planned.update(pd.plan_stopped(dict(unit=unit, running=running), WHERE))
    assert planned == set(deploy.Deployer.ACTIONS)


# The Deployer ends a failed run with RunFailed (the module layer turns it into fail_json).
Failed = RunFailed


def failure(exc):
    """What the module fails with: the message and the result keys."""
    return dict(exc.value.extra, msg=exc.value.msg)


class FakeCalls(object):
    """What Deployer asks of the module (``concerns.module.HostCalls``): commands through ``run``."""

    check_mode = False
    diff = False
    label = None
    together = None

    def __init__(self, run):
        self.run = run


def deployer_with(tmp_path, init_system, answers, **params):
    """A Deployer on a fake host: ``answers`` by command line (tool name, arguments); ``calls`` records them."""
    calls = []

    def run(argv):
        calls.append(' '.join([argv[0].rsplit('/', 1)[-1]] + list(argv[1:])))
        return answers.get(calls[-1], (0, '', ''))
    deployer = deploy.Deployer(dict(service_name='nvidia-persistenced', bundled_path=str(tmp_path / 'bin'), **params),
                               FakeCalls(run))
    deployer.init = init_system
    deployer.service = deploy.Service(init_system, 'nvidia-persistenced', run, {'systemctl': '/bin/systemctl'},
                                      find_pid=lambda: None)
    deployer.unit_path = str(tmp_path / 'unit')
    deployer.unit_mode = 0o644
    return deployer, calls


def test_absent_names_the_action_that_failed(tmp_path):
    answers = {'systemctl stop nvidia-persistenced': (1, '', 'Access denied\n')}
    deployer, calls = deployer_with(tmp_path, 'systemd', answers)
    (tmp_path / 'unit').write_text(OURS)
    with pytest.raises(Failed) as exc:
        deployer.apply(['stop', 'remove_unit'], {}, {}, deployer.absent_failed)
    assert 'removing the persistence daemon failed at stop: stop nvidia-persistenced failed' in failure(exc)['msg']
    assert 'Access denied' in failure(exc)['msg']
    assert (tmp_path / 'unit').read_text() == OURS  # nothing after the failed action ran


def test_present_puts_the_previous_definition_back_when_a_service_command_fails(tmp_path):
    answers = {'systemctl enable nvidia-persistenced': (1, '', 'Failed to enable unit\n')}
    deployer, calls = deployer_with(tmp_path, 'systemd', answers)
    (tmp_path / 'unit').write_text(THEIRS)
    current = dict(unit=THEIRS, binary=None, running=False)
    desired = dict(unit=OURS, binary='#!/usr/bin/python3\n')
    with pytest.raises(Failed) as exc:
        deployer.apply(['install_binary', 'write_unit', 'reload_init', 'enable', 'start'], current, desired,
                       deployer.present_failed)
    msg = failure(exc)['msg']
    assert 'enabling nvidia-persistenced failed' in msg and 'the previous service definition was restored' in msg
    assert 'Daemon log' in msg and failure(exc)['changed'] is True
    assert (tmp_path / 'unit').read_text() == THEIRS and not (tmp_path / 'bin').exists()
    assert 'systemctl start nvidia-persistenced' not in calls


def test_a_write_that_fails_names_the_file(tmp_path):
    (tmp_path / 'file').write_text('')
    deployer, calls = deployer_with(tmp_path, 'systemd', {})
    deployer.unit_path = str(tmp_path / 'file' / 'unit')
    with pytest.raises(Failed) as exc:
        deployer.apply(['write_unit'], {}, dict(unit=OURS), deployer.present_failed)
    assert 'cannot write %s' % deployer.unit_path in failure(exc)['msg'] and calls == []


# --------------------------------------------------------------------------
# stopped, carried out
# --------------------------------------------------------------------------

DAEMON_PID = 4321
HOLDER = {'pid': 777, 'name': 'dcgm-exporter', 'uid': 0, 'paths': ['/dev/nvidia0', '/dev/nvidiactl']}


@pytest.fixture
def holders(monkeypatch):
    """What /proc shows: the daemon's own descriptors while it runs, and whatever the test adds."""
    found = []
    monkeypatch.setattr(deploy.procs, 'open_file_holders', lambda prefixes: list(found))
    return found


def stopped_deployer(tmp_path, unit=OURS, running=True, survives=False, answers=None, check_mode=False):
    """A SysV host whose daemon (pid DAEMON_PID) is gone once its script's stop ran, unless it ``survives``."""
    deployer, calls = deployer_with(tmp_path, 'sysvinit', answers or {}, state='stopped')
    deployer.calls.check_mode = check_mode
    deployer.calls.diff = True
    deployer.STOP_SETTLE = 0.3

    def find_pid():
        alive = running and (survives or 'nvidia-persistenced stop' not in calls)
        return DAEMON_PID if alive else None
    deployer.service.find_pid = find_pid
    if unit is not None:
        (tmp_path / 'unit').write_text(unit)
    return deployer, calls


@pytest.mark.parametrize('unit', [OURS, THEIRS])
def test_stopped_stops_the_daemon_and_touches_nothing_else(tmp_path, holders, unit):
    deployer, calls = stopped_deployer(tmp_path, unit=unit)
    deployer.stopped()
    assert calls == ['nvidia-persistenced stop']
    assert deployer.result['actions'] == ['stop'] and deployer.result['changed'] is True
    assert deployer.result['pid'] is None and deployer.result['device_holders'] == []
    assert deployer.result['diff']['before'] == 'running\n' and deployer.result['diff']['after'] == 'stopped\n'
    assert (tmp_path / 'unit').read_text() == unit and not (tmp_path / 'bin').exists()
    assert deployer.warnings == []


def test_stopped_again_changes_nothing(tmp_path, holders):
    deployer, calls = stopped_deployer(tmp_path, running=False)
    deployer.stopped()
    assert calls == [] and deployer.result['actions'] == [] and deployer.result['changed'] is False
    assert deployer.result['pid'] is None
    assert deployer.result['diff']['before'] == deployer.result['diff']['after'] == 'stopped\n'


def test_stopped_in_check_mode_runs_no_command_and_reports_the_other_holders(tmp_path, holders):
    holders += [dict(HOLDER, pid=DAEMON_PID, name='nvidia-persistenced'), HOLDER]
    deployer, calls = stopped_deployer(tmp_path, check_mode=True)
    deployer.stopped()
    assert calls == [] and deployer.result['actions'] == ['stop'] and deployer.result['changed'] is True
    assert deployer.result['pid'] == DAEMON_PID
    assert deployer.result['device_holders'] == [HOLDER]  # the daemon would be stopped


def test_stopped_warns_about_what_still_holds_the_gpus(tmp_path, holders):
    holders.append(HOLDER)
    deployer, calls = stopped_deployer(tmp_path)
    deployer.stopped()
    assert deployer.result['device_holders'] == [HOLDER]
    assert len(deployer.warnings) == 1
    warning = deployer.warnings[0]
    assert '1 process(es) still hold NVIDIA device files' in warning
    assert 'pid 777 (dcgm-exporter, uid 0): /dev/nvidia0, /dev/nvidiactl' in warning


@pytest.mark.parametrize('running', [True, False])
def test_stopped_fails_when_the_service_is_not_installed(tmp_path, holders, running):
    deployer, calls = stopped_deployer(tmp_path, unit=None, running=running)
    with pytest.raises(Failed) as exc:
        deployer.stopped()
    msg = failure(exc)['msg']
    assert 'it is not installed (no %s)' % deployer.unit_path in msg and 'state=present first' in msg
    assert ('a daemon runs without it, pid %d: stop it by hand' % DAEMON_PID in msg) is running
    assert calls == []


def test_stopped_names_a_failed_stop(tmp_path, holders):
    answers = {'nvidia-persistenced stop': (1, '', 'nvidia-persistenced: pid 4321 did not stop after SIGTERM\n')}
    deployer, calls = stopped_deployer(tmp_path, answers=answers)
    with pytest.raises(Failed) as exc:
        deployer.stopped()
    msg = failure(exc)['msg']
    assert 'stopping the persistence daemon failed at stop' in msg and 'did not stop after SIGTERM' in msg
    assert 'Daemon log' in msg


def test_stopped_fails_when_a_daemon_is_left(tmp_path, holders):
    deployer, calls = stopped_deployer(tmp_path, survives=True)
    with pytest.raises(Failed) as exc:
        deployer.stopped()
    msg = failure(exc)['msg']
    assert 'still running after stop (pid %d)' % DAEMON_PID in msg and 'stop it by hand' in msg
    assert failure(exc)['changed'] is True
