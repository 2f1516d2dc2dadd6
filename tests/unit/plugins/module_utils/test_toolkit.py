# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The container toolkit's rules: dpkg's status database, the repository files, every drift reason, bad input."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.toolkit import rules as tk

KEY = '-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmQINBFake\n=abcd\n-----END PGP PUBLIC KEY BLOCK-----'
URL = 'http://10.250.0.1:8765/stable/deb/$(ARCH)'
NAMES = list(tk.PACKAGES)

# As dpkg writes it (Debian 12): other packages around ours, a multi-line Description, Conffiles.
STATUS = """Package: bash
Essential: yes
Status: install ok installed
Priority: required
Version: 5.2.15-2+b8
Description: GNU Bourne Again SHell
 Bash is an sh-compatible command language interpreter.
 .
 Package: nvidia-container-toolkit
 Version: 9.9.9-9

Package: nvidia-container-toolkit-base
Status: hold ok installed
Priority: optional
Architecture: amd64
Version: 1.20.0-1
Conffiles:
 /etc/nvidia-container-toolkit/nvidia-cdi-refresh.env 0123456789abcdef
Description: NVIDIA Container Toolkit Base

Package: nvidia-container-toolkit
Status: install ok installed
Architecture: amd64
Depends: nvidia-container-toolkit-base (= 1.20.0-1)
Version: 1.20.0-1
Description: NVIDIA Container toolkit
"""


def request(**changed):
    found = {'state': 'present', 'version': '1.20.0-1', 'packages': list(NAMES), 'repo_url': URL, 'repo_suite': '/',
             'repo_components': [], 'repo_key': KEY, 'hold': True}
    found.update(changed)
    return found


def fact(text, mode=0o644, uid=0, gid=0, regular=True):
    return {'regular': regular, 'mode': mode, 'uid': uid, 'gid': gid,
            'data': None if text is None else text.encode('utf-8')}


def good_files(req=None):
    wanted = tk.wanted_files(req or request())
    return dict((path, None if text is None else fact(text)) for path, text in wanted.items())


def packages(version='1.20.0-1', held=True, **each):
    found = dict((name, {'version': version, 'held': held, 'status': 'installed'}) for name in NAMES)
    for name, value in each.items():
        found[name.replace('_', '-')].update(value)
    return found


# dpkg's status database

def test_status_gives_each_packages_version_and_hold_and_ignores_look_alikes_in_descriptions():
    found = tk.parse_status(STATUS, NAMES + ['absent-one'])
    assert found['nvidia-container-toolkit'] == {'version': '1.20.0-1', 'held': False, 'status': 'installed'}
    assert found['nvidia-container-toolkit-base'] == {'version': '1.20.0-1', 'held': True, 'status': 'installed'}
    assert found['absent-one'] == {'version': None, 'held': False, 'status': 'not-installed'}


@pytest.mark.parametrize('status, version, held', [
    ('deinstall ok config-files', None, False),       # removed, its configuration left
    ('hold ok config-files', None, True),             # removed while held
    ('purge ok not-installed', None, False),
    ('install ok unpacked', '1.19.0-1', False),       # files on the host, not configured: installed for apt
    ('install reinstreq half-installed', '1.19.0-1', False),
    ('hold ok installed', '1.19.0-1', True),
])
def test_status_words(status, version, held):
    text = 'Package: nvidia-container-toolkit\nStatus: %s\nVersion: 1.19.0-1\n' % status
    found = tk.parse_status(text, NAMES)['nvidia-container-toolkit']
    assert (found['version'], found['held']) == (version, held)


def test_multiarch_stanzas_one_installed_one_not():
    text = ('Package: nvidia-container-toolkit\nStatus: deinstall ok config-files\nArchitecture: arm64\n'
            'Version: 1.18.0-1\n\nPackage: nvidia-container-toolkit\nStatus: install ok installed\n'
            'Architecture: amd64\nVersion: 1.20.0-1\n')
    assert tk.parse_status(text, NAMES)['nvidia-container-toolkit']['version'] == '1.20.0-1'


def test_blank_lines_holding_spaces_still_separate_stanzas():
    text = 'Package: a\nStatus: install ok installed\nVersion: 1\n \nPackage: nvidia-container-toolkit\n' \
           'Status: install ok installed\nVersion: 1.20.0-1\n'
    assert tk.parse_status(text, NAMES)['nvidia-container-toolkit']['version'] == '1.20.0-1'


@pytest.mark.parametrize('stanza, words', [
    ('Package: nvidia-container-toolkit\nStatus: installed\nVersion: 1.20.0-1\n', 'three words'),
    ('Package: nvidia-container-toolkit\nStatus: install ok installed\nVersion: $(reboot)\n', 'not a Debian version'),
    ('Package: nvidia-container-toolkit\nStatus: install ok installed\n', 'not a Debian version'),
])
def test_a_damaged_database_fails_naming_the_package_and_what_to_run(stanza, words):
    with pytest.raises(tk.ToolkitError) as exc:
        tk.parse_status(stanza, NAMES)
    assert words in str(exc.value) and 'nvidia-container-toolkit' in str(exc.value) and 'dpkg --audit' in str(exc.value)


def test_empty_database():
    assert all(entry['version'] is None for entry in tk.parse_status('', NAMES).values())


def test_madison_lists_versions_per_package_and_skips_what_is_not_a_row():
    text = (' nvidia-container-toolkit | 1.20.0-1 | http://10.250.0.1:8765/stable/deb/amd64  Packages\n'
            ' nvidia-container-toolkit | 1.19.0-1 | http://10.250.0.1:8765/stable/deb/amd64  Packages\n'
            'N: Unable to locate package nvidia-container-toolkit-base\n'
            ' other | 1.0 | somewhere\n nvidia-container-toolkit | not a version! | x\n')
    assert tk.parse_madison(text, NAMES) == {'nvidia-container-toolkit': ['1.20.0-1', '1.19.0-1'],
                                             'nvidia-container-toolkit-base': []}


# the files

def test_the_source_is_deb822_flat_and_signed_by_our_key_alone():
    text = tk.render_source(URL, '/', [])
    assert text.startswith('# Managed by gpufleet.nvidia')
    assert text.splitlines()[1:] == ['Types: deb', 'URIs: %s' % URL, 'Suites: /',
                                     'Signed-By: /etc/apt/keyrings/gpufleet-nvidia-container-toolkit.asc']
    assert 'Components: main contrib\n' in tk.render_source('http://x/', 'stable', ['main', 'contrib'])


def test_the_key_is_trimmed_to_one_final_newline():
    assert tk.render_key('\n\n' + KEY + '\n\n\n') == KEY + '\n' == tk.render_key(KEY)


def test_no_url_wants_our_files_gone():
    assert tk.wanted_files(request(repo_url=None)) == {tk.KEY_PATH: None, tk.SOURCE_PATH: None}
    assert tk.wanted_files(request(state='absent')) == {tk.KEY_PATH: None, tk.SOURCE_PATH: None}


@pytest.mark.parametrize('got, problem', [
    (None, 'is missing'),
    (fact('other'), 'differs'),
    (fact(None, regular=False), 'is not a regular file'),
    (fact(tk.render_key(KEY), mode=0o600), 'has mode 0600 and owner 0:0, not 0644 root:root'),
    (fact(tk.render_key(KEY), uid=1000), 'has mode 0644 and owner 1000:0'),
    (fact(tk.render_key(KEY)), ''),
])
def test_file_problems(got, problem):
    found = tk.file_problem(tk.KEY_PATH, got, tk.render_key(KEY))
    assert (problem in found) if problem else found == ''
    assert tk.file_problem(tk.KEY_PATH, None, None) == ''
    assert tk.file_problem(tk.KEY_PATH, fact('x'), None) == tk.KEY_PATH + ' is present'


# every drift reason and the actions that follow

def test_converged():
    assert tk.plan(request(), packages(), good_files()) == ([], [])


def test_nothing_installed_from_a_new_source():
    drift, actions = tk.plan(request(), packages(version=None, held=False), {}, {'nvidia-container-toolkit': []})
    assert actions == ['write_key', 'write_source', 'update_index', 'install', 'hold']
    assert drift == [tk.KEY_PATH + ' is missing', tk.SOURCE_PATH + ' is missing',
                     'nvidia-container-toolkit is not installed', 'nvidia-container-toolkit-base is not installed',
                     'nvidia-container-toolkit is not held', 'nvidia-container-toolkit-base is not held']


def test_a_different_version_known_to_apt_installs_without_refreshing():
    available = dict((name, ['1.20.0-1', '1.19.0-1']) for name in NAMES)
    drift, actions = tk.plan(request(), packages(nvidia_container_toolkit={'version': '1.19.0-1'}), good_files(),
                             available)
    assert drift == ['nvidia-container-toolkit 1.19.0-1 is installed, not 1.20.0-1']
    assert actions == ['install', 'hold']


def test_a_version_apt_does_not_know_refreshes_the_index_first():
    drift, actions = tk.plan(request(), packages(version='1.19.0-1'), good_files(),
                             {'nvidia-container-toolkit': ['1.20.0-1'], 'nvidia-container-toolkit-base': []})
    assert actions == ['update_index', 'install', 'hold']
    # not asked (None): refresh too
    assert tk.plan(request(), packages(version='1.19.0-1'), good_files())[1] == ['update_index', 'install', 'hold']


def test_not_held():
    drift, actions = tk.plan(request(), packages(nvidia_container_toolkit_base={'held': False}), good_files())
    assert (drift, actions) == (['nvidia-container-toolkit-base is not held'], ['hold'])


def test_held_where_hold_is_off():
    drift, actions = tk.plan(request(hold=False), packages(), good_files())
    assert actions == ['unhold'] and drift == ['%s is held' % name for name in NAMES]


def test_a_source_that_differs_is_written_and_its_index_refreshed_only_when_something_is_to_be_installed():
    files = good_files()
    files[tk.SOURCE_PATH] = fact(tk.render_source('http://old/', '/', []))
    assert tk.plan(request(), packages(), files) == ([tk.SOURCE_PATH + ' differs'], ['write_source'])
    available = dict((name, ['1.20.0-1']) for name in NAMES)
    assert tk.plan(request(), packages(version=None), files, available)[1] == [
        'write_source', 'update_index', 'install', 'hold']


def test_no_url_removes_files_an_earlier_run_wrote():
    drift, actions = tk.plan(request(repo_url=None, repo_key=None), packages(), good_files())
    assert actions == ['remove_key', 'remove_source']
    assert drift == [tk.KEY_PATH + ' is present', tk.SOURCE_PATH + ' is present']


def test_absent():
    drift, actions = tk.plan(request(state='absent'), packages(), good_files())
    assert actions == ['remove_key', 'remove_source', 'unhold', 'remove']
    assert drift[2:] == ['nvidia-container-toolkit 1.20.0-1 is installed', 'nvidia-container-toolkit-base 1.20.0-1 '
                         'is installed', 'nvidia-container-toolkit is held', 'nvidia-container-toolkit-base is held']
    gone = packages(version=None, held=False)
    assert tk.plan(request(state='absent'), gone, {}) == ([], [])
    # removed while held (config-files left, still held): let go, nothing to remove
    assert tk.plan(request(state='absent'), packages(version=None, held=True), {})[1] == ['unhold']


# bad input

@pytest.mark.parametrize('changed, words', [
    ({'version': None}, 'version is required with state present'),
    ({'version': '1.20.0-1; rm -rf /'}, 'is not a Debian version'),
    ({'version': '-o APT::x'}, 'is not a Debian version'),
    ({'packages': ['-oDebug::pkgProblemResolver=1']}, 'is not a Debian package name'),
    ({'packages': []}, 'packages is empty'),
    ({'repo_url': 'http://x/\nSigned-By: /etc/apt/trusted.gpg'}, 'is not a URL'),
    ({'repo_url': 'not a url'}, 'is not a URL'),
    ({'repo_suite': 'stable\nTrusted: yes'}, 'holds a space or control character'),
    ({'repo_suite': ''}, 'is empty'),
    ({'repo_components': ['main contrib']}, 'holds a space'),
    ({'repo_components': ['main']}, 'a flat repository'),
    ({'repo_key': None}, 'repo_key is not an armored OpenPGP public key'),
    ({'repo_key': 'ssh-rsa AAAA'}, 'repo_key is not an armored OpenPGP public key'),
])
def test_bad_options_fail_before_anything_is_read(changed, words):
    with pytest.raises(tk.ToolkitError) as exc:
        tk.check_request(request(**changed))
    assert words in str(exc.value) and 'Nothing was read or changed' in str(exc.value)


def test_good_options_pass():
    tk.check_request(request())
    tk.check_request(request(version='2:1.20.0~rc.1-1ubuntu1+b2'))
    tk.check_request(request(repo_url=None, repo_key=None))
    tk.check_request(request(state='absent', version=None, repo_key=None))
    tk.check_request(request(repo_suite='bookworm', repo_components=['main']))
