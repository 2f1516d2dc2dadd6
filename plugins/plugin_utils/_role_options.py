# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which role variable gives each option of each concern's module: the one table gpu_node evaluates a node with.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change at any time.

Both the concern modules' actions (each role calls its module with ``role_vars: true``, ``_role_action``) and
``node_state``'s (``roles/gpu_node/tasks/evaluate.yml``) build the options here, on the controller, from the roles'
variables, so node_state judges exactly what the role applies. Before this table, every role's task and
``evaluate.yml`` wrote the mapping out as templates, compiled anew for every host.

Each entry: ``(option, variable, when)``, ``when`` one of

- ``ALWAYS``: the option is the variable's value;
- ``SET``: left out when the variable is null (the module's own default then applies);
- ``TRUTHY``: left out when the variable is empty, false or null;
- ``(WITHOUT, other)``: left out when the variable ``other`` is set (not empty): ``gpu_persistence_modes``
  replaces ``gpu_persistence_gpus`` and ``gpu_persistence_mode``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.yaml import yaml_load
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._results import CONCERNS, ENGINES

ALWAYS, SET, TRUTHY, WITHOUT = 'always', 'set', 'truthy', 'without'

# The container engines' options they share: the same role variable for every engine.
_RUNTIME = (('name', 'container_runtime_name', ALWAYS),
            ('runtime_path', 'container_runtime_path', SET),
            ('default_runtime', 'container_runtime_default', SET))
# CDI in containerd and CRI-O (dockerd has cdi alone: it reads its own default directories).
_CDI = (('cdi', 'container_runtime_cdi', SET),
        ('cdi_spec_dirs', 'container_runtime_cdi_spec_dirs', ALWAYS))
_APPLY = (('state', 'container_runtime_state', ALWAYS),
          ('backup', 'container_runtime_backup', ALWAYS),
          ('apply', 'container_runtime_apply', ALWAYS))
_VERIFY = (('verify', 'container_runtime_verify', ALWAYS),
           ('verify_image', 'container_runtime_verify_image', ALWAYS),
           ('verify_devices', 'container_runtime_verify_devices', ALWAYS))

OPTIONS = {
    'device_links': (
        ('boot', 'gpu_node_device_links_boot', ALWAYS),),
    'persistenced': (
        ('state', 'persistenced_state', ALWAYS),
        ('daemon', 'persistenced_daemon', ALWAYS),
        ('driver_path', 'persistenced_driver_path', ALWAYS),
        ('bundled_path', 'persistenced_bundled_path', ALWAYS),
        ('init_system', 'persistenced_init_system', ALWAYS),
        ('service_name', 'persistenced_service_name', ALWAYS),
        ('user', 'persistenced_user', ALWAYS),
        ('group', 'persistenced_group', TRUTHY),
        ('create_user', 'persistenced_create_user', ALWAYS),
        ('allow_other_primary_group', 'persistenced_allow_other_primary_group', ALWAYS),
        ('persistence_mode', 'persistenced_persistence_mode', ALWAYS),
        ('uvm_persistence_mode', 'persistenced_uvm_persistence_mode', SET),
        ('verbose', 'persistenced_verbose', ALWAYS),
        ('nvidia_cfg_path', 'persistenced_nvidia_cfg_path', TRUTHY),
        ('extra_args', 'persistenced_extra_args', ALWAYS),
        ('state_file', 'persistenced_state_file', ALWAYS),
        ('backup', 'persistenced_backup', ALWAYS),
        ('start_timeout', 'persistenced_start_timeout', ALWAYS),
        ('remove_user', 'persistenced_remove_user', ALWAYS)),
    'gpu_persistence': (
        ('gpus', 'gpu_persistence_gpus', (WITHOUT, 'gpu_persistence_modes')),
        ('mode', 'gpu_persistence_mode', (WITHOUT, 'gpu_persistence_modes')),
        ('modes', 'gpu_persistence_modes', TRUTHY),
        ('persist', 'gpu_persistence_persist', ALWAYS),
        ('state_file', 'gpu_persistence_state_file', ALWAYS),
        ('backend', 'gpu_persistence_backend', ALWAYS)),
    'container_toolkit': (
        ('state', 'container_toolkit_state', ALWAYS),
        ('version', 'container_toolkit_version', SET),
        ('packages', 'container_toolkit_packages', ALWAYS),
        ('repo_url', 'container_toolkit_repo_url', SET),
        ('repo_suite', 'container_toolkit_repo_suite', ALWAYS),
        ('repo_components', 'container_toolkit_repo_components', ALWAYS),
        ('repo_key', 'container_toolkit_repo_key', SET),
        ('hold', 'container_toolkit_hold', ALWAYS)),
    'cdi': (
        ('state', 'gpu_node_cdi_state', ALWAYS),
        ('path', 'gpu_node_cdi_path', ALWAYS),
        ('boot', 'gpu_node_cdi_boot', ALWAYS),
        ('runtime_mode', 'gpu_node_cdi_runtime_mode', SET)),
    'containerd': (('path', 'container_runtime_containerd_config', ALWAYS),) + _RUNTIME + _CDI + (
        ('take_over', 'container_runtime_containerd_take_over', ALWAYS),) + _APPLY + (
        ('service_name', 'container_runtime_containerd_service_name', ALWAYS),
        ('apply_timeout', 'container_runtime_timeout', ALWAYS)) + _VERIFY,
    'crio': (
        ('path', 'container_runtime_crio_dropin', ALWAYS),
        ('config_path', 'container_runtime_crio_config', ALWAYS),
        ('config_dir', 'container_runtime_crio_config_dir', ALWAYS)) + _RUNTIME + _CDI + _APPLY + (
        ('service_name', 'container_runtime_crio_service_name', ALWAYS),
        ('apply_timeout', 'container_runtime_timeout', ALWAYS)),
    'docker': (('path', 'container_runtime_daemon_json', ALWAYS),) + _RUNTIME + (
        ('runtime_args', 'container_runtime_args', ALWAYS),
        ('cdi', 'container_runtime_cdi', SET)) + _APPLY + (
        ('docker_host', 'container_runtime_docker_host', ALWAYS),
        ('service_name', 'container_runtime_service_name', ALWAYS),
        ('apply_timeout', 'container_runtime_timeout', ALWAYS)) + _VERIFY,
}

# gpu_node's switch for each concern (a boolean role variable); every engine has the container runtime's.
SWITCHES = {'device_links': 'gpu_node_device_links', 'persistenced': 'gpu_node_persistenced',
            'gpu_persistence': 'gpu_node_gpu_persistence', 'container_toolkit': 'gpu_node_container_toolkit',
            'cdi': 'gpu_node_cdi'}
SWITCHES.update((engine, 'gpu_node_container_runtime') for engine in ENGINES)


# What ``resolve`` gives for a variable set to ``omit``: the option is left out, as a task's template would.
OMITTED = object()


class MissingVariable(KeyError):
    """A role variable the table reads is not defined where node_state runs (``args[0]``: its name)."""


def _omitted(exc):
    """Whether templating failed because the value is ``omit`` (ansible-core 2.19 and later raise for it)."""
    return type(exc).__name__ == 'AnsibleValueOmittedError'


def resolver(templar, variables, templated=None):
    """``resolve(name)``: the variable ``name`` of ``variables`` (a task's variables) templated by ``templar`` (the
    task's), once; ``OMITTED`` for ``omit``; ``MissingVariable`` when it is not defined. ``templated``: variables
    already templated (``role_arguments``), taken as they are."""
    omit = variables.get('omit')  # ansible-core 2.18's placeholder; later releases raise instead
    cache = {}

    def resolve(name):
        if name not in cache:
            if name not in variables:
                raise MissingVariable(name)
            try:
                value = templated[name] if templated and name in templated else templar.template(variables[name])
            except Exception as exc:  # pylint: disable=broad-except
                if not _omitted(exc):
                    raise
                value = OMITTED
            if omit is not None and isinstance(value, str) and value == omit:
                value = OMITTED
            cache[name] = value
        return cache[name]
    return resolve


def _kept(value, when, resolve):
    if value is OMITTED:
        return False
    if when == ALWAYS:
        return True
    if when == SET:
        return value is not None
    if when == TRUTHY:
        return bool(value)
    return not resolve(when[1])


def concern_options(concern, resolve):
    """The options gpu_node evaluates ``concern`` with; ``resolve(variable)`` gives a role variable's value
    (templated) or raises ``MissingVariable``."""
    options = {}
    for option, variable, when in OPTIONS[concern]:
        value = resolve(variable)
        if _kept(value, when, resolve):
            options[option] = value
    return options


def switched_on(concern, resolve):
    """Whether gpu_node evaluates ``concern``: its switch, and for the GPUs' modes a daemon not stopped for
    maintenance (``persistenced_state: stopped`` leaves the GPUs alone)."""
    if not boolean(resolve(SWITCHES[concern]), strict=False):
        return False
    if concern == 'gpu_persistence':
        try:
            return resolve('persistenced_state') != 'stopped'
        except MissingVariable:
            return True
    return True


def node_state_args(resolve):
    """node_state's arguments as gpu_node gives them: each switched-on concern's options (a concern switched off
    is left out), and the engines to register with (none when the container runtime is off)."""
    args = dict((concern, concern_options(concern, resolve)) for concern in CONCERNS
                if switched_on(concern, resolve))
    runtime_on = boolean(resolve('gpu_node_container_runtime'), strict=False)
    args['engines'] = list(resolve('container_runtime_engines') or []) if runtime_on else []
    return args


def variables_read(concerns=None):
    """The role variables the table reads for ``concerns`` (for the tests): for all of them, also the switches and
    the engine list."""
    names = set(SWITCHES.values()) | {'container_runtime_engines', 'persistenced_state'} if concerns is None else set()
    for concern in OPTIONS if concerns is None else concerns:
        for unused_option, variable, when in OPTIONS[concern]:
            names.add(variable)
            if isinstance(when, tuple):
                names.add(when[1])
    return sorted(names)


# gpu_node's argument spec (its entry points main and evaluate take the same options), read once per process.
SPEC_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                         'roles', 'gpu_node', 'meta', 'argument_specs.yml')
_SPEC = {}


def role_spec(entry_point='evaluate'):
    """The options of gpu_node's ``entry_point`` (its meta/argument_specs.yml)."""
    if entry_point not in _SPEC:
        with open(SPEC_FILE) as handle:
            specs = yaml_load(handle)['argument_specs']  # ansible-core's safe loader (libyaml's where there is one)
        _SPEC.update((name, spec.get('options') or {}) for name, spec in specs.items())
    return _SPEC[entry_point]


def role_arguments(templar, variables, entry_point='evaluate'):
    """gpu_node's arguments among ``variables``, templated (as Ansible's argument check takes them)."""
    return templar.template(dict((name, variables[name]) for name in role_spec(entry_point) if name in variables))


def validate(templar, variables, entry_point='evaluate', given=None):
    """The error messages of gpu_node's argument check (none when it passes): what Ansible's own role argument
    check (``validate_argument_spec``, the task it prepends to a role) gives for these variables, so that gpu_node
    imported with ``rolespec_validate: false`` (site.yml, drift.yml) is checked the same way in node_state's task,
    not in a task of its own per host. ``given``: ``role_arguments``' answer, when the caller has it already."""
    if given is None:
        given = role_arguments(templar, variables, entry_point)
    return list(ArgumentSpecValidator(role_spec(entry_point)).validate(
        given, validate_role_argument_spec=True).error_messages)
