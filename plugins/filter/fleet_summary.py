# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet summary of playbooks/site.yml, one line per host, from each host's gpu_node_result."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: fleet_summary
short_description: One line per host from each host's gpu_node_result (the fleet summary of playbooks/site.yml)
version_added: 1.0.0
description:
  - Turns the play's hosts, each healthy host's C(gpu_node_result) and each failed host's message into one line per
    host, C(HOST ok found=... init=... daemon=... gpus=... docker_runtimes=... docker_action=...
    nvidia_run=...) (and C(toolkit=VERSION) where the node has NVIDIA's container toolkit concern, C(containerd_*),
    C(crio_*) for those engines), C(HOST MESSAGE) for a failed host, or
    C(HOST unreachable).
  - "What a host returned is untrusted data. A result of the wrong shape gives that host the line
    C(HOST failed: its gpu_node_result was malformed), with what was wrong, and leaves the other lines alone;
    every value printed has its control characters (newline, carriage return, ANSI escape) escaped, so that one
    host's line is one line."
options:
  _input:
    description: The play's hosts, in order.
    type: list
    elements: str
    required: true
  results:
    description: Host name to that host's C(gpu_node_result), for the hosts that have one.
    type: dict
    required: true
  errors:
    description: Host name to the message of the host's failure, for the hosts that failed.
    type: dict
    default: {}
  stopped:
    description:
      - Host name to the health gate's record, for the hosts that came back from their change worse and stopped the
        rollout (C(msg), and C(rollback), the M(gpufleet.nvidia.rollback) result). Such a host's line is
        C(HOST stopped the rollout, health BEFORE -> AFTER (...); rolled back, ...); a host with no result then is
        C(HOST not reached, the rollout stopped at HOST).
    type: dict
    default: {}
author:
  - gpufleet.nvidia maintainers (@gpufleet)
'''

EXAMPLES = r'''
- name: Summarise the fleet
  ansible.builtin.debug:
    msg: "{{ ansible_play_hosts_all | gpufleet.nvidia.fleet_summary(results, errors) }}"
  run_once: true
'''

RETURN = r'''
_value:
  description: One line per host, in the order of the input.
  type: list
  elements: str
'''


from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._fleet_summary import fleet_summary


class FilterModule(object):
    def filters(self):
        return {'fleet_summary': fleet_summary}
