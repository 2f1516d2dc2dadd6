#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: docker_runtime
short_description: Register a container runtime (nvidia) in dockerd's daemon.json and apply it
version_added: 1.0.0
description:
  - Merges a runtime entry into dockerd's C(daemon.json) (C(runtimes.<name>.path) and C(runtimeArgs)),
    optionally makes it the C(default-runtime) and sets C(features.cdi), then makes the running dockerd use it.
  - B(Merge, never overwrite.) Every other key and value keeps its exact text (numbers such as C(1.0) or C(1e3),
    escapes, key order), and the file keeps its indentation (2 or 4 spaces, tabs, one-line), line endings and
    trailing newline. Only the members this module sets are written, formatted like their neighbours.
    A file whose content does not change is not rewritten.
  - A missing or empty file counts as C({}); the directory is created with mode C(0755) and the file with C(0644).
    Invalid JSON, duplicate keys, a top level that is not an object, or a C(runtimes) that is not an object make
    the module fail, naming the file and the problem, and leave the file untouched. So does a file larger than
    1 MiB or nested deeper than 64 levels.
  - B(Nobody but root may be able to change the file or its directories.) dockerd runs as root and obeys this file,
    and the module writes it, a temporary file and backups as root. The module refuses (fails, naming the path and
    what to fix, changing nothing) when the file, its directory or any directory above it is owned by a user other
    than root (or the user running the module) or writable by group or others (a directory above may be sticky,
    like C(/tmp)), and when a symbolic link on the way is owned by another user.
  - When O(path) is a symbolic link (owned by root, in such a directory), its target is written and the link is kept;
    a dangling link is refused. Writes are atomic (a new temporary file in the same directory, created exclusively,
    never through a link; fsync; rename) and keep owner, mode (set on the open file, never by path) and SELinux
    context. Any write failure (read-only or full file system, permission, immutable file) fails naming the file,
    with the file as it was and no temporary file left.
    Concurrent runs on one host are serialised by a lock only root can open (a file in C(/run/gpufleet-locks),
    mode 0700), never by a lock on the file's directory, which any user could hold.
  - With O(apply=auto) the module asks the running dockerd (C(GET /info) on its API socket) whether it already runs
    what the file says. If it does, nothing is signalled, even when the file was changed by an earlier run that never
    applied it. Additions and changes are applied by a reload (SIGHUP), so running containers keep running; a removal
    (of the runtime, or of C(default-runtime)) needs a restart, because dockerd keeps removed settings on reload
    (and dockerd 20.10 crashes when the running default runtime disappears on reload). The result is verified through
    the API; if a reload did not take, dockerd is restarted.
  - Reload and restart go through the host's init system (C(systemctl reload|restart docker), Upstart
    C(initctl reload|restart docker), SysV C(service docker restart)); SysV scripts have no reload, so SIGHUP
    goes to dockerd's PID.
  - B(dockerd is never left down.) Before writing, the module refuses a configuration dockerd would reject when it can
    tell (a key it sets is also given as a dockerd flag in the unit, the running command line or C(DOCKER_OPTS);
    C(dockerd --validate) when the installed dockerd has it, 23.0 and later; on older dockerd, keys that are not
    dockerd options per its C(--help), which would make it refuse to start). If dockerd does not come back or
    verification fails, the previous file is restored, dockerd restarted with it, and the module fails with
    dockerd's own error.
  - When dockerd is not running (or not installed) the file is still written and RV(action=deferred) says it will be
    applied when dockerd next starts; this is not a failure. The module never starts a stopped dockerd.
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
      - Predicts the file change and the apply action (RV(action)) without writing or signalling.
  diff_mode:
    support: full
    details:
      - Shows the file before and after, with the file path as header.
  idempotent:
    support: full
options:
  path:
    description:
      - The dockerd configuration file. Use the file dockerd is started with (C(--config-file)).
    type: path
    default: /etc/docker/daemon.json
  name:
    description:
      - The runtime name, as given to C(docker run --runtime=<name>).
      - C(runc), C(io.containerd.runc.v2) and C(io.containerd.runtime.v1.linux) are reserved by dockerd.
    type: str
    default: nvidia
  runtime_path:
    description:
      - The runtime executable, an absolute path or a name dockerd finds in its C(PATH).
      - A warning (not a failure) is given when it is not found on the host; it comes with the
        C(nvidia-container-toolkit) package.
    type: str
    default: nvidia-container-runtime
  runtime_args:
    description:
      - Arguments for the runtime, written as dockerd's C(runtimeArgs) (not C(args), which C(nvidia-ctk) writes and
        dockerd ignores; an existing C(args) key is left alone with a warning).
      - When omitted, an existing entry's C(runtimeArgs) are left as they are and a new entry gets C([]).
        A missing C(runtimeArgs) equals C([]).
    type: list
    elements: str
  default_runtime:
    description:
      - Whether the runtime is dockerd's C(default-runtime).
      - V(true) sets it. V(false) removes C(default-runtime) only when it names this runtime; another default is
        left alone.
      - V(true) replaces a C(default-runtime) the file already had, and the replaced value is not remembered (the
        module keeps no state outside the file). Removing the runtime (V(false), or O(state=absent)) removes a
        C(default-runtime) that names it, so dockerd falls back to its own default (C(runc)), not to the earlier
        value. To return to that value, set C(default-runtime) again yourself.
      - When omitted, C(default-runtime) is left exactly as it is (a C(default-runtime) of this runtime that the user
        set stays).
    type: bool
  cdi:
    description:
      - Sets C(features.cdi) (Container Device Interface support, dockerd 25 and later).
      - When omitted, C(features.cdi) is left as it is. A missing C(features.cdi) means CDI is off on dockerd 25 to
        27 and on from dockerd 28, where CDI is on by default.
      - dockerd sets CDI up only when it starts (measured on 26.1 and 28.5; a SIGHUP leaves it as it was), so
        switching it on or off restarts a dockerd that reports CDI. Setting V(true) on dockerd 28 with CDI already
        on only writes the file.
    type: bool
  state:
    description:
      - V(present) registers the runtime; V(absent) removes the runtime entry, and C(default-runtime) if it names
        the runtime, and nothing else; with O(cdi=true) also C(features.cdi) when it is V(true) (and a C(features)
        object that this leaves empty), which is what V(present) with the same options added. So a play that switched CDI on
        switches it off again with only O(state) changed. O(cdi) V(false) or omitted leaves C(features) alone.
      - A C(runtimes) object that the removal leaves empty is removed too, with its separator. So a file that had no
        C(runtimes) before V(present) added one comes back byte for byte (indentation, line endings, commas).
        A C(runtimes) object without this runtime, empty or not, is left exactly as it is.
      - "An empty C(runtimes) object the user wrote (C(\"runtimes\": {})) that V(present) then filled is not kept
        by V(absent): the file does not record who created the object, so an object emptied by the removal goes.
        dockerd reads a missing C(runtimes) as an empty one."
    type: str
    choices: [present, absent]
    default: present
  backup:
    description:
      - Create a backup file with a timestamp before changing the file (C(<file>.<pid>.<date>@<time>~), the
        original's owner and mode, created exclusively, never through a link).
    type: bool
    default: false
  apply:
    description:
      - How to make the running dockerd use the file.
      - V(auto) reloads when that suffices and restarts only when something was removed or a reload did not take.
      - V(reload) only ever reloads; a change that needs a restart is written and reported as RV(action=deferred)
        with a warning.
      - V(restart) restarts dockerd whenever the running configuration differs from the file.
      - V(none) only writes the file; RV(action=deferred) when dockerd runs something else. It never fails because of
        dockerd. A dockerd that reads another file is ignored, and one whose API does not answer gives a warning.
    type: str
    choices: [auto, reload, restart, none]
    default: auto
  docker_host:
    description:
      - dockerd's API socket, a path or a C(unix://) URL.
    type: str
    default: unix:///var/run/docker.sock
  service_name:
    description:
      - The init system's name for dockerd's service.
    type: str
    default: docker
  apply_timeout:
    description:
      - Seconds to wait for dockerd to answer with the new configuration after a restart (and again after a
        rollback). A reload is given at most 5 seconds before the module falls back to a restart.
      - Each API request to dockerd waits at most 10 seconds (and at most this long).
      - Named C(apply_timeout) because the GPU modules' O(gpufleet.nvidia.gpu_persistence#module:timeout) means
        seconds per daemon answer; C(timeout) is kept as an alias.
    type: int
    default: 60
    aliases: [timeout]
notes:
  - A key of dockerd's own that the module reads written in another case (C("Runtimes"), or C("Path") in a runtime's
    entry) is refused, naming the file and the line, as dockerd reads a runtime's keys in any case (the last
    spelling in the file wins) and refuses a top-level key in another case.
  - "A restart stops running containers unless dockerd runs with C(live-restore) enabled; set
    C({\"live-restore\": true}) in C(daemon.json) on hosts where containers must survive dockerd restarts.
    A restart is only needed to remove settings; registering the runtime is a reload."
  - Only what this module manages is compared with the running dockerd (C(/info) C(Runtimes), C(DefaultRuntime),
    and C(CDISpecDirs) for O(cdi) on dockerd 25 and later). Older dockerd does not report C(features), so a change of
    C(features.cdi) there is applied by a reload when this run changes it, and cannot be verified.
  - Tested for real on dockerd 20.10, 26.1 and 28.5 (Debian 12, 13 and testing).
  - B(dockerd) is the process the init system names (systemd's C(MainPID), Upstart's C(initctl status), else the
    root-owned pid file C(/var/run/docker.pid)), and only when it is a root process of the host's PID namespace
    running the installed C(dockerd), a file only root can change; only when the init system has no record of
    the service at all, a root process running that file. Never a process by its name or arguments;
    RV(dockerd_found_by) says which evidence was used.
  - Requires root on the managed host.
seealso:
  - name: Docker daemon configuration file
    description: dockerd's reference for daemon.json.
    link: https://docs.docker.com/reference/cli/dockerd/#daemon-configuration-file
  - name: NVIDIA Container Toolkit
    description: Installing nvidia-container-runtime.
    link: https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html
  - module: gpufleet.nvidia.init_system_info
    description: How the init system that reloads and restarts dockerd is detected.
'''

EXAMPLES = r'''
- name: Register the nvidia runtime with dockerd (reload, containers keep running)
  gpufleet.nvidia.docker_runtime:
    state: present

- name: Make nvidia the default runtime and enable CDI, keeping a backup
  gpufleet.nvidia.docker_runtime:
    default_runtime: true
    cdi: true
    backup: true
  register: gpu_docker_runtime

- name: Show what happened to dockerd
  ansible.builtin.debug:
    msg: "{{ gpu_docker_runtime.action }}: {{ gpu_docker_runtime.msg }}"

- name: Register a legacy runtime with arguments in a non-default config file, applied later in a window
  gpufleet.nvidia.docker_runtime:
    path: /etc/docker/daemon.json
    name: nvidia-legacy
    runtime_path: /usr/bin/nvidia-container-runtime
    runtime_args:
      - --debug
    apply: none

- name: Remove the nvidia runtime (a restart, removals are not reloadable)
  gpufleet.nvidia.docker_runtime:
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
  sample: /etc/docker/daemon.json
backup_file:
  description: The backup made before the change, when O(backup=true) and the file changed.
  returned: always
  type: str
  sample: /etc/docker/daemon.json.12345.2026-11-30@05:30:00~
action:
  description:
    - What was (in check mode, would be) done to the running dockerd.
    - V(none) nothing needed; V(reload) SIGHUP; V(restart) restart through the init system;
      V(deferred) the file was written but dockerd is not running (applies at its next start),
      O(apply=none), or O(apply=reload) and a restart is needed.
  returned: always
  type: str
  choices: [none, reload, restart, deferred]
  sample: reload
file_changed:
  description: Whether the file content changed (would change in check mode).
  returned: always
  type: bool
  sample: true
runtimes:
  description: The runtimes the running dockerd reports (C(/info) C(Runtimes)) after the run; empty when it is not running.
  returned: always
  type: dict
  sample: {"nvidia": {"path": "nvidia-container-runtime"}, "runc": {"path": "runc"}}
default_runtime:
  description: The default runtime the running dockerd reports after the run (before it, in check mode); null when it is not running.
  returned: always
  type: str
  sample: runc
dockerd_pid_before:
  description: PID of dockerd before the run; null when it was not running (or, with O(apply=none), when the dockerd
    found reads another file).
  returned: always
  type: int
  sample: 1234
dockerd_found_by:
  description: How the process in RV(dockerd_pid_before) was identified, in words - systemd's MainPID, Upstart's
    C(initctl status), a root-owned pid file (named), or, only when the init system has no record of the service, a
    root process running the installed C(dockerd); null when none was found.
  returned: always
  type: str
  sample: systemd (MainPID of docker)
dockerd_pid_after:
  description: PID of dockerd after the run (the same as before after a reload).
  returned: always
  type: int
  sample: 1234
msg:
  description: What was found and done, in one line.
  returned: always
  type: str
  sample: "/etc/docker/daemon.json changed; dockerd was reloaded (SIGHUP, containers keep running): runtime \"nvidia\" is not loaded"
verification:
  description:
    - The verification of the registered runtime (O(verify)); nothing in it is a change.
  returned: always
  type: dict
  contains:
    status:
      description:
        - V(off) O(verify) is false; V(check_mode); V(absent) the runtime was removed; V(not_loaded) the running
          dockerd does not run the runtime (not running, or the change is deferred); V(no_client) the docker
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
      sample: gpufleet/busybox:1
    runs:
      description:
        - One entry per container run, in order - C(visible_devices) (the C(NVIDIA_VISIBLE_DEVICES) value),
          C(command) (as a shell would read it), C(devices) (the C(/dev/nvidia*) nodes the container saw, sorted),
          C(rc) (the command's exit status).
        - When dockerd's default runtime is the runtime, one more container runs without C(--runtime) and without
          C(NVIDIA_VISIBLE_DEVICES) (its C(visible_devices) is null).
      type: list
      elements: dict
      sample:
        - visible_devices: "1"
          command: "docker run --rm --network none --runtime nvidia -e NVIDIA_VISIBLE_DEVICES=1 --entrypoint sh gpufleet/busybox:1 -c '...'"
          devices: [/dev/nvidia-uvm, /dev/nvidia-uvm-tools, /dev/nvidia1, /dev/nvidiactl]
          rc: 0
    msg:
      description: What was run and seen, or why nothing was, in one line.
      type: str
      sample: >-
        ran 1 container: dockerd runs containers through the "nvidia" runtime
        (NVIDIA_VISIBLE_DEVICES=1 saw /dev/nvidia-uvm, /dev/nvidia-uvm-tools, /dev/nvidia1, /dev/nvidiactl)
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.compile_once import compiled_once


def main():
    # This concern's code alone (module_utils/concerns/docker.py), and what it imports as it runs (its check, what
    # makes a change): each file compiled once, and kept compiled between root's runs
    # (module_utils/common/compile_once.py).
    with compiled_once():
        from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.docker import CONCERN
        module = AnsibleModule(**CONCERN.module_args())
        result = CONCERN.execute(module)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
