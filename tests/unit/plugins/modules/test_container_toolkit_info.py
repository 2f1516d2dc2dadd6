# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""container_toolkit_info on a host laid out in a temporary directory (dpkg's database, our two files, apt-cache),
in and out of check mode, and node_state's verdict for the same options: the same result."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import container_toolkit as concern
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import registry
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import node_state as concerns_node_state
from ansible_collections.gpufleet.nvidia.plugins.module_utils.toolkit import rules as tk
from ansible_collections.gpufleet.nvidia.plugins.modules import container_toolkit_info

KEY = '-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmQINBFake\n-----END PGP PUBLIC KEY BLOCK-----\n'
URL = 'http://10.250.0.1:8765/stable/deb/$(ARCH)'
INSTALLED = ('Package: nvidia-container-toolkit\nStatus: hold ok installed\nVersion: %s\n\n'
             'Package: nvidia-container-toolkit-base\nStatus: hold ok installed\nVersion: %s\n')
MADISON = ' nvidia-container-toolkit | 1.20.0-1 | http://10.250.0.1:8765/stable/deb/amd64  Packages\n' \
          ' nvidia-container-toolkit-base | 1.20.0-1 | http://10.250.0.1:8765/stable/deb/amd64  Packages\n'


class Host(object):
    """The host's files under a temporary directory, and apt-cache's answer."""

    def __init__(self, root, monkeypatch):
        self.root = root
        self.madison = MADISON
        self.commands = []
        for name in ('DPKG_STATUS', 'KEY_PATH', 'SOURCE_PATH'):
            path = os.path.join(root, name.lower())
            monkeypatch.setattr(tk, name, path)
            setattr(self, name.lower(), path)
        self.status(INSTALLED % ('1.20.0-1', '1.20.0-1'))

    def status(self, text):
        with open(self.dpkg_status, 'w') as handle:
            handle.write(text)

    def write_files(self, url=URL, key=KEY):
        for path, text in ((self.key_path, tk.render_key(key)), (self.source_path, tk.render_source(url, '/', []))):
            with open(path, 'w') as handle:
                handle.write(text)
            os.chmod(path, 0o644)

    def run_command(self, argv, **kwargs):
        self.commands.append(argv)
        if argv[1:2] == ['madison']:
            return 0, self.madison, ''
        return 1, '', 'unexpected command %s' % argv

    def get_bin_path(self, arg, required=False, opt_dirs=None):
        return '/usr/bin/' + arg

    def selinux_enabled(self):
        return False


@pytest.fixture
def host(tmp_path, monkeypatch):
    found = Host(str(tmp_path), monkeypatch)
    monkeypatch.setattr(container_toolkit_info.AnsibleModule, 'run_command', lambda self, argv, **kw: found.run_command(argv))
    monkeypatch.setattr(container_toolkit_info.AnsibleModule, 'get_bin_path',
                        lambda self, arg, required=False, opt_dirs=None: found.get_bin_path(arg))
    return found


def args(**changed):
    found = {'version': '1.20.0-1', 'repo_url': URL, 'repo_key': KEY}
    found.update(changed)
    return found


def both(call_module, host, options):
    """The module's result (not in check mode, then in check mode) and node_state's verdict: all one."""
    rc, result = call_module(container_toolkit_info.main, options)
    rc_check, checked = call_module(container_toolkit_info.main, dict(options, _ansible_check_mode=True))
    verdict = concerns_node_state.check(host, registry.CONCERNS['container_toolkit'], options)
    for each in (result, checked):
        each.pop('invocation', None)
    assert rc == rc_check and result == checked
    assert verdict['failed'] == (rc != 0)
    if rc == 0:
        assert verdict['result'] == result
    else:  # the same failure (AnsibleModule words an option error its own way)
        assert result.pop('failed') is True and verdict['converged'] is False
        ours = verdict['result']['msg']
        assert ours == result['msg'] or ours[len('container_toolkit_info: '):] in result['msg']
    return rc, result, verdict


def test_converged(call_module, host):
    host.write_files()
    rc, result, verdict = both(call_module, host, args())
    assert rc == 0 and verdict['converged'] is True and result['changed'] is False
    assert result['installed'] == {'nvidia-container-toolkit': '1.20.0-1', 'nvidia-container-toolkit-base': '1.20.0-1'}
    assert result['held'] == {'nvidia-container-toolkit': True, 'nvidia-container-toolkit-base': True}
    assert result['available'] is None and host.commands == []  # apt-cache asked only when something is installed
    assert concerns_node_state.describe('container_toolkit', verdict) == ''


def test_missing_package_and_files(call_module, host):
    host.status('')
    rc, result, verdict = both(call_module, host, args())
    assert rc == 0 and result['converged'] is False and verdict['converged'] is False
    assert result['changed'] is False  # read-only, in every mode
    assert result['installed'] == {'nvidia-container-toolkit': None, 'nvidia-container-toolkit-base': None}
    assert result['available'] is True
    assert result['actions'] == ['write_key', 'write_source', 'update_index', 'install', 'hold']
    assert concerns_node_state.describe('container_toolkit', verdict) == '; '.join(result['drift'])
    assert host.commands[0] == ['/usr/bin/apt-cache', 'madison', 'nvidia-container-toolkit',
                                'nvidia-container-toolkit-base']


def test_a_different_version_and_apt_that_does_not_know_the_wanted_one(call_module, host):
    host.write_files()
    host.status(INSTALLED % ('1.19.0-1', '1.20.0-1'))
    host.madison = MADISON.replace('1.20.0-1 | http://10.250.0.1:8765/stable/deb/amd64  Packages\n nvidia-container-'
                                   'toolkit-base', '1.19.0-1 | x\n nvidia-container-toolkit-base')
    rc, result, verdict = both(call_module, host, args())
    assert result['drift'] == ['nvidia-container-toolkit 1.19.0-1 is installed, not 1.20.0-1']
    assert result['available'] is False and result['actions'] == ['update_index', 'install', 'hold']


def test_a_link_in_place_of_our_source_is_not_followed(call_module, host, tmp_path):
    host.write_files()
    os.remove(host.source_path)
    target = str(tmp_path / 'elsewhere')
    with open(target, 'w') as handle:
        handle.write(tk.render_source(URL, '/', []))
    os.symlink(target, host.source_path)
    rc, result, verdict = both(call_module, host, args())
    assert result['drift'] == [host.source_path + ' is not a regular file'] and result['actions'] == ['write_source']


def test_absent(call_module, host):
    host.write_files()
    rc, result, verdict = both(call_module, host, {'state': 'absent'})
    assert result['actions'] == ['remove_key', 'remove_source', 'unhold', 'remove']


@pytest.mark.parametrize('options, words', [
    (args(version=None), 'version is required with state present'),
    (args(version='1.20.0-1\nfoo'), 'is not a Debian version'),
    (args(repo_url='http://a b/'), 'is not a URL'),
    (args(repo_key='not a key'), 'not an armored OpenPGP public key'),
    (args(hold='maybe'), 'hold'),
    (dict(args(), stat='present'), 'stat'),
])
def test_bad_options_fail_in_the_module_and_in_node_state_alike(call_module, host, options, words):
    rc, result, verdict = both(call_module, host, options)
    assert rc == 1 and words in result['msg'] and verdict['converged'] is False


def test_a_damaged_database_fails(call_module, host):
    host.status('Package: nvidia-container-toolkit\nStatus: installed\nVersion: 1\n')
    rc, result, verdict = both(call_module, host, args())
    assert rc == 1 and 'dpkg --audit' in result['msg']


def test_a_host_without_apt_fails_saying_what_to_do(call_module, host, monkeypatch):
    os.remove(host.dpkg_status)
    rc, result, verdict = both(call_module, host, args())
    assert rc == 1 and result['package_manager'] is None
    assert 'apt only (dnf and yum are not supported' in result['msg']
    assert 'gpu_node_container_toolkit: false' in result['msg']
    assert concerns_node_state.describe('container_toolkit', verdict).startswith('fails: ')


def test_apt_cache_failing_fails_with_its_words(call_module, host):
    host.status('')
    host.run_command = lambda argv, **kw: (100, '', 'E: could not open lock')
    rc, result, verdict = both(call_module, host, args())
    assert rc == 1 and 'E: could not open lock' in result['msg']


def test_a_large_status_database_is_read(call_module, host):
    filler = ''.join('Package: p%d\nStatus: install ok installed\nVersion: 1.0-%d\nDescription: x\n %s\n\n'
                     % (n, n, 'y' * 200) for n in range(20000))
    host.write_files()
    host.status(filler + INSTALLED % ('1.20.0-1', '1.20.0-1'))
    assert os.path.getsize(host.dpkg_status) > 4 << 20
    rc, result, verdict = both(call_module, host, args())
    assert verdict['converged'] is True


def test_node_state_runs_it_with_the_other_concerns_in_gpu_nodes_order():
    order = list(registry.ORDER)
    assert order.index('gpu_persistence') < order.index('container_toolkit') < min(
        order.index(engine) for engine in registry.ENGINES)
    assert concern.CONCERN.module == 'container_toolkit_info'
