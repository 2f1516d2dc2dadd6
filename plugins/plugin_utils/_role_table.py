# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every concern's declaration (its file's ``DECLARATION``), in order, with its module's option names (``options``).

Written by scripts/sync-roles from plugins/module_utils/concerns/<name>.py; do not edit. This module is PRIVATE to
the gpufleet.nvidia collection: its API may change at any time. ``_role_options`` and ``_results`` read it on the
controller, without importing the modules' code.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DECLARED = (
    {
        'name': 'device_links',
        'module': 'device_links',
        'order': 10,
        'role': 'gpu_node',
        'switch': 'gpu_node_device_links',
        'variables': (
            ('gpu_node_device_links_boot', 'boot'),
        ),
        'module_only': (
            'dev_root', 'docker_host', 'init_system', 'report_containers', 'state',
        ),
        'options': (
            'state', 'boot', 'init_system', 'dev_root', 'report_containers', 'docker_host',
        ),
    },
    {
        'name': 'persistenced',
        'module': 'persistenced',
        'order': 20,
        'role': 'persistenced',
        'switch': 'gpu_node_persistenced',
        'variables': (
            ('persistenced_disruption', 'disruption'),
            ('persistenced_state', 'state'),
            ('persistenced_daemon', 'daemon'),
            ('persistenced_driver_path', 'driver_path'),
            ('persistenced_bundled_path', 'bundled_path'),
            ('persistenced_init_system', 'init_system'),
            ('persistenced_service_name', 'service_name'),
            ('persistenced_user', 'user'),
            ('persistenced_group', 'group', 'truthy'),
            ('persistenced_create_user', 'create_user'),
            ('persistenced_allow_other_primary_group', 'allow_other_primary_group'),
            ('persistenced_persistence_mode', 'persistence_mode'),
            ('persistenced_uvm_persistence_mode', 'uvm_persistence_mode'),
            ('persistenced_verbose', 'verbose'),
            ('persistenced_nvidia_cfg_path', 'nvidia_cfg_path', 'truthy'),
            ('persistenced_extra_args', 'extra_args'),
            ('persistenced_state_file', 'state_file'),
            ('persistenced_backup', 'backup'),
            ('persistenced_start_timeout', 'start_timeout'),
            ('persistenced_remove_user', 'remove_user'),
        ),
        'module_only': (
            'bundled_source',
        ),
        'drift': 'daemon',
        'summary': (
            'init', 'daemon',
        ),
        'options': (
            'state', 'daemon', 'driver_path', 'bundled_path', 'init_system', 'service_name', 'user',
            'group', 'create_user', 'allow_other_primary_group', 'persistence_mode', 'uvm_persistence_mode',
            'verbose', 'nvidia_cfg_path', 'extra_args', 'state_file', 'backup', 'start_timeout',
            'remove_user', 'disruption', 'bundled_source',
        ),
    },
    {
        'name': 'gpu_persistence',
        'module': 'gpu_persistence',
        'order': 30,
        'after': (
            'persistenced',
        ),
        'role': 'gpu_persistence',
        'switch': 'gpu_node_gpu_persistence',
        'off_when': (
            'persistenced_state', 'stopped',
        ),
        'variables': (
            ('gpu_persistence_gpus', 'gpus', ('without', 'gpu_persistence_modes')),
            ('gpu_persistence_mode', 'mode', ('without', 'gpu_persistence_modes')),
            ('gpu_persistence_modes', 'modes', 'truthy'),
            ('gpu_persistence_persist', 'persist'),
            ('gpu_persistence_state_file', 'state_file'),
            ('gpu_persistence_backend', 'backend'),
        ),
        'module_only': (
            'service_user', 'socket_path', 'timeout',
        ),
        'drift': 'gpus_off',
        'summary': (
            'gpus',
        ),
        'options': (
            'gpus', 'mode', 'modes', 'persist', 'state_file', 'service_user', 'backend', 'socket_path',
            'timeout',
        ),
    },
    {
        'name': 'container_toolkit',
        'module': 'container_toolkit_info',
        'order': 40,
        'role': 'container_toolkit',
        'switch': 'gpu_node_container_toolkit',
        'variables': (
            ('container_toolkit_state', 'state'),
            ('container_toolkit_version', 'version'),
            ('container_toolkit_packages', 'packages'),
            ('container_toolkit_repo_url', 'repo_url'),
            ('container_toolkit_repo_suite', 'repo_suite'),
            ('container_toolkit_repo_components', 'repo_components'),
            ('container_toolkit_repo_key', 'repo_key'),
            ('container_toolkit_hold', 'hold'),
        ),
        'module_only': (),
        'drift': 'toolkit',
        'drift_optional': True,
        'summary': (
            'toolkit',
        ),
        'options': (
            'state', 'version', 'packages', 'repo_url', 'repo_suite', 'repo_components', 'repo_key', 'hold',
        ),
    },
    {
        'name': 'cdi',
        'module': 'cdi_spec',
        'order': 50,
        'after': (
            'persistenced', 'container_toolkit',
        ),
        'role': 'gpu_node',
        'switch': 'gpu_node_cdi',
        'variables': (
            ('gpu_node_cdi_state', 'state'),
            ('gpu_node_cdi_path', 'path'),
            ('gpu_node_cdi_device_name_strategy', 'device_name_strategy'),
            ('gpu_node_cdi_boot', 'boot'),
            ('gpu_node_cdi_runtime_mode', 'runtime_mode'),
        ),
        'module_only': (
            'boot_unit', 'init_system', 'nvidia_ctk', 'runtime_config',
        ),
        'drift': 'cdi',
        'drift_optional': True,
        'options': (
            'state', 'path', 'nvidia_ctk', 'device_name_strategy', 'boot', 'boot_unit', 'init_system',
            'runtime_mode', 'runtime_config',
        ),
    },
    {
        'name': 'containerd',
        'module': 'containerd_runtime',
        'order': 60,
        'role': 'container_runtime',
        'switch': 'gpu_node_container_runtime',
        'engine': True,
        'variables': (
            ('container_runtime_disruption', 'disruption'),
            ('container_runtime_containerd_config', 'path'),
            ('container_runtime_name', 'name'),
            ('container_runtime_path', 'runtime_path'),
            ('container_runtime_default', 'default_runtime'),
            ('container_runtime_cdi', 'cdi'),
            ('container_runtime_cdi_spec_dirs', 'cdi_spec_dirs'),
            ('container_runtime_containerd_take_over', 'take_over'),
            ('container_runtime_state', 'state'),
            ('container_runtime_backup', 'backup'),
            ('container_runtime_apply', 'apply'),
            ('container_runtime_containerd_service_name', 'service_name'),
            ('container_runtime_timeout', 'apply_timeout'),
            ('container_runtime_verify', 'verify'),
            ('container_runtime_verify_image', 'verify_image'),
            ('container_runtime_verify_devices', 'verify_devices'),
        ),
        'module_only': (),
        'drift': 'engines_off',
        'summary': (
            'containerd_runtimes', 'containerd_action',
        ),
        'options': (
            'path', 'name', 'runtime_path', 'default_runtime', 'cdi', 'cdi_spec_dirs', 'take_over', 'state',
            'backup', 'apply', 'disruption', 'service_name', 'apply_timeout', 'verify', 'verify_image',
            'verify_devices',
        ),
    },
    {
        'name': 'crio',
        'module': 'crio_runtime',
        'order': 70,
        'role': 'container_runtime',
        'switch': 'gpu_node_container_runtime',
        'engine': True,
        'variables': (
            ('container_runtime_disruption', 'disruption'),
            ('container_runtime_crio_dropin', 'path'),
            ('container_runtime_crio_config', 'config_path'),
            ('container_runtime_crio_config_dir', 'config_dir'),
            ('container_runtime_name', 'name'),
            ('container_runtime_path', 'runtime_path'),
            ('container_runtime_default', 'default_runtime'),
            ('container_runtime_cdi', 'cdi'),
            ('container_runtime_cdi_spec_dirs', 'cdi_spec_dirs'),
            ('container_runtime_crio_take_over', 'take_over'),
            ('container_runtime_state', 'state'),
            ('container_runtime_backup', 'backup'),
            ('container_runtime_apply', 'apply'),
            ('container_runtime_crio_service_name', 'service_name'),
            ('container_runtime_timeout', 'apply_timeout'),
        ),
        'module_only': (),
        'drift': 'engines_off',
        'summary': (
            'crio_runtimes', 'crio_action',
        ),
        'options': (
            'path', 'config_path', 'config_dir', 'name', 'runtime_path', 'default_runtime', 'cdi',
            'cdi_spec_dirs', 'take_over', 'state', 'backup', 'apply', 'disruption', 'service_name',
            'apply_timeout',
        ),
    },
    {
        'name': 'docker',
        'module': 'docker_runtime',
        'order': 80,
        'role': 'container_runtime',
        'switch': 'gpu_node_container_runtime',
        'engine': True,
        'variables': (
            ('container_runtime_disruption', 'disruption'),
            ('container_runtime_daemon_json', 'path'),
            ('container_runtime_name', 'name'),
            ('container_runtime_path', 'runtime_path'),
            ('container_runtime_args', 'runtime_args'),
            ('container_runtime_default', 'default_runtime'),
            ('container_runtime_cdi', 'cdi'),
            ('container_runtime_state', 'state'),
            ('container_runtime_backup', 'backup'),
            ('container_runtime_apply', 'apply'),
            ('container_runtime_docker_host', 'docker_host'),
            ('container_runtime_service_name', 'service_name'),
            ('container_runtime_timeout', 'apply_timeout'),
            ('container_runtime_verify', 'verify'),
            ('container_runtime_verify_image', 'verify_image'),
            ('container_runtime_verify_devices', 'verify_devices'),
        ),
        'module_only': (),
        'drift': 'engines_off',
        'summary': (
            'docker_runtimes', 'docker_action', 'nvidia_run',
        ),
        'options': (
            'path', 'name', 'runtime_path', 'runtime_args', 'default_runtime', 'cdi', 'state', 'backup',
            'apply', 'disruption', 'docker_host', 'service_name', 'apply_timeout', 'verify', 'verify_image',
            'verify_devices',
        ),
    },
    {
        'name': 'gpu_health',
        'module': 'gpu_health',
        'order': 90,
        'role': 'gpu_node',
        'switch': 'gpu_node_gpu_health',
        'variables': (
            ('gpu_node_contract', 'contract'),
            ('gpu_node_health_textfile_directory', 'textfile_directory'),
            ('gpu_node_health_metrics', 'metrics'),
            ('gpu_node_health_textfile_create', 'textfile_create'),
        ),
        'module_only': (
            'kernel_log', 'report_passed', 'verdict_before',
        ),
        'drift': 'health',
        'summary': (
            'health',
        ),
        'options': (
            'contract', 'metrics', 'textfile_directory', 'textfile_create', 'kernel_log', 'report_passed',
            'verdict_before',
        ),
    },
    {
        'name': 'slurm_node',
        'module': 'slurm_node',
        'order': 95,
        'role': 'gpu_node',
        'switch': 'gpu_node_slurm',
        'variables': (
            ('gpu_node_slurm_health_check', 'health_check'),
            ('gpu_node_slurm_health_check_act', 'health_check_act'),
            ('gpu_node_contract', 'contract'),
        ),
        'module_only': (
            'action', 'health_check_path', 'health_check_config', 'name', 'reason', 'wait_timeout',
        ),
        'drift': 'slurm',
        'drift_optional': True,
        'summary': (
            'slurm',
        ),
        'options': (
            'name', 'health_check', 'health_check_act', 'health_check_path', 'health_check_config',
            'contract', 'action', 'reason', 'wait_timeout',
        ),
    },
)
