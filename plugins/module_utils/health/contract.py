# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node contract: what a site expects of a GPU node, as data, and the checks' thresholds.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change at any time. Pure: no host access.
The contract is validated by its argument spec (``SPEC``, the gpu_health module's ``contract`` option, and gpu_node's
``gpu_node_contract`` before any task runs): an unknown key, a wrong type or a bad choice is refused naming the key.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Every check, per GPU or for the node; `ignore` takes these names.
CHECKS = ('nvml', 'gpu_count', 'pci_bus_ids', 'driver', 'xid', 'model', 'ecc', 'retired_pages', 'remapped_rows',
          'sram_ecc', 'recovery_action', 'clocks', 'temperature', 'pcie', 'nvlink', 'fabric', 'mig', 'persistence',
          'configuration')

# Default thresholds, each overridable in the contract's `thresholds`; the sources are in docs/health.md.
THRESHOLDS = {
    # DCGM: any volatile double-bit (uncorrected) ECC error fails the memory health watch
    'ecc_volatile_uncorrected': 1,
    # DCGM: 63 or more retired pages (60 on some boards) fail; pending retirement warns
    'retired_pages': 63,
    # DCGM: 512 or more uncorrectable remapped rows warn (a bank near exhaustion); a remap failure fails
    'remapped_rows_uncorrectable': 512,
    # degrees below the GPU's own slowdown threshold at which the temperature check warns (0: at the threshold)
    'temperature_margin': 0,
}

THRESHOLD_SPEC = dict((name, dict(type='int')) for name in THRESHOLDS)

SPEC = dict(
    gpu_count=dict(type='int'),
    gpu_model=dict(type='str'),
    pci_bus_ids=dict(type='list', elements='str'),
    driver_version=dict(type='str'),
    driver_branch=dict(type='str'),
    mig_mode=dict(type='str', choices=['enabled', 'disabled']),
    persistence_mode=dict(type='str', choices=['enabled', 'disabled']),
    nvlink_links=dict(type='int'),
    fabric=dict(type='bool'),
    pcie_min_generation=dict(type='int'),
    pcie_min_width=dict(type='int'),
    thresholds=dict(type='dict', options=THRESHOLD_SPEC),
    ignore=dict(type='list', elements='str', choices=list(CHECKS)),
    xid_ignore=dict(type='list', elements='int'),
)


class Contract(object):
    """A validated contract (the module's ``contract`` option, None for none): its keys, thresholds filled in."""

    def __init__(self, given=None):
        given = dict((key, value) for key, value in (given or {}).items() if value is not None)
        self.given = given
        self.thresholds = dict(THRESHOLDS)
        self.thresholds.update((key, value) for key, value in (given.get('thresholds') or {}).items()
                               if value is not None)
        self.ignored = frozenset(given.get('ignore') or ())
        self.xid_ignored = frozenset(given.get('xid_ignore') or ())

    def get(self, key):
        return self.given.get(key)

    def source(self, key):
        """Where an expectation came from, for the check's ``source``."""
        if key in self.given or key in (self.given.get('thresholds') or {}):
            return 'contract.%s' % key
        return None
