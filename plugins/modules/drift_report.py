#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: drift_report
short_description: Build the fleet's drift report from each host's node_state result, on the controller
version_added: 1.0.0
description:
  - Builds the fleet's drift report, one row per host (status converged/drifted/failed/unreachable, init system,
    daemon, the GPUs not in their mode, the engines whose runtime registration drifted, errors) and a readable table,
    from a dict of host name to that host's M(gpufleet.nvidia.node_state) result.
  - Runs on the controller only (an action plugin; nothing runs on any host) and writes the report as JSON to O(path)
    there, atomically. C(playbooks/drift.yml) uses it once per run.
  - Each host's result is untrusted data. A result of the wrong shape gives that host a C(failed) row saying its
    result was malformed, the other rows unaffected; every value in RV(table) has its control characters escaped.
author:
  - gpufleet.nvidia maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes
attributes:
  check_mode:
    support: full
    details:
      - Changes nothing on any host; the report file on the controller is written in check mode too.
  diff_mode:
    support: none
  idempotent:
    support: full
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the
      controller.
    support: full
options:
  states:
    description: Host name to that host's node_state result; null for a host that has none (unreachable, or failed).
    type: dict
    required: true
  errors:
    description: Host name to an error message, for hosts that failed.
    type: dict
    default: {}
  path:
    description:
      - Where to write the report as JSON on the controller, mode 0644; omitted or empty writes nothing. A link at
        this name is replaced, never written through. Anything else there that is not a regular file (a device such
        as C(/dev/null), a pipe, a directory) is refused and left as it is, since the atomic rename would replace it.
      - A controller path, so take it from the controller's own variables (C(playbooks/drift.yml) reads
        C(hostvars['localhost'].gpufleet_drift_report)), never from a managed host's variables, since the facts a host
        returns become its host variables.
    type: path
seealso:
  - module: gpufleet.nvidia.node_state
'''

EXAMPLES = r'''
- name: The fleet's drift report
  gpufleet.nvidia.drift_report:
    states: "{{ dict(ansible_play_hosts_all | zip(ansible_play_hosts_all | map('extract', hostvars, 'node_result'))) }}"
    path: "{{ hostvars['localhost'].drift_report_path | default('/var/tmp/gpufleet-drift.json') }}"
  run_once: true
  register: drift
'''

RETURN = r'''
report:
  description: C(hosts) (one row per host), C(counts) per status and C(table) (the rows as text lines).
  returned: always
  type: dict
table:
  description: The report as text lines, a header and one row per host, then each error.
  returned: always
  type: list
  elements: str
path:
  description: The JSON file written, or null.
  returned: always
  type: str
'''
