# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each concern module's options, in its argument spec's order. Written by scripts/sync-roles; do not edit.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change at any time. ``_role_options`` derives
the roles' table from it on the controller, without importing the modules' code.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

MODULE_OPTIONS = {
    'device_links': (
        'state', 'boot', 'init_system', 'dev_root', 'report_containers', 'docker_host',
    ),
    'persistenced': (
        'state', 'daemon', 'driver_path', 'bundled_path', 'init_system', 'service_name', 'user', 'group',
        'create_user', 'allow_other_primary_group', 'persistence_mode', 'uvm_persistence_mode', 'verbose',
        'nvidia_cfg_path', 'extra_args', 'state_file', 'backup', 'start_timeout', 'remove_user',
        'bundled_source',
    ),
    'gpu_persistence': (
        'gpus', 'mode', 'modes', 'persist', 'state_file', 'service_user', 'backend', 'socket_path', 'timeout',
    ),
    'container_toolkit': (
        'state', 'version', 'packages', 'repo_url', 'repo_suite', 'repo_components', 'repo_key', 'hold',
    ),
    'cdi': (
        'state', 'path', 'nvidia_ctk', 'device_name_strategy', 'boot', 'boot_unit', 'init_system',
        'runtime_mode', 'runtime_config',
    ),
    'containerd': (
        'path', 'name', 'runtime_path', 'default_runtime', 'cdi', 'cdi_spec_dirs', 'take_over', 'state',
        'backup', 'apply', 'service_name', 'apply_timeout', 'verify', 'verify_image', 'verify_devices',
    ),
    'crio': (
        'path', 'config_path', 'config_dir', 'name', 'runtime_path', 'default_runtime', 'cdi', 'cdi_spec_dirs',
        'state', 'backup', 'apply', 'service_name', 'apply_timeout',
    ),
    'docker': (
        'path', 'name', 'runtime_path', 'runtime_args', 'default_runtime', 'cdi', 'state', 'backup', 'apply',
        'docker_host', 'service_name', 'apply_timeout', 'verify', 'verify_image', 'verify_devices',
    ),
}
