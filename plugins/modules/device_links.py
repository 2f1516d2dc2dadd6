#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: device_links
short_description: Keep GPU containers' devices across systemctl daemon-reload with /dev/char links for NVIDIA nodes
version_added: 1.0.0
description:
  - With dockerd's (or containerd's) systemd cgroup driver, C(systemctl daemon-reload) re-applies the device rules of
    every container scope. runc hands a device to systemd only when C(/dev/char/MAJOR:MINOR) exists, and the NVIDIA
    driver makes no such entry, so at the next reload running containers lose their GPUs (NVML fails with "Unknown
    Error" and their device files give EPERM). Any package or service that writes a unit, this collection's
    M(gpufleet.nvidia.persistenced) included, reloads systemd.
  - This module creates the link C(/dev/char/MAJOR:MINOR -> ../NODE) for every NVIDIA character device node
    (C(nvidia0) to C(nvidiaN), C(nvidiactl), C(nvidia-uvm), C(nvidia-uvm-tools), C(nvidia-modeset),
    C(nvidia-caps/nvidia-capN)), the fix NVIDIA ships as C(nvidia-ctk system create-dev-char-symlinks).
  - An entry that is there already is never replaced. One that is not a link to the same node (another device, a
    regular file) is left as it is and reported in RV(conflicts) with a warning.
  - With O(boot), the links come back at every boot and driver load. A small script
    (C(/usr/local/sbin/gpufleet-dev-char-links)) makes them; a udev rule runs it when the driver binds and its modules
    load (C(/etc/udev/rules.d/71-gpufleet-nvidia-dev-char.rules)), and a boot unit ordered before the container engines
    (C(docker), C(containerd), C(crio)) runs it at boot. That unit is a systemd oneshot service, a SysV script
    (C(X-Start-Before)) or an Upstart task started on the engines' C(starting) events. The links are made before the
    boot unit is written, so the C(daemon-reload) that installing it causes on systemd cannot cut off a container
    started after this run.
  - A container started before the links existed keeps the flaw until it is restarted. The module reports each
    running GPU container (NVIDIA devices, C(--gpus), the C(nvidia) runtime or C(NVIDIA_VISIBLE_DEVICES)) that dockerd
    started before then, when dockerd uses the systemd cgroup driver, with a warning; it never touches a container.
author:
  - gpufleet.nvidia maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes
  - gpufleet.nvidia.role_vars
  - gpufleet.nvidia.audit
  - gpufleet.nvidia.attributes.FULL
options:
  state:
    description:
      - V(present) creates the missing links (and the boot pieces with O(boot)).
      - V(absent) removes the boot pieces this collection wrote, then the links that point at an NVIDIA node; nothing
        else. Containers started afterwards lose their GPUs at the next C(daemon-reload) again.
    type: str
    choices: [present, absent]
    default: present
  boot:
    description: Install (or with O(state=absent) remove) the script, the udev rule and the boot unit.
    type: bool
    default: true
  init_system:
    description:
      - The init system that runs the boot unit; V(auto) detects it as M(gpufleet.nvidia.init_system_info) does.
      - When none is recognised only the udev rule runs the script at boot, with a warning.
    type: str
    choices: [auto, systemd, sysvinit, upstart]
    default: auto
  dev_root:
    description:
      - The device directory. It, every directory above it and its C(char) directory must be root's and writable
        only by root; the module fails before changing anything otherwise. For tests.
    type: path
    default: /dev
  report_containers:
    description: Ask dockerd (at O(docker_host)) for running GPU containers started before the links existed.
    type: bool
    default: true
  docker_host:
    description: dockerd's API socket. No dockerd there means nothing to report, not an error.
    type: str
    default: unix:///var/run/docker.sock
notes:
  - Needs root (C(become=true)).
  - NVIDIA device nodes that appear later (MIG capability nodes, nodes made on first use by C(nvidia-modprobe)) get
    their links at the next run of this module, the next boot or the next driver load.
  - nspawn and other containers run no udevd; there the boot unit makes the links.
seealso:
  - module: gpufleet.nvidia.persistenced
  - module: gpufleet.nvidia.docker_runtime
'''

EXAMPLES = r'''
- name: Keep GPU containers' devices across systemd reloads (before anything reloads systemd)
  gpufleet.nvidia.device_links:
  become: true

- name: Links only, no boot pieces (the host image makes them at boot)
  gpufleet.nvidia.device_links:
    boot: false
  become: true

- name: See which running containers must be restarted
  gpufleet.nvidia.device_links:
  check_mode: true
  become: true
  register: links

- name: Show them
  ansible.builtin.debug:
    msg: "{{ links.exposed_containers | map(attribute='name') }}"
'''

RETURN = r'''
actions:
  description: What was done (or would be done in check mode), in order.
  returned: always
  type: list
  elements: str
  sample: [create_links, write_script, write_udev_rule, write_unit, enable]
links:
  description: The NVIDIA links in place after the run (with O(state=present)).
  returned: always
  type: list
  elements: dict
  sample: [{link: /dev/char/195:0, target: ../nvidia0}, {link: /dev/char/195:255, target: ../nvidiactl}]
created:
  description: Links this run created.
  returned: always
  type: list
  elements: str
  sample: [/dev/char/195:0]
removed:
  description: Links this run removed (O(state=absent)).
  returned: always
  type: list
  elements: str
  sample: []
conflicts:
  description: Entries in the way of a link, left as they are.
  returned: always
  type: list
  elements: dict
  sample: [{link: /dev/char/195:1, problem: "is a link to ../sda, not a link to ../nvidia1 (nvidia1): left as it is"}]
boot_files:
  description: The boot pieces (script, udev rule, unit) for this host; empty without O(boot).
  returned: always
  type: list
  elements: str
  sample: [/usr/local/sbin/gpufleet-dev-char-links, /etc/udev/rules.d/71-gpufleet-nvidia-dev-char.rules,
           /etc/systemd/system/gpufleet-dev-char-links.service]
init_system:
  description: The init system that runs the boot unit; null without O(boot) or when none was recognised.
  returned: always
  type: str
  sample: systemd
cgroup_driver:
  description: dockerd's cgroup driver; null when dockerd did not answer or nothing was asked.
  returned: always
  type: str
  sample: systemd
exposed_containers:
  description:
    - Running GPU containers started before the links existed, which the next C(systemctl daemon-reload) cuts off
      their GPUs. Restart them. Only with dockerd's systemd cgroup driver.
  returned: always
  type: list
  elements: dict
  sample: [{id: 3f2a9c1b7d4e, name: trainer, started_at: "2026-11-30T10:00:00.123456789Z"}]
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.compile_once import compiled_once


def main():
    # This concern's code alone (module_utils/concerns/device_links.py), and what it imports as it runs (its check,
    # what makes a change): each file compiled once, and kept compiled between root's runs
    # (module_utils/common/compile_once.py).
    with compiled_once():
        from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.device_links import CONCERN
        module = AnsibleModule(**CONCERN.module_args())
        result = CONCERN.execute(module)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
