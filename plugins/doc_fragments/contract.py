# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """The node contract (health.contract.SPEC): gpu_health's checks, and slurm_node's resume and health check
    program, which evaluate the same checks."""

    DOCUMENTATION = r'''
options:
  contract:
    description:
      - The node contract, what the site expects of this node. Every key is optional; a key left out is not
        checked (or, for a threshold, has its default). An unknown key, a wrong type or a bad choice is refused
        before anything runs, naming the key.
    type: dict
    suboptions:
      gpu_count:
        description: The number of GPUs NVML must list. Fewer is V(FAIL) (V(reboot_node)), more V(WARN).
        type: int
      gpu_model:
        description: The GPUs' name as NVML gives it; a shell pattern (C(NVIDIA H100*)) matches case-sensitively.
        type: str
      pci_bus_ids:
        description: PCI bus ids that must each have a GPU (C(0000:01:00.0); the domain may have 4 or 8 digits).
        type: list
        elements: str
      driver_version:
        description: The exact driver version (C(550.163.01)).
        type: str
      driver_branch:
        description: The driver branch, the version's first number (C(550)).
        type: str
      mig_mode:
        description: The MIG mode every MIG-capable GPU must be in.
        type: str
        choices: [enabled, disabled]
      persistence_mode:
        description: The persistence mode every GPU must be in (in node_state, gpu_persistence's wish takes its
          place).
        type: str
        choices: [enabled, disabled]
      nvlink_links:
        description: The number of active NVLink links each GPU must have.
        type: int
      fabric:
        description: Whether each GPU must have completed its NVLink fabric registration (NVSwitch systems).
        type: bool
      pcie_min_generation:
        description: The lowest PCIe link generation accepted (GPUs lower it when idle, so set it with care).
        type: int
      pcie_min_width:
        description: The narrowest PCIe link accepted; by default the GPU's own maximum width.
        type: int
      thresholds:
        description: The checks' thresholds (defaults from DCGM's health watches).
        type: dict
        suboptions:
          ecc_volatile_uncorrected:
            description: Volatile uncorrected (double-bit) ECC errors at which ECC fails (default 1).
            type: int
          retired_pages:
            description: Retired pages at which retired_pages fails (default 63).
            type: int
          remapped_rows_uncorrectable:
            description: Rows remapped for uncorrectable errors at which remapped_rows warns (default 512).
            type: int
          temperature_margin:
            description: Degrees below the GPU's slowdown threshold at which temperature warns (default 0).
            type: int
      ignore:
        description: Checks not to report (their verdicts do not count).
        type: list
        elements: str
        choices: [nvml, gpu_count, pci_bus_ids, driver, xid, model, ecc, retired_pages, remapped_rows, sram_ecc,
                  recovery_action, clocks, temperature, pcie, nvlink, fabric, mig, persistence, configuration]
      xid_ignore:
        description: XID codes not to count (for example codes a site's applications cause).
        type: list
        elements: int
'''
