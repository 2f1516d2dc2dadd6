# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the persistenced run reads of the host: before it changes anything, the accounts and the state and run
directories; after, whether the daemon answers and which processes hold the GPUs.

PRIVATE to the gpufleet.nvidia collection: the API may change at any time.
``deploy.Deployer`` asks these. Where a fact refuses the run, the function calls ``fail`` (``Deployer.fail``:
raises RunFailed naming the host), before anything was changed.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import grp
import os
import pwd
import stat
import time

from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import procs
from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import rpc
from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import state_dir as gpu_state_dir
from ansible_collections.gpufleet.nvidia.plugins.module_utils.persistenced import rules as pd


def lookup(getter, name):
    """``getter(name)`` (``pwd.getpwnam``, ``grp.getgrnam``), or None when there is no such account."""
    try:
        return getter(name)
    except KeyError:
        return None


def resolve_identity(params, fail):
    """Look the accounts up: ``(pw, gr, warnings)``. An existing user is used as it is: unless a group is asked
    for, its own primary group is the daemon's, and nothing is created or changed.

    Sets ``params['primary_group']`` and, when none was given, ``params['group']``."""
    p = params
    pw = lookup(pwd.getpwnam, p['user'])
    p['primary_group'] = p['user']
    if pw is not None:
        try:
            p['primary_group'] = grp.getgrgid(pw.pw_gid).gr_name
        except KeyError:
            p['primary_group'] = str(pw.pw_gid)
    if p['group'] is None:
        p['group'] = p['primary_group'] if pw is not None else p['user']
        try:
            pd.validate({'group': p['group'], 'service_name': p['service_name']})
        except pd.ConfigError:
            fail('user %s\'s primary group is %r, which cannot be written into a service definition: '
                 'set group to a group name of lower case letters, digits, "_" and "-"'
                 % (p['user'], p['group']))
    gr = lookup(grp.getgrnam, p['group'])
    if pw is not None and gr is not None and pw.pw_gid != gr.gr_gid and not p['allow_other_primary_group']:
        fail('user %s exists with primary group %s, not %s: set group: %s, or allow_other_primary_group: '
             'true to run the daemon with --group %s'
             % (p['user'], p['primary_group'], p['group'], p['primary_group'], p['group']))
    if pw is None and not p['create_user']:
        fail('user %s does not exist and create_user is false: create it or let this module create it' % p['user'])
    if gr is None and not p['create_user']:
        fail('group %s does not exist and create_user is false' % p['group'])
    warnings = pd.account_warnings(pw.pw_name, pw.pw_uid, pw.pw_shell or '') if pw is not None else []
    return pw, gr, warnings


def inspect_state_dir(params, pw, gr, fail):
    """Refuse a state directory that is not dedicated, before anything changes: ``(directory, ok)``, ``ok``
    True when it is as wanted."""
    p = params
    uid = pw.pw_uid if pw else None
    try:
        directory = gpu_state_dir.check_path(p['state_file'])
        facts = gpu_state_dir.inspect_dir(directory, [uid] if uid is not None else [])
    except gpu_state_dir.StateError as exc:
        fail('%s; nothing was changed' % exc)
    if p['user'] != 'root' and facts['exists'] and facts['uid'] == 0 and not facts['marked']:
        fail('the state directory %s exists, owned by root, and was not created by gpufleet.nvidia, so it '
             'is not handed to the service user %s: choose a state_file in a directory that does not exist '
             'yet (this module creates it), or, if %s is dedicated to the state file, chown it to %s:%s '
             'yourself; nothing was changed' % (directory, p['user'], directory, p['user'], p['group']))
    if not facts['exists']:
        return directory, False
    if p['user'] == 'root':
        return directory, True
    gid = gr.gr_gid if gr else None
    return directory, facts['uid'] == uid and facts['gid'] == gid and facts['mode'] == 0o755


def state_dir_of(state_file, uid):
    """The state file's directory when it is a real directory owned by ``uid``, else None."""
    try:
        directory = gpu_state_dir.check_path(state_file)
        st = os.lstat(directory)
    except (gpu_state_dir.StateError, OSError):
        return None
    return directory if stat.S_ISDIR(st.st_mode) and st.st_uid == uid else None


def dir_ok(path, uid, gid):
    """``path`` is a real directory, owned by ``uid`` (and ``gid`` unless None), mode 0755."""
    try:
        st = os.lstat(path)  # a link in place of the run directory is not ok: restart makes it afresh
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        return False
    return (uid is not None and st.st_uid == uid and (gid is None or st.st_gid == gid)
            and stat.S_IMODE(st.st_mode) == 0o755)


# ---- after the actions ------------------------------------------------------
def daemon_answer_error(timeout):
    """Wait up to ``timeout`` seconds for the daemon to answer on its socket: None once it does, else the last
    error (rpc.PersistencedError)."""
    deadline = time.time() + timeout
    last = None
    while True:
        try:
            with rpc.PersistencedClient(pd.SOCKET, timeout=2.0) as client:
                client.null()
            return None
        except rpc.PersistencedError as exc:
            last = exc
        if time.time() > deadline:
            return last
        time.sleep(0.1)


def device_holders(exclude=()):
    """The processes (but the pids in ``exclude``) that hold NVIDIA device files, and the warning they are worth
    (None when there are none): they keep the driver from being unloaded or a GPU from being reset."""
    holders = [h for h in procs.open_file_holders((pd.DEVICE_PREFIX,)) if h['pid'] not in exclude]
    if not holders:
        return holders, None
    listed = '; '.join('pid %d (%s, uid %s): %s' % (h['pid'], h['name'], h['uid'], ', '.join(h['paths']))
                       for h in holders)
    return holders, ('%d process(es) still hold NVIDIA device files, which keeps the driver from being unloaded '
                     'or a GPU reset: %s' % (len(holders), listed))
