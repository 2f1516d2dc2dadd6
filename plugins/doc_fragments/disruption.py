# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """The disruption policy of the modules that restart or stop a service GPU work depends on."""

    DOCUMENTATION = r'''
options:
  disruption:
    description:
      - What a run does when it would restart or stop the service (a container engine, the persistence daemon)
        while the host has GPU work. GPU work is a process holding an NVIDIA device file open, or a container of any
        engine granted an NVIDIA GPU (its own C(/dev) holds an C(nvidia<N>) node), found in C(/proc), and on a Slurm node
        a job Slurm runs there (C(squeue)).
      - V(defer) leaves this module's whole change out while there is work, and says so in RV(deferred) (the
        action, and the work with its pids, names and container ids); the next run makes it once the work is gone.
      - V(force) makes the change whatever runs (the modules' behaviour before this option).
      - V(drain) is V(defer) in the module. The gpu_node role drains the Slurm node and waits for its jobs before it
        runs the module (M(gpufleet.nvidia.slurm_node)); on a Slurm node a job Slurm runs there is work too.
      - The collection's roles pass C(gpu_node_disruption), whose default is V(defer).
    type: str
    choices: [defer, drain, force]
    default: force
'''
