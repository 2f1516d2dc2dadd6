# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The container engines the collection registers NVIDIA's runtime with: the one list.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It imports nothing, so that every layer, and the controller's
plugins, read the list from here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# In the order they are registered and evaluated: the CRI runtimes first, dockerd last, so that dockerd's
# verification (a container run) comes after any containerd restart.
ENGINES = ('containerd', 'crio', 'docker')
# Each engine's daemon executable (what "installed" means).
DAEMONS = {'containerd': 'containerd', 'crio': 'crio', 'docker': 'dockerd'}
