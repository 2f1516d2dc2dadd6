# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The container_toolkit concern: its argument spec and run (read-only: the role installs with ansible.builtin).

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time (see ``concerns.base``). The run reads dpkg's status database, our two
repository files and, only when a package must be installed, which versions
apt's sources offer (``apt-cache madison``); ``rules`` decides. It changes
nothing, in or out of check mode: its result says ``converged`` and, when not,
``drift`` (why) and ``actions`` (what the container_toolkit role does).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import stat

from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import module as concerns_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.toolkit import rules
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.base import Concern

# This concern, declared once (the keys: concerns/base.py, DECLARATION_KEYS); scripts/sync-roles builds the rest.
DECLARATION = {
    'name': 'container_toolkit',
    'module': 'container_toolkit_info',
    'order': 40,
    'role': 'container_toolkit',
    'switch': 'gpu_node_container_toolkit',
    'variables': (
        ('container_toolkit_state', 'state'),
        ('container_toolkit_version', 'version'),
        ('container_toolkit_packages', 'packages'),
        ('container_toolkit_repo_url', 'repo_url'),
        ('container_toolkit_repo_suite', 'repo_suite'),
        ('container_toolkit_repo_components', 'repo_components'),
        ('container_toolkit_repo_key', 'repo_key'),
        ('container_toolkit_hold', 'hold'),
    ),
    'module_only': (),
    'drift': 'toolkit',
    'drift_optional': True,
    'summary': ('toolkit',),
}

SPEC = dict(
    state=dict(type='str', default='present', choices=['present', 'absent']),
    version=dict(type='str'),
    packages=dict(type='list', elements='str', default=list(rules.PACKAGES)),
    repo_url=dict(type='str'),
    repo_suite=dict(type='str', default='/'),
    repo_components=dict(type='list', elements='str', default=[]),
    repo_key=dict(type='str', no_log=False),  # a public key
    hold=dict(type='bool', default=True),
)
FILE_LIMIT = 1 << 20
STATUS_LIMIT = 256 << 20
NOT_APT = ('this host has no dpkg database (%s) or no apt-get: the collection installs the NVIDIA Container Toolkit '
           'with apt only (dnf and yum are not supported: no RPM distribution runs in its tests). Install the '
           'toolkit with your distribution\'s tools and turn this concern off (gpu_node_container_toolkit: false)')


def read_fact(path, limit=FILE_LIMIT):
    """``None`` when ``path`` is missing, else ``{'regular', 'mode', 'uid', 'gid', 'data'}`` (never through a
    link: a link is not a regular file)."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise
    fact = {'regular': stat.S_ISREG(st.st_mode), 'mode': stat.S_IMODE(st.st_mode), 'uid': st.st_uid,
            'gid': st.st_gid, 'data': None}
    if fact['regular'] and st.st_size <= limit:
        fd = os.open(path, os.O_RDONLY | getattr(os, 'O_NOFOLLOW', 0) | getattr(os, 'O_NONBLOCK', 0))
        with os.fdopen(fd, 'rb') as handle:
            fact['data'] = handle.read(limit + 1)
    return fact


def available_versions(module, names):
    """``{name: [versions]}`` the host's apt sources offer (apt-cache madison: the lists as they are, no download)."""
    rc, out, err = concerns_module.runner(module)([module.get_bin_path('apt-cache', required=True), 'madison'] + list(names))
    if rc != 0:
        module.fail_json(msg='apt-cache madison %s failed (rc %d): %s' % (' '.join(names), rc, err.strip()))
    return rules.parse_madison(out, names)


def result_of(request, packages, drift, actions, available):
    names = request['packages']
    known = None if available is None else rules.all_available(available, names, request['version'])
    return dict(
        changed=False, converged=not drift, drift=drift, actions=actions, state=request['state'],
        version=request['version'], package_manager='apt',
        installed=dict((name, packages[name]['version']) for name in names),
        held=dict((name, packages[name]['held']) for name in names),
        available=known,
        files={'key': rules.KEY_PATH, 'source': rules.SOURCE_PATH},
        msg='converged' if not drift else 'drifted: ' + '; '.join(drift))


def run(module):
    request = dict(module.params)
    request['packages'] = list(dict.fromkeys(request['packages']))
    try:
        rules.check_request(request)
    except rules.ToolkitError as exc:
        module.fail_json(msg=str(exc))
    if not os.path.isfile(rules.DPKG_STATUS) or module.get_bin_path('apt-get') is None:
        module.fail_json(msg=NOT_APT % rules.DPKG_STATUS, package_manager=None)
    try:
        status = read_fact(rules.DPKG_STATUS, limit=STATUS_LIMIT)
        files = dict((path, read_fact(path)) for path in (rules.KEY_PATH, rules.SOURCE_PATH))
        packages = rules.parse_status((status['data'] or b'').decode('utf-8', 'replace'), request['packages'])
    except (IOError, OSError) as exc:
        module.fail_json(msg='cannot read %s: %s' % (getattr(exc, 'filename', None) or 'a file', exc))
    except rules.ToolkitError as exc:
        module.fail_json(msg=str(exc))
    available = None
    if request['state'] == 'present' and any(packages[name]['version'] != request['version']
                                             for name in request['packages']):
        available = available_versions(module, request['packages'])
    drift, actions = rules.plan(request, packages, files, available)
    return result_of(request, packages, drift, actions, available)


CONCERN = Concern.declared(DECLARATION, SPEC, run, audited=False)  # it changes nothing of the host's configuration
