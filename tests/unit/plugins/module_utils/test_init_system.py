# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Init-system detection on fixture trees shaped like real hosts."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import detect as init


def _write(path, data=b''):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'wb') as handle:
        handle.write(data)


def _tool(root, path):
    host = os.path.join(str(root), path.lstrip('/'))
    _write(host, b'#!/bin/sh\n')
    os.chmod(host, 0o755)


def make_host(root, comm, argv0, tools=(), dirs=(), links=()):
    root = str(root)
    _write(os.path.join(root, 'proc/1/comm'), (comm + '\n').encode())
    _write(os.path.join(root, 'proc/1/cmdline'), argv0.encode() + b'\0--arg\0')
    for tool in tools:
        _tool(root, tool)
    for directory in dirs:
        os.makedirs(os.path.join(root, directory.lstrip('/')), exist_ok=True)
    for link, target in links:
        host = os.path.join(root, link.lstrip('/'))
        os.makedirs(os.path.dirname(host), exist_ok=True)
        os.symlink(target, host)
    return root


class FakeRunner(object):
    def __init__(self, answers=None):
        self.answers = answers or {}
        self.calls = []

    def __call__(self, argv):
        """Answers are keyed by 'initctl version' (tool name and arguments) or by the tool name."""
        self.calls.append(list(argv))
        name = os.path.basename(argv[0])
        key = ' '.join([name] + list(argv[1:]))
        return self.answers.get(key, self.answers.get(name, (127, '', 'not found')))


DEBIAN_TOOLS = ('/usr/bin/systemctl', '/usr/sbin/service', '/usr/sbin/update-rc.d')


def test_debian_systemd_booted(tmp_path):
    root = make_host(tmp_path, 'systemd', '/sbin/init', DEBIAN_TOOLS, ('/run/systemd/system', '/etc/init.d'))
    result = init.detect(root, FakeRunner())
    assert result['init_system'] == 'systemd'
    assert result['service_manager'] == '/usr/bin/systemctl'
    assert result['enable_tool'] == '/usr/bin/systemctl'
    assert result['evidence']['run_systemd_system'] is True


def test_systemd_found_through_init_symlink(tmp_path):
    """comm hidden (e.g. renamed), but /sbin/init links to systemd."""
    root = make_host(tmp_path, 'init', '/sbin/init', DEBIAN_TOOLS, ('/run/systemd/system', '/lib/systemd'),
                     links=(('/sbin/init', '../lib/systemd/systemd'),))
    _tool(root, '/lib/systemd/systemd')
    assert init.detect(root, FakeRunner())['init_system'] == 'systemd'


def test_systemd_installed_but_not_running_is_sysvinit(tmp_path):
    root = make_host(tmp_path, 'init', '/sbin/init', DEBIAN_TOOLS, ('/etc/init.d',))
    result = init.detect(root, FakeRunner())
    assert result['init_system'] == 'sysvinit'
    assert result['service_manager'] == '/usr/sbin/service'
    assert result['enable_tool'] == '/usr/sbin/update-rc.d'
    assert result['evidence']['tools']['systemctl'] == '/usr/bin/systemctl'


def test_pid1_systemd_without_run_marker_is_not_trusted(tmp_path):
    root = make_host(tmp_path, 'systemd', '/lib/systemd/systemd', DEBIAN_TOOLS, ('/etc/init.d',))
    result = init.detect(root, FakeRunner())
    assert result['init_system'] == 'unknown'
    assert '/run/systemd/system is missing' in result['reason']


@pytest.mark.parametrize('shim,argv0', [
    ('tini', '/usr/bin/tini'),
    ('dumb-init', '/usr/bin/dumb-init'),
    ('sh', '/bin/sh'),
    ('docker-init', '/sbin/docker-init'),
])
def test_container_shims_are_unknown_even_with_systemd_run_dir(tmp_path, shim, argv0):
    # /run/systemd/system bind-mounted from a systemd host must not fool us.
    root = make_host(tmp_path, shim, argv0, DEBIAN_TOOLS, ('/run/systemd/system', '/etc/init.d'))
    result = init.detect(root, FakeRunner())
    assert result['init_system'] == 'unknown'
    assert shim in result['reason'] and 'container entrypoint' in result['reason']
    assert 'systemd is not running here' in result['reason']
    assert result['service_manager'] is None and result['enable_tool'] is None


def test_application_as_pid1_is_unknown(tmp_path):
    root = make_host(tmp_path, 'python3', '/usr/bin/python3', (), ('/etc/init.d',))
    result = init.detect(root, FakeRunner())
    assert result['init_system'] == 'unknown'
    assert 'python3' in result['reason']


UBUNTU_UPSTART_TOOLS = ('/sbin/initctl', '/usr/sbin/service', '/usr/sbin/update-rc.d')

# What real Upstart prints (measured on the lab's upstart13 and upstart06 hosts).
UPSTART_113 = {
    'initctl version': (0, 'init (upstart 1.13.2)\n', ''),
    'initctl --version': (0, 'initctl (upstart 1.13.2)\nCopyright (C) 2006-2014 Canonical Ltd., 2011 Scott James '
                             'Remnant\n\nThis is free software; see the source for copying conditions.\n', ''),
}
UPSTART_065 = {
    'initctl version': (0, 'init (upstart 0.6.5)\n', ''),
    'initctl --version': (0, 'initctl (upstart 0.6.5)\nCopyright (C) 2010 Canonical Ltd.\n\n'
                             'This is free software; see the source for copying conditions.\n', ''),
}


@pytest.mark.parametrize('answers, version', [(UPSTART_113, '1.13.2'), (UPSTART_065, '0.6.5')])
def test_upstart_asks_the_running_init_daemon(tmp_path, answers, version):
    root = make_host(tmp_path, 'init', '/sbin/init', UBUNTU_UPSTART_TOOLS, ('/etc/init', '/etc/init.d'))
    runner = FakeRunner(answers)
    result = init.detect(root, runner)
    assert result['init_system'] == 'upstart'
    assert result['version'] == version
    assert result['service_manager'] == '/sbin/initctl'
    assert result['enable_tool'] is None
    assert result['evidence']['init_daemon_version'] == 'init (upstart %s)' % version
    assert result['evidence']['initctl_version'] == 'initctl (upstart %s)' % version
    assert 'answers initctl version with init (upstart %s)' % version in result['reason']
    assert runner.calls == [['/sbin/initctl', 'version'], ['/sbin/initctl', '--version']]


def test_upstart_daemon_version_wins_over_the_tool(tmp_path):
    """An initctl from another Upstart than PID 1: PID 1's own answer gives the version."""
    root = make_host(tmp_path, 'init', '/sbin/init', UBUNTU_UPSTART_TOOLS, ('/etc/init', '/etc/init.d'))
    runner = FakeRunner({'initctl version': UPSTART_065['initctl version'],
                         'initctl --version': UPSTART_113['initctl --version']})
    assert init.detect(root, runner)['version'] == '0.6.5'


def test_upstart_unreachable_daemon_falls_back_to_the_tool(tmp_path):
    """Without privileges initctl 1.x cannot reach PID 1 (it tries the system bus)."""
    root = make_host(tmp_path, 'init', '/sbin/init', UBUNTU_UPSTART_TOOLS, ('/etc/init', '/etc/init.d'))
    runner = FakeRunner({
        'initctl version': (1, '', 'initctl: Unable to connect to system bus: Failed to connect to socket '
                                   '/var/run/dbus/system_bus_socket: No such file or directory\n'),
        'initctl --version': UPSTART_113['initctl --version']})
    result = init.detect(root, runner)
    assert result['init_system'] == 'upstart'
    assert result['version'] == '1.13.2'
    assert result['evidence']['init_daemon_version'].startswith('initctl version failed: initctl: Unable to connect')
    assert 'could not be asked' in result['reason']


def test_sysvinit_has_no_version(tmp_path):
    root = make_host(tmp_path, 'init', '/sbin/init', ('/usr/sbin/service',), ('/etc/init.d',))
    assert init.detect(root, FakeRunner())['version'] is None


@pytest.mark.parametrize('text, version', [
    ('init (upstart 1.13.2)', '1.13.2'), ('initctl (upstart 0.6.5)', '0.6.5'), ('init (upstart 1.5)', '1.5'),
    ('init (upstart 1.12.1-0ubuntu4.2)', '1.12.1-0ubuntu4.2'), ('systemd 252 (252.38-1~deb12u1)', None), ('', None),
    (None, None)])
def test_upstart_version_parsing(text, version):
    assert init.upstart_version(text) == version


def test_version_tuple_orders_0_6_before_1_x():
    assert init.version_tuple('0.6.5') == (0, 6, 5)
    assert init.version_tuple('1.12.1-0ubuntu4.2') == (1, 12, 1)
    assert init.version_tuple('0.6.5') < init.version_tuple('0.6.7') < init.version_tuple('1.13.2')
    assert init.version_tuple(None) == ()


def test_initctl_that_is_not_upstart_means_sysvinit(tmp_path):
    root = make_host(tmp_path, 'init', '/sbin/init', ('/sbin/initctl', '/usr/sbin/service'), ('/etc/init.d',))
    runner = FakeRunner({'initctl': (1, '', 'initctl: unrecognized option')})
    assert init.detect(root, runner)['init_system'] == 'sysvinit'


def test_no_initctl_is_never_run(tmp_path):
    root = make_host(tmp_path, 'init', '/sbin/init', ('/usr/sbin/service',), ('/etc/init.d',))
    runner = FakeRunner()
    init.detect(root, runner)
    assert runner.calls == []


def test_rhel6_sysvinit_uses_chkconfig(tmp_path):
    root = make_host(tmp_path, 'init', '/sbin/init', ('/sbin/service', '/sbin/chkconfig'), ('/etc/init.d',))
    result = init.detect(root, FakeRunner())
    assert result['init_system'] == 'sysvinit'
    assert result['service_manager'] == '/sbin/service'
    assert result['enable_tool'] == '/sbin/chkconfig'


def test_init_without_scripts_dir_is_unknown(tmp_path):
    root = make_host(tmp_path, 'init', '/sbin/init')
    result = init.detect(root, FakeRunner())
    assert result['init_system'] == 'unknown'


def test_unreadable_proc_is_unknown(tmp_path):
    result = init.detect(str(tmp_path), FakeRunner())
    assert result['init_system'] == 'unknown'
    assert 'could not be inspected' in result['reason']


def test_non_executable_tool_is_not_found(tmp_path):
    root = make_host(tmp_path, 'init', '/sbin/init', (), ('/etc/init.d',))
    _write(os.path.join(root, 'usr/sbin/update-rc.d'), b'')
    assert init.find_tools(root)['update-rc.d'] is None


def test_this_machine_agrees_with_proc():
    """Run against the real host: the verdict must match what /proc/1 says."""
    result = init.detect('/', None)
    with open('/proc/1/comm') as handle:
        comm = handle.read().strip()
    assert result['evidence']['pid1_comm'] == comm
    if comm == 'systemd' and os.path.isdir('/run/systemd/system'):
        assert result['init_system'] == 'systemd'
    elif comm not in ('init', 'systemd'):
        assert result['init_system'] == 'unknown'
