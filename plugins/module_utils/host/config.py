# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The JSON configuration of a program of ours that root runs between Ansible runs (slurmd's health check,
gpufleet-pull): read only from a file root alone can change.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change at any time.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import json
import os
import stat

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import HostFileError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files


def read_program_config(path, reader, installer, error, limit=1 << 20):
    """The JSON configuration at ``path`` of a program root runs: from a regular file, not a link, root's and
    writable by nobody else, in directories only root can change. Raises ``error`` (the program's own exception)
    naming the file and the remedy, converging the node with ``installer`` (the module and option that write it)."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise error('%s: the configuration is missing: converge the node with %s, which installs it with this '
                        'program' % (path, installer))
        raise error('%s: cannot read the configuration: %s' % (path, exc.strerror))
    if stat.S_ISLNK(st.st_mode):
        raise error('%s is a symbolic link: the configuration of a program root runs is read from a file only root '
                    'can change; replace the link with the file (%s writes it)' % (path, installer))
    try:
        text = files.read_root_text(path, limit=limit, reader=reader)
    except HostFileError as exc:
        raise error(str(exc))
    if text is None:
        raise error('%s: the configuration disappeared while being read: run again' % path)
    try:
        return json.loads(text)
    except ValueError as exc:
        raise error('%s: not valid JSON (%s): converge the node with %s to write it again' % (path, exc, installer))
