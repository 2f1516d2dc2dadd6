#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: gpu_health
short_description: Tell whether an NVIDIA GPU node is fit for work, against a node contract (read-only)
version_added: 1.0.0
description:
  - Reads every GPU once through NVML (the Python library C(nvidia-ml-py), import name C(pynvml)) and the kernel log
    since boot (C(/dev/kmsg), else the ring buffer as C(dmesg) reads it, else the journal), checks what it read
    against the node contract
    O(contract) and gives each check a verdict (V(PASS), V(WARN), V(FAIL), V(UNKNOWN)) with the value, the threshold,
    where the threshold came from, the evidence and one recommended action. The node's verdict is its worst check's.
  - "The checks: NVML itself, the GPU count, model and PCI bus ids, the driver version or branch, XID events by
    NVIDIA's XID catalogue, ECC counts, retired pages, row remapping, SRAM ECC, NVIDIA's recovery action field,
    clocks event reasons, temperature against the GPU's own thresholds, PCIe link width (and generation with the
    contract), NVLink links, the NVLink fabric, MIG mode and persistence mode. The table with each NVML call,
    threshold and its source is in the collection's docs/health.md."
  - A call the host's driver lacks makes that one check V(UNKNOWN) with the reason; a feature the GPU does not have
    (NVML says Not Supported) passes; no NVML at all (no driver, no library, no C(nvidia-ml-py)) is one clear node
    verdict. Never sets anything on a GPU and never acts on a verdict.
  - Writes the verdicts and the raw values in Prometheus' text format to node_exporter's textfile directory
    (O(textfile_directory)) on every run but in check mode; writing them is never a change. Nothing is written when
    the directory does not exist, unless O(textfile_create).
  - This is the C(gpu_health) concern of M(gpufleet.nvidia.node_state), which runs the same code in the same round
    trip as the configuration concerns and adds two checks of its own there, C(configuration) (whether every
    concern is converged) and gpu_persistence's wish as the C(persistence) expectation.
author:
  - gpufleet.nvidia maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes
  - gpufleet.nvidia.role_vars
  - gpufleet.nvidia.contract
  - gpufleet.nvidia.audit
  - gpufleet.nvidia.attributes.INFO_MODULE
requirements:
  - nvidia-ml-py on the managed host (without it the verdict is V(UNKNOWN) and RV(missing_library) says so)
options:
  metrics:
    description: Write the metrics file.
    type: bool
    default: true
  textfile_directory:
    description:
      - node_exporter's textfile directory (its C(--collector.textfile.directory)); the file is
        C(gpufleet_health.prom) in it. Debian's and Ubuntu's packages use the default.
      - Every component is opened without following a link; give the real path.
    type: str
    default: /var/lib/prometheus/node-exporter
  textfile_create:
    description: Create O(textfile_directory) (root's, mode 0755) when it does not exist.
    type: bool
    default: false
  verdict_before:
    description:
      - The node's verdict before a change (the health gate of the C(gpufleet.nvidia.gpu_node) role gives it). With it,
        outside check mode, the run appends one line to the audit trail (O(audit_log)) with the verdicts before and
        after (C(verdict_before), C(verdict_after)), under the run's id, so that each run's changes and the node's
        health around them are in one place.
    type: str
    choices: [PASS, WARN, FAIL, UNKNOWN]
  report_passed:
    description:
      - Return every check in full in RV(checks), the ones that passed too. By default RV(checks) holds the checks
        that did not pass and RV(passed) names the others, so that a healthy node's result stays small (node_state
        carries it on every run); the metrics hold every check and every value either way.
    type: bool
    default: false
  kernel_log:
    description:
      - Where XIDs are read. V(auto) reads C(/dev/kmsg) (the kernel's device only), else the ring buffer through
        C(syslog(2)) as C(dmesg) does, else C(journalctl -k -b 0).
      - Otherwise the path of a regular file of kernel log lines (kmsg records, C(dmesg) or journal lines), for sites
        that collect the kernel log elsewhere.
    type: str
    default: auto
notes:
  - The kernel's ring buffer may have dropped the boot's first messages on a long-running node; RV(xid.complete)
    then says V(false), and older XIDs are only in the journal or a log collector.
  - XIDs are counted since boot, so a GPU reset does not clear them. Reboot, or list a code handled in O(contract.xid_ignore).
seealso:
  - module: gpufleet.nvidia.node_state
'''

EXAMPLES = r'''
- name: Check the node against its contract
  gpufleet.nvidia.gpu_health:
    contract:
      gpu_count: 8
      gpu_model: NVIDIA H100*
      driver_branch: "550"
      nvlink_links: 18
      thresholds:
        retired_pages: 60
  register: health

- name: Stop here when the node is not fit for work
  ansible.builtin.fail:
    msg: "{{ health.msg }}"
  when: health.verdict == 'FAIL'
'''

RETURN = r'''
verdict:
  description: The node's verdict, its worst check's.
  returned: always
  type: str
  choices: [PASS, UNKNOWN, WARN, FAIL]
action:
  description: The recommended action, the strongest among the worst checks' (none, drain, reset_gpu, reboot_node,
    service, replace_gpu).
  returned: always
  type: str
  sample: reset_gpu
reasons:
  description: One line per worst check.
  returned: always
  type: list
  elements: str
  sample: ["GPU 1 ecc: FAIL (reset_gpu): 2 volatile uncorrected (double-bit) ECC errors, at least 1"]
checks:
  description: Every check that did not pass (all of them with O(report_passed)), for a GPU (C(gpu) its index) or
    for the node (C(gpu) null).
  returned: always
  type: list
  elements: dict
  contains:
    check:
      description: The check's name.
      type: str
    gpu:
      description: The GPU's index; null for a node check.
      type: int
    verdict:
      description: V(PASS), V(UNKNOWN), V(WARN) or V(FAIL).
      type: str
    action:
      description: The recommended action.
      type: str
    value:
      description: What was read.
      type: raw
    threshold:
      description: What it was held to.
      type: raw
    source:
      description: Where the threshold came from (C(contract.KEY), DCGM's threshold, NVML, NVIDIA's XID catalogue).
      type: str
    evidence:
      description: The kernel log lines or the NVML message behind it.
      type: raw
    reason:
      description: Why it is not PASS (or why it passed without a value).
      type: str
passed:
  description: The checks that passed, by name, each with the GPUs it passed on (null for the node's own check).
  returned: always
  type: dict
  sample: {"ecc": [0, 1], "gpu_count": [null]}
gpus:
  description: Each GPU NVML lists, with its own verdict and action (the values read are in RV(checks) and in the
    metrics).
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: NVML's index.
      type: int
    uuid:
      description: The GPU's UUID.
      type: str
    name:
      description: The GPU's name.
      type: str
    pci_bus_id:
      description: The GPU's PCI bus id.
      type: str
    verdict:
      description: The worst of this GPU's checks.
      type: str
    action:
      description: The strongest action among them.
      type: str
driver_version:
  description: The driver version NVML reports.
  returned: when NVML answered
  type: str
xid:
  description: The kernel log the XIDs were read from.
  returned: always
  type: dict
  contains:
    source:
      description: C(/dev/kmsg), C(syslog(2)), C(journal) or the file of O(kernel_log).
      type: str
    complete:
      description: Whether the ring buffer still held the boot's first message.
      type: bool
    error:
      description: Why no kernel log could be read (the xid check is then UNKNOWN).
      type: str
    events:
      description: The number of XID lines.
      type: int
metrics_file:
  description: The metrics file written, or null (check mode, O(metrics=false), no textfile directory).
  returned: always
  type: str
missing_library:
  description: V(nvidia-ml-py) when the host lacks it.
  returned: when the library is missing
  type: str
msg:
  description: The verdict and its reasons, in one line.
  returned: always
  type: str
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.compile_once import compiled_once


def main():
    # This concern's code alone (module_utils/concerns/gpu_health.py), compiled once.
    with compiled_once():
        from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.gpu_health import CONCERN
    module = AnsibleModule(**CONCERN.module_args())
    module.exit_json(**CONCERN.run(module))


if __name__ == '__main__':
    main()
