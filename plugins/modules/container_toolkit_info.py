#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: container_toolkit_info
short_description: Tell whether NVIDIA's container toolkit packages on an apt host are as wanted, and why not (read-only)
version_added: 1.0.0
description:
  - Reads, in one round trip, the installed version and hold state of each toolkit package from dpkg's status
    database (C(/var/lib/dpkg/status)), and whether the collection's apt key
    (C(/etc/apt/keyrings/gpufleet-nvidia-container-toolkit.asc)) and deb822 source
    (C(/etc/apt/sources.list.d/gpufleet-nvidia-container-toolkit.sources)) hold what the options say. When a package
    must be installed it also asks C(apt-cache madison) whether the wanted version is in apt's package lists already
    (nothing is downloaded).
  - Changes nothing. RV(converged) says whether the host is as wanted, RV(drift) why not, RV(actions) what the
    C(gpufleet.nvidia.container_toolkit) role does about it with C(ansible.builtin) modules (the key and the source
    with C(copy), the source's own index with C(apt-get update) limited to it, the packages with C(apt), the hold with
    C(dpkg_selections)).
  - This is the C(container_toolkit) concern of M(gpufleet.nvidia.node_state), which runs the same code with the same
    options.
  - apt hosts only. On a host without dpkg and apt-get (an RPM distribution) it fails, saying so; dnf and yum are not
    supported, because no RPM distribution runs in the collection's tests.
author:
  - gpufleet.nvidia maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes
  - gpufleet.nvidia.role_vars
  - gpufleet.nvidia.attributes.INFO_MODULE
options:
  state:
    description: V(present) wants the packages at O(version); V(absent) wants them and the collection's key and source
      gone.
    type: str
    choices: [present, absent]
    default: present
  version:
    description: The exact Debian version every package of O(packages) must have (for example V(1.20.0-1)). Required
      with O(state=present).
    type: str
  packages:
    description: The toolkit packages.
    type: list
    elements: str
    default: [nvidia-container-toolkit, nvidia-container-toolkit-base]
  repo_url:
    description:
      - The repository's URL, as apt takes it (C($(ARCH)) is apt's own substitution); the collection's deb822 source
        names it, signed by O(repo_key) alone.
      - Null means the host's apt already has a source for the packages; the collection's key and source must then be
        absent.
    type: str
  repo_suite:
    description: The source's suite; V(/) for a flat repository such as NVIDIA's.
    type: str
    default: /
  repo_components:
    description: The source's components; none for a flat repository.
    type: list
    elements: str
    default: []
  repo_key:
    description: The repository's armored OpenPGP public key (its text). Required with O(repo_url) and
      O(state=present).
    type: str
  hold:
    description: The packages must be held (C(dpkg --set-selections)), so that unattended upgrades leave them at
      O(version); V(false) wants them not held.
    type: bool
    default: true
notes:
  - Reads files only root can be trusted to have written; run with C(become=true).
seealso:
  - module: gpufleet.nvidia.node_state
'''

EXAMPLES = r'''
- name: Is the toolkit installed and held at 1.20.0-1 from the site's mirror?
  gpufleet.nvidia.container_toolkit_info:
    version: 1.20.0-1
    repo_url: https://mirror.example.internal/nvidia/stable/deb/$(ARCH)
    repo_key: "{{ lookup('ansible.builtin.file', 'nvidia-container-toolkit.asc') }}"
  become: true
  register: toolkit

- name: Say why not
  ansible.builtin.debug:
    msg: "{{ toolkit.drift }}"
  when: not toolkit.converged
'''

RETURN = r'''
converged:
  description: Whether the host is as the options say.
  returned: always
  type: bool
  sample: false
drift:
  description: Why not, one reason each (a package missing, another version, not held, a file missing or different).
  returned: always
  type: list
  elements: str
  sample: ["nvidia-container-toolkit 1.19.0-1 is installed, not 1.20.0-1", "nvidia-container-toolkit is not held"]
actions:
  description: What the C(gpufleet.nvidia.container_toolkit) role does, in order, from V(write_key), V(write_source),
    V(remove_key), V(remove_source), V(update_index), V(install), V(hold), V(unhold), V(remove).
  returned: always
  type: list
  elements: str
  sample: [update_index, install, hold]
installed:
  description: Each package's installed version; null when it is not installed.
  returned: always
  type: dict
  sample: {"nvidia-container-toolkit": "1.20.0-1", "nvidia-container-toolkit-base": null}
held:
  description: Whether each package is held.
  returned: always
  type: dict
  sample: {"nvidia-container-toolkit": true, "nvidia-container-toolkit-base": true}
available:
  description: Whether apt's package lists already offer O(version) of every package; null when not asked (nothing
    to install).
  returned: always
  type: bool
  sample: true
version:
  description: The wanted version (O(version)).
  returned: always
  type: str
  sample: 1.20.0-1
state:
  description: O(state).
  returned: always
  type: str
  sample: present
package_manager:
  description: The package manager the evaluation used (V(apt)).
  returned: always
  type: str
  sample: apt
files:
  description: The collection's apt key and source paths.
  returned: always
  type: dict
  sample: {"key": /etc/apt/keyrings/gpufleet-nvidia-container-toolkit.asc,
           "source": /etc/apt/sources.list.d/gpufleet-nvidia-container-toolkit.sources}
msg:
  description: What was found, in one line.
  returned: always
  type: str
  sample: "drifted: nvidia-container-toolkit is not installed"
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.compile_once import compiled_once


def main():
    # This concern's code alone (module_utils/concerns/container_toolkit.py), compiled once.
    with compiled_once():
        from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.container_toolkit import CONCERN
    module = AnsibleModule(**CONCERN.module_args())
    module.exit_json(**CONCERN.run(module))


if __name__ == '__main__':
    main()
