#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: container_engines_info
short_description: Report which container engines (dockerd, containerd, CRI-O) a host has
version_added: 1.0.0
description:
  - Reports, for each container engine the collection registers a runtime with (C(containerd), C(crio), C(docker)),
    whether it is installed, its daemon's executable, and whether C(auto) takes it.
  - An engine is installed when its daemon's executable (C(containerd), C(crio), C(dockerd)) is on C($PATH) or in
    C(/usr/local/sbin), C(/usr/local/bin), C(/usr/sbin), C(/usr/bin), C(/sbin) or C(/bin).
  - RV(auto) is every installed engine except a containerd whose CRI plugin is disabled (C(disabled_plugins), as the
    containerd.io package of Docker's own repositories writes it). Only the CRI plugin reads the runtimes registered in
    C(config.toml); dockerd hands containerd its own runtimes per container. Whether the plugin is disabled is asked
    of containerd itself (C(containerd config dump)), so imported files and containerd's defaults count.
  - The C(gpufleet.nvidia.container_runtime) role uses it for C(container_runtime_engines=[auto]).
author:
  - gpufleet.nvidia maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes
  - gpufleet.nvidia.attributes.INFO_MODULE
options:
  containerd_config:
    description:
      - containerd's configuration file, whose effective configuration tells whether the CRI plugin is on.
    type: path
    default: /etc/containerd/config.toml
seealso:
  - module: gpufleet.nvidia.containerd_runtime
  - module: gpufleet.nvidia.crio_runtime
  - module: gpufleet.nvidia.docker_runtime
'''

EXAMPLES = r'''
- name: Find the container engines of the GPU nodes
  gpufleet.nvidia.container_engines_info:
  register: found

- name: Register the runtime with each of them
  ansible.builtin.debug:
    msg: "{{ found.auto }}"
'''

RETURN = r'''
auto:
  description: The engines C(auto) takes, in the order the role registers them (containerd, crio, docker).
  returned: always
  type: list
  elements: str
  sample: [containerd, docker]
engines:
  description: Per engine (C(containerd), C(crio), C(docker)), what was found.
  returned: always
  type: dict
  contains:
    installed:
      description: Whether the engine's daemon executable is on the host.
      type: bool
      sample: true
    binary:
      description: The daemon's executable, null when not installed.
      type: str
      sample: /usr/bin/containerd
    auto:
      description: Whether RV(auto) takes the engine.
      type: bool
      sample: false
    reason:
      description: Why, in one line.
      type: str
      sample: /etc/containerd/config.toml disables the CRI plugin (disabled_plugins has "cri")
    cri_disabled:
      description: containerd only; the C(disabled_plugins) entry that turns the CRI plugin off, null when it is on.
      type: str
      returned: for containerd, when installed
      sample: cri
  sample: {"containerd": {"installed": true, "binary": "/usr/bin/containerd", "auto": true, "cri_disabled": null,
           "reason": "containerd is installed and its CRI plugin is enabled"},
           "crio": {"installed": false, "binary": null, "auto": false, "reason": "not installed (no crio executable)"},
           "docker": {"installed": true, "binary": "/usr/sbin/dockerd", "auto": true,
           "reason": "/usr/sbin/dockerd is installed"}}
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import engines as concerns_engines
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import module as concerns_module


def main():
    module = AnsibleModule(argument_spec=dict(containerd_config=dict(type='path', default='/etc/containerd/config.toml')),
                           supports_check_mode=True)
    result = concerns_engines.detect(concerns_module.runner(module), containerd_config=module.params['containerd_config'])
    module.exit_json(changed=False, **result)


if __name__ == '__main__':
    main()
