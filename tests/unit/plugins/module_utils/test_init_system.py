# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Init-system detection on fixture trees shaped like real hosts."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils import _init_system as init


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
        self.calls.append(list(argv))
        return self.answers.get(os.path.basename(argv[0]), (127, '', 'not found'))


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


def test_upstart(tmp_path):
    root = make_host(tmp_path, 'init', '/sbin/init',
                     ('/sbin/initctl', '/usr/sbin/service', '/usr/sbin/update-rc.d'), ('/etc/init', '/etc/init.d'))
    runner = FakeRunner({'initctl': (0, 'init (upstart 1.12.1)\nCopyright (C) 2006-2014 Canonical Ltd.\n', '')})
    result = init.detect(root, runner)
    assert result['init_system'] == 'upstart'
    assert result['service_manager'] == '/sbin/initctl'
    assert result['enable_tool'] is None
    assert result['evidence']['initctl_version'] == 'init (upstart 1.12.1)'
    assert runner.calls == [['/sbin/initctl', '--version']]


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
