#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: gpu_info
short_description: List a host's NVIDIA GPUs with their persistence mode
version_added: 1.0.0
description:
  - Reports every NVIDIA GPU of the host (index, UUID, name, PCI bus id, minor number, persistence mode), the driver
    version, and which persistence daemon answers on its socket (C(none), NVIDIA's C(nvidia-persistenced), or the
    collection's C(bundled) drop-in).
  - When a persistence daemon answers, GPUs are read from the kernel driver's C(/proc/driver/nvidia/gpus) and modes
    through the daemon's RPC, with the standard library only. Otherwise NVML is used through C(pynvml), which then
    must be installed on the host (PyPI C(nvidia-ml-py)).
author:
  - gpufleet.nvidia maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes
  - gpufleet.nvidia.gpu_access
  - gpufleet.nvidia.attributes.INFO_MODULE
options: {}
seealso:
  - module: gpufleet.nvidia.gpu_persistence
'''

EXAMPLES = r'''
- name: Read the GPUs of every node
  gpufleet.nvidia.gpu_info:
  register: gpu_inventory

- name: Show which GPUs are not persistent
  ansible.builtin.debug:
    msg: "{{ gpu_inventory.gpus | selectattr('persistence_mode', 'eq', 'disabled') | map(attribute='uuid') | list }}"

- name: Fail early on hosts whose driver does not match the fleet
  ansible.builtin.assert:
    that: gpu_inventory.driver_version is version('535.0', '>=')
'''

RETURN = r'''
gpus:
  description: The GPUs, in index order.
  returned: success
  type: list
  elements: dict
  contains:
    index:
      description: NVML index (PCI bus order).
      type: int
      returned: always
      sample: 0
    uuid:
      description: GPU UUID.
      type: str
      returned: always
      sample: GPU-5f9a6e3d-1d2c-4b0e-9d6a-3f0c2b1a8e77
    name:
      description: Product name.
      type: str
      returned: always
      sample: NVIDIA H100 80GB HBM3
    pci_bus_id:
      description: PCI bus id in NVML form.
      type: str
      returned: always
      sample: "00000000:1B:00.0"
    minor:
      description: Minor number of the GPU's C(/dev/nvidiaN).
      type: int
      returned: always
      sample: 0
    persistence_mode:
      description: C(enabled) or C(disabled).
      type: str
      returned: always
      sample: enabled
count:
  description: Number of GPUs.
  returned: success
  type: int
  sample: 8
driver_version:
  description: Kernel driver version from C(/proc/driver/nvidia/version), null when unknown.
  returned: success
  type: str
  sample: 535.171.04
daemon:
  description: The persistence daemon.
  returned: success
  type: dict
  contains:
    kind:
      description: C(nvidia), C(bundled), C(unknown) (a process we do not recognise holds the pid file) or C(none).
      type: str
      returned: always
      sample: nvidia
    pid:
      description: Its process id, null when none runs.
      type: int
      returned: always
      sample: 1234
    answers:
      description: Whether it answered an RPC NULL call on O(socket_path).
      type: bool
      returned: always
      sample: true
backend:
  description: The backend used, C(rpc) or C(nvml).
  returned: success
  type: str
  sample: rpc
missing_library:
  description:
    - The PyPI name of the Python library whose absence made the module fail, for a playbook to install it and
      retry without matching the message text.
    - V(nvidia-ml-py) when NVML was needed to read the GPUs (no persistence daemon answers, or O(backend=nvml)) and
      C(pynvml) could not be imported.
  returned: when the module fails because a Python library is missing
  type: str
  sample: nvidia-ml-py
'''

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import backends


def main():
    module = AnsibleModule(argument_spec=dict(backends.ACCESS_ARGUMENT_SPEC), supports_check_mode=True)
    try:
        backend, answers = backends.open_backend(module.params, 'to read GPUs through NVML')
    except backends.GpuError as exc:
        module.fail_json(**exc.fail_json_args())
    try:
        with backend:
            gpus = backend.gpus()
            for gpu in gpus:
                gpu['persistence_mode'] = backend.get_mode(gpu)
    except backends.GpuError as exc:
        module.fail_json(msg=str(exc))
    daemon = backends.daemon_identity(os.path.dirname(module.params['socket_path']))
    daemon['answers'] = answers
    module.exit_json(changed=False, gpus=gpus, count=len(gpus), driver_version=backends.read_driver_version(),
                     daemon=daemon, backend=backend.name)


if __name__ == '__main__':
    main()
