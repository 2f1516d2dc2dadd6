# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """How the GPU modules reach the GPUs: the persistence daemon's RPC, or NVML."""

    DOCUMENTATION = r'''
options:
  backend:
    description:
      - How to reach the GPUs. V(auto) uses the persistence daemon's RPC when it answers on O(socket_path) (standard
        library only) and NVML through C(pynvml) otherwise.
    type: str
    choices: [auto, rpc, nvml]
    default: auto
  socket_path:
    description: The persistence daemon's RPC socket.
    type: path
    default: /var/run/nvidia-persistenced/socket
  timeout:
    description: Seconds to wait for each answer of the daemon.
    type: float
    default: 5.0
requirements:
  - nvidia-ml-py (C(pynvml)) on the managed host, only when no persistence daemon answers or O(backend=nvml).
notes:
  - GPU indexes follow PCI bus order, as NVML's do.
'''
