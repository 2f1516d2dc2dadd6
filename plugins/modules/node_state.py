#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: node_state
short_description: Tell, in one round trip, which of a GPU node's concerns drifted and how (read-only)
version_added: 1.0.0
description:
  - Evaluates every requested concern of a GPU node, the /dev/char links (M(gpufleet.nvidia.device_links)), the
    persistence daemon (M(gpufleet.nvidia.persistenced)), the GPUs' persistence modes
    (M(gpufleet.nvidia.gpu_persistence)), NVIDIA's container toolkit packages (M(gpufleet.nvidia.container_toolkit_info)),
    the CDI spec (M(gpufleet.nvidia.cdi_spec)) and the runtime registration of each container engine
    (M(gpufleet.nvidia.containerd_runtime), M(gpufleet.nvidia.crio_runtime), M(gpufleet.nvidia.docker_runtime)),
    in one module run on the host, and changes nothing.
  - Each concern is evaluated by running that concern module's own code in check mode with the options given here,
    validated against that module's own argument spec. Its verdict (RV(concerns)) is the check-mode result that
    module returns with the same options, so there is no second copy of any decision.
  - The C(gpufleet.nvidia.gpu_node) role (and so C(playbooks/site.yml)) runs it first and then runs a concern's module
    only where that concern drifted (RV(run)); C(playbooks/drift.yml) turns the fleet's results into a drift report.
  - A concern whose check fails (bad options, a host problem its module would fail on) is reported as drifted with
    the module's own message, so that running its module reports the failure where it belongs.
  - Run as root, it keeps what the installed containerd answered (C(containerd --version), and C(containerd config
    dump) of a config file without C(imports)) in a memo, C(/run/gpufleet-memo) (C(/var/run/gpufleet-memo) on hosts
    without C(/run)), and a later run uses an answer only for the same executable (device, inode, size, modification
    and change times), the same file bytes (SHA-256) and the same boot; a file with C(imports) is dumped on every run.
    This saves two starts of containerd, about a fifth of a converged host's CPU.
  - On systemd, the memo also holds the names of the units the run asked systemd about; the next run asks about all
    of them in one C(systemctl show) (the answers are that run's own, only the question is shared), and about a unit
    not on the list alone.
  - The memo is JSON data, never executed, in a directory only root can open (mode 0700, opened without following
    links, owner and mode checked; anything else is not used); a memo that cannot be read or written is ignored and
    the programs are asked.
  - Run as root, it (like every module of the collection) keeps the code it compiled from Ansible's module zip in
    C(/run/gpufleet-bytecode) (C(/var/run/gpufleet-bytecode) without C(/run)), one file per source file named by the
    SHA-256 of the interpreter, the file's path in the zip and its bytes; a later run loads what it would compile again
    (about 60 ms of CPU less on a converged host). The directory and each file are used only when root's and closed
    to other users, never through a link; a run in check mode only reads it; it is emptied at each boot and once it
    holds 4096 files.
author:
  - gpufleet.nvidia maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes
attributes:
  check_mode:
    support: full
    details:
      - The module never changes anything the host's programs read. Its one write is its own memo of containerd's
        answers (see the description), and in check mode it writes no memo, only uses one an earlier run kept.
  diff_mode:
    support: full
    details:
      - Returns, as its diff, every diff the concern modules return in check mode (the files and modes that would
        change).
      - With O(role_vars=true), only where nothing runs after it (see O(role_vars)).
  idempotent:
    support: full
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the
      controller.
    support: full
    details:
      - An action plugin hands the module the collection's copy of the bundled persistence daemon, which the
        persistence daemon's check compares with the installed one, and with O(role_vars) builds the options from
        the roles' variables.
options:
  device_links:
    description:
      - The options of M(gpufleet.nvidia.device_links) to evaluate; omitted or null leaves the concern out.
    type: dict
  persistenced:
    description:
      - The options of M(gpufleet.nvidia.persistenced) to evaluate; omitted or null leaves the concern out.
    type: dict
  gpu_persistence:
    description:
      - The options of M(gpufleet.nvidia.gpu_persistence) to evaluate; omitted or null leaves the concern out.
    type: dict
  container_toolkit:
    description:
      - The options of M(gpufleet.nvidia.container_toolkit_info) to evaluate; omitted or null leaves the concern out.
    type: dict
  cdi:
    description:
      - The options of M(gpufleet.nvidia.cdi_spec) to evaluate; omitted or null leaves the concern out.
      - Its verdict says whether the CDI spec is stale (C(stale) in its result, from the spec NVIDIA's C(nvidia-ctk)
        prints now and the one on the host) and whether its boot refresh is in place.
    type: dict
  engines:
    description:
      - The container engines whose registration is evaluated, from V(containerd), V(crio), V(docker) and V(auto)
        (every engine installed on the host, as M(gpufleet.nvidia.container_engines_info) reports for C(auto)).
      - An engine is evaluated when it is in this list and its options (O(containerd), O(crio), O(docker)) are given.
        Empty evaluates every engine whose options are given.
    type: list
    elements: str
    choices: [auto, containerd, crio, docker]
    default: []
  containerd:
    description:
      - The options of M(gpufleet.nvidia.containerd_runtime) to evaluate.
    type: dict
  crio:
    description:
      - The options of M(gpufleet.nvidia.crio_runtime) to evaluate.
    type: dict
  docker:
    description:
      - The options of M(gpufleet.nvidia.docker_runtime) to evaluate.
    type: dict
  gpu_health:
    description:
      - The options of M(gpufleet.nvidia.gpu_health) to evaluate, last, in the same round trip.
      - Its verdict never drifts (its result's C(verdict) is the node's health); it adds two checks only node_state
        can make, C(configuration) (every other concern evaluated here converged) and gpu_persistence's wanted modes
        as the C(persistence) expectation. Its metrics are written unless the play is in check mode.
    type: dict
  slurm_node:
    description:
      - The options of M(gpufleet.nvidia.slurm_node) to evaluate (never its O(gpufleet.nvidia.slurm_node#module:action)
        steps). Its result has the node's Slurm state, drain reason and jobs, and whether the health check program
        drifted. A host that is no Slurm node is converged.
    type: dict
  role_vars:
    description:
      - Build every concern's options on the controller from the C(gpufleet.nvidia) roles' variables, exactly as each
        concern's role passes them to its own module, and each concern's switch from C(gpu_node)'s variables
        (C(gpu_node_device_links), C(gpu_node_persistenced), ...). This is how the C(gpufleet.nvidia.gpu_node) role
        calls the module; the roles' defaults must be in scope (gpu_node imports them).
      - With V(true), the concern options (O(device_links) ... O(docker)) and O(engines) must not be given.
      - With V(true), the action also decides the module's diff mode as C(gpu_node) needs it, in C(--diff) mode
        (C(ansible_diff_mode)) only where nothing runs after this task (not in C(gpu_node)'s C(main) entry point unless
        C(gpu_node_drift_only)), where each drifted concern's module shows its own diff when it runs; the task's own
        C(diff) keyword does not change that.
      - Handled by the action plugin; the module never sees it.
    type: bool
    default: false
  publish_result:
    description:
      - For the C(gpufleet.nvidia.gpu_node) role's C(main) entry point, with O(role_vars=true) only.
      - Where the task does not give it, with O(role_vars=true), the action decides it from the task's variables,
        V(true) in C(gpu_node)'s C(main) entry point (whose C(tasks/main.yml) sets C(__gpu_node_main) on its import of
        C(tasks/evaluate.yml)), else V(false). (A keyword templated in the task would cost a template compiled in
        every host's worker.)
      - Where nothing is to run after this task (RV(run) empty, or C(gpu_node_drift_only)), set the role's public
        result C(gpu_node_result) as a host variable, at the precedence of M(ansible.builtin.set_fact), so that the
        role needs no task of its own for it. Its value is the role's own expression, C(gpu_node_state |
        gpufleet.nvidia.gpu_node_result), over this task's registered result. ansible-core 2.21 and later; on
        earlier releases the role publishes it in a task.
      - With V(true) the task must register C(gpu_node_state) and cannot run with C(async).
      - Handled by the action plugin; the module never sees it.
    type: bool
  bundled_source:
    description:
      - Internal, set by the action plugin (the collection's copy of the bundled daemon); do not set it.
    type: str
notes:
  - Needs what each evaluated concern's module needs to read the host (root, C(become=true)).
  - Per-GPU persistence is always to be run after the persistence daemon drifted (RV(run)), since installing or
    restarting a daemon can bring the GPUs back to its global default.
seealso:
  - module: gpufleet.nvidia.device_links
  - module: gpufleet.nvidia.cdi_spec
  - module: gpufleet.nvidia.persistenced
  - module: gpufleet.nvidia.gpu_persistence
  - module: gpufleet.nvidia.container_toolkit_info
  - module: gpufleet.nvidia.containerd_runtime
  - module: gpufleet.nvidia.crio_runtime
  - module: gpufleet.nvidia.docker_runtime
'''

EXAMPLES = r'''
- name: Which concerns of the node drifted?
  gpufleet.nvidia.node_state:
    persistenced: {}
    gpu_persistence:
      mode: enabled
    engines: [auto]
    containerd: {}
    docker: {}
  become: true
  register: node

- name: Say what drifted
  ansible.builtin.debug:
    msg: "{{ node.msg }}"
  when: not node.converged
'''

RETURN = r'''
converged:
  description: Whether every evaluated concern is converged.
  returned: always
  type: bool
  sample: false
drifted:
  description: The concerns that are not converged (their module would change something, or fail).
  returned: always
  type: list
  elements: str
  sample: [gpu_persistence]
run:
  description: The concerns whose module is to run, in order; the drifted ones and the ones that depend on them
    (per-GPU persistence after the persistence daemon).
  returned: always
  type: list
  elements: str
  sample: [gpu_persistence]
evaluated:
  description: The concerns evaluated, in order (C(device_links), C(persistenced), C(gpu_persistence),
    C(container_toolkit), C(cdi), C(containerd), C(crio), C(docker)).
  returned: always
  type: list
  elements: str
  sample: [persistenced, gpu_persistence, containerd, docker]
concerns:
  description: Per evaluated concern, its verdict.
  returned: always
  type: dict
  contains:
    converged:
      description: The concern's module would change nothing and not fail (for C(container_toolkit), a read-only
        concern, the C(converged) of its result).
      type: bool
      sample: false
    failed:
      description: The concern's module would fail; its message is the C(msg) of RV(concerns.result).
      type: bool
      sample: false
    changes:
      description: What would change, in one line; empty when converged.
      type: str
      sample: 1 disabled->enabled
    seconds:
      description: How long the concern's evaluation took on the host.
      type: float
      sample: 0.041
    result:
      description: The concern module's own check-mode result, without its diff (which, in diff mode, is the module's diff).
      type: dict
      sample: {"changed": true, "backend": "rpc", "gpus": [], "state_changed": false, "state_file": null}
  sample: {"gpu_persistence": {"converged": false, "failed": false, "changes": "1 disabled->enabled", "result": {}}}
engine_list:
  description: The container engines evaluated, in the order they are registered.
  returned: always
  type: list
  elements: str
  sample: [containerd, docker]
engines_seconds:
  description: How long finding the engines (V(auto)) took on the host.
  returned: always
  type: float
  sample: 0.052
engines_found:
  description: With V(auto) in O(engines), what M(gpufleet.nvidia.container_engines_info) reports per engine; null
    otherwise.
  returned: always
  type: dict
  sample: {"docker": {"installed": true, "binary": "/usr/sbin/dockerd", "auto": true, "reason": "installed"}}
msg:
  description: What was found, in one line.
  returned: always
  type: str
  sample: "drifted: gpu_persistence (1 disabled->enabled)"
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.compile_once import compiled_once


def main():
    # Our code, and each concern's, imported when it is evaluated (concerns.registry.CONCERNS): each file compiled once,
    # and kept compiled between root's runs (module_utils/common/compile_once.py: zipimport compiles each file twice,
    # and keeps nothing).
    with compiled_once():
        from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import node_state as concerns_node_state
        from ansible_collections.gpufleet.nvidia.plugins.module_utils.engines.names import ENGINES
        module = AnsibleModule(
            argument_spec=dict(
                # each concern's options, by its name (concerns/registry.py, written from the concerns' declarations)
                [(name, dict(type='dict')) for name in concerns_node_state.registry.ORDER],
                engines=dict(type='list', elements='str', default=[], choices=['auto'] + list(ENGINES)),
                role_vars=dict(type='bool', default=False),
                publish_result=dict(type='bool'),
                bundled_source=dict(type='str', no_log=True),
            ),
            supports_check_mode=True,
        )
        result, warnings, diffs = concerns_node_state.evaluate(module, module.params, diff=module._diff)
    for warning in warnings:
        module.warn(warning)
    if module._diff:
        result['diff'] = diffs
    module.exit_json(**result)


if __name__ == '__main__':
    main()
