# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A GPU's PCI address: the forms NVML, the driver's /proc files and lspci write, parsed once (pure).

This module is PRIVATE to the gpufleet.nvidia collection: its API may change at any time. The persistence daemon's
RPC (``gpu.rpc``), the GPU selectors (``gpu.backends``) and the health checks (``health``) share it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from collections import namedtuple

_BUS_ID_RE = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):"
    r"(?P<device>[0-9a-fA-F]{1,2})\.(?P<function>[0-7])$")


class PciBusId(namedtuple("PciBusId", "domain bus device function")):
    """A GPU's PCI address. ``str()`` gives the ``0000:01:00.0`` form."""

    __slots__ = ()

    def __str__(self):
        return "%04x:%02x:%02x.%x" % self

    @property
    def nvml(self):
        """The form NVML reports in ``busId``: ``00000000:01:00.0``."""
        return "%08X:%02X:%02X.%X" % self

    @property
    def short(self):
        """The lspci form ``01:00.0`` (domain dropped)."""
        return "%02x:%02x.%x" % self[1:]

    def same_slot(self, other):
        """True when ``other`` is the same device; the daemon ignores the function."""
        return tuple(self[:3]) == tuple(other[:3])


def parse_pci_bus_id(text):
    """Parse ``00000000:01:00.0`` (NVML), ``0000:01:00.0`` or ``01:00.0`` (lspci).

    Raises ValueError naming the text when it is none of these.
    """
    if isinstance(text, PciBusId):
        return text
    if not isinstance(text, str):
        raise ValueError("PCI bus id must be a string, not %r" % (text,))
    match = _BUS_ID_RE.match(text.strip())
    if not match:
        raise ValueError(
            "%r is not a PCI bus id; expected DDDDDDDD:BB:DD.F (NVML), "
            "DDDD:BB:DD.F or BB:DD.F (lspci)" % (text,))
    device = int(match.group("device"), 16)
    if device > 0x1f:
        raise ValueError("%r is not a PCI bus id: device number %#x is above 0x1f"
                         % (text, device))
    return PciBusId(int(match.group("domain") or "0", 16), int(match.group("bus"), 16),
                    device, int(match.group("function")))
