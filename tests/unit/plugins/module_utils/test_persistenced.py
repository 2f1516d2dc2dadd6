# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Service rendering, input validation and the daemon checks of persistenced (its plans: test_persistenced_plan.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import os
import shutil
import subprocess
import sys
import time
import zlib

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import procs
from ansible_collections.gpufleet.nvidia.plugins.module_utils.persistenced import rules as pd


def params(**overrides):
    base = dict(service_name='nvidia-persistenced', user='nvidia-persistenced', group='nvidia-persistenced',
                persistence_mode=True, uvm_persistence_mode=None, verbose=False, nvidia_cfg_path=None,
                extra_args=[], state_file=pd.STATE_FILE, bundled_path=pd.BUNDLED_PATH, driver_path=pd.DRIVER_PATH)
    base.update(overrides)
    return base


def test_daemon_argv_options():
    assert pd.daemon_argv(params(), pd.DRIVER_PATH, 'driver') == [
        pd.DRIVER_PATH, '--user', 'nvidia-persistenced', '--persistence-mode']
    argv = pd.daemon_argv(params(user='root', group='root', persistence_mode=False, uvm_persistence_mode=True,
                                 verbose=True, nvidia_cfg_path='/usr/lib/nvidia', extra_args=['--foo=1']),
                          pd.BUNDLED_PATH, 'bundled')
    assert argv == [pd.BUNDLED_PATH, '--no-persistence-mode', '--uvm-persistence-mode', '--verbose',
                    '--nvidia-cfg-path', '/usr/lib/nvidia', '--state-file', pd.STATE_FILE, '--foo=1']
    assert '--group' in pd.daemon_argv(params(group='video'), pd.DRIVER_PATH, 'driver')


@pytest.mark.parametrize('key,value,words', [
    ('user', 'nvidia persistenced', 'not a valid account name'),
    ('user', '$(reboot)', 'not a valid account name'),
    ('group', 'Video', 'not a valid account name'),
    ('service_name', 'nv;rm', 'may only hold'),
    ('state_file', 'relative/path.json', 'must be an absolute path'),
    ('nvidia_cfg_path', '/usr/lib/$HOME', 'must be an absolute path'),
    ('extra_args', ['--opt=a b'], 'unsafe in a service definition'),
    ('extra_args', ['%n'], 'unsafe in a service definition'),
    ('extra_args', ['x\nExecStartPre=/bin/sh'], 'unsafe in a service definition'),
])
def test_validation_refuses_injection(key, value, words):
    with pytest.raises(pd.ConfigError) as exc:
        pd.validate(params(**{key: value}))
    assert words in str(exc.value)


@pytest.mark.parametrize('init', ['systemd', 'sysvinit', 'upstart'])
@pytest.mark.parametrize('kind', ['driver', 'bundled'])
def test_every_definition_is_marked_and_runs_the_right_things(init, kind):
    path = pd.DRIVER_PATH if kind == 'driver' else pd.BUNDLED_PATH
    text = pd.render(init, params(), path, kind)
    assert pd.is_ours(text)
    assert path in text and '--user' in text and 'nvidia-persistenced' in text
    assert ('--apply-saved-modes' in text) == (kind == 'driver')
    assert ('--state-file' in text)


def test_systemd_unit_shape():
    unit = pd.render('systemd', params(), pd.DRIVER_PATH, 'driver')
    for line in ('Type=forking', 'PIDFile=/run/nvidia-persistenced/nvidia-persistenced.pid',
                 'ExecStartPre=/bin/rm -rf /run/nvidia-persistenced',
                 'ExecStartPre=/usr/bin/install -d -m 0755 -o nvidia-persistenced -g nvidia-persistenced '
                 '/run/nvidia-persistenced',
                 'ExecStopPost=/bin/rm -rf /run/nvidia-persistenced', 'Restart=on-failure',
                 'After=syslog.target local-fs.target', 'WantedBy=multi-user.target',
                 'ExecStartPost=%s --apply-saved-modes --state-file %s' % (pd.BUNDLED_PATH, pd.STATE_FILE)):
        assert line in unit.splitlines()


@pytest.mark.parametrize('kind', ['driver', 'bundled'])
def test_systemd_analyze_verify_accepts_the_unit(tmp_path, kind):
    tool = shutil.which('systemd-analyze')
    assert tool, 'systemd-analyze is needed (Debian package systemd)'
    unit = tmp_path / 'nvidia-persistenced.service'
    # verify checks that the programs exist: point them at ones that do
    unit.write_text(pd.render('systemd', params(bundled_path='/bin/true'), '/bin/true', kind))
    proc = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True, cwd=str(tmp_path), check=False)
    assert proc.returncode == 0 and proc.stderr.strip() == '', proc.stderr


@pytest.mark.parametrize('kind', ['driver', 'bundled'])
def test_sysv_script_is_posix_sh(tmp_path, kind):
    script = tmp_path / 'nvidia-persistenced'
    script.write_text(pd.render('sysvinit', params(extra_args=['--opt=1']), pd.DRIVER_PATH, kind))
    for shell in ('/bin/sh', '/bin/dash'):
        proc = subprocess.run([shell, "-n", str(script)], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
    checker = shutil.which('checkbashisms')
    assert checker, 'checkbashisms is needed (Debian package devscripts)'
    proc = subprocess.run([checker, "--posix", "--force", str(script)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    text = script.read_text()
    assert '### BEGIN INIT INFO' in text and '# Default-Start:     2 3 4 5' in text and '# chkconfig: 2345' in text


def test_sysv_usage_and_unknown_action_exit_2(tmp_path):
    script = tmp_path / 'nvidia-persistenced'
    script.write_text(pd.render('sysvinit', params(), pd.DRIVER_PATH, 'driver'))
    proc = subprocess.run(["/bin/dash", str(script), "frobnicate"], capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and 'Usage:' in proc.stderr


def test_upstart_job_stanzas():
    job = pd.render('upstart', params(user='root', group='root'), pd.DRIVER_PATH, 'driver')
    lines = job.splitlines()
    for stanza in ('start on runlevel [2345]', 'stop on runlevel [016]', 'expect fork', 'respawn',
                   'pre-start script', 'end script'):
        assert stanza in lines
    # real Upstart 1.13 can abort as PID 1 when a respawning job's post-stop process ends
    assert not any(line.startswith('post-stop') for line in lines)
    assert 'exec /usr/bin/nvidia-persistenced --persistence-mode' in lines  # root: no --user
    assert any(line.startswith('post-start exec /usr/local/sbin/gpufleet-persistenced --apply-saved-modes')
               for line in lines)


def test_bundled_script_gets_the_hosts_python():
    source = '#!/usr/bin/env python\nprint(1)\n'
    assert pd.bundled_script(source, '/usr/bin/python3') == '#!/usr/bin/python3\nprint(1)\n'
    packed = 'zlib+base64:' + base64.b64encode(zlib.compress(source.encode())).decode()
    assert pd.bundled_script(packed, '/usr/bin/python3') == '#!/usr/bin/python3\nprint(1)\n'
    with pytest.raises(pd.ConfigError, match='damaged'):
        pd.bundled_script('zlib+base64:bm90IHpsaWI=', '/usr/bin/python3')
    with pytest.raises(pd.ConfigError):
        pd.bundled_script('print(1)\n', '/usr/bin/python3')


def test_pid_alive_checks_the_process_is_a_persistence_daemon(tmp_path):
    pid_file = tmp_path / 'pid'
    pid_file.write_text('%d\n' % os.getpid())
    assert pd.pid_alive(str(pid_file)) is None  # pytest is not a persistence daemon
    pid_file.write_text('not a pid\n')
    assert pd.pid_alive(str(pid_file)) is None
    assert pd.pid_alive(str(tmp_path / 'missing')) is None


def test_pid_alive_knows_nvidias_daemon_and_the_bundled_one(tmp_path):
    pid_file = tmp_path / 'pid'
    bundled = tmp_path / 'gpufleet-persistenced'
    bundled.write_text('import time\ntime.sleep(60)\n')
    for argv in (['bash', '-c', 'exec -a /usr/bin/nvidia-persistenced sleep 60'], [sys.executable, str(bundled)]):
        daemon = subprocess.Popen(argv)
        try:
            pid_file.write_text('%d\n' % daemon.pid)
            deadline = time.time() + 10
            while pd.pid_alive(str(pid_file)) is None and time.time() < deadline:
                time.sleep(0.02)  # until bash has exec'd
            assert pd.pid_alive(str(pid_file)) == daemon.pid
        finally:
            daemon.kill()
            daemon.wait()


# --------------------------------------------------------------------------
# Root's steps in the service definitions (docs/security.md)
# --------------------------------------------------------------------------

@pytest.mark.parametrize('init', ['systemd', 'sysvinit', 'upstart'])
@pytest.mark.parametrize('kind', ['driver', 'bundled'])
def test_every_start_makes_the_run_directory_afresh(init, kind):
    """The daemon starts as root and opens its pid file in the run directory: nothing the service user
    left there may survive into a start. The only root steps on it: rm -r (never follows a link), and
    mkdir/chown/chmod of the directory itself (its parent is root's)."""
    text = pd.render(init, params(), pd.DRIVER_PATH, kind)
    lines = [line.strip() for line in text.splitlines()]
    if init == 'systemd':
        pre = [line for line in lines if line.startswith('ExecStartPre=')]
        assert pre == ['ExecStartPre=/bin/rm -rf /run/nvidia-persistenced',
                       'ExecStartPre=/usr/bin/install -d -m 0755 -o nvidia-persistenced -g nvidia-persistenced '
                       '/run/nvidia-persistenced']
        assert 'RuntimeDirectory' not in text
    elif init == 'sysvinit':
        assert 'rm -rf "$RUN_DIR" && mkdir -m 0755 "$RUN_DIR" && chown "$RUN_OWNER" "$RUN_DIR" || return 1' in lines
        assert 'mkdir -p' not in text
    else:
        start = lines.index('pre-start script')
        assert lines[start:start + 5] == ['pre-start script', 'rm -rf /var/run/nvidia-persistenced',
                                          'mkdir -m 0755 /var/run/nvidia-persistenced',
                                          'chown nvidia-persistenced:nvidia-persistenced /var/run/nvidia-persistenced',
                                          'end script']
    # nothing inside the run directory is chowned, chmodded or written by path
    for line in lines:
        if ('chown' in line or 'chmod' in line) and not line.startswith('#'):
            assert line.rstrip(' |&;1return').endswith(('nvidia-persistenced', '"$RUN_DIR"')), line


def test_sysv_script_reads_the_pid_file_without_following_links_and_checks_the_owner():
    script = pd.render('sysvinit', params(user='nobody', group='nogroup'), pd.DRIVER_PATH, 'driver')
    assert 'dd if="$1" bs=32 count=1 iflag=nofollow,nonblock' in script
    assert 'checked_pid "$PIDFILE" "$(id -u "$RUN_USER" 2>/dev/null)"' in script
    assert 'cat "$' not in script
    assert 'RUN_USER=nobody' in script and '[ -n "$uid" ] && [ "$uid" = "$2" ] || return 1' in script


def test_daemon_argv_group_only_when_not_the_primary_group():
    assert '--group' not in pd.daemon_argv(params(user='nobody', group='nogroup', primary_group='nogroup'),
                                           pd.DRIVER_PATH, 'driver')
    assert pd.daemon_argv(params(user='nobody', group='video', primary_group='nogroup'), pd.DRIVER_PATH,
                          'driver')[1:5] == ['--user', 'nobody', '--group', 'video']


@pytest.mark.parametrize('name,uid,shell,words', [
    ('nvidia-persistenced', 998, '/usr/sbin/nologin', []),
    ('root', 0, '/bin/bash', []),
    ('nobody', 65534, '/usr/sbin/nologin', ['shared with other services']),
    ('www-data', 33, '/usr/sbin/nologin', ['shared with other services']),
    ('gpu', 997, '/bin/bash', ['has a login shell (/bin/bash)']),
    ('alice', 1000, '/bin/bash', ['has a login shell', "looks like a person's account"]),
    ('svc', 1001, '/bin/false', ["looks like a person's account"]),
])
def test_account_warnings(name, uid, shell, words):
    found = pd.account_warnings(name, uid, shell)
    assert len(found) == len(words)
    for warning, word in zip(found, words):
        assert word in warning and name in warning


def test_pid_file_is_read_without_following_a_link_or_blocking(tmp_path):
    target = tmp_path / 'target'
    target.write_text('%d\n' % os.getpid())
    link = tmp_path / 'link'
    link.symlink_to(target)
    assert procs.read_pid_file(str(target)) == os.getpid()
    assert procs.read_pid_file(str(link)) is None
    fifo = str(tmp_path / 'fifo')
    os.mkfifo(fifo)
    assert procs.read_pid_file(fifo) is None  # returns at once
    (tmp_path / 'junk').write_text('12; rm -rf /\n')
    assert procs.read_pid_file(str(tmp_path / 'junk')) is None


def fake_proc(root, processes):
    """A /proc look-alike: ``processes`` maps a pid to (comm bytes, uid, {fd: link text}), or to None for a
    process whose descriptors cannot be listed."""
    for pid, found in processes.items():
        entry = root / str(pid)
        entry.mkdir()
        if found is None:
            continue
        comm, uid, fds = found
        (entry / 'comm').write_bytes(comm + b'\n')
        (entry / 'status').write_bytes(b'Name:\t%s\nUid:\t%d\t%d\t%d\t%d\n' % (comm, uid, uid, uid, uid))
        (entry / 'fd').mkdir()
        for fd, target in fds.items():
            os.symlink(target, str(entry / 'fd' / str(fd)))
    (root / 'self').mkdir()
    return str(root)


def test_device_holders_read_each_descriptor_link_as_text(tmp_path):
    proc = fake_proc(tmp_path, {
        4321: (b'dcgm-exporter', 0, {3: '/dev/nvidia0', 4: '/dev/nvidiactl', 5: '/dev/null', 6: '/dev/nvidia0'}),
        77: (b'bash', 1000, {0: '/dev/pts/0', 1: 'socket:[1234]'}),
        88: (b'\xffevil\nname', 4242, {7: '/dev/nvidia-uvm (deleted)', 8: '/tmp/dev/nvidia0'}),
        99: None,  # gone, or its descriptors are not ours to list
    })
    assert procs.open_file_holders((pd.DEVICE_PREFIX,), proc=proc) == [
        {'pid': 88, 'name': '\ufffdevil?name', 'uid': 4242, 'paths': ['/dev/nvidia-uvm (deleted)']},
        {'pid': 4321, 'name': 'dcgm-exporter', 'uid': 0, 'paths': ['/dev/nvidia0', '/dev/nvidiactl']},
    ]
    assert procs.open_file_holders((pd.DEVICE_PREFIX,), proc=str(tmp_path / 'missing')) == []


def test_device_holders_never_open_what_the_links_name(tmp_path):
    """The links point at a FIFO (opening it would block) and at a missing file: only their text is read."""
    fifo = str(tmp_path / 'fifo')
    os.mkfifo(fifo)
    (tmp_path / 'proc' / '5' / 'fd').mkdir(parents=True)  # no comm or status: name '' and uid None
    os.symlink(fifo, str(tmp_path / 'proc' / '5' / 'fd' / '3'))
    os.symlink(str(tmp_path / 'gone'), str(tmp_path / 'proc' / '5' / 'fd' / '4'))
    holders = procs.open_file_holders((fifo, str(tmp_path / 'gone')), proc=str(tmp_path / 'proc'))  # returns at once
    assert holders == [{'pid': 5, 'name': '', 'uid': None, 'paths': [fifo, str(tmp_path / 'gone')]}]
