#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: gpu_persistence
short_description: Set NVIDIA GPU persistence mode GPU by GPU, and keep it across restarts
version_added: 1.0.0
description:
  - Sets persistence mode on the selected GPUs of a host, changing only the GPUs whose mode differs, in one round trip.
  - When a persistence daemon answers on its socket (NVIDIA's C(nvidia-persistenced) or the collection's bundled
    one), modes are set through its RPC, as C(nvidia-smi -pm) does; nothing but the standard library is needed.
    Otherwise NVML's legacy kernel path is used through C(pynvml); NVIDIA deprecates that path and its setting is lost
    at reboot, so a warning says so.
  - With O(persist=true) the wanted modes are recorded per GPU UUID in a state file. The bundled daemon reads it at
    start and on SIGHUP; the service that M(gpufleet.nvidia.persistenced) installs for NVIDIA's daemon re-applies it
    right after start. A daemon restart or a reboot then brings each GPU back to its own mode instead of the daemon's
    global default.
  - If setting one GPU fails, the GPUs already changed in this run are set back and the state file is left as it was.
author:
  - gpufleet.nvidia maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes
  - gpufleet.nvidia.role_vars
  - gpufleet.nvidia.audit
  - gpufleet.nvidia.attributes.FULL
  - gpufleet.nvidia.gpu_access
options:
  gpus:
    description:
      - The GPUs to set to O(mode). Each item is an index (V(0)), a UUID (V(GPU-5f9a...)), or a PCI bus id in NVML
        (V(00000000:1B:00.0)) or lspci (V(1b:00.0), V(0000:1b:00.0)) form; V(all) means every GPU.
      - Selecting all GPUs also records O(mode) as the default for GPUs added to the host later.
      - A selector that matches no GPU fails and lists the GPUs that exist.
    type: list
    elements: raw
    default: [all]
  mode:
    description: Persistence mode for the GPUs of O(gpus).
    type: str
    choices: [enabled, disabled]
  modes:
    description: Mixed settings in one call, instead of O(gpus) and O(mode).
    type: list
    elements: dict
    suboptions:
      gpu:
        description: Index, UUID or PCI bus id, as in O(gpus).
        type: raw
        required: true
      mode:
        description: Persistence mode for this GPU.
        type: str
        choices: [enabled, disabled]
        required: true
  persist:
    description: Record the wanted modes in O(state_file) so they come back after a daemon restart or a reboot.
    type: bool
    default: true
  state_file:
    description:
      - The per-GPU state file shared with the persistence daemon.
      - Its directory must be dedicated to it, since the persistence daemon's service user owns it. It must be an
        absolute, normalised path (no V(..)), not a system or home directory (V(/etc), V(/var/lib), V(/tmp), ...),
        not a symbolic link, owned by root or the service user (see O(service_user)), below directories only root
        can write. A missing directory is created (root, mode 0755, with a C(.gpufleet-state-dir) marker that lets
        M(gpufleet.nvidia.persistenced) hand it to the service user later).
      - The state file is at most 1 MiB; a larger, deeper or otherwise malformed file is an error naming it.
    type: path
    default: /var/lib/gpufleet/persistence.json
  service_user:
    description:
      - The account the persistence daemon runs as (O(gpufleet.nvidia.persistenced#module:user)); besides root,
        only it may own the state file's directory.
      - Unset accepts the owner of the daemon's run directory C(/var/run/nvidia-persistenced) and the account
        C(nvidia-persistenced).
    type: str
notes:
  - Changing persistence mode needs root (C(become=true)); NVIDIA's daemon 555 and newer, and the bundled daemon,
    refuse other users.
  - The state file is updated as root in a directory the service user can write, so nothing there is trusted
    by path. The directory is opened once without following links, the lock and temp files are created with
    C(O_EXCL)/C(O_NOFOLLOW), existing files must be regular files with one link owned by root or the directory's
    owner, and modes and owners are set on descriptors. A write that fails (read-only file system, no space,
    permission, immutable file) leaves the old file as it was and no temp file.
seealso:
  - module: gpufleet.nvidia.gpu_info
  - module: gpufleet.nvidia.persistenced
'''

EXAMPLES = r'''
- name: Enable persistence on every GPU (and on GPUs added later)
  gpufleet.nvidia.gpu_persistence:
    mode: enabled
  become: true

- name: Keep two inference GPUs persistent and let a training GPU power down
  gpufleet.nvidia.gpu_persistence:
    modes:
      - gpu: GPU-5f9a6e3d-1d2c-4b0e-9d6a-3f0c2b1a8e77
        mode: enabled
      - gpu: "00000000:3B:00.0"
        mode: enabled
      - gpu: 3
        mode: disabled
  become: true

- name: Disable persistence on the GPU in slot 1b:00.0 for this run only
  gpufleet.nvidia.gpu_persistence:
    gpus: ["1b:00.0"]
    mode: disabled
    persist: false
  become: true
'''

RETURN = r'''
gpus:
  description: Each selected GPU with its mode before and after.
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
    before:
      description: Mode before the task.
      type: str
      returned: always
      sample: disabled
    after:
      description: Mode after the task (predicted in check mode).
      type: str
      returned: always
      sample: enabled
    changed:
      description: Whether this GPU's mode changed.
      type: bool
      returned: always
      sample: true
backend:
  description: The backend used, C(rpc) or C(nvml).
  returned: success
  type: str
  sample: rpc
state_changed:
  description: Whether the state file changed (or would change in check mode).
  returned: success
  type: bool
  sample: false
state_file:
  description: Path of the state file, null when O(persist=false).
  returned: success
  type: str
  sample: /var/lib/gpufleet/persistence.json
missing_library:
  description:
    - The PyPI name of the Python library whose absence made the module fail, for a playbook to install it and
      retry without matching the message text.
    - V(nvidia-ml-py) when NVML was needed to set persistence (no persistence daemon answers, or O(backend=nvml)) and
      C(pynvml) could not be imported.
  returned: when the module fails because a Python library is missing
  type: str
  sample: nvidia-ml-py
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.compile_once import compiled_once


def main():
    # This concern's code alone (module_utils/concerns/gpu_persistence.py), and what it imports as it runs (its check,
    # what makes a change): each file compiled once, and kept compiled between root's runs
    # (module_utils/common/compile_once.py).
    with compiled_once():
        from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.gpu_persistence import CONCERN
        module = AnsibleModule(**CONCERN.module_args())
        result = CONCERN.execute(module)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
