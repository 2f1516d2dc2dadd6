# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The device_links concern: its argument spec and run.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time (see ``concerns.base``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import module as concerns_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.base import Concern
from ansible_collections.gpufleet.nvidia.plugins.module_utils.device_links.run import Runner as DevCharRunner
from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker.api import DockerAPI
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import RunFailed


# This concern, declared once (the keys: concerns/base.py, DECLARATION_KEYS); scripts/sync-roles builds the rest.
DECLARATION = {
    'name': 'device_links',
    'module': 'device_links',
    'order': 10,
    'role': 'gpu_node',
    'switch': 'gpu_node_device_links',
    'variables': (
        ('gpu_node_device_links_boot', 'boot'),
    ),
    'module_only': ('dev_root', 'docker_host', 'init_system', 'report_containers', 'state'),
}

SPEC = dict(
    state=dict(type='str', default='present', choices=['present', 'absent']),
    boot=dict(type='bool', default=True),
    init_system=dict(type='str', default='auto', choices=['auto', 'systemd', 'sysvinit', 'upstart']),
    dev_root=dict(type='path', default='/dev'),
    report_containers=dict(type='bool', default=True),
    docker_host=dict(type='str', default='unix:///var/run/docker.sock'),
)


def run(module, **kwargs):
    """The module's result; ``kwargs`` go to the Runner (tests: ``root``, ``lstat``, ``api``, ``clock``)."""
    p = module.params
    if 'api' not in kwargs:
        kwargs['api'] = DockerAPI(p['docker_host'], timeout=5.0) if p['report_containers'] else None
    run_command = concerns_module.runner(module)
    runner = DevCharRunner(p, run_command, lambda chosen: concerns_module.init_system(module, run_command, chosen),
                           check_mode=module.check_mode, diff=module._diff, label=files.selinux_labeller(module),
                           together=concerns_module.run_state(module).together, **kwargs)
    try:
        result = runner.converge()
    except RunFailed as exc:
        module.fail_json(msg=exc.msg, **dict(runner.result, **exc.extra))
    for warning in runner.warnings:
        module.warn(warning)
    return result


CONCERN = Concern.declared(DECLARATION, SPEC, run)
