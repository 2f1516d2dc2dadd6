# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where each init system keeps a service's definition and output: the one per-init-system table.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. Data only (it imports nothing), so that the service layer
(``init.service``, which re-exports it), the rules that render a unit
(``persistenced.rules``) and the operations (``device_links.links``, ``docker.dockerd``,
``containerd.apply``, ``persistenced.deploy``) all read this one table.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Per init system, the one table every concern reads: where a service's definition lives (``%s``: its name), that
# file's mode, and where the service's own output goes (systemd: the journal, read with journalctl).
INIT_SYSTEMS = {
    'systemd': {'unit': '/etc/systemd/system/%s.service', 'unit_mode': 0o644, 'log': None},
    'sysvinit': {'unit': '/etc/init.d/%s', 'unit_mode': 0o755, 'log': '/var/log/%s.log'},
    'upstart': {'unit': '/etc/init/%s.conf', 'unit_mode': 0o644, 'log': '/var/log/upstart/%s.log'},
}


def unit_path(init_system, service):
    """The file that defines ``service`` under ``init_system`` (a systemd unit, a SysV script, an Upstart job)."""
    return INIT_SYSTEMS[init_system]['unit'] % service


def unit_mode(init_system):
    """That file's mode: a SysV script is executable."""
    return INIT_SYSTEMS[init_system]['unit_mode']


def log_files(service):
    """Where ``service`` writes its output when a SysV script or an Upstart job runs it (both are looked at: an
    Upstart host can run a SysV script through its rc job)."""
    return tuple(INIT_SYSTEMS[init]['log'] % service for init in ('sysvinit', 'upstart'))
