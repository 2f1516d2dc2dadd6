# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The device_links concern: its argument spec and run.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time (see ``_concern``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.nvidia.plugins.module_utils._concern import Concern
from ansible_collections.gpufleet.nvidia.plugins.module_utils._dev_char import Runner as DevCharRunner
from ansible_collections.gpufleet.nvidia.plugins.module_utils._docker_api import DockerAPI


SPEC = dict(
    state=dict(type='str', default='present', choices=['present', 'absent']),
    boot=dict(type='bool', default=True),
    init_system=dict(type='str', default='auto', choices=['auto', 'systemd', 'sysvinit', 'upstart']),
    dev_root=dict(type='path', default='/dev'),
    report_containers=dict(type='bool', default=True),
    docker_host=dict(type='str', default='unix:///var/run/docker.sock'),
)


def run(module):
    api = DockerAPI(module.params['docker_host'], timeout=5.0) if module.params['report_containers'] else None
    return DevCharRunner(module, api=api).converge()


CONCERN = Concern('device_links', 'device_links', SPEC, run)
