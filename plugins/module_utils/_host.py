# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Host file helpers shared by the modules.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os


def rename_into_place(module, src, dest):
    """Rename ``src`` (a finished temp file beside ``dest``) over ``dest``.

    Not ``module.atomic_move``: that changes owner and mode by path, and gives a new
    file the default mode (0644), which would drop a program's execute bit. The temp
    file already has its owner and mode (set on its descriptor); only the SELinux
    label is copied. Callers use it only in directories that only root can write.
    """
    if module.selinux_enabled():
        context = (module.selinux_context(dest) if os.path.exists(dest)
                   else module.selinux_default_context(dest))
        module.set_context_if_different(src, context, False)
    os.rename(src, dest)
