#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: persistenced
short_description: Deploy the NVIDIA persistence daemon as a service on systemd, SysV and Upstart hosts
version_added: 1.0.0
description:
  - Detects the init system, creates the daemon's service user and group, installs a service definition written by
    this collection (systemd unit, LSB SysV script or Upstart job), enables it at boot the native way, and starts the
    daemon, all in one round trip.
  - The daemon is NVIDIA's C(nvidia-persistenced) from the driver, or the collection's bundled drop-in
    C(gpufleet-persistenced) when the driver's is absent (O(daemon=auto)) or asked for (O(daemon=bundled)).
  - The run directory C(/var/run/nvidia-persistenced) is made afresh, owned by the service user, by the service
    definition at every start (the systemd unit's C(ExecStartPre=), the SysV script's C(start), the Upstart job's
    C(pre-start)); the daemon starts as root and opens its pid file there, so nothing the service user left behind
    may survive into the next start. The unit's C(ExecStopPost=) and the SysV script's C(stop) remove it; the
    Upstart job has no C(post-stop) (see the notes), so there it stays until the next start or O(state=absent).
    The unit does not use systemd's C(RuntimeDirectory=). With no C(User=) in the unit (the daemon drops root
    itself) that directory would be root's, and NVIDIA's daemon does not hand over a directory it did not create.
  - The state file's directory is handed to the service user (so the bundled daemon can record per-GPU modes) only
    when it is dedicated and this collection created it; see O(state_file).
  - A running daemon is left alone unless its service definition, options or (bundled) program changed; then it is
    restarted once. NVIDIA's daemon resets every GPU to its global default when it starts, so the service runs
    C(gpufleet-persistenced --apply-saved-modes) right after it, which restores the per-GPU modes that
    M(gpufleet.nvidia.gpu_persistence) recorded.
  - An existing service definition not written by this collection is backed up before it is replaced.
    If the daemon does not come up after a change, the previous definition is put back and the module fails with
    the daemon's log lines.
author:
  - gpufleet.nvidia maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes
  - gpufleet.nvidia.role_vars
  - gpufleet.nvidia.audit
  - gpufleet.nvidia.disruption
  - gpufleet.nvidia.attributes.FULL
attributes:
  action:
    support: full
    description: An action plugin hands the bundled daemon's text from the collection to the module.
    details:
      - With O(role_vars), the action plugin also builds the module's options from the roles' variables.
options:
  state:
    description:
      - V(present) deploys and starts the daemon; V(absent) stops and disables it and removes the service definition
        and program this module installed (and the user with O(remove_user)). The state file is kept.
      - V(stopped) stops the daemon for maintenance (a driver upgrade, a GPU reset, a MIG change) and changes
        nothing else. The service stays defined and enabled at boot, the program and the state file stay, so a
        later V(present) starts the same daemon and every GPU comes back to the mode recorded for it (see
        RV(device_holders) for what else still holds the GPUs). A service that is not installed is an error, as
        with M(ansible.builtin.service). Only O(init_system), O(service_name) and O(start_timeout) matter then.
      - The daemon is not kept from starting at the next boot; a reboot during maintenance brings it back.
    type: str
    choices: [present, absent, stopped]
    default: present
  daemon:
    description:
      - V(driver) uses NVIDIA's daemon at O(driver_path) and fails if it is missing; V(bundled) uses the collection's
        drop-in; V(auto) uses NVIDIA's when present, else the bundled one.
      - The bundled program is installed at O(bundled_path) in every case, because the service for NVIDIA's daemon
        uses it to restore per-GPU modes after start.
    type: str
    choices: [auto, driver, bundled]
    default: auto
  driver_path:
    description: Where the driver installs NVIDIA's daemon.
    type: path
    default: /usr/bin/nvidia-persistenced
  bundled_path:
    description: Where to install the bundled daemon.
    type: path
    default: /usr/local/sbin/gpufleet-persistenced
  init_system:
    description: The host's init system; V(auto) detects it as M(gpufleet.nvidia.init_system_info) does.
    type: str
    choices: [auto, systemd, sysvinit, upstart]
    default: auto
  service_name:
    description: Name of the service (unit, init script, Upstart job).
    type: str
    default: nvidia-persistenced
  user:
    description:
      - Account the daemon runs as after start-up. Drivers 560 and newer no longer create it; this module does.
      - V(root) keeps the daemon as root, which coherent-NVLink systems (GH200) need for NUMA memory onlining.
      - An existing account is used as it is. One that other services share (V(nobody), V(daemon), V(www-data),
        uid 65534), that has a login shell, or whose uid is in the range of people's accounts (1000 to 59999) gets a
        warning, since whoever runs as it controls the daemon's run and state directories.
    type: str
    default: nvidia-persistenced
  group:
    description:
      - Group of the daemon. Unset, an existing O(user) keeps its own primary group (no group is created); a user
        this module creates gets a new group named like it (V(root) for root).
    type: str
  create_user:
    description: Create O(user) (a system account with no login shell and home C(/)) and O(group) when missing.
    type: bool
    default: true
  allow_other_primary_group:
    description:
      - An existing O(user) whose primary group is not O(group) is an error unless this is true; the daemon is then
        started with C(--group) O(group).
    type: bool
    default: false
  persistence_mode:
    description: Default persistence mode for GPUs without a saved per-GPU mode (C(--persistence-mode)).
    type: bool
    default: true
  uvm_persistence_mode:
    description:
      - Pass C(--uvm-persistence-mode) (true) or C(--no-uvm-persistence-mode) (false); unset passes neither.
      - NVIDIA's daemon has the option from its 550 series on (measured with Debian 13's 550.163.01); the 535 series
        answers "unrecognized option" and exits 0 without running. The bundled daemon accepts the option and
        does nothing with it (it has no UVM persistence, which matters only on confidential-computing hosts).
    type: bool
  verbose:
    description: Pass C(--verbose) (log every state change to syslog).
    type: bool
    default: false
  nvidia_cfg_path:
    description: Pass C(--nvidia-cfg-path) (directory of C(libnvidia-cfg.so.1)).
    type: path
  extra_args:
    description: More options for the daemon, one item each; letters, digits and C(_./=:,+@-) only.
    type: list
    elements: str
    default: []
  state_file:
    description:
      - Per-GPU modes kept across restarts (shared with M(gpufleet.nvidia.gpu_persistence)).
      - Its directory is handed to O(user), so it must be dedicated to the state file. It must be an absolute,
        normalised path (no V(..)); the directory may not be a system or home directory (V(/), V(/etc), V(/var),
        V(/var/lib), V(/usr/local), V(/run), V(/tmp), V(/home), V(/root), V(/srv), V(/opt), every passwd home and
        more), nor a symbolic link, nor owned by anyone but root and O(user), and every directory above it must be
        root's and writable only by root. Otherwise the module fails before changing anything.
      - A missing directory is created (mode 0755, with a root-owned C(.gpufleet-state-dir) marker) and handed to
        O(user). An existing directory is handed over only if this collection created it (the marker) or it is
        O(user)'s already; the owner of anything else is never changed.
    type: path
    default: /var/lib/gpufleet/persistence.json
  backup:
    description: Back up a service definition not written by this collection before replacing it.
    type: bool
    default: true
  start_timeout:
    description: Seconds to wait for the daemon to answer on its socket after a start.
    type: float
    default: 30
  remove_user:
    description:
      - With O(state=absent), also remove O(user) and O(group) (never C(root)).
      - The state directory, which that user owned, is first given back to root (with the files of that user in it,
        through descriptors), so it never belongs to a free uid; a later V(present) run hands it over again.
    type: bool
    default: false
  bundled_source:
    description:
      - Set by the module's action plugin, which reads the bundled daemon from the collection's C(files/) on the
        controller and sends it compressed, so the host receives it in the same round trip. Do not set it; the
        action plugin refuses it.
    type: str
notes:
  - Needs root (C(become=true)).
  - On a systemd host each change of the service definition runs C(systemctl daemon-reload), which cuts running
    GPU containers (systemd cgroup driver) off their devices unless C(/dev/char) links exist; run
    M(gpufleet.nvidia.device_links) first, as the C(gpu_node) role does.
  - The threat model, and what root does in the directories the service user owns, is in the collection's
    C(docs/security.md).
  - Local additions to the systemd unit belong in a drop-in (C(/etc/systemd/system/<service>.service.d/)), which this
    module never touches.
  - Upstart is supported through its job file and C(initctl), tested against real Upstart 1.13.2 (Ubuntu 14.04/16.04)
    and 0.6.5 (RHEL/CentOS 6) running as PID 1. The job has no C(post-stop) stanza, since Upstart 1.13 as PID 1 can
    abort when a respawning job's post-stop ends at the wrong moment; the C(pre-start) makes the run directory afresh,
    and O(state=absent) removes it. C(initctl) answers for a job already stopped or started count as success, and a
    stop waits until the job has settled in C(stop/waiting).
seealso:
  - module: gpufleet.nvidia.init_system_info
  - module: gpufleet.nvidia.gpu_persistence
'''

EXAMPLES = r'''
- name: Run NVIDIA's persistence daemon (or the bundled one) as a service
  gpufleet.nvidia.persistenced:
  become: true

- name: GH200 nodes need the daemon to stay root
  gpufleet.nvidia.persistenced:
    user: root
    uvm_persistence_mode: true
  become: true

- name: Leave new GPUs unpersisted by default, and log every change
  gpufleet.nvidia.persistenced:
    persistence_mode: false
    verbose: true
  become: true

- name: Release the GPUs for a driver upgrade (the service stays defined and enabled)
  gpufleet.nvidia.persistenced:
    state: stopped
  become: true
  register: released

- name: Say what else still holds the GPUs
  ansible.builtin.debug:
    var: released.device_holders

- name: Bring the daemon back afterwards; each GPU gets its recorded mode again
  gpufleet.nvidia.persistenced:
  become: true

- name: Remove the service and its user
  gpufleet.nvidia.persistenced:
    state: absent
    remove_user: true
  become: true
'''

RETURN = r'''
deferred:
  description: With O(disruption=defer) and GPU work on the host, what was left out (C(action)), the C(policy), the
    C(work) found (C(holders) and C(containers), with pids, names, container ids and devices, and C(slurm_jobs) on a
    Slurm node) and C(msg).
  returned: when the change was deferred
  type: dict
actions:
  description: What was done (or would be done in check mode), in order.
  returned: always
  type: list
  elements: str
  sample: [create_user, install_binary, write_unit, reload_init, enable, start]
init_system:
  description: The init system used.
  returned: always
  type: str
  sample: systemd
daemon:
  description: Which daemon runs, V(driver) (NVIDIA's) or V(bundled).
  returned: when state is present
  type: str
  sample: driver
daemon_path:
  description: Path of the daemon program.
  returned: when state is present
  type: str
  sample: /usr/bin/nvidia-persistenced
unit_path:
  description: The service definition file.
  returned: always
  type: str
  sample: /etc/systemd/system/nvidia-persistenced.service
user:
  description: Account the daemon runs as.
  returned: always
  type: str
  sample: nvidia-persistenced
group:
  description: Its group.
  returned: always
  type: str
  sample: nvidia-persistenced
pid:
  description:
    - Process id of the running daemon, null when it is not running.
    - With O(state=stopped) null, once no daemon is left (in check mode, the daemon that would be stopped).
  returned: when state is present or stopped
  type: int
  sample: 1234
device_holders:
  description:
    - With O(state=stopped), the processes that still hold an NVIDIA device file (C(/dev/nvidia*)) open once the
      daemon is gone, which keep the driver from being unloaded or a GPU from being reset; each also makes a warning.
    - Read from C(/proc/PID/fd) as root, each entry's link text only (nothing is opened); a process chooses its own
      name, so take it as a hint. In check mode, without the daemon that would be stopped.
  returned: when state is stopped
  type: list
  elements: dict
  contains:
    pid:
      description: Process id.
      type: int
    name:
      description: Its command name (C(/proc/PID/comm)), non-printable characters as C(?).
      type: str
    uid:
      description: Its real user id.
      type: int
    paths:
      description: The NVIDIA device files it holds.
      type: list
      elements: str
  sample: [{pid: 4321, name: dcgm-exporter, uid: 0, paths: [/dev/nvidia0, /dev/nvidiactl]}]
backup_file:
  description: Backup of a replaced service definition that this collection had not written.
  returned: when a backup was made
  type: str
  sample: /etc/init.d/nvidia-persistenced.12345.2026-11-30@10:00:00~
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.compile_once import compiled_once


def main():
    # This concern's code alone (module_utils/concerns/persistenced.py), and what it imports as it runs (its check,
    # what makes a change): each file compiled once, and kept compiled between root's runs
    # (module_utils/common/compile_once.py).
    with compiled_once():
        from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.persistenced import CONCERN
        module = AnsibleModule(**CONCERN.module_args())
        result = CONCERN.execute(module)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
