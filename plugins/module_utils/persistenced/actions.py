# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What each action of a persistenced plan does on the host: one table (``ACTIONS``) for every state.

PRIVATE to the gpufleet.nvidia collection: the API may change at any time.
Each action is called as ``action(deployer, current, desired)`` by ``deploy.Deployer.apply``, which hands its
errors to the state's handler; ``deployer`` is the run (its options, accounts, service and result).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import grp
import os
import pwd
import shutil

from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files as host_files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import state_dir as gpu_state_dir
from ansible_collections.gpufleet.nvidia.plugins.module_utils.persistenced import facts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.persistenced import rules as pd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import HostFileError

BINARY_MODE = 0o755


# ---- files ------------------------------------------------------------------
def write_file(path, text, mode, label):
    """Replace a root-owned file (unit, script, program) in a root-only directory, atomically.

    Owner, mode and SELinux label (``label``: the module's labeller) are set on the temp file before the rename
    (write_atomic); a failure leaves the old file as it was and no temp file.
    """
    directory = os.path.dirname(path)
    try:
        if not os.path.isdir(directory):
            os.makedirs(directory, 0o755)
    except OSError as exc:
        raise HostFileError('cannot write %s: %s; the file was left as it was' % (path, exc.strerror or exc))
    host_files.write_atomic(path, text.encode('utf-8'), mode=mode, label=label)


def restore_file(path, text, mode, label):
    """Put a file back as it was: ``text``, or no file when it is None."""
    if text is None:
        if os.path.lexists(path):
            os.unlink(path)
    else:
        write_file(path, text, mode, label)


# ---- present ----------------------------------------------------------------
def create_group(deployer, current, desired):
    rc, out, err = deployer.run([deployer.calls.bin_path('groupadd'), '-r', deployer.params['group']])
    if rc != 0:
        deployer.fail('creating group %s failed: %s' % (deployer.params['group'], (err or out).strip()))
    deployer.gr = grp.getgrnam(deployer.params['group'])


def create_user(deployer, current, desired):
    p = deployer.params
    nologin = next((s for s in ('/usr/sbin/nologin', '/sbin/nologin') if os.path.exists(s)), '/bin/false')
    argv = [deployer.calls.bin_path('useradd'), '-r', '-M', '-d', '/', '-s', nologin,
            '-c', 'NVIDIA Persistence Daemon', '-g', p['group'], p['user']]
    rc, out, err = deployer.run(argv)
    if rc != 0:
        deployer.fail('creating user %s failed (%s): %s' % (p['user'], ' '.join(argv), (err or out).strip()))
    deployer.pw = pwd.getpwnam(p['user'])


def make_state_dir(deployer, current, desired):
    """Create the state directory if missing, and hand it to the service user through a descriptor.

    Inspected again here (the users may have been created since), then every change goes through
    descriptors opened without following links: only a directory we created or already the user's
    changes owner.
    """
    uid = deployer.pw.pw_uid if deployer.pw else 0
    gid = deployer.gr.gr_gid if deployer.gr else 0
    created = False
    found = gpu_state_dir.inspect_dir(deployer.state_dir, [uid])
    if not found['exists']:
        os.close(gpu_state_dir.create_dir(deployer.state_dir, found))
        created = True
    if deployer.params['user'] != 'root':
        gpu_state_dir.hand_over(deployer.state_dir, [uid], uid, gid, may_chown=created or found.get('marked'))


def install_binary(deployer, current, desired):
    write_file(deployer.params['bundled_path'], desired['binary'], BINARY_MODE, deployer.calls.label)


def backup_unit(deployer, current, desired):
    if deployer.params['backup']:
        deployer.result['backup_file'] = deployer.calls.backup(deployer.unit_path)


def write_unit(deployer, current, desired):
    write_file(deployer.unit_path, desired['unit'], deployer.unit_mode, deployer.calls.label)


# ---- absent -----------------------------------------------------------------
def remove_unit(deployer, current, desired):
    os.unlink(deployer.unit_path)


def remove_run_dir(deployer, current, desired):
    # rmtree works through directory descriptors and never follows a link (the directory belongs to
    # the service user).
    shutil.rmtree(pd.RUN_DIR)


def remove_binary(deployer, current, desired):
    os.unlink(deployer.params['bundled_path'])


def reclaim_state_dir(deployer, current, desired):
    gpu_state_dir.take_back(deployer.state_dir, deployer.pw.pw_uid)


def remove_user(deployer, current, desired):
    remove_account(deployer, 'userdel', deployer.params['user'], pwd.getpwnam)


def remove_group(deployer, current, desired):
    # userdel already removes a user's private group on most distributions
    remove_account(deployer, 'groupdel', deployer.params['group'], grp.getgrnam)


def remove_account(deployer, tool, name, getter):
    if facts.lookup(getter, name) is None:
        return
    rc, out, err = deployer.run([deployer.calls.bin_path(tool), name])
    if rc != 0:
        deployer.fail('%s %s failed: %s' % (tool, name, (err or out).strip()))


# What each action of any plan does: one table for every state. Errors go to the state's handler (apply).
ACTIONS = {
    'create_group': create_group,
    'create_user': create_user,
    'state_dir': make_state_dir,
    'install_binary': install_binary,
    'backup_unit': backup_unit,
    'write_unit': write_unit,
    'reload_init': lambda deployer, current, desired: deployer.service.reload_init(),
    'enable': lambda deployer, current, desired: deployer.service.enable(),
    'start': lambda deployer, current, desired: deployer.service.start(),
    'restart': lambda deployer, current, desired: deployer.service.restart(),
    'stop': lambda deployer, current, desired: deployer.service.stop(),
    'disable': lambda deployer, current, desired: deployer.service.disable(),
    'remove_unit': remove_unit,
    'remove_run_dir': remove_run_dir,
    'remove_binary': remove_binary,
    'reclaim_state_dir': reclaim_state_dir,
    'remove_user': remove_user,
    'remove_group': remove_group,
}
