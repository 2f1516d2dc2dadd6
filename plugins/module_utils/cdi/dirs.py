# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""CDI spec directories compared as the engines read them: one rule for every engine's CDI settings.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It is pure and imports nothing of ours (the bottom layer), so
that containerd's, CRI-O's and NVIDIA's runtime's code share it without
carrying another concern's code.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import posixpath

# The engines' own default spec directories (containerd's and CRI-O's cdi_spec_dirs, dockerd's, podman's, NVIDIA's
# runtime's spec-dirs): the directories every engine module makes sure it reads with cdi=true.
DEFAULT_DIRS = ('/etc/cdi', '/var/run/cdi')


def directory_key(path):
    """The key under which two spellings of one CDI spec directory compare equal: normalised, ``/var/run/...`` as
    ``/run/...`` (``/var/run`` is a link to ``/run`` on the hosts we support). Every engine's CDI settings and
    NVIDIA's runtime's ``spec-dirs`` are compared with it."""
    path = posixpath.normpath('/' + path.lstrip('/')) if path.startswith('/') else posixpath.normpath(path)
    if path == '/var/run' or path.startswith('/var/run/'):
        path = path[len('/var'):]
    return path


def missing_directories(have, wanted):
    """The directories of ``wanted`` that the list ``have`` does not name (``directory_key``), in order, once."""
    known = set(directory_key(item) for item in have if isinstance(item, str))
    found = []
    for item in wanted:
        if directory_key(item) not in known:
            known.add(directory_key(item))
            found.append(item)
    return found
