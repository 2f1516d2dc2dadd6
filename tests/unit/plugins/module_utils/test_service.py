# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One service manager for systemd, Upstart and SysV, driven by a fake ``run(argv)``.

The answers are real Upstart 1.13 / 0.6.5 initctl's and systemctl's (tests/lab has the real ones).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import signal
import subprocess

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.persistenced import rules as pd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.persistenced import deploy
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import ServiceError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init.service import Service

TOOLS = {'systemctl': '/bin/systemctl', 'initctl': '/sbin/initctl', 'update-rc.d': '/usr/sbin/update-rc.d',
         'journalctl': '/bin/journalctl'}


class Host(object):
    """Answers ``run(argv)`` from a table keyed by the argv without its tool path; records every call."""

    def __init__(self, answers=None, default=(0, '', '')):
        self.answers = dict(answers or {})
        self.default = default
        self.calls = []

    def __call__(self, argv):
        key = ' '.join([argv[0].rsplit('/', 1)[-1]] + list(argv[1:]))
        self.calls.append(key)
        answer = self.answers.get(key, self.default)
        return answer.pop(0) if isinstance(answer, list) else answer


def service(init_system, run, tools=None, find_pid=lambda: None, **kwargs):
    return Service(init_system, 'nvidia-persistenced', run, TOOLS if tools is None else tools, find_pid=find_pid,
                   **kwargs)


# --------------------------------------------------------------------------
# Upstart
# --------------------------------------------------------------------------

@pytest.mark.parametrize('stopped', ['initctl: Job has already been stopped: nvidia-persistenced\n',  # 1.13
                                     'initctl: Unknown instance: \n'])  # 0.6.5
def test_upstart_start_and_stop_accept_already_there(stopped):
    """Real initctl exits 1 for a job already stopped or already running."""
    host = Host({'initctl stop nvidia-persistenced': (1, '', stopped),
                 'initctl start nvidia-persistenced': (1, '', 'initctl: Job is already running: nvidia-persistenced\n'),
                 'initctl status nvidia-persistenced': (0, 'nvidia-persistenced stop/waiting\n', '')})
    upstart = service('upstart', host)
    upstart.stop()
    upstart.start()
    assert host.calls == ['initctl stop nvidia-persistenced', 'initctl status nvidia-persistenced',
                          'initctl start nvidia-persistenced']
    host.answers['initctl start nvidia-persistenced'] = (1, '', 'initctl: Job failed to start\n')
    with pytest.raises(ServiceError, match='Job failed to start'):
        upstart.start()


def test_upstart_stop_waits_until_a_lingering_post_start_is_done():
    """After a failed start, real Upstart stays in stop/post-start while the post-start
    process runs; a start issued then leaves "start/running" with no main process."""
    statuses = [(0, 'nvidia-persistenced stop/post-start, (post-start) process 462\n', '')] * 3 + \
        [(0, 'nvidia-persistenced stop/waiting\n', '')]
    host = Host({'initctl status nvidia-persistenced': statuses,
                 'initctl stop nvidia-persistenced': (1, '', 'initctl: Job has already been stopped: x\n')})
    slept = []
    service('upstart', host).stop(sleep=slept.append)
    assert statuses == [] and len(slept) == 3


def test_upstart_stop_gives_up_waiting_after_the_settle_time():
    host = Host({'initctl status nvidia-persistenced': (0, 'nvidia-persistenced stop/post-start\n', '')})
    now = [0.0]

    def sleep(seconds):
        now[0] += seconds
    service('upstart', host).stop(settle=1.0, sleep=sleep, clock=lambda: now[0])
    assert 1.0 <= now[0] < 1.2


def test_upstart_running_needs_a_main_process():
    def status(text):
        return service('upstart', Host({'initctl status nvidia-persistenced': (0, text, '')}))
    assert status('nvidia-persistenced start/running, process 394\n').is_running()
    assert not status('nvidia-persistenced start/running\n').is_running()  # main process lost
    assert not status('nvidia-persistenced stop/waiting\n').is_running()
    assert not service('upstart', Host(default=(1, '', 'initctl: Unknown job: nvidia-persistenced\n'))).is_running()


def test_upstart_restart_is_stop_then_start_to_load_the_new_job():
    host = Host({'initctl status nvidia-persistenced': (0, 'nvidia-persistenced stop/waiting\n', '')})
    upstart = service('upstart', host)
    upstart.restart()
    upstart.reload_init()
    assert host.calls == ['initctl stop nvidia-persistenced', 'initctl status nvidia-persistenced',
                          'initctl start nvidia-persistenced', 'initctl reload-configuration']
    assert upstart.is_enabled()  # the job's "start on" stanza


# --------------------------------------------------------------------------
# systemd
# --------------------------------------------------------------------------

def test_systemd_restart_clears_a_failed_state_first():
    """A unit past its start limit refuses a restart until reset-failed; its answer does not matter."""
    host = Host({'systemctl reset-failed nvidia-persistenced': (1, '', 'Unit not loaded.\n')})
    service('systemd', host).restart()
    assert host.calls == ['systemctl reset-failed nvidia-persistenced', 'systemctl restart nvidia-persistenced']


def test_systemd_failure_names_the_command_and_its_error():
    host = Host({'systemctl start nvidia-persistenced': (1, '', 'Job for nvidia-persistenced.service failed.\n')})
    with pytest.raises(ServiceError) as exc:
        service('systemd', host).start()
    assert 'start nvidia-persistenced failed (rc=1, `/bin/systemctl start nvidia-persistenced`)' in str(exc.value)
    assert 'Job for nvidia-persistenced.service failed.' in str(exc.value)


@pytest.mark.parametrize('answer,enabled', [((0, 'enabled\n', ''), True), ((0, 'static\n', ''), True),
                                            ((1, 'disabled\n', ''), False), ((0, 'masked\n', ''), False)])
def test_systemd_is_enabled_asks_is_enabled_where_show_cannot_say(answer, enabled):
    # a unit generated from a SysV script: only is-enabled reads its rc links (through systemd-sysv-install)
    host = Host({SHOW: (0, 'LoadState=loaded\nUnitFileState=generated\n', ''),
                 'systemctl is-enabled nvidia-persistenced': answer})
    assert service('systemd', host).is_enabled() is enabled
    # a unit systemd has not loaded (no file state), or systemctl failing: the same
    for show in ((0, 'LoadState=not-found\nUnitFileState=\n', ''), (1, '', 'Failed to connect to bus')):
        host = Host({SHOW: show, 'systemctl is-enabled nvidia-persistenced': answer})
        assert service('systemd', host).is_enabled() is enabled


@pytest.mark.parametrize('state, enabled', [('enabled', True), ('enabled-runtime', True), ('static', True),
                                            ('alias', True), ('disabled', False), ('masked', False),
                                            ('indirect', False), ('linked', False), ('bad', False)])
def test_systemd_is_enabled_from_one_show(state, enabled):
    host = Host({SHOW: (0, 'LoadState=loaded\nActiveState=active\nUnitFileState=%s\nMainPID=9\n' % state, '')})
    assert service('systemd', host).is_enabled() is enabled
    assert host.calls == [SHOW]  # is-enabled not asked: the file state said all


@pytest.mark.parametrize('state, running', [('active', True), ('reloading', True), ('refreshing', True),
                                            ('inactive', False), ('activating', False), ('deactivating', False),
                                            ('failed', False)])
def test_systemd_is_running_from_one_show(state, running):
    host = Host({SHOW: (0, 'LoadState=loaded\nActiveState=%s\nUnitFileState=enabled\n' % state, '')})
    assert service('systemd', host).is_running() is running
    assert host.calls == [SHOW]
    assert service('systemd', Host({SHOW: (1, '', 'Failed to connect to bus')})).is_running() is False


def test_systemd_logs_come_from_the_journal():
    host = Host({'journalctl -u nvidia-persistenced.service --no-pager -o cat -n 40 --since=@1700000000':
                 (0, 'line 1\nline 2\n', '')})
    assert service('systemd', host).logs(since=1700000000.5) == 'line 1\nline 2'


# --------------------------------------------------------------------------
# SysV
# --------------------------------------------------------------------------

def test_sysv_runs_the_init_script_and_enables_with_update_rc_d():
    host = Host()
    sysv = service('sysvinit', host)
    sysv.start()
    sysv.enable()
    sysv.disable()
    assert host.calls == ['nvidia-persistenced start', 'update-rc.d nvidia-persistenced defaults',
                          'update-rc.d nvidia-persistenced enable', 'update-rc.d -f nvidia-persistenced remove']


def test_sysv_is_enabled_by_its_start_links(tmp_path):
    sysv = service('sysvinit', Host(), rc_root=str(tmp_path))
    (tmp_path / 'rc2.d').mkdir()
    (tmp_path / 'rc2.d' / 'K01nvidia-persistenced').touch()
    assert not sysv.is_enabled()
    (tmp_path / 'rc2.d' / 'S01nvidia-persistenced').touch()
    assert sysv.is_enabled()


def test_sysv_running_is_the_daemons_process():
    assert service('sysvinit', Host(), find_pid=lambda: 1234).is_running()
    assert not service('sysvinit', Host(), find_pid=lambda: None).is_running()


def test_sysv_reload_sends_sighup_to_the_daemon():
    # SIGHUP's default action in the child, whatever the test run inherited (under nohup it is ignored, and so
    # would be the reload's signal).
    child = subprocess.Popen(['sleep', '60'], preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    try:
        host = Host()
        service('sysvinit', host, find_pid=lambda: child.pid).reload()
        assert child.wait(timeout=10) == -signal.SIGHUP
        assert host.calls == []  # no init script verb: Debian's force-reload restarts
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    with pytest.raises(ServiceError, match='cannot reload nvidia-persistenced: it is not running'):
        service('sysvinit', Host()).reload()


def test_sysv_logs_are_the_matching_syslog_lines(tmp_path):
    empty = tmp_path / 'syslog'
    empty.write_text('Dec  1 cron[1]: job\n')
    messages = tmp_path / 'messages'
    messages.write_text(''.join('Dec  1 nvidia-persistenced[9]: line %d\nDec  1 sshd[2]: x\n' % n for n in range(50)))
    sysv = service('sysvinit', Host(), log_files=(str(tmp_path / 'missing'), str(empty), str(messages)),
                   log_filter='persistenced')
    lines = sysv.logs().splitlines()
    assert len(lines) == 40 and lines[-1] == 'Dec  1 nvidia-persistenced[9]: line 49'
    assert service('sysvinit', Host(), log_files=(str(empty),), log_filter='persistenced').logs() == ''


# --------------------------------------------------------------------------
# Missing tools
# --------------------------------------------------------------------------

@pytest.mark.parametrize('init_system,tool', [('systemd', 'systemctl'), ('upstart', 'initctl')])
def test_a_missing_tool_is_named(init_system, tool):
    with pytest.raises(ServiceError, match='%s is needed to manage nvidia-persistenced on this %s host but was not '
                                           'found' % (tool, init_system)):
        service(init_system, Host(), tools={}).start()


def test_sysv_enable_without_any_boot_tool_names_them():
    with pytest.raises(ServiceError, match='none of update-rc.d, chkconfig or insserv was found'):
        service('sysvinit', Host(), tools={}).enable()


def test_no_init_system_is_an_error_not_a_guess():
    with pytest.raises(ServiceError, match='no init system manages it here'):
        service('unknown', Host()).start()


# --------------------------------------------------------------------------
# The persistence daemon's service
# --------------------------------------------------------------------------

def test_the_persistence_service_finds_its_daemon_by_the_pid_file_and_its_syslog_lines(monkeypatch):
    asked = []
    monkeypatch.setattr(pd, 'pid_alive', lambda pid_file: asked.append(pid_file) or 4321)
    persistence = deploy.persistence_service('sysvinit', 'nvidia-persistenced', Host(), {})
    assert persistence.is_running() and persistence.pid() == 4321 and asked == [pd.PID_FILE] * 2
    assert persistence.log_files == pd.SYSLOG_FILES and persistence.log_filter == 'persistenced'


# --------------------------------------------------------------------------
# Which process the init system names (tests/security/test_service_identity.py runs real processes)
# --------------------------------------------------------------------------

SHOW = 'systemctl show -p LoadState -p ActiveState -p UnitFileState -p MainPID -p ExecStart nvidia-persistenced'


@pytest.mark.parametrize('answer, expected', [
    ((0, 'LoadState=loaded\nMainPID=812\n', ''), (812, 'systemd (MainPID of nvidia-persistenced)')),
    ((0, 'MainPID=0\nLoadState=loaded\n', ''), (None, 'systemd (MainPID of nvidia-persistenced)')),  # stopped
    ((0, 'LoadState=not-found\nMainPID=0\n', ''), (None, None)),  # no such unit: no record
    ((1, '', 'Failed to connect to bus'), (None, None)),
])
def test_systemd_names_its_main_pid(answer, expected):
    assert service('systemd', Host({SHOW: answer}), pid_files=()).reported_pid() == expected


@pytest.mark.parametrize('answer, expected', [
    ((0, 'nvidia-persistenced start/running, process 977\n', ''), (977, 'Upstart (initctl status nvidia-persistenced)')),
    ((0, 'nvidia-persistenced start/running\n', ''), (None, 'Upstart (initctl status nvidia-persistenced)')),
    ((0, 'nvidia-persistenced stop/waiting\n', ''), (None, 'Upstart (initctl status nvidia-persistenced)')),
    ((1, '', 'initctl: Unknown job: nvidia-persistenced\n'), (None, None)),  # a SysV script run by rc: no job
])
def test_upstart_names_its_main_process(answer, expected):
    host = Host({'initctl status nvidia-persistenced': answer})
    assert service('upstart', host, pid_files=()).reported_pid() == expected


def test_sysv_takes_the_scripts_pid_file_and_only_roots(tmp_path):
    if os.geteuid() != 0:
        pytest.skip('needs root: the pid files must be root-owned')
    script_dir = tmp_path / 'init.d'
    script_dir.mkdir()
    pid_file = tmp_path / 'lab.pid'
    pid_file.write_text('4321\n')
    (script_dir / 'nvidia-persistenced').write_text('#!/bin/sh\nNAME=x\nPIDFILE=%s\n. /lib/lsb/init-functions\n'
                                                    % pid_file)
    sysv = service('sysvinit', Host(), script_dir=str(script_dir), pid_files=(str(tmp_path / 'missing.pid'),))
    assert sysv.reported_pid() == (4321, 'the root-owned pid file %s' % pid_file)
    os.chown(str(pid_file), 4242, 4242)
    assert sysv.reported_pid() == (None, None)  # another user's pid file is no record
    (script_dir / 'nvidia-persistenced').chmod(0o666)
    assert sysv.script_pid_file() is None  # nor is a script every user can write
