# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA's container toolkit packages on an apt host: what is wanted, what dpkg says, what differs (pure).

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. Text in, findings out, no host access: the concern
(``concerns.container_toolkit``) reads the host, the ``container_toolkit``
filters render the same repository files on the controller for the role's
``ansible.builtin.copy`` tasks, so both sides write and compare one text.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError

KEY_PATH = '/etc/apt/keyrings/gpufleet-nvidia-container-toolkit.asc'
SOURCE_PATH = '/etc/apt/sources.list.d/gpufleet-nvidia-container-toolkit.sources'
FILE_MODE = 0o644
DPKG_STATUS = '/var/lib/dpkg/status'
PACKAGES = ('nvidia-container-toolkit', 'nvidia-container-toolkit-base')
HEADER = '# Managed by gpufleet.nvidia (container_toolkit): NVIDIA Container Toolkit packages. Do not edit.\n'

# Debian policy 5.6.12 (epoch, upstream version, revision) and 5.6.1 (package names).
VERSION_RE = re.compile(r'\A(?:[0-9]+:)?[0-9][A-Za-z0-9.+~:-]*\Z')
PACKAGE_RE = re.compile(r'\A[a-z0-9][a-z0-9+.-]+\Z')
# One apt source field value: no whitespace or control character can end the field or add another.
TOKEN_RE = re.compile(r'\A[^\s\x00-\x1f\x7f]+\Z')
URL_RE = re.compile(r'\A[a-z][a-z0-9+.-]*:[^\s\x00-\x1f\x7f]+\Z')
KEY_BEGIN = '-----BEGIN PGP PUBLIC KEY BLOCK-----'
KEY_END = '-----END PGP PUBLIC KEY BLOCK-----'
# Every action the container_toolkit role knows (the evaluation's ``actions`` are some of them, in the role's order).
ACTIONS = ('write_key', 'write_source', 'remove_key', 'remove_source', 'update_index', 'unhold', 'install', 'remove',
           'hold')
# dpkg states (the third word of Status) in which a package's files are on the host.
ON_HOST = ('installed', 'half-configured', 'unpacked', 'half-installed', 'triggers-awaited', 'triggers-pending')


class ToolkitError(GpufleetError):
    """Options that cannot be written into an apt source, or a dpkg database that cannot be read."""


def valid_version(value):
    return isinstance(value, str) and bool(VERSION_RE.match(value))


def check_request(request):
    """Fail (ToolkitError) on options that would not give a valid apt source or apt command line."""
    problems = []
    for name in request['packages']:
        if not PACKAGE_RE.match(name):
            problems.append('package name %r is not a Debian package name' % name)
    if not request['packages']:
        problems.append('packages is empty: name the toolkit packages to install')
    if request['state'] == 'present':
        if not request['version']:
            problems.append('version is required with state present (an exact Debian version, e.g. 1.20.0-1)')
        elif not valid_version(request['version']):
            problems.append('version %r is not a Debian version (e.g. 1.20.0-1)' % request['version'])
    if request['repo_url'] is not None:
        problems.extend(_repo_problems(request))
    if problems:
        raise ToolkitError('container toolkit options: %s. Nothing was read or changed.' % '; '.join(problems))


def _repo_problems(request):
    problems = []
    if not URL_RE.match(request['repo_url']):
        problems.append('repo_url %r is not a URL without spaces or control characters' % request['repo_url'])
    for value in [request['repo_suite']] + list(request['repo_components']):
        if not TOKEN_RE.match(value or ''):
            problems.append('suite or component %r is empty or holds a space or control character' % value)
    if request['repo_suite'].endswith('/') and request['repo_components']:
        problems.append('a flat repository (suite %r, ending in /) has no components' % request['repo_suite'])
    if request['state'] == 'present':
        key = request['repo_key'] or ''
        if KEY_BEGIN not in key or KEY_END not in key:
            problems.append('repo_key is not an armored OpenPGP public key (%s ... %s); give the text of the '
                            "repository's signing key" % (KEY_BEGIN, KEY_END))
    return problems


def render_source(url, suite, components):
    """The deb822 source the collection writes at SOURCE_PATH (signed by KEY_PATH alone)."""
    lines = ['Types: deb', 'URIs: %s' % url, 'Suites: %s' % suite]
    if components:
        lines.append('Components: %s' % ' '.join(components))
    lines.append('Signed-By: %s' % KEY_PATH)
    return HEADER + '\n'.join(lines) + '\n'


def render_key(key):
    """The key file's text: the armored key as given, surrounding blank space trimmed, one final newline."""
    return key.strip() + '\n'


def wanted_files(request):
    """``{path: text or None}``: our repository files and what each must hold (None: must not exist)."""
    if request['state'] == 'present' and request['repo_url'] is not None:
        return {KEY_PATH: render_key(request['repo_key']),
                SOURCE_PATH: render_source(request['repo_url'], request['repo_suite'], request['repo_components'])}
    return {KEY_PATH: None, SOURCE_PATH: None}


def parse_status(text, names):
    """``{name: {'version', 'held', 'status'}}`` from dpkg's status database, for ``names``; a package dpkg does not
    have on the host (never installed, removed, only its configuration files left) has version None.

    Multi-arch: dpkg keeps one stanza per architecture; a package is on the host when any of them is, and held when
    any of them is.
    """
    found = dict((name, {'version': None, 'held': False, 'status': 'not-installed'}) for name in names)
    for stanza in re.split(r'\n[ \t]*\n', text):
        fields = _fields(stanza)
        name = fields.get('package')
        if name not in found:
            continue
        words = fields.get('status', '').split()
        if len(words) != 3:
            raise ToolkitError('%s: package %s has the status %r, not three words (want flag status); the '
                               'database is damaged: run dpkg --audit' % (DPKG_STATUS, name, fields.get('status')))
        entry = found[name]
        entry['held'] = entry['held'] or words[0] == 'hold'
        if words[2] in ON_HOST:
            version = fields.get('version', '')
            if not valid_version(version):
                raise ToolkitError('%s: package %s has the version %r, not a Debian version; the database is '
                                   'damaged: run dpkg --audit' % (DPKG_STATUS, name, version))
            entry['version'], entry['status'] = version, words[2]
        elif entry['version'] is None:
            entry['status'] = words[2]
    return found


def _fields(stanza):
    """The single-line fields of one control stanza, lower-cased names (continuation lines are skipped)."""
    fields = {}
    for line in stanza.split('\n'):
        if not line or line[0] in ' \t' or ':' not in line:
            continue
        name, value = line.split(':', 1)
        fields[name.strip().lower()] = value.strip()
    return fields


def parse_madison(text, names):
    """``{name: [versions]}``: what ``apt-cache madison NAMES`` lists from the configured sources."""
    found = dict((name, []) for name in names)
    for line in text.splitlines():
        parts = [part.strip() for part in line.split('|')]
        if len(parts) >= 3 and parts[0] in found and valid_version(parts[1]):
            found[parts[0]].append(parts[1])
    return found


def file_problem(path, fact, text):
    """Why our file at ``path`` (``fact``: None when missing, else ``{'regular', 'mode', 'uid', 'gid', 'data'}``)
    differs from ``text`` (None: it must not exist); '' when it matches."""
    if text is None:
        return '' if fact is None else '%s is present' % path
    if fact is None:
        return '%s is missing' % path
    if not fact['regular']:
        return '%s is not a regular file' % path
    if fact['data'] != text.encode('utf-8'):
        return '%s differs' % path
    if (fact['mode'], fact['uid'], fact['gid']) != (FILE_MODE, 0, 0):
        return '%s has mode %04o and owner %d:%d, not 0644 root:root' % (path, fact['mode'], fact['uid'], fact['gid'])
    return ''


def plan(request, packages, files, available=None):
    """``(drift, actions)``: why the host differs from ``request`` (reasons, in words) and what the role does about
    it, in order.

    ``packages``: ``parse_status``'s answer; ``files``: ``{path: fact}`` for KEY_PATH and SOURCE_PATH;
    ``available``: ``{name: [versions]}`` from the sources (``parse_madison``), or None when not asked.
    """
    drift, actions = [], []
    wanted = wanted_files(request)
    for path, action in ((KEY_PATH, 'key'), (SOURCE_PATH, 'source')):
        problem = file_problem(path, files.get(path), wanted[path])
        if problem:
            drift.append(problem)
            actions.append(('write_' if wanted[path] is not None else 'remove_') + action)
    names = request['packages']
    if request['state'] == 'absent':
        on_host = [name for name in names if packages[name]['version'] is not None]
        drift.extend('%s %s is installed' % (name, packages[name]['version']) for name in on_host)
        if any(packages[name]['held'] for name in names):
            drift.extend('%s is held' % name for name in names if packages[name]['held'])
            actions.append('unhold')
        if on_host:
            actions.append('remove')
        return drift, actions
    version = request['version']
    for name in names:
        installed = packages[name]['version']
        if installed is None:
            drift.append('%s is not installed' % name)
        elif installed != version:
            drift.append('%s %s is installed, not %s' % (name, installed, version))
    install = any(packages[name]['version'] != version for name in names)
    if install and ('write_source' in actions or not all_available(available, names, version)):
        actions.append('update_index')
    if install:
        actions.append('install')
    hold_wrong = [name for name in names if packages[name]['held'] != request['hold']]
    drift.extend('%s is %s' % (name, 'not held' if request['hold'] else 'held') for name in hold_wrong)
    if hold_wrong or install:
        actions.append('hold' if request['hold'] else 'unhold')
    return drift, actions


def all_available(available, names, version):
    return available is not None and all(version in available.get(name, ()) for name in names)
