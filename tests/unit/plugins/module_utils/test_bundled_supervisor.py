# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The SysV supervisor: the bundled program's --supervise decisions and the script lines that run it
(the real crash and restart: tests/kit/test_mod_persistenced_sysv.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import signal

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.persistenced import rules as pd

from test_bundled_daemon_copies import DAEMON


def exited(code):
    return code << 8


def killed(sig):
    return sig


@pytest.mark.parametrize('status,restart', [
    (exited(0), False), (killed(signal.SIGTERM), False), (killed(signal.SIGINT), False),
    (killed(signal.SIGHUP), False), (killed(signal.SIGPIPE), False),
    (exited(1), True), (exited(255), True), (killed(signal.SIGKILL), True), (killed(signal.SIGSEGV), True),
    (killed(signal.SIGABRT), True),
])
def test_restarted_like_systemd_restart_on_failure(status, restart):
    assert DAEMON.crashed(status) is restart


def test_describe_exit():
    assert DAEMON.describe_exit(killed(9)) == 'was killed by signal 9'
    assert DAEMON.describe_exit(exited(3)) == 'exited with status 3'


def test_restart_limit_is_upstarts_respawn_limit_5_60():
    limit = DAEMON.RestartLimit()
    assert [limit.allow(t) for t in (0, 1, 2, 3, 4)] == [True] * 5
    assert not limit.allow(5)           # a sixth within 60 s: give up
    assert not limit.allow(59.9)
    assert limit.allow(60.0)            # the first has aged out
    assert DAEMON.RESTART_LIMIT == (5, 60.0) and DAEMON.RESTART_DELAY == 2.0


def test_supervise_arguments():
    opts = DAEMON.parse_args(['--supervise', '/run/x.pid', '--', '/etc/init.d/x', 'launch'])
    assert opts['supervise'] == ('/run/x.pid', ['/etc/init.d/x', 'launch'])
    for bad in (['--supervise', 'x.pid', '--', 'cmd'], ['--supervise', '/run/x.pid', 'cmd'],
                ['--supervise', '/run/x.pid', '--']):
        with pytest.raises(SystemExit):
            DAEMON.parse_args(bad)


def test_own_pid_file_only_where_only_root_writes(tmp_path):
    tmp_path.chmod(0o777)
    with pytest.raises(DAEMON.StartupError) as err:
        DAEMON.write_own_pid_file(str(tmp_path / 'x.pid'))
    assert 'only root can write' in str(err.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize('kind', ['driver', 'bundled'])
def test_sysv_script_starts_through_the_supervisor(kind):
    params = dict(service_name='nvidia-persistenced', user='nobody', group='nogroup', persistence_mode=True,
                  uvm_persistence_mode=None, verbose=False, nvidia_cfg_path=None, extra_args=[],
                  state_file=pd.STATE_FILE, bundled_path=pd.BUNDLED_PATH, driver_path=pd.DRIVER_PATH)
    lines = [line.strip() for line in pd.render('sysvinit', params, pd.DRIVER_PATH, kind).splitlines()]
    assert 'SUPERVISOR=/usr/local/sbin/gpufleet-persistenced' in lines
    assert 'SUPERVISOR_PIDFILE=/var/run/$NAME.supervisor.pid' in lines
    assert '"$SUPERVISOR" --supervise "$SUPERVISOR_PIDFILE" -- "$SELF" launch' in lines
    # the supervisor is trusted only as a root process in --supervise mode, read like the daemon's pid file
    assert 'checked_pid "$SUPERVISOR_PIDFILE" 0 || return 1' in lines
    assert 'dd if="$1" bs=32 count=1 iflag=nofollow,nonblock 2>/dev/null | tr -d \' \\n\')' in ' '.join(lines)
    # stop: the supervisor first, then a daemon that has none (started by an older script)
    stop = lines[lines.index('do_stop() {'):]
    assert stop.index('if supervised; then') < stop.index('if running; then')
