#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: crio_runtime
short_description: Register a container runtime (nvidia) with CRI-O, and let it read CDI specs, through a drop-in file
version_added: 1.0.0
description:
  - Writes one drop-in file that the collection owns, by default C(/etc/crio/crio.conf.d/99-nvidia.conf), with
    C([crio.runtime.runtimes.nvidia]), and C([crio.runtime] default_runtime = "nvidia") and C(cdi_spec_dirs) only
    on request. No other file is edited but by O(take_over=true) (a definition of the runtime in a drop-in read after
    this one, commented out); O(state=absent) removes exactly that file and puts back what O(take_over) commented
    out. The drop-in exists only while it has something to set.
  - B(What the runtime copies.) Like NVIDIA's C(nvidia-ctk runtime configure --runtime=crio), the default runtime's
    table whole, as CRI-O's merged configuration has it (C(privileged_without_host_devices), C(allowed_annotations),
    C(runtime_config_path), C(default_annotations), C(container_min_memory), C(no_sync_log), C(stream_websockets)
    and any other key it has), with C(runtime_path) set to O(runtime_path). The exceptions, each for a reason
    given in the collection's C(docs/crio.md), are C(runtime_type) (C(oci), or C(pod) for conmon-rs; a C(vm)
    default gives C(oci) and nothing else), the monitor (C(monitor_path), C(monitor_cgroup), C(monitor_env),
    written explicitly from what CRI-O runs), and C(runtime_root), C(platform_runtime_paths) (another binary per
    platform, which would run instead of the NVIDIA runtime) and C(inherit_default_runtime), not copied. When the
    default runtime's table changes, the next run copies it again, so the drop-in is rewritten and crio restarted
    once.
  - B(Tested on files only.) CRI-O is not installable on the collection's test hosts; the merge rules, the plan and
    the apply decision are tested on fixture files and against a fake service, and follow CRI-O's source (1.24 to
    1.36). See the collection's C(docs/crio.md).
  - B(How CRI-O reads its files.) The main file (O(config_path)), then every file under the drop-in directory
    (O(config_dir)), recursively, by name; a later file's key wins, and a runtime's table comes whole from the last
    file that has it. The module reads them all the same way, so the runtime follows the B(effective) default runtime
    (the deprecated C(conmon), C(conmon_cgroup) and C(conmon_env) win, as in CRI-O) and C(monitor_cgroup) is checked
    against C(cgroup_manager) (V(cgroupfs) takes C(pod) or empty, V(systemd) C(pod) or a C(.slice)).
  - B(A runtime of that name in another file.) With the same C(runtime_path) it is left as it is. With another one
    in a file CRI-O reads before the drop-in (C(crio.conf), or a drop-in whose name sorts first, for example an old
    toolkit path), the drop-in's table replaces it whole, as CRI-O's drop-ins are meant to (a warning names it), and
    O(state=absent) brings it back. In a drop-in CRI-O reads after this one (for example NVIDIA's
    C(99-nvidia.toml), which sorts after C(99-nvidia.conf)), its table would win, so it is refused unless
    O(take_over=true).
  - B(Refused, nothing changed.) Invalid TOML in any file (named); a C(cdi_spec_dirs) that is not a list of
    strings; O(cdi=true) when a file read later sets C(cdi_spec_dirs) and a directory is missing; a runtime of that
    name with another C(runtime_path) in a file CRI-O reads after the drop-in (it would win), unless O(take_over=true)
    and the file is a drop-in beside O(path) (another one, in a subdirectory, is refused naming it); a file at O(path) the
    module did not write; a O(path) outside O(config_dir), or a running crio started with another C(--config-dir);
    O(default_runtime=true) when a file read later sets C(default_runtime); the runtime made default while its
    binary is missing (CRI-O would not start).
  - B(CDI.) CRI-O 1.24 and later always inject CDI devices (the CRI C(CDIDevices) field, or C(cdi.k8s.io/*)
    annotations); there is no switch to turn CDI on. They read the specs from C([crio.runtime] cdi_spec_dirs),
    built-in C(["/etc/cdi", "/var/run/cdi"]), which covers the spec M(gpufleet.nvidia.cdi_spec) writes. A later
    file's list replaces an earlier one whole. With O(cdi=true) the drop-in sets C(cdi_spec_dirs) only when the list
    the other files make (or the built-in one) lacks a directory of O(cdi_spec_dirs), to that list plus the missing
    directories, the other files' entries first. C(/run/cdi) and C(/var/run/cdi) count as one directory. Refused when
    a file CRI-O reads after the drop-in sets C(cdi_spec_dirs) (it would win). RV(cdi) reports the directories
    CRI-O reads. C(crio --cdi-spec-dirs) (or C(CONTAINER_CDI_SPEC_DIRS)) overrides every file at start; the module
    warns when the running crio has that flag, and cannot change it. These facts were read in CRI-O's source
    (cri-o/cri-o v1.23.0 to v1.36.3, C(pkg/config/config.go), C(pkg/config/reload.go)); see C(docs/crio.md).
  - B(Apply.) crio.conf(5) documents the runtimes table and C(default_runtime) as reloaded on SIGHUP from CRI-O 1.26,
    but the reload updates only the server's copy of the configuration, not the one that creates pods
    (cri-o/cri-o#10202, open), so O(apply=auto) restarts crio, only when this run changed the drop-in or the drop-in
    changed after crio started (C(cdi_spec_dirs) too; CRI-O re-reads it on SIGHUP since 1.24, but the module makes
    no difference between the keys of its drop-in). If crio does not come back (or logs a failed reload), the
    previous file is restored, crio restarted (or reloaded) with it, and the module fails with crio's own words.
  - The same root-only file rules as M(gpufleet.nvidia.docker_runtime) apply to the files and their directories.
author:
  - gpufleet.nvidia maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes
  - gpufleet.nvidia.role_vars
  - gpufleet.nvidia.audit
  - gpufleet.nvidia.disruption
attributes:
  check_mode:
    support: full
    details:
      - Predicts the file change and the apply action (RV(action)) without writing or signalling.
  diff_mode:
    support: full
    details:
      - Shows the drop-in before and after, with its path as header, and each file O(take_over) changes.
  idempotent:
    support: full
options:
  path:
    description:
      - The drop-in file the module owns. It must be under O(config_dir), and it is best named to sort last there.
    type: path
    default: /etc/crio/crio.conf.d/99-nvidia.conf
  config_path:
    description:
      - CRI-O's main configuration file (C(crio --config)), read only.
    type: path
    default: /etc/crio/crio.conf
  config_dir:
    description:
      - CRI-O's drop-in directory (C(crio --config-dir)), read only except for O(path).
    type: path
    default: /etc/crio/crio.conf.d
  name:
    description:
      - The runtime name (the Kubernetes RuntimeClass handler).
    type: str
    default: nvidia
  runtime_path:
    description:
      - The runtime executable, written as C(runtime_path).
      - There is no C(runtime_args); CRI-O has no such setting for a runtime handler.
    type: str
    default: /usr/bin/nvidia-container-runtime
  default_runtime:
    description:
      - Whether the runtime is CRI-O's C(default_runtime), set in the drop-in.
      - V(true) sets it; V(false) leaves it out of the drop-in; omitted keeps what the drop-in says now.
    type: bool
  cdi:
    description:
      - Whether the drop-in makes CRI-O read CDI specs from every directory of O(cdi_spec_dirs).
      - V(true) sets C([crio.runtime] cdi_spec_dirs) in the drop-in when, and only when, the list the other files make
        (or CRI-O's built-in C(["/etc/cdi", "/var/run/cdi"]) when none sets it) lacks one of those directories, to
        that list followed by the missing ones. When nothing is missing the drop-in does not set it.
      - V(false) leaves C(cdi_spec_dirs) out of the drop-in; omitted keeps what the drop-in says now.
      - CRI-O before 1.24 has no CDI (a warning).
    type: bool
  cdi_spec_dirs:
    description:
      - The directories CRI-O must read CDI specs from, absolute paths. Used only with O(cdi=true) (a warning
        otherwise when changed from the default).
    type: list
    elements: str
    default: [/etc/cdi, /var/run/cdi]
  take_over:
    description:
      - What to do when a drop-in CRI-O reads after O(path) already defines the runtime O(name) with another
        C(runtime_path) (for example an older toolkit's binary path, or another tool's registration), which CRI-O
        would use instead of this module's.
      - V(false) refuses, with every file untouched.
      - V(true) comments every line of that definition out (the C([crio.runtime.runtimes.NAME]) table, its
        sub-tables and dotted keys into it), in each drop-in read after O(path), behind a marker comment that
        starts with C(gpufleet.nvidia crio_runtime took over) and stays in the file, and writes the drop-in;
        O(state=absent) removes the drop-in and uncomments those lines, which gives back each file byte for byte.
        Only drop-ins beside O(path) (in its directory) are edited; a definition in any other file CRI-O reads after
        it (a subdirectory's drop-in) is refused, naming that file.
      - A definition in a file CRI-O reads before O(path) (C(crio.conf), a drop-in whose name sorts first) needs
        no take-over; the drop-in replaces it.
    type: bool
    default: false
  state:
    description:
      - V(present) writes the drop-in; V(absent) removes it (and nothing else), with any C(cdi_spec_dirs) it set, and
        puts back a definition O(take_over) commented out.
    type: str
    choices: [present, absent]
    default: present
  backup:
    description:
      - Keep a copy of the drop-in (and of each file O(take_over) changes) before changing it. The copy is made in the
        directory above O(config_dir)
        (C(/etc/crio)), never in O(config_dir), because CRI-O reads every file there. The temp file of each write
        is made outside it too, in a root-only (0700) sibling C(.crio.conf.d.gpufleet) on the same file system.
    type: bool
    default: false
  apply:
    description:
      - V(auto) and V(restart) restart crio when the drop-in changed or changed after crio started.
      - V(reload) sends SIGHUP instead, on CRI-O 1.26 and later (RV(action=deferred) on older ones); choose it only
        for a CRI-O that applies reloaded runtimes to new pods (see cri-o/cri-o#10202).
      - V(none) only writes the file; RV(action=deferred) when crio runs something else.
    type: str
    choices: [auto, reload, restart, none]
    default: auto
  service_name:
    description:
      - The init system's name for CRI-O's service.
    type: str
    default: crio
  apply_timeout:
    description:
      - Seconds to wait for crio to come back after a restart (and again after a rollback).
    type: int
    default: 60
notes:
  - B(The service's process) is the one the init system names (systemd's C(MainPID), Upstart's C(initctl status),
    else a root-owned pid file, the SysV script's C(PIDFILE) or C(/run/crio.pid)), and only when it is a root
    process of the host's PID namespace running the installed C(crio), a file only root can change; only when the
    init system has no record of the service at all, a root process running that file. Never a process by its name
    or arguments (any user can start a program called C(crio)); RV(crio_found_by) says which evidence was used.
  - Concurrent runs on one host are serialised by a lock only root can open (a file in C(/run/gpufleet-locks), mode
    0700), never by a lock on the configuration directory, which any user could hold.
  - A key of CRI-O's own written in another case than its documented one (C([CRIO.runtime]), C(Runtime_Path)) is
    refused, naming the file and the line, as CRI-O's TOML decoder matches keys in any case, so the module would
    otherwise read the file differently from CRI-O. Runtime and workload names keep their case.
  - Requires root on the managed host and the C(crio) binary (for its version).
seealso:
  - module: gpufleet.nvidia.containerd_runtime
    description: The same for containerd.
  - module: gpufleet.nvidia.docker_runtime
    description: The same for dockerd.
'''

EXAMPLES = r'''
- name: Register the nvidia runtime with CRI-O (a RuntimeClass with handler "nvidia" selects it)
  gpufleet.nvidia.crio_runtime:
    state: present

- name: Make nvidia CRI-O's default runtime
  gpufleet.nvidia.crio_runtime:
    default_runtime: true

- name: Register the runtime and make sure CRI-O reads the CDI spec directories
  gpufleet.nvidia.crio_runtime:
    cdi: true

- name: Also read CDI specs from a site directory
  gpufleet.nvidia.crio_runtime:
    cdi: true
    cdi_spec_dirs: [/etc/cdi, /var/run/cdi, /opt/site/cdi]

- name: Update an nvidia runtime another drop-in read later defines (kept, commented out, for state=absent)
  gpufleet.nvidia.crio_runtime:
    take_over: true

- name: Write the drop-in only; restart crio later in a window
  gpufleet.nvidia.crio_runtime:
    apply: none

- name: Remove the drop-in
  gpufleet.nvidia.crio_runtime:
    state: absent
'''

RETURN = r'''
deferred:
  description: With O(disruption=defer) and GPU work on the host, what was left out (C(action)), the C(policy), the
    C(work) found (C(holders) and C(containers), with pids, names, container ids and devices, and C(slurm_jobs) on a
    Slurm node) and C(msg).
  returned: when the change was deferred
  type: dict
path:
  description: The drop-in file, as given.
  returned: always
  type: str
  sample: /etc/crio/crio.conf.d/99-nvidia.conf
backup_file:
  description: The backup made before the change, when O(backup=true) and the file changed.
  returned: always
  type: str
  sample: /etc/crio/99-nvidia.conf.12345.2026-12-01@05:30:00~
backup_files:
  description: Every backup this run made, when O(backup=true) - RV(backup_file) first, then those of the files
    O(take_over) changed or O(state=absent) put back.
  returned: always
  type: list
  elements: str
  sample: [/etc/crio/99-zz-site.conf.12345.2026-12-01@05:30:00~]
action:
  description:
    - What was (in check mode, would be) done to the running crio.
    - V(none) nothing needed; V(reload) SIGHUP; V(restart) restart through the init system; V(deferred) the file
      was written but crio is not running, O(apply=none), or O(apply=reload) on a CRI-O older than 1.26.
  returned: always
  type: str
  choices: [none, reload, restart, deferred]
  sample: restart
file_changed:
  description: Whether the drop-in changed, was created or removed, or a file O(take_over) edits changed (would be,
    in check mode).
  returned: always
  type: bool
  sample: true
changes:
  description: What changed, in words.
  returned: always
  type: list
  elements: str
  sample:
    - drop-in /etc/crio/crio.conf.d/99-nvidia.conf created
    - 'the definition of runtime "nvidia" in /etc/crio/crio.conf.d/99-nvidia.toml at lines 1, 2, 3 commented out
      (state=absent puts it back)'
crio_version:
  description: The installed CRI-O's version (C(crio --version)).
  returned: always
  type: str
  sample: 1.29.1
runtimes:
  description: The runtimes of CRI-O's effective configuration after the run (in check mode, the planned one), CRI-O's
    own default runtime included.
  returned: always
  type: list
  elements: str
  sample: [crun, nvidia]
default_runtime:
  description: CRI-O's default runtime in that configuration.
  returned: always
  type: str
  sample: crun
cdi:
  description: Where CRI-O reads CDI specs from in the effective configuration after the run (in check mode, the
    planned one).
  returned: always
  type: dict
  contains:
    spec_dirs:
      description: The directories, in CRI-O's order (a later one wins for a device named twice).
      type: list
      elements: str
      sample: [/etc/cdi, /var/run/cdi]
    set_in:
      description: The file whose C(cdi_spec_dirs) CRI-O uses; null when no file sets it (CRI-O's built-in list).
      type: str
      sample: /etc/crio/crio.conf.d/99-nvidia.conf
  sample: {"spec_dirs": ["/etc/cdi", "/var/run/cdi"], "set_in": null}
crio_pid_before:
  description: PID of crio before the run; null when it was not running.
  returned: always
  type: int
  sample: 1234
crio_pid_after:
  description: PID of crio after the run.
  returned: always
  type: int
  sample: 1240
crio_found_by:
  description: How the process in RV(crio_pid_before) was identified, in words - systemd's MainPID, Upstart's
    C(initctl status), a root-owned pid file (named), or, only when the init system has no record of the service, a
    root process running the installed C(crio); null when none was found.
  returned: always
  type: str
  sample: systemd (MainPID of crio)
msg:
  description: What was found and done, in one line.
  returned: always
  type: str
  sample: "/etc/crio/crio.conf.d/99-nvidia.conf changed; crio was restarted (the file changed)"
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.compile_once import compiled_once


def main():
    # This concern's code alone (module_utils/concerns/crio.py), and what it imports as it runs (its check, what makes
    # a change): each file compiled once, and kept compiled between root's runs (module_utils/common/compile_once.py).
    with compiled_once():
        from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.crio import CONCERN
        module = AnsibleModule(**CONCERN.module_args())
        result = CONCERN.execute(module)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
