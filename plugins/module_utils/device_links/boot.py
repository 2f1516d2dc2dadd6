# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The /dev/char links' boot pieces: one POSIX sh script, a udev rule, a unit per init system.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. The pieces do at every boot and driver load what ``CharDir``
does now, before the container engines start; their plans are pure.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import boot as init_boot
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import systems
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init.systems import unit_mode
from ansible_collections.gpufleet.nvidia.plugins.module_utils.device_links.links import (
    ENGINES, SCRIPT_PATH, SERVICE, UDEV_RULE_PATH, UNIT_PATHS)


# --------------------------------------------------------------------------
# Boot-time pieces
# --------------------------------------------------------------------------

def _header(comment):
    return init_boot.header(comment, 'device_links')


def render_script():
    """The boot-time program: one POSIX sh script that links every NVIDIA node and replaces nothing."""
    return '''#!/bin/sh
%(header)s# Creates /dev/char/MAJOR:MINOR -> ../NODE for every NVIDIA character device node, as
# gpufleet.nvidia.device_links does: with the systemd cgroup driver, systemd keeps a container's
# access to a device across "systemctl daemon-reload" only when such a link exists.
# Run by udev (driver and module loads) and by the boot unit, before the container engines start.
# An existing entry is never replaced.
set -u
dev=/dev
[ -d "$dev/char" ] || mkdir -m 0755 "$dev/char" 2>/dev/null || [ -d "$dev/char" ] || exit 1
[ ! -L "$dev/char" ] || exit 1
for node in "$dev"/nvidia* "$dev"/nvidia-caps/nvidia-cap*; do
    name=${node#"$dev"/}
    case "$name" in
        nvidiactl|nvidia-uvm|nvidia-uvm-tools|nvidia-modeset) ;;
        nvidia[0-9]*) case "${name#nvidia}" in *[!0-9]*) continue ;; esac ;;
        nvidia-caps/nvidia-cap[0-9]*) case "${name#nvidia-caps/nvidia-cap}" in *[!0-9]*) continue ;; esac ;;
        *) continue ;;
    esac
    [ -c "$node" ] && [ ! -L "$node" ] || continue
    numbers=$(stat -c '%%t %%T' "$node" 2>/dev/null) || continue
    major=$((0x${numbers%% *}))
    minor=$((0x${numbers#* }))
    link="$dev/char/$major:$minor"
    [ -e "$link" ] || [ -L "$link" ] || ln -s "../$name" "$link" 2>/dev/null || :
done
exit 0
''' % {'header': _header('#')}


def render_udev_rule(script=SCRIPT_PATH):
    """udev runs the script when the NVIDIA driver binds and when its modules load."""
    return ('%s'
            '# The NVIDIA driver makes no sysfs class entry, so udev makes no /dev/char links for its nodes.\n'
            'ACTION=="add", DEVPATH=="/bus/pci/drivers/nvidia", RUN+="%s"\n'
            'ACTION=="add", SUBSYSTEM=="module", KERNEL=="nvidia|nvidia_uvm|nvidia_modeset", RUN+="%s"\n'
            % (_header('#'), script, script))


# The unit (SysV script, Upstart task) that runs the script at boot, before the engines (init.systems renders it).
TASK = init_boot.BootTask(
    header=_header('#'), service=SERVICE, summary='/dev/char links for NVIDIA device nodes (keeps containers\' GPUs '
    'across daemon-reload)', short='/dev/char links for NVIDIA device nodes',
    lines=('Keeps containers\' GPU devices across systemd reloads of their',
           'cgroups (systemd cgroup driver); runs before the container engines.'),
    after=('systemd-modules-load.service', 'systemd-udev-settle.service', 'nvidia-persistenced.service'),
    should_start=('nvidia-persistenced',), engines=ENGINES, before_units=('kubelet.service',), chkconfig='14 86',
    script=SCRIPT_PATH, per_engine=False)


def render_unit(init_system):
    """The boot unit's text under ``init_system``, or None where no unit of ours can run."""
    return systems.get(init_system).render_boot_task(TASK)


BOOT_KINDS = ('script', 'udev_rule', 'unit')  # the order they are written in (the unit runs the script)


def boot_files(init_system):
    """{kind: (path, text, mode)} of the boot-time pieces: the script and udev rule, and the unit of
    ``init_system`` when it is one we know."""
    files = {'script': (SCRIPT_PATH, render_script(), 0o755),
             'udev_rule': (UDEV_RULE_PATH, render_udev_rule(), 0o644)}
    if init_system in systems.SYSTEMS:
        files['unit'] = (UNIT_PATHS[init_system], render_unit(init_system), unit_mode(init_system))
    return files


def is_ours(text):
    return init_boot.is_ours(text)


def plan_boot_present(current, desired, enabled):
    """``write_<kind>`` per changed piece, ``reload_init`` for a changed unit the init system has read
    already, ``enable`` when the unit does not start at boot. ``current``/``desired``: {kind: text}."""
    return init_boot.plan_present(BOOT_KINDS, current, desired, enabled)


def plan_boot_absent(current, enabled):
    """``disable`` and ``remove_<kind>`` for the pieces this collection wrote (files without its marker stay)."""
    return init_boot.plan_absent(BOOT_KINDS, current, enabled)
