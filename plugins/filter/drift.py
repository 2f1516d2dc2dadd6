# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet's drift report, from each host's node_state result (playbooks/drift.yml)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: drift_report
short_description: A fleet drift report from each host's node_state result
version_added: 1.0.0
description:
  - Turns a dict of host name to that host's M(gpufleet.nvidia.node_state) result (null for a host that has none,
    unreachable or failed before it) into the fleet's drift report, one row per host, and a readable table.
  - C(playbooks/drift.yml) writes the report as JSON and prints the table.
  - Each host's result is untrusted data. A result of the wrong shape gives that host a C(failed) row whose error
    says its result was malformed, and leaves the other rows alone; every value in the rows and the table has its
    control characters (newline, carriage return, ANSI escape) escaped, so that one host's row is one line.
options:
  _input:
    description: Host name to node_state result (or null).
    type: dict
    required: true
  errors:
    description: Host name to an error message, for hosts that failed or were unreachable.
    type: dict
    default: {}
author:
  - gpufleet.nvidia maintainers (@gpufleet)
'''

EXAMPLES = r'''
- name: The fleet's drift report
  ansible.builtin.debug:
    msg: "{{ (states | gpufleet.nvidia.drift_report).table }}"
'''

RETURN = r'''
_value:
  description:
    - C(hosts), one row per host (C(host), C(status) converged/drifted/failed/unreachable, C(init), C(daemon),
      C(gpus_off) (the GPUs not in their mode, as C(index:mode->wanted)), C(engines_off) (the engines whose runtime
      registration drifted, as C(engine:action)), C(toolkit) (NVIDIA's container toolkit, C(n/a) when not evaluated,
      its installed version when converged, else C(INSTALLED->WANTED:ACTIONS), versions checked for shape), C(drifted),
      C(errors)); C(counts) per status; C(table), the rows as text lines (the C(toolkit) column only when a host
      evaluated it).
  type: dict
'''


from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._drift import drift_report


class FilterModule(object):
    def filters(self):
        return {'drift_report': drift_report}
