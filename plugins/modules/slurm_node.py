#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: slurm_node
short_description: This host as a Slurm node, drained and resumed by an owned reason, and its GPU health check program
version_added: 1.0.0
description:
  - Reads the node's Slurm state and drain reason and the jobs Slurm runs on it, with Slurm's own clients
    (C(scontrol), C(squeue), found in C(/usr/bin), C(/usr/local/bin), C(/opt/slurm/bin) or C(/usr/local/slurm/bin), root's
    and writable by nobody else), authenticated by munge as root on the node. A host without a Slurm configuration
    (C(/etc/slurm/slurm.conf), C(/etc/slurm-llnl/slurm.conf), C(/usr/local/etc/slurm.conf) or C($SLURM_CONF)) or
    without those clients is no Slurm node; the module says so and changes nothing.
  - "Owned reasons, as LBNL NHC keeps them: every drain this collection makes has a reason that starts with
    C(gpufleet:) (C(gpufleet: rollout) while a rollout changes the node, C(gpufleet: health <check>: <detail>) while its
    GPU health fails). Only a node whose reason is ours is ever resumed. A drain or down a person (or Slurm) set
    keeps its state and its reason whatever runs."
  - The node contract (O(contract)) is the one M(gpufleet.nvidia.gpu_health) checks against; O(action=resume) and the
    health check program evaluate it.
  - O(action=drain) drains the node (if it takes jobs) and waits up to O(wait_timeout) seconds for its jobs to end;
    RV(jobs) lists those still running then (RV(timed_out)). The node stays drained; O(action=resume) after the
    change brings it back.
  - "O(action=resume) evaluates the node's GPU health against O(contract) (the checks of M(gpufleet.nvidia.gpu_health))
    and resumes the node when its drain is ours and the verdict is V(PASS). With another verdict a rollout's drain
    becomes a health drain (C(gpufleet: health <check>: ...)), which the health check program resumes once the GPUs
    pass."
  - "With O(health_check) (the default) it installs the health check program for slurmd's C(HealthCheckProgram)
    (O(health_check_path)) and its configuration (O(health_check_config), the contract): at every
    C(HealthCheckInterval) it evaluates the same checks and drains the node with C(gpufleet: health ...) when the
    verdict is V(FAIL), and resumes a node it drained once the verdict is V(PASS) (V(WARN) and V(UNKNOWN) change
    nothing). slurm.conf is the site's: add C(HealthCheckProgram=/usr/sbin/gpufleet-slurm-health-check) and a
    C(HealthCheckInterval) there."
  - The program is a Python zip application made of this collection's own code, exactly the version that installed
    it, run by C(/usr/bin/python3); its GPU checks need nvidia-ml-py there, as M(gpufleet.nvidia.gpu_health) does.
  - This is the C(slurm_node) concern of M(gpufleet.nvidia.node_state), which reports the node's state and reason and
    finds the program's drift in the same round trip as the other concerns.
author:
  - gpufleet.nvidia maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes
  - gpufleet.nvidia.role_vars
  - gpufleet.nvidia.contract
  - gpufleet.nvidia.audit
  - gpufleet.nvidia.attributes.FULL
options:
  name:
    description: The node's name in slurm.conf. Defaults to the host name's first label, as slurmd's own default.
    type: str
  action:
    description:
      - V(none) reports the node and converges the health check program. V(drain) and V(resume) as above.
    type: str
    choices: [none, drain, resume]
    default: none
  reason:
    description: The drain reason's words after C(gpufleet:) for O(action=drain) (one line, at most 200 characters);
      the run's id follows them.
    type: str
    default: rollout
  wait_timeout:
    description: Seconds O(action=drain) waits for the node's jobs to end (0 does not wait).
    type: int
    default: 0
  health_check:
    description: Install the health check program and its configuration (V(false) removes them).
    type: bool
    default: true
  health_check_act:
    description: Whether the health check program drains and resumes (V(false) only prints its verdict, for slurmd's log).
    type: bool
    default: true
  health_check_path:
    description: The health check program, in a directory only root can write.
    type: path
    default: /usr/sbin/gpufleet-slurm-health-check
  health_check_config:
    description: Its configuration (JSON, root's, mode 0600).
    type: path
    default: /etc/gpufleet/slurm-health-check.json
notes:
  - Tested with Debian 12's Slurm 22.05 (C(slurmctld), C(slurmd), munge) on systemd, SysV and Upstart hosts; later Slurm
    releases' JSON output is read too.
seealso:
  - module: gpufleet.nvidia.gpu_health
  - module: gpufleet.nvidia.node_state
'''

EXAMPLES = r'''
- name: Drain the node for a change and wait up to an hour for its jobs
  gpufleet.nvidia.slurm_node:
    action: drain
    reason: rollout driver 550
    wait_timeout: 3600
  become: true
  register: drained

- name: Bring it back once its GPUs pass
  gpufleet.nvidia.slurm_node:
    action: resume
    contract:
      gpu_count: 8
  become: true
'''

RETURN = r'''
slurm:
  description: Whether the host is a Slurm node (configuration and clients found).
  returned: always
  type: bool
node:
  description: The node's name in Slurm.
  returned: always
  type: str
  sample: gpu017
state:
  description:
    - The node's Slurm state after the run (C(state) as scontrol writes it, C(drain), C(down), C(available), C(reason),
      C(reason_user), C(reason_time), C(ours), C(held) (a drain or down that is not ours)); null without Slurm.
  returned: always
  type: dict
  sample: {name: gpu017, state: IDLE+DRAIN, base_state: IDLE, drain: true, down: false, available: false,
           reason: "fan replaced Tuesday", reason_user: root, reason_time: "2026-12-05T19:36:28", ours: false, held: true}
jobs:
  description: The jobs Slurm runs on the node (after the wait, for O(action=drain)).
  returned: always
  type: list
  elements: dict
  sample: [{id: "42", user: alice, state: RUNNING, name: train}]
timed_out:
  description: Whether O(action=drain) stopped waiting with jobs still running.
  returned: always
  type: bool
verdict:
  description: The health verdict O(action=resume) went by; null otherwise.
  returned: always
  type: str
actions:
  description: What was done (C(drain), C(resume), C(drain_reason)).
  returned: always
  type: list
  elements: str
changes:
  description: The changes in words.
  returned: always
  type: list
  elements: str
health_check:
  description: The program and its configuration, each with C(path), C(changed), C(sha256_before), C(sha256_after).
  returned: always
  type: list
  elements: dict
msg:
  description: Why nothing was done, where it was not.
  returned: always
  type: str
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.compile_once import compiled_once


def main():
    # This concern's code alone (module_utils/concerns/slurm_node.py), and what it imports as it runs (its check, what
    # makes a change): each file compiled once, and kept compiled between root's runs
    # (module_utils/common/compile_once.py).
    with compiled_once():
        from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.slurm_node import CONCERN
        module = AnsibleModule(**CONCERN.module_args())
        result = CONCERN.execute(module)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
