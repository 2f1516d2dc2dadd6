#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: containerd_runtime
short_description: Register a container runtime (nvidia) in containerd's config.toml and apply it
version_added: 1.0.0
description:
  - Adds the runtime's tables to the CRI plugin of containerd's C(config.toml)
    (C([plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]) with C(runtime_type = "io.containerd.runc.v2")
    and C(options.BinaryName)), optionally makes it C(default_runtime_name), then makes the running containerd use it.
  - B(Insert, never rewrite.) The tables are appended to the file as one block between two marker comments; no existing
    line changes (comments, key order, quoting, indentation, CRLF all stay). O(default_runtime=true) changes the value
    of an existing C(default_runtime_name) in place and keeps its previous value in a marker comment above it.
  - B(Why not a drop-in.) containerd 1.x takes an imported file's CRI plugin table whole, replacing the main file's
    (sandbox image, registry, the runc runtime's C(SystemdCgroup)); a drop-in that adds only the runtime would silently
    reset them. containerd 2.x merges imports key by key; the module keeps the same block there (it survives an upgrade
    from 1.x without a write), and a runtime an imported file (NVIDIA's C(/etc/containerd/conf.d/99-nvidia.toml))
    already defines as this module would is left alone with a warning; defined otherwise, it is refused, naming the
    file. See the collection's C(docs/containerd.md) for the measurements (1.6.20, 1.7.24, 2.1.9).
  - The schema follows the installed containerd and the file. containerd 1.x; version 1 files get
    C(plugins.cri) tables, version 2 files C(plugins."io.containerd.grpc.v1.cri"); a C(version = 3) file is refused on
    containerd 1.x, which ignores its tables without a word. containerd 2.x; version 2 or 3 (C(io.containerd.cri.v1.runtime));
    a file without a C(version) line (an empty one included) or with C(version = 1) is refused there, because 2.x drops
    such a file's CRI runtimes when it migrates it (measured on 2.1.9); write it as version 2 or 3.
  - The runtime copies a template runtime whole, as NVIDIA's C(nvidia-ctk runtime configure) does (C(SystemdCgroup),
    which must match the kubelet's cgroup driver, C(privileged_without_host_devices), C(NoPivotRoot), C(Root),
    C(sandboxer) and every other setting), with its own C(BinaryName). C(sandboxer = "podsandbox"), which containerd
    2.x's dump shows for runc and its CRI plugin implies for a runtime without it, is not copied. The template is the default runtime the CRI
    plugin really uses (containerd 1.x's deprecated C(default_runtime) table when it has a C(runtime_type); the
    default before this module made its own the default), else C(runc), else C(crun); never an C(nvidia*) runtime,
    and only a runc v2 runtime (C(BinaryName) is an option of the runc v2 shim). Settings come from the effective
    configuration (C(config dump)), imported files included. When the file
    defines no runtime at all, the block also carries containerd's default runtimes (C(runc)) as containerd reports
    them; defining one runtime replaces containerd's defaults, and the CRI plugin fails when its default runtime is gone.
  - B(Checked with containerd itself before writing.) The planned text is given to C(containerd --config /dev/stdin
    config dump) on its standard input (no file is written for it, in check mode or not; relative file imports are
    made absolute for it, as containerd resolves them against the file's directory), and it must show the same
    effective configuration as before except the runtime (and C(default_runtime_name) and the CDI keys when asked,
    which must show CDI on and every O(cdi_spec_dirs) read); otherwise nothing
    is written. Invalid TOML, a runtime of that name already
    defined differently (unless O(take_over)), O(default_runtime=true) while containerd 1.x's deprecated
    C(default_runtime) table is in effect, a C(runtimes) table written inline, or (containerd 1.x) an imported file that carries the CRI
    table make the module fail with the file untouched.
  - B(Apply.) containerd has no reload; it is restarted through the init system, only when the effective configuration
    differs from what the running containerd started with, that is when this run changed the file, or when a file it
    loads (the main file and its imports; on 2.x, whose dump lists the C(imports) patterns, the files they match)
    changed after the containerd process started. Running containers keep running
    (their shims are separate processes). containerd must come back, answer on its socket and load the CRI plugin if
    it had it before; otherwise the previous file is restored, containerd restarted with it, and the module fails with
    containerd's own error (for example the CRI plugin's "invalid plugin config").
  - The same root-only file rules as M(gpufleet.nvidia.docker_runtime) apply to the file and its directories, and to
    every file containerd imports and every directory an C(imports) pattern can match, whether or not it matches a
    file yet (a stranger's or world-writable directory there is refused, as containerd would load what they add). An
    C(imports) glob that matches the temp file or backups made beside the file (for example C(*) in its own
    directory) is refused too.
  - Nesting deeper than 64 levels and files over 1 MiB are refused, naming the file.
  - A key of containerd's own written in another case than its documented one (C(IMPORTS), C(Default_Runtime_Name))
    is refused, naming the file and the line, as containerd 1.6 and 1.7 also read a key in upper case and 2.x in any
    case, so the module would otherwise read the file differently from containerd. Plugin ids and runtime names keep
    their case.
author:
  - gpufleet.nvidia maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes
  - gpufleet.nvidia.role_vars
  - gpufleet.nvidia.audit
  - gpufleet.nvidia.disruption
  - gpufleet.nvidia.verify
attributes:
  check_mode:
    support: full
    details:
      - Predicts the file change and the restart (RV(action)) without writing or restarting.
  diff_mode:
    support: full
    details:
      - Shows the file before and after, with the file path as header.
  idempotent:
    support: full
options:
  path:
    description:
      - containerd's configuration file (the one containerd is started with, C(--config)).
      - When it does not exist, the smallest file that keeps containerd's defaults is created (its C(version) line and
        the block).
    type: path
    default: /etc/containerd/config.toml
  name:
    description:
      - The runtime name (the Kubernetes RuntimeClass handler).
    type: str
    default: nvidia
  runtime_path:
    description:
      - The runtime executable, written as C(options.BinaryName).
      - There is no C(runtime_args); containerd's runc shim passes no arguments to the runtime binary.
    type: str
    default: /usr/bin/nvidia-container-runtime
  default_runtime:
    description:
      - Whether the runtime is the CRI plugin's C(default_runtime_name).
      - V(true) sets it (the previous value is kept in a marker comment); V(false) puts back what this module changed;
        omitted leaves it as it is.
    type: bool
  cdi:
    description:
      - Whether the CRI plugin has the Container Device Interface on (C(enable_cdi)) and reads every directory of
        O(cdi_spec_dirs) (where M(gpufleet.nvidia.cdi_spec) writes NVIDIA's spec).
      - V(true) changes only what the effective configuration lacks. A value the file sets (C(containerd config
        default) writes C(enable_cdi = false) on 1.7) is changed in place, its previous value kept in a marker comment
        above it; a key the file's CRI table lacks is added to that table behind a marker; a file without a CRI table
        gets it in the module's block. Nothing is written when containerd already has CDI on and reads the
        directories (containerd 2.x by default). containerd 1.6 has no CDI; V(true) fails there, the file untouched.
        A key that must change but is set in a file containerd imports is refused, naming that file (imported files
        are not edited).
      - V(false) puts back what this module changed for CDI (the values in its markers); a value it did not set is
        left as it is, with a warning when CDI is on. Omitted leaves CDI as it is. O(state=absent) puts CDI back too,
        with the last runtime of the block.
      - containerd reads these settings only at start; a change restarts it (O(apply)).
    type: bool
  cdi_spec_dirs:
    description:
      - With O(cdi=true), the directories the CRI plugin must read CDI specs from. A C(cdi_spec_dirs) that already
        lists each of them (containerd's default does) is left alone; otherwise the missing ones are appended to the
        list in effect. C(/run/cdi) and C(/var/run/cdi) count as one directory.
    type: list
    elements: str
    default: [/etc/cdi, /var/run/cdi]
  take_over:
    description:
      - What to do when the runtime O(name) is already defined in the file, outside this module's block, differently
        (for example by an older toolkit installer, with another C(BinaryName)).
      - V(false) refuses, with the file untouched.
      - V(true) comments every line of that definition out, behind a marker comment (kept in the file), and writes
        the runtime in the block; O(state=absent) removes the block and uncomments those lines, which gives back the
        old definition byte for byte.
    type: bool
    default: false
  state:
    description:
      - V(present) registers the runtime; V(absent) removes exactly what this module added (the block, and its
        C(default_runtime_name) and CDI changes) and puts back a definition O(take_over) commented out.
    type: str
    choices: [present, absent]
    default: present
  backup:
    description:
      - Create a backup file with a timestamp before changing the file.
    type: bool
    default: false
  apply:
    description:
      - V(auto) and V(restart) restart containerd when its running configuration differs from the files (containerd
        has no reload, so both mean the same).
      - V(none) only writes the file; RV(action=deferred) when containerd runs something else.
    type: str
    choices: [auto, restart, none]
    default: auto
  service_name:
    description:
      - The init system's name for containerd's service.
    type: str
    default: containerd
  apply_timeout:
    description:
      - Seconds to wait for containerd to answer after a restart (and again after a rollback).
    type: int
    default: 60
notes:
  - "B(Verification through ctr, not CRI.) O(verify) runs C(ctr run) in containerd's own C(gpufleet) namespace (load
    the image there with C(ctr -n gpufleet images import FILE.tar); images of another namespace, a kubelet's
    C(k8s.io), and dockerd 20.10's own image store are not seen), through the runtime binary O(runtime_path)
    (C(--runc-binary)) under containerd's runc shim. A pod through the CRI plugin's runtime table, the path a
    kubelet takes with a RuntimeClass, needs a kubelet, which this module does not run."
  - B(The service's process) is the one the init system names (systemd's C(MainPID), Upstart's C(initctl status),
    else a root-owned pid file, the SysV script's C(PIDFILE) or C(/run/containerd.pid)), and only when it is a root
    process of the host's PID namespace running the installed C(containerd), a file only root can change; only when the
    init system has no record of the service at all, a root process running that file. Never a process by its name
    or arguments (any user can start a program called C(containerd)); RV(containerd_found_by) says which evidence was used.
  - Concurrent runs on one host are serialised by a lock only root can open (a file in C(/run/gpufleet-locks), mode
    0700), never by a lock on the configuration directory, which any user could hold.
  - Requires root on the managed host, and C(containerd) and C(ctr) (both in the containerd package).
seealso:
  - module: gpufleet.nvidia.docker_runtime
    description: The same for dockerd.
'''

EXAMPLES = r'''
- name: Register the nvidia runtime with containerd (containers keep running)
  gpufleet.nvidia.containerd_runtime:
    state: present

- name: Make nvidia the default runtime, keeping a backup
  gpufleet.nvidia.containerd_runtime:
    default_runtime: true
    backup: true

- name: Write the file only; restart containerd later in a window
  gpufleet.nvidia.containerd_runtime:
    apply: none

- name: Update an nvidia entry an older toolkit installer wrote (kept, commented out, for state=absent)
  gpufleet.nvidia.containerd_runtime:
    take_over: true

- name: Register the runtime and have the CRI plugin read NVIDIA's CDI spec (/var/run/cdi/nvidia.yaml)
  gpufleet.nvidia.containerd_runtime:
    cdi: true

- name: Remove exactly what was added
  gpufleet.nvidia.containerd_runtime:
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
  description: The configuration file, as given.
  returned: always
  type: str
  sample: /etc/containerd/config.toml
backup_file:
  description: The backup made before the change, when O(backup=true) and the file changed.
  returned: always
  type: str
  sample: /etc/containerd/config.toml.12345.2026-12-01@05:30:00~
action:
  description:
    - What was (in check mode, would be) done to the running containerd.
    - V(none) nothing needed; V(restart) restart through the init system; V(deferred) the file was written but
      containerd is not running or O(apply=none).
  returned: always
  type: str
  choices: [none, restart, deferred]
  sample: restart
file_changed:
  description: Whether the file content changed (would change in check mode).
  returned: always
  type: bool
  sample: true
changes:
  description: What changed in the file, in words.
  returned: always
  type: list
  elements: str
  sample: ['runtime "nvidia" added (plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia)']
schema:
  description: The config version the tables were written for (1, 2 or 3).
  returned: always
  type: int
  sample: 2
containerd_version:
  description: The installed containerd's version.
  returned: always
  type: str
  sample: 1.6.20
runtimes:
  description:
    - The CRI plugin's runtimes in containerd's effective configuration after the run (in check mode, the planned one),
      per C(containerd config dump).
  returned: always
  type: list
  elements: str
  sample: [nvidia, runc]
default_runtime:
  description: The CRI plugin's C(default_runtime_name) in that effective configuration.
  returned: always
  type: str
  sample: runc
cdi:
  description:
    - The CRI plugin's CDI settings in that effective configuration (C(enable_cdi), C(cdi_spec_dirs)); null when the
      installed containerd has no CDI (1.6).
  returned: always
  type: dict
  contains:
    enabled:
      description: C(enable_cdi).
      type: bool
      sample: true
    spec_dirs:
      description: C(cdi_spec_dirs).
      type: list
      elements: str
      sample: [/etc/cdi, /var/run/cdi]
  sample: {enabled: true, spec_dirs: [/etc/cdi, /var/run/cdi]}
containerd_pid_before:
  description: PID of the containerd that reads O(path) before the run; null when none was running.
  returned: always
  type: int
  sample: 1234
containerd_pid_after:
  description: PID of that containerd after the run.
  returned: always
  type: int
  sample: 1240
containerd_found_by:
  description: How the process in RV(containerd_pid_before) was identified, in words - systemd's MainPID, Upstart's
    C(initctl status), a root-owned pid file (named), or, only when the init system has no record of the service, a
    root process running the installed C(containerd); null when none was found.
  returned: always
  type: str
  sample: systemd (MainPID of containerd)
msg:
  description: What was found and done, in one line.
  returned: always
  type: str
  sample: "/etc/containerd/config.toml changed; containerd was restarted (the file changed; running containers keep running)"
verification:
  description:
    - The verification of the registered runtime (O(verify)); nothing in it is a change.
  returned: always
  type: dict
  contains:
    status:
      description:
        - V(off) O(verify) is false; V(check_mode); V(absent) the runtime was removed; V(not_loaded) the running
          containerd does not run the runtime (not running, or the change is deferred); V(no_client) the ctr
          program is missing; V(no_image) no local image to run (never pulled); V(failed) a container did not run;
          V(no_gpu) every container ran, but one that asked for GPUs saw no C(/dev/nvidiaN) node; V(ok) every
          container ran and each that asked for GPUs saw at least one. Only V(no_client), V(no_image),
          V(failed), V(no_gpu) and V(ok) ran anything.
      type: str
      choices: ['off', check_mode, absent, not_loaded, no_client, no_image, failed, no_gpu, ok]
      sample: ok
    verified:
      description: True for V(ok), false for V(failed) and V(no_gpu), null when none was run.
      type: bool
      sample: true
    image:
      description: The image the containers ran; null when none was run.
      type: str
      sample: docker.io/gpufleet/busybox:1
    runs:
      description:
        - One entry per container run, in order - C(visible_devices) (the C(NVIDIA_VISIBLE_DEVICES) value),
          C(command) (as a shell would read it), C(devices) (the C(/dev/nvidia*) nodes the container saw, sorted),
          C(rc) (the command's exit status).
        - C(ctr) runs them in containerd's C(gpufleet) namespace through the runtime binary O(runtime_path)
          (C(--runc-binary)), each named C(gpufleet-verify-PID-N).
      type: list
      elements: dict
      sample:
        - visible_devices: "1"
          command: >-
            ctr --address /run/containerd/containerd.sock --namespace gpufleet run --rm
            --runc-binary /usr/bin/nvidia-container-runtime --env NVIDIA_VISIBLE_DEVICES=1 docker.io/gpufleet/busybox:1 gpufleet-verify-812-0 sh -c '...'
          devices: [/dev/nvidia-uvm, /dev/nvidia-uvm-tools, /dev/nvidia1, /dev/nvidiactl]
          rc: 0
    msg:
      description: What was run and seen, or why nothing was, in one line.
      type: str
      sample: >-
        ran 1 container: containerd runs containers through the "nvidia" runtime
        (NVIDIA_VISIBLE_DEVICES=1 saw /dev/nvidia-uvm, /dev/nvidia-uvm-tools, /dev/nvidia1, /dev/nvidiactl)
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.compile_once import compiled_once


def main():
    # This concern's code alone (module_utils/concerns/containerd.py), and what it imports as it runs (its check, what
    # makes a change): each file compiled once, and kept compiled between root's runs
    # (module_utils/common/compile_once.py).
    with compiled_once():
        from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.containerd import CONCERN
        module = AnsibleModule(**CONCERN.module_args())
        result = CONCERN.execute(module)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
