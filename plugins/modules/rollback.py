#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: rollback
short_description: Put a GPU node back as it was before a run of this collection, files byte for byte, services with them
version_added: 1.0.0
description:
  - Every module of this collection that changes a host (M(gpufleet.nvidia.docker_runtime),
    M(gpufleet.nvidia.containerd_runtime), M(gpufleet.nvidia.crio_runtime), M(gpufleet.nvidia.persistenced),
    M(gpufleet.nvidia.cdi_spec), M(gpufleet.nvidia.device_links), M(gpufleet.nvidia.gpu_persistence), ...) saves what
    it changed to the host's rollback store (their option C(rollback_store)), under the run's id. This module puts
    back what the run O(run_id) changed, its newest change first.
  - "Each file the run changed: when it still holds what the run left (by its SHA-256), its text before the run is
    written back byte for byte, atomically, with the mode and owner the file has; a file the run created is removed,
    one it removed is made again. A file that is as it was before the run is left. A file changed since the run
    (by hand, by another tool) is a conflict: left as it is and reported in RV(conflicts); the rest goes on."
  - Then the services the run touched, with the files put back. Where a definition of the init system was put back
    (a systemd unit or drop-in, an Upstart job), the init system is reloaded first (C(systemctl daemon-reload),
    C(initctl reload-configuration)). A service the run restarted or started is restarted, one it only reloaded is
    reloaded, one it stopped is started; one whose definition the run created is stopped before that definition is
    removed. Only the services of the changes whose files were put back by this task.
  - A service that fails to come back fails the task, once every file was put back and every other service handled.
  - Files in a directory another user can change, and what is not a file (the C(/dev/char) links of
    M(gpufleet.nvidia.device_links), GPU persistence modes), are never saved, so never put back.
  - The rollback itself is written to the audit trail, as the change of concern C(rollback), naming the run it put
    back.
  - A second run with the same O(run_id) changes nothing.
author:
  - gpufleet.nvidia maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes
  - gpufleet.nvidia.attributes.FULL
options:
  run_id:
    description:
      - The run to put back. The module's action plugin gives this C(ansible-playbook) run's own id (the one the
        changing modules saved under, the same for every host and task of the run) when it is not given.
      - To put back an earlier run, give the C(run_id) of its lines in the audit trail.
    type: str
  store:
    description:
      - The rollback store the changing modules wrote (their C(rollback_store)). It must be root's and open to
        nobody else, every directory above it root's and writable by nobody else; a link in place of the run's file
        is never followed.
    type: path
    default: /var/lib/gpufleet-rollback
  audit_log:
    description:
      - The host's audit trail (the changing modules' C(audit_log)). A rollback that changed the host (not in check
        mode) appends one JSON line to it, as a change of concern C(rollback) whose C(rollback_of) is O(run_id), with
        the files put back (their SHA-256 before and after) and what was done to services.
      - An empty value writes no line. A line that cannot be written is a warning and RV(audit_error); the rollback
        itself is done.
    type: path
    default: /var/log/gpufleet/audit.jsonl
  audit_run_id:
    description:
      - The run the rollback's own audit line belongs to. Set by the module's action plugin to this
        C(ansible-playbook) run's id.
    type: str
notes:
  - Needs root (C(become=true)).
  - A file that was empty before the run and that the run filled is removed (a diff shows a missing file and an
    empty one alike).
  - Whether a service starts at boot (enabled) is not changed back.
seealso:
  - module: gpufleet.nvidia.gpu_health
  - module: gpufleet.nvidia.docker_runtime
'''

EXAMPLES = r'''
- name: Put back what this run changed on a node whose GPU health got worse
  gpufleet.nvidia.rollback:
  become: true
  register: rolled_back

- name: See what putting back an earlier run would do
  gpufleet.nvidia.rollback:
    run_id: ctl-20261205T170000Z-4242
  check_mode: true
  diff: true
  become: true
'''

RETURN = r'''
run_id:
  description: The run put back.
  returned: always
  type: str
  sample: ctl-20261205T170000Z-4242
store:
  description: The rollback store read.
  returned: always
  type: str
  sample: /var/lib/gpufleet-rollback
records:
  description: How many changes (one per module run that changed files) the store held for the run.
  returned: always
  type: int
  sample: 2
restored:
  description: The files given their text before the run (would be, in check mode).
  returned: always
  type: list
  elements: str
  sample: [/etc/docker/daemon.json]
removed:
  description: The files the run had created, removed (would be, in check mode).
  returned: always
  type: list
  elements: str
  sample: [/etc/cdi/nvidia.yaml]
conflicts:
  description: Files changed since the run, or that cannot be read safely, left as they are.
  returned: always
  type: list
  elements: dict
  sample: [{path: /etc/containerd/config.toml, concern: containerd,
            problem: "it changed since the run (SHA-256 ...; the run left ...): left as it is"}]
services:
  description: What was done to services and init systems, in order (would be, in check mode).
  returned: always
  type: list
  elements: str
  sample: [reload_init systemd, restart docker]
errors:
  description: What failed (a file that could not be written, a service that did not come back); the task fails.
  returned: always
  type: list
  elements: str
  sample: []
msg:
  description: What was done, in words.
  returned: always
  type: str
  sample: "rolled back run ctl-20261205T170000Z-4242: 1 file(s) restored, 0 removed, 0 conflict(s); services: restart docker"
audit_error:
  description: Why the audit line of the rollback was not written (the rollback itself was done).
  returned: when the audit trail could not be written
  type: str
'''

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import module as concerns_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import audit
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import rollback
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init.service import Service


def services(module):
    """``service(name, init_system)`` for ``rollback.restore``: the host's init system and tools found once, when a
    service is first asked for."""
    run = concerns_module.runner(module)
    found = []

    def service(name, init_system=None):
        if not found:
            found.append(concerns_module.init_system(module, run))
        detected, tools, unused_detected = found[0]
        return Service(init_system or detected, name or 'init', run, tools)
    return service


def main():
    module = AnsibleModule(argument_spec=dict(
        run_id=dict(type='str'),
        store=dict(type='path', default=rollback.DEFAULT_STORE),
        audit_log=dict(type='path', default=audit.DEFAULT_PATH),
        audit_run_id=dict(type='str'),
    ), supports_check_mode=True)
    p = module.params
    if not p['run_id']:
        module.fail_json(msg='no run_id: give the run to put back (the module\'s action plugin gives this run\'s)')
    try:
        result = rollback.restore(p['run_id'], p['store'], services(module), module.check_mode,
                                  label=files.selinux_labeller(module))
    except GpufleetError as exc:
        module.fail_json(msg='%s: %s' % (os.uname()[1], exc), run_id=p['run_id'], store=p['store'])
    if result['changed'] and not module.check_mode and p['audit_log']:
        try:
            audit.append([rollback.audit_entry(result, p['audit_run_id'], by=os.environ.get('SUDO_USER'))],
                         p['audit_log'])
        except (GpufleetError, OSError) as exc:
            result['audit_error'] = str(exc)
            module.warn('the audit trail was not written: %s' % exc)
    if not module._diff:
        result.pop('diff')
    if result['errors']:
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
