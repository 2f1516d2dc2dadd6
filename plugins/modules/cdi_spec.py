#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: cdi_spec
short_description: Keep NVIDIA's CDI spec for a GPU node written, fresh, and refreshed at every boot
version_added: 1.0.0
description:
  - Writes the Container Device Interface (CDI) spec of the host's NVIDIA GPUs, the file through which dockerd (26 and
    later), containerd (2.x, or 1.7 with C(enable_cdi)), CRI-O and podman give a container the GPUs it asks for by
    name (C(--device nvidia.com/gpu=0), C(=<uuid>), C(=all)).
  - B(NVIDIA's spec, never ours.) The spec is what NVIDIA's own C(nvidia-ctk cdi generate) (NVIDIA Container Toolkit,
    package C(nvidia-container-toolkit-base)) prints on the host; the module never guesses which device nodes,
    libraries or hooks a driver needs. It is printed to the module (no file is written for it, so check mode and
    M(gpufleet.nvidia.node_state) only read) and written atomically (a temp file beside it, renamed), mode 0644,
    only when its text differs from the file's.
  - B(Stale.) A spec whose text differs from what C(nvidia-ctk) prints now is stale (RV(stale) says why, from both
    specs; the driver version, devices added or gone, or other changes such as MIG devices or libraries).
  - B(Where.) O(path), by default C(/var/run/cdi/nvidia.yaml), the file NVIDIA's refresh unit writes. The engines read
    C(/etc/cdi) and C(/var/run/cdi) (containerd's and CRI-O's C(cdi_spec_dirs) default, dockerd's and podman's too);
    C(/var/run/cdi) is on tmpfs, so the spec is written again at every boot (below). The name must end in C(.yaml) or
    C(.json), the only files the engines read, and its format follows the name.
  - B(At every boot), before the container engines start, the spec is generated again, so that a driver upgraded or
    a GPU added while the host was down is in the spec before an engine starts a container (one with
    C(restart=always) included). With O(boot_unit=auto), a systemd host whose NVIDIA toolkit ships
    C(nvidia-cdi-refresh.service) (toolkit 1.18 and later) uses NVIDIA's unit, enabled, with a drop-in of ours
    (C(/etc/systemd/system/nvidia-cdi-refresh.service.d/50-gpufleet-order.conf)) that orders it after the device
    nodes and C(/dev/char) links (C(systemd-udev-settle), C(nvidia-persistenced), C(gpufleet-dev-char-links)) and
    before C(docker), C(containerd), C(crio), C(podman) and C(kubelet). NVIDIA's unit is chosen only when it writes
    the same file the same way (its environment file C(/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env) sets
    nothing but the same output path, and O(device_name_strategy) is NVIDIA's default). Elsewhere (SysV, Upstart,
    an older toolkit, another path) the module installs its own refresh, the POSIX sh script
    C(/usr/local/sbin/gpufleet-cdi-refresh) (generate to a temp file beside the spec, replace it only when it
    differs) run by C(gpufleet-cdi-refresh) as a systemd unit, an LSB init script (C(X-Start-Before) the engines) or
    an Upstart task started on the engines' C(starting) events. RV(boot) says which was chosen on each host, and why.
    Pieces of the other kind a previous run installed are removed, so one refresh runs at boot.
  - A spec change restarts no engine; the engines read the specs for each container they create.
  - B(NVIDIA's runtime in CDI mode), only when O(runtime_mode) is given. C(nvidia-container-runtime.mode) in the
    runtime's C(config.toml) (O(runtime_config)) is set to it, in place; that one value changes (or is added at the end
    of the C([nvidia-container-runtime]) table), every other byte stays. In V(cdi) mode the runtime turns a
    container's C(NVIDIA_VISIBLE_DEVICES) (C(0), a UUID, C(all)) into CDI names (C(nvidia.com/gpu=0)) and takes the
    devices from the specs in C(nvidia-container-runtime.modes.cdi.spec-dirs), that is from this spec; the module
    fails, changing nothing, when those directories do not include O(path)'s. A missing file is written as NVIDIA's
    default (C(nvidia-ctk config default)) with the mode. The runtime reads its config for each container, so no
    engine restarts. NVIDIA's package rewrites the file with C(nvidia-ctk config --in-place) at every upgrade, which
    keeps the mode. A file NVIDIA's runtime would read otherwise than the module is refused, naming the file and the
    line, changing nothing - a value of another type on the way to the mode or the spec directories (C(mode = 1),
    an array of tables), or one of those keys in another case (the runtime also reads C(MODE)).
  - O(state=absent) removes the spec (only a spec of kind C(nvidia.com/gpu)), our boot script, unit and drop-in, and
    nothing else (NVIDIA's own units stay as its packages left them). With O(runtime_mode), the runtime's mode goes
    back to NVIDIA's default (C(nvidia-ctk config default), V(auto) where C(nvidia-ctk) is gone) when it is
    O(runtime_mode); another mode is left as it is.
  - The spec's directory and the boot pieces' follow the collection's root-only file rules (no directory or link on
    the way that another user can change; a file written through a directory descriptor, never by a path that can
    be replaced). O(nvidia_ctk) must be a regular file only root can change, since root runs it.
author:
  - gpufleet.nvidia maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes
  - gpufleet.nvidia.role_vars
  - gpufleet.nvidia.audit
attributes:
  check_mode:
    support: full
    details:
      - Generates the spec (C(nvidia-ctk) prints it) and tells whether the file and the boot pieces would change,
        writing nothing. Where C(nvidia-ctk) is not installed yet (the toolkit is installed in the same run), predicts
        a write, with a warning.
  diff_mode:
    support: full
    details:
      - Shows the spec and each boot piece before and after.
  idempotent:
    support: full
options:
  state:
    description:
      - V(present) writes the spec and installs the boot refresh; V(absent) removes them.
    type: str
    choices: [present, absent]
    default: present
  path:
    description:
      - The spec file. It must end in C(.yaml) or C(.json) and be a plain absolute path (letters, digits and
        C(._+-/)), since the boot script carries it.
    type: path
    default: /var/run/cdi/nvidia.yaml
  nvidia_ctk:
    description: NVIDIA's C(nvidia-ctk) (package C(nvidia-container-toolkit-base)).
    type: path
    default: /usr/bin/nvidia-ctk
  device_name_strategy:
    description:
      - How the spec names each GPU (C(nvidia-ctk cdi generate --device-name-strategy)); each strategy gives every GPU
        one more name. V(index) gives C(nvidia.com/gpu=0), V(uuid) C(nvidia.com/gpu=GPU-...), V(type-index)
        C(nvidia.com/gpu=gpu0). The spec always has C(nvidia.com/gpu=all).
    type: list
    elements: str
    choices: [index, uuid, type-index]
    default: [index, uuid]
  boot:
    description: Refresh the spec at every boot, before the container engines start (see the description).
    type: bool
    default: true
  boot_unit:
    description:
      - Whose refresh runs at boot. V(auto) NVIDIA's C(nvidia-cdi-refresh.service) where it can do it (systemd, the
        same file and names), else ours; V(nvidia) NVIDIA's, failing where it cannot; V(gpufleet) ours.
    type: str
    choices: [auto, nvidia, gpufleet]
    default: auto
  init_system:
    description: The host's init system for the boot refresh; V(auto) detects it.
    type: str
    choices: [auto, systemd, sysvinit, upstart]
    default: auto
  runtime_mode:
    description:
      - The mode of NVIDIA's C(nvidia-container-runtime) (C(nvidia-container-runtime.mode)); omitted leaves it as it
        is. V(cdi) makes the runtime give containers their GPUs from this spec (see the description); NVIDIA's other
        modes (V(auto), the default, which is C(jit-cdi) on a host with the driver; V(jit-cdi), V(legacy), V(csv)) are
        accepted by name.
    type: str
  runtime_config:
    description: The runtime's config file (what C(nvidia-ctk config) reads by default).
    type: path
    default: /etc/nvidia-container-runtime/config.toml
notes:
  - Needs root (C(become=true)).
  - NVIDIA's C(nvidia-cdi-refresh.service) runs C(nvidia-smi -L) first and only on a host whose kernel has NVIDIA's
    module (C(modules.dep)); its C(.path) unit regenerates the spec when the driver's modules or C(nvidia-ctk) change
    on a running host.
seealso:
  - module: gpufleet.nvidia.node_state
  - module: gpufleet.nvidia.docker_runtime
  - name: Container Device Interface
    description: The CDI specification the engines read.
    link: https://github.com/cncf-tags/container-device-interface
'''

EXAMPLES = r'''
- name: NVIDIA's CDI spec, kept fresh at every boot
  gpufleet.nvidia.cdi_spec:
  become: true

- name: The spec as JSON in /etc/cdi, GPUs named by index only, our own boot refresh
  gpufleet.nvidia.cdi_spec:
    path: /etc/cdi/nvidia.json
    device_name_strategy: [index]
    boot_unit: gpufleet
  become: true

- name: The spec, and NVIDIA's runtime giving containers their GPUs from it (CDI mode)
  gpufleet.nvidia.cdi_spec:
    runtime_mode: cdi
  become: true

- name: Remove the spec and its boot refresh, and put the runtime's default mode back
  gpufleet.nvidia.cdi_spec:
    state: absent
    runtime_mode: cdi
  become: true
'''

RETURN = r'''
actions:
  description:
    - What the run did or, in check mode, would do, in order; V(write_spec), V(remove_spec), V(write_script),
      V(write_unit), V(write_dropin), V(remove_script), V(remove_unit), V(remove_dropin), V(disable_other) (our own
      unit, when NVIDIA's takes over), V(reload_init), V(enable), V(disable), V(write_runtime_config) (the runtime's
      mode).
  returned: always
  type: list
  elements: str
  sample: [write_spec, write_script, write_unit, enable]
path:
  description: The spec file.
  returned: always
  type: str
  sample: /var/run/cdi/nvidia.yaml
devices:
  description: The device names the spec gives (after C(nvidia.com/gpu=)), as C(nvidia-ctk) generated them.
  returned: always
  type: list
  elements: str
  sample: ['0', '1', 'GPU-4d0f8a56-0b4c-5f34-9a59-1d4c7e2b9a10', all]
driver_version:
  description: The driver version the spec was generated for (from its hooks); null when not known.
  returned: always
  type: str
  sample: 550.163.01
stale:
  description:
    - Why the spec on the host differs from what C(nvidia-ctk) generates now; empty when it is fresh.
    - A spec that cannot be read as a CDI spec (not UTF-8 YAML or JSON, deeper than 64 levels, more than 100000
      values, a YAML anchor, alias or explicit tag) is stale too, named with what is wrong with it, and replaced.
  returned: always
  type: list
  elements: str
  sample: ['driver 550.163.01, the spec names 535.171.04', 'devices not in the spec: 2']
boot:
  description:
    - The boot refresh; null with O(boot=false). C(source) is V(nvidia) (NVIDIA's unit with our drop-in),
      V(gpufleet) (ours) or null (no init system), C(reason) says why, C(files) are the pieces that belong to it.
  returned: always
  type: dict
  sample: {source: gpufleet, reason: our own gpufleet-cdi-refresh (this host runs sysvinit),
           init_system: sysvinit, files: [/etc/init.d/gpufleet-cdi-refresh, /usr/local/sbin/gpufleet-cdi-refresh]}
runtime_mode:
  description:
    - NVIDIA's runtime's mode before and after this run (C(after) is what check mode would write), and its config
      file; null without O(runtime_mode).
  returned: always
  type: dict
  sample: {path: /etc/nvidia-container-runtime/config.toml, before: auto, after: cdi}
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.compile_once import compiled_once


def main():
    # This concern's code alone (module_utils/concerns/cdi.py), and what it imports as it runs (its check, what makes
    # a change): each file compiled once, and kept compiled between root's runs (module_utils/common/compile_once.py).
    with compiled_once():
        from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.cdi import CONCERN
        module = AnsibleModule(**CONCERN.module_args())
        result = CONCERN.execute(module)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
