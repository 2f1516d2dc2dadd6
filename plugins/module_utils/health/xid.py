# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA XID events: the kernel driver's ``NVRM: Xid`` lines, parsed, and each code's verdict and action.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change at any time. Pure: no host access.

The catalogue follows NVIDIA's published XID catalogue (its "resolution" per code): codes that mean the GPU or its
memory failed are FAIL with the catalogue's first resolution (reset the GPU, reboot); codes a job causes (13, 31, 43,
45, 109) are PASS with the event kept as evidence (the application is at fault, the node is fit); a code the table
does not know is WARN with action none, so that a new driver's new code is seen, never hidden.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu.pci import parse_pci_bus_id

# code: (what NVIDIA calls it, verdict, action)
CATALOGUE = {
    8: ('GPU stopped processing (timeout)', 'WARN', 'reset_gpu'),
    13: ('graphics engine exception (application fault)', 'PASS', 'none'),
    31: ('GPU memory page fault (application fault)', 'PASS', 'none'),
    32: ('invalid or corrupted push buffer stream', 'WARN', 'none'),
    38: ('driver firmware error', 'FAIL', 'reset_gpu'),
    43: ('GPU stopped processing (application fault)', 'PASS', 'none'),
    45: ('preemptive cleanup after a fault (application ended)', 'PASS', 'none'),
    48: ('double-bit ECC error', 'FAIL', 'reset_gpu'),
    56: ('display engine error', 'WARN', 'none'),
    57: ('error programming video memory interface', 'FAIL', 'reset_gpu'),
    61: ('internal micro-controller breakpoint/warning', 'WARN', 'reset_gpu'),
    62: ('internal micro-controller halt', 'FAIL', 'reset_gpu'),
    63: ('ECC page retirement or row remapping recorded', 'WARN', 'reset_gpu'),
    64: ('ECC page retirement or row remapping recording failure', 'FAIL', 'reset_gpu'),
    68: ('video processor exception', 'WARN', 'reset_gpu'),
    69: ('graphics engine class error', 'WARN', 'reset_gpu'),
    74: ('NVLink error', 'FAIL', 'reset_gpu'),
    79: ('GPU has fallen off the bus', 'FAIL', 'reboot_node'),
    92: ('high single-bit ECC error rate', 'WARN', 'none'),
    94: ('contained ECC error (the application was stopped)', 'WARN', 'reset_gpu'),
    95: ('uncontained ECC error', 'FAIL', 'reset_gpu'),
    109: ('context switch timeout (application fault)', 'PASS', 'none'),
    119: ('GSP RPC timeout', 'FAIL', 'reset_gpu'),
    120: ('GSP error', 'FAIL', 'reset_gpu'),
    121: ('C2C link error', 'FAIL', 'reset_gpu'),
    122: ('SPI PMU RPC read failure', 'WARN', 'reset_gpu'),
    123: ('SPI PMU RPC write failure', 'FAIL', 'reset_gpu'),
    136: ('link training failed', 'FAIL', 'reboot_node'),
    140: ('unrecovered ECC error', 'FAIL', 'reset_gpu'),
    143: ('GPU initialization failure', 'FAIL', 'reboot_node'),
    144: ('NVLink SAW error', 'FAIL', 'reset_gpu'),
    145: ('NVLink RLW error', 'FAIL', 'reset_gpu'),
    146: ('NVLink TLW error', 'FAIL', 'reset_gpu'),
    147: ('NVLink TREX error', 'FAIL', 'reset_gpu'),
    148: ('NVLink NVLPW_CTRL error', 'FAIL', 'reset_gpu'),
    149: ('NVLink NETIR error', 'FAIL', 'reset_gpu'),
    150: ('NVLink MSE error', 'FAIL', 'reset_gpu'),
    154: ('GPU recovery action changed (see the recovery_action check)', 'WARN', 'none'),
}
UNKNOWN_CODE = ('not in this collection\'s XID table; see NVIDIA\'s XID catalogue', 'WARN', 'none')

# "NVRM: Xid (PCI:0000:01:00): 79, pid=..., ..." (the domain may have 4 or 8 digits, a function may follow).
XID_LINE = re.compile(r'NVRM: Xid \(PCI:([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.[0-7])?\): '
                      r'(\d{1,5})\b')
# Kept of each line as evidence: enough for a person to find it in the log.
EVIDENCE_CHARS = 300
# Lines kept as evidence: the first few of each (PCI address, code), at most MAX_EVENTS in all (every line is counted):
# a GPU in an XID storm logs thousands, and a storm on one GPU must not hide another GPU's lines.
EVENTS_PER_KEY = 3
MAX_EVENTS = 256


def classify(code):
    """``(name, verdict, action)`` of an XID code."""
    return CATALOGUE.get(code, UNKNOWN_CODE)


def bus_key(domain, bus, device):
    """A PCI address as the key GPUs and XID lines share: ``0000:01:00`` (no function: an XID names the device)."""
    return '%04x:%02x:%02x' % (domain, bus, device)


def gpu_bus_key(pci_bus_id):
    """The key of a bus id (``gpu.pci.parse_pci_bus_id``'s forms: NVML's ``00000000:01:00.0``, ``0000:01:00.0``,
    ``01:00.0``), or None when it is not one."""
    try:
        return bus_key(*parse_pci_bus_id(pci_bus_id)[:3])
    except ValueError:
        return None


def events(lines):
    """``(events, counts)`` from kernel log lines: XID lines as ``{'code', 'bus', 'line'}`` (the first
    ``EVENTS_PER_KEY`` of each bus and code, ``MAX_EVENTS`` in all), and ``{(bus, code): number}`` for all of them."""
    found, counts = [], {}
    for line in lines:
        if 'NVRM: Xid' not in line:
            continue
        match = XID_LINE.search(line)
        if not match:
            continue
        bus, code = bus_key(*(int(part, 16) for part in match.groups()[:3])), int(match.group(4))
        counts[(bus, code)] = counts.get((bus, code), 0) + 1
        if counts[(bus, code)] <= EVENTS_PER_KEY and len(found) < MAX_EVENTS:
            found.append({'code': code, 'bus': bus, 'line': line[match.start():][:EVIDENCE_CHARS]})
    return found, counts
