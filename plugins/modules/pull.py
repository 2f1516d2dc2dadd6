#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: pull
short_description: Pull mode on a GPU node, a periodic ansible-pull of the site's repository applied to the node itself
version_added: 1.1.0
description:
  - Installs on the node the program C(/usr/sbin/gpufleet-pull), its configuration C(/etc/gpufleet/pull.json), its
    inventory and state directory (O(state_directory), root's, mode 0700), and what starts it every O(interval)
    minutes and after boot, on every init system this collection supports. A systemd timer (C(gpufleet-pull.timer)
    and C(gpufleet-pull.service) in C(/etc/systemd/system)) where systemd is the init system; a cron job
    (C(/etc/cron.d/gpufleet-pull)) on SysV and Upstart hosts, which need cron running.
  - "One run of C(gpufleet-pull): a random delay up to O(splay) seconds (none with C(gpufleet-pull --now)); the run
    lock (a C(flock) on the state directory, which only root can open: two runs never overlap, a second one ends at
    once and says so); C(ansible-pull) from the virtual environment O(venv): the site repository O(url) checked out
    in the state directory (O(checkout), C(--verify-commit) with O(verify_commit)), then its O(playbook) applied to
    this node alone (C(-c local), C(--limit) O(name)), with this node's inventory and O(inventories)."
  - The playbook is the site's; importing C(gpufleet.nvidia.site) applies every concern, the workload policy and the
    audit trail exactly as in push mode. C(gpufleet.nvidia.site) then leaves the node's result (C(gpu_node_result))
    for the run, which reads the node's drift from it.
  - "Each run's output goes to O(log) (bounded: rotated at the start of a run past O(log_max_bytes), O(log_keep)
    kept, one run's output cut at O(log_max_bytes)); its outcome to C(last-run.json) in the state directory and as
    metrics to node_exporter's textfile directory O(textfile_directory) (C(gpufleet_pull.prom)):
    C(gpufleet_last_run_timestamp_seconds), C(gpufleet_last_run_duration_seconds), C(gpufleet_last_run_outcome)
    (C(ok), C(changed), C(deferred), C(unchanged), C(refused), C(failed)), C(gpufleet_last_success_timestamp_seconds),
    C(gpufleet_applied_commit_info), C(gpufleet_fetched_commit_info), C(gpufleet_concern_drifted) per concern and
    C(gpufleet_last_evaluation_timestamp_seconds)."
  - A run that cannot check out the repository (an unreachable server, a commit without a good signature of
    O(gpg_keys) under O(verify_commit)) or whose playbook cannot be parsed is C(refused); nothing runs, the reason is
    logged. ansible-pull's git step verifies the commit at every run, so a refused commit stays refused.
  - I(state=absent) stops and removes the timer or the cron job, the program, its configuration, the state directory
    (checkout, keyring, state) and the metrics file, after a run in progress ends; the log is kept.
  - A systemd host reloads systemd (C(daemon-reload)) only when the units change, and not while an NVIDIA device
    node has no C(/dev/char) link (a reload would cut running GPU containers off it; M(gpufleet.nvidia.device_links)
    makes the links).
author:
  - gpufleet.nvidia maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes
  - gpufleet.nvidia.attributes.FULL
options:
  state:
    description: Pull mode installed (V(present)) or removed (V(absent)).
    type: str
    choices: [present, absent]
    default: present
  url:
    description:
      - The site repository (C(ansible-pull --url)), any URL git clones (C(https://), C(ssh://), C(git://), a path).
        Required with I(state=present). The repository holds O(playbook) and, beside it, C(group_vars) and the
        collections it uses (C(collections/ansible_collections/...)), or an C(ansible.cfg) naming where they are.
    type: str
  checkout:
    description: The branch, tag or commit to check out (C(ansible-pull --checkout)); the repository's default
      branch when not given.
    type: str
  playbook:
    description: The playbook to run, a path in the repository (a file with C(- import_playbook gpufleet.nvidia.site)).
    type: str
    default: local.yml
  inventories:
    description:
      - More inventories (C(--inventory)), after the node's own; a relative path is in the checkout.
      - The node's own inventory, which each run writes, names it O(name) in O(groups), with a local connection and
        O(python), and C(localhost) when O(name) is not one of the host's own names (ansible-pull checks the
        repository out on the hosts named localhost or as the host is, and on one of them alone here).
    type: list
    elements: str
    default: []
  name:
    description: The node's name in the site's inventory and C(--limit) (the play's C(inventory_hostname) is a good
      value); the host's name (C(uname -n)) when not given.
    type: str
  groups:
    description: The groups the node is in, in its own inventory (C(gpufleet.nvidia.site) runs on C(gpu_nodes)).
    type: list
    elements: str
    default: [gpu_nodes]
  python:
    description: The Python the modules run with on the node (the system's, which the collection's modules use in
      push mode too).
    type: path
    default: /usr/bin/python3
  venv:
    description:
      - The collection's virtual environment with ansible-core (its C(bin/ansible-pull)), made with O(python)'s
        C(venv) (Debian and Ubuntu need C(python3-venv)); never the system Python's packages.
      - A stamp in it (C(gpufleet-pull.json)) says what was installed; ansible-core is installed again when
        O(ansible_core), O(pip_index_url) or O(pip_find_links) change. I(state=absent) removes it.
    type: path
    default: /opt/gpufleet-pull/venv
  ansible_core:
    description:
      - The requirement pip installs (C(ansible-core>=2.18) is this collection's floor; pip takes the newest release
        the index serves for O(python), so pin it, C(ansible-core==2.19.4), for a fleet on one release).
      - ansible-core 2.18 and 2.19 run on Python 3.11 (Debian 12), 2.20 and later need Python 3.12.
    type: str
    default: ansible-core>=2.18
  pip_index_url:
    description: The site's package index (C(pip --index-url)). There is no default index; give this or
      O(pip_find_links) where ansible-core is not installed yet.
    type: str
  pip_find_links:
    description: A wheelhouse the site serves (an URL of a page that links the wheels, or a directory), used with
      C(--no-index) unless O(pip_index_url) is given too.
    type: str
  pip_trusted_hosts:
    description: Hosts pip may reach over plain HTTP (C(--trusted-host)), for an index or wheelhouse served without
      TLS inside the site (pip ignores such a source otherwise).
    type: list
    elements: str
    default: []
  state_directory:
    description: The run's state (root's, mode 0700), with the checkout (C(checkout/)), the keyring (C(gnupg/)), the
      node's inventory, C(last-run.json) and the result the playbook leaves.
    type: path
    default: /var/lib/gpufleet-pull
  interval:
    description:
      - Minutes between runs. systemd starts a run O(interval) minutes after the last one ended; cron at fixed
        minutes, so on SysV and Upstart hosts O(interval) divides an hour (1-30) or is whole hours dividing a day.
    type: int
    default: 30
  splay:
    description: Each run first waits a random time up to this many seconds, so that a fleet does not fetch at once.
    type: int
    default: 600
  boot_delay:
    description: Seconds after boot before the first run.
    type: int
    default: 120
  timeout:
    description: A run still going after this many seconds is ended (SIGTERM to its processes, SIGKILL 30 s later)
      and is C(failed).
    type: int
    default: 3600
  only_if_changed:
    description:
      - Run the playbook only when the repository has a new commit (C(--only-if-changed)), or when the last run did
        not succeed. Between commits the node's drift is then neither corrected nor evaluated (the drift metrics say
        when they were last evaluated).
    type: bool
    default: false
  verify_commit:
    description: Refuse a commit without a good signature by one of O(gpg_keys) (C(--verify-commit)).
    type: bool
    default: false
  gpg_keys:
    description:
      - The site's public keys (ASCII-armoured), the only keys a node trusts under O(verify_commit). They make the
        keyring of the state directory alone (the keyring is replaced when they change, removed when they are empty).
    type: list
    elements: str
    default: []
  log:
    description: The runs' log (root's, mode 0600, in a directory root's alone).
    type: path
    default: /var/log/gpufleet/pull.log
  log_max_bytes:
    description: The log is rotated at the start of a run once it is larger; one run writes at most this much.
    type: int
    default: 4194304
  log_keep:
    description: Rotated logs kept (C(pull.log.1) ...).
    type: int
    default: 3
  textfile_directory:
    description: node_exporter's textfile directory (it must exist; an empty value writes no metrics).
    type: str
    default: /var/lib/prometheus/node-exporter
  extra_vars:
    description: Extra variables for every run (C(--extra-vars)), above the repository's variables.
    type: dict
    default: {}
  scheduler:
    description: What starts the runs, a systemd timer (V(timer)) or cron (V(cron)); V(auto) is the timer where
      systemd is the init system, cron elsewhere.
    type: str
    choices: [auto, timer, cron]
    default: auto
notes:
  - Needs root (C(become=true)), C(git), and C(gpg) with O(verify_commit); cron on SysV and Upstart hosts.
  - Tested on the lab's Debian 12 hosts (systemd 252, SysV, Upstart 1.13.2) pulling with ansible-core 2.19.
seealso:
  - module: gpufleet.nvidia.node_state
  - module: gpufleet.nvidia.gpu_health
'''

EXAMPLES = r'''
- name: Every node converges itself from the site repository every 30 minutes
  gpufleet.nvidia.pull:
    url: https://git.example.internal/gpu/site.git
    checkout: production
    name: "{{ inventory_hostname }}"
    verify_commit: true
    gpg_keys:
      - "{{ lookup('file', 'keys/site-release.asc') }}"
  become: true

- name: Back to push mode
  gpufleet.nvidia.pull:
    state: absent
  become: true
'''

RETURN = r'''
scheduler:
  description: What starts the runs (C(timer) or C(cron)); null with I(state=absent).
  returned: always
  type: str
name:
  description: The node's name in its inventory and the runs' C(--limit).
  returned: always
  type: str
program:
  description: The program's path.
  returned: always
  type: str
config:
  description: Its configuration's path.
  returned: always
  type: str
actions:
  description: What was done (C(venv), C(program), C(config), C(keys), C(unit), C(cron), C(reload_init), C(enable),
    C(start), C(stop), C(state_directory), C(metrics)).
  returned: always
  type: list
  elements: str
changes:
  description: The changes in words.
  returned: always
  type: list
  elements: str
'''

import platform

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.compile_once import compiled_once


def main():
    with compiled_once():
        from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError
        from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import module as concerns_module
        from ansible_collections.gpufleet.nvidia.plugins.module_utils.pull import install
    module = AnsibleModule(argument_spec=install.SPEC, supports_check_mode=True,
                           required_if=[('state', 'present', ('url',))])
    run = concerns_module.runner(module)
    try:
        init, tools, _detected = concerns_module.init_system(module, run)
        converge = install.Converge(module.params, run, init, tools, module.check_mode, platform.node())
        result = converge.converge()
    except GpufleetError as exc:
        module.fail_json(msg=str(exc))
    if module._diff and converge.diffs:
        result['diff'] = converge.diffs
    for warning in converge.warnings:
        module.warn(warning)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
