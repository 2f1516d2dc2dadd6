#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: init_system_info
short_description: Report which init system runs a host, with the evidence
version_added: 1.0.0
description:
  - Reports the init system of the managed host as C(systemd), C(upstart), C(sysvinit) or C(unknown),
    together with the evidence the verdict rests on and the tools to use for services.
  - "The rule, in order: C(systemd) when PID 1 is systemd B(and) C(/run/systemd/system) exists (what C(sd_booted) checks);
    C(upstart) when PID 1 is C(init) and answers C(initctl version) with C(init (upstart X.Y.Z)) (or, when the running
    init cannot be asked, C(initctl --version) names upstart); C(sysvinit) when PID 1 is C(init)
    (not a link to systemd) and C(/etc/init.d) exists; otherwise C(unknown)."
  - "For Upstart the version of the running init is reported (for example C(1.13.2) on Ubuntu 14.04/16.04, C(0.6.5) on
    RHEL/CentOS 6): the two series differ in override files, C(initctl) output and C(expect) handling."
  - A host with systemd installed but not running as PID 1 is not reported as C(systemd).
  - Containers whose PID 1 is a shim such as C(tini), C(dumb-init) or C(sh) are reported as C(unknown);
    nothing there starts services at boot. The evidence still lists the service tools found.
  - Unlike the C(service_mgr) fact, this needs no fact gathering and costs one module round trip.
author:
  - gpufleet.nvidia maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes
  - gpufleet.nvidia.attributes.INFO_MODULE
options: {}
notes:
  - Reading C(/proc/1/exe) needs privileges; without them the verdict rests on C(/proc/1/comm) and C(/proc/1/cmdline).
  - Asking a running Upstart C(initctl version) needs root (C(initctl) 1.x otherwise tries the system D-Bus).
seealso:
  - module: ansible.builtin.service_facts
  - module: gpufleet.nvidia.persistenced
'''

EXAMPLES = r'''
- name: Find out how services are managed on the GPU nodes
  gpufleet.nvidia.init_system_info:
  register: gpu_node_init

- name: Refuse hosts that cannot run a boot-time persistence daemon
  ansible.builtin.assert:
    that: gpu_node_init.init_system != 'unknown'
    fail_msg: "{{ inventory_hostname }}: {{ gpu_node_init.reason }}"
'''

RETURN = r'''
init_system:
  description: The init system running the host.
  returned: always
  type: str
  choices: [systemd, upstart, sysvinit, unknown]
  sample: systemd
version:
  description: >-
    Version of the running init system where it is known: for Upstart, the version PID 1 reports through
    C(initctl version) (or the C(initctl) tool's own when PID 1 cannot be asked); null otherwise.
  returned: always
  type: str
  sample: 1.13.2
reason:
  description: One sentence saying why, built from the evidence.
  returned: always
  type: str
  sample: PID 1 is systemd and /run/systemd/system exists
service_manager:
  description: Tool that starts and stops services (C(systemctl), C(initctl), C(service) or C(/etc/init.d)); null when unknown.
  returned: always
  type: str
  sample: /usr/bin/systemctl
enable_tool:
  description: >-
    Tool that enables services at boot (C(systemctl), C(update-rc.d), C(chkconfig), C(insserv)); null for Upstart (jobs start
    through their C(start on) stanza) and when unknown.
  returned: always
  type: str
  sample: /usr/sbin/update-rc.d
evidence:
  description: What the verdict rests on.
  returned: always
  type: dict
  contains:
    pid1_comm:
      description: Contents of C(/proc/1/comm).
      type: str
      returned: always
      sample: systemd
    pid1_argv0:
      description: First word of C(/proc/1/cmdline).
      type: str
      returned: always
      sample: /sbin/init
    pid1_exe:
      description: Target of C(/proc/1/exe), null when not readable.
      type: str
      returned: always
      sample: /usr/lib/systemd/systemd
    run_systemd_system:
      description: Whether C(/run/systemd/system) exists.
      type: bool
      returned: always
    etc_init_d:
      description: Whether C(/etc/init.d) exists.
      type: bool
      returned: always
    etc_init:
      description: Whether C(/etc/init) (Upstart job directory) exists.
      type: bool
      returned: always
    initctl_version:
      description: First line of C(initctl --version) (the installed tool's version), null when initctl is absent.
      type: str
      returned: always
      sample: initctl (upstart 1.13.2)
    init_daemon_version:
      description: >-
        First line of C(initctl version), which asks the running init daemon over its socket, or
        C(initctl version failed: ...); null when initctl is absent.
      type: str
      returned: always
      sample: init (upstart 1.13.2)
    tools:
      description: Path of each service tool found (C(systemctl), C(initctl), C(service), C(update-rc.d), C(chkconfig), C(insserv)), null when absent.
      type: dict
      returned: always
      sample: {"systemctl": "/usr/bin/systemctl", "service": "/usr/sbin/service", "update-rc.d": "/usr/sbin/update-rc.d",
               "initctl": null, "chkconfig": null, "insserv": null}
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.init.detect import detect


def main():
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)

    def run(argv):
        return module.run_command(argv, environ_update={'LANG': 'C', 'LC_ALL': 'C'})

    result = detect('/', run_command=run)
    module.exit_json(changed=False, **result)


if __name__ == '__main__':
    main()
