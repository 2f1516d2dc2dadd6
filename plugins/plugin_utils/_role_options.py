# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which role variable gives each option of each concern's module: the one table gpu_node evaluates a node with.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change at any time.

Both the concern modules' actions (each role calls its module with ``role_vars: true``, ``_role_action``) and
``node_state``'s (``roles/gpu_node/tasks/evaluate.yml``) build the options here, on the controller, from the roles'
variables, so node_state judges exactly what the role applies.

The table is each concern's declaration (``DECLARATION`` in plugins/module_utils/concerns/<name>.py: which role
variable gives which module option, written out, so that ``git grep`` of a variable finds it), read from
``_role_table`` (scripts/sync-roles writes it from the declarations, with each module's option names, so that the
controller never imports the modules' code). An option is passed unless its variable is null (``SET``: the module's
own default then applies), except where its row says:

- ``TRUTHY``: left out when the variable is empty, false or null;
- ``(WITHOUT, other)``: left out when the variable ``other`` is set (not empty): ``gpu_persistence_modes``
  replaces ``gpu_persistence_gpus`` and ``gpu_persistence_mode``.

Each role variable is templated by Ansible's templar, but for one that is exactly a reference to another variable
holding a plain value (``bare_reference``: ``"{{ name }}"``, or ``"{{ gpu_node_disruption | default('defer') }}"`` as
the roles' defaults refer to gpu_node's): that value is taken as templating gives it, without a template compiled for
it in every host's worker (ansible-core 2.19 and later compile every template anew).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.yaml import yaml_load
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._role_table import DECLARED

try:  # ansible-core 2.19 and later (data tagging): a template is a string trusted as one; what templating tags
    from ansible.template import is_trusted_as_template
    from ansible.module_utils._internal._datatag import AnsibleTagHelper
    from ansible._internal._datatag._tags import Origin, TrustedAsTemplate
    # The tags a plain value may have: others (Deprecated: templating warns where it is read; a vault's) leave it to
    # the templar.
    PLAIN_TAGS = frozenset((Origin, TrustedAsTemplate))
except ImportError:  # ansible-core 2.18 (every string a template, and native types from literal_eval): the templar
    is_trusted_as_template = AnsibleTagHelper = Origin = None
    PLAIN_TAGS = frozenset()

SET, TRUTHY, WITHOUT = 'set', 'truthy', 'without'

CONCERNS = tuple(concern['name'] for concern in DECLARED)
# Each concern: its module's options the roles give, as (option, role variable, when).
OPTIONS = dict((concern['name'], tuple((row[1], row[0], row[2] if len(row) > 2 else SET)
                                       for row in concern['variables'])) for concern in DECLARED)
# gpu_node's switch for each concern (a boolean role variable); every engine has the container runtime's.
SWITCHES = dict((concern['name'], concern['switch']) for concern in DECLARED)
# (variable, value): the concern is also off while the variable has that value (the GPUs' modes while the daemon is
# stopped for maintenance: persistenced_state: stopped leaves the GPUs alone).
OFF_WHEN = dict((concern['name'], tuple(concern['off_when'])) for concern in DECLARED if concern.get('off_when'))


# What ``resolve`` gives for a variable set to ``omit``: the option is left out, as a task's template would.
OMITTED = object()

# What ``bare_reference`` gives for a value it leaves to the templar.
TEMPLATE = object()
# ``{{ name }}``, or ``{{ name | default('text') }}`` (the roles' own defaults refer to gpu_node's so: the text, a
# constant, is not used where the variable is defined, and an undefined one is left to the templar), all of the
# string (no trailing newline: templating keeps it).
BARE = re.compile(r"""\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*(\|\s*default\s*\(\s*(?:'[^'\\{}#]*'|"[^"\\{}#]*")\s*\)\s*)?\}\}\Z""")
# Names in that place that are no variable of the task's (Jinja's constants and words, and its special names) or
# whose value is no plain value (omit): left to the templar whatever the variables hold.
NOT_VARIABLES = frozenset(('true', 'false', 'none', 'True', 'False', 'None', 'and', 'or', 'not', 'in', 'is', 'if',
                           'else', 'omit', 'self', 'loop', 'super', 'caller', 'varargs', 'kwargs', 'namespace'))


def _builtin_default():
    """Whether the filter a template's ``default`` is is Ansible's own (a playbook's or role's filter plugins may
    replace it), which passes a defined value through."""
    try:
        from ansible.plugins.loader import filter_loader
        return filter_loader.get('default').ansible_name == 'ansible.builtin.default'
    except Exception:  # pylint: disable=broad-except
        return False


def bare_reference(templar, value):
    """What ``templar`` gives for ``value`` where that is computed without it (no template compiled), else ``TEMPLATE``:
    ``value`` a string trusted as a template (ansible-core 2.19 and later), tagged with nothing else but its origin,
    that is exactly ``{{ name }}`` or ``{{ name | default('text') }}`` (Ansible's own ``default``), ``name`` a variable
    of the templar's holding a plain value: None, a boolean, an integer, a float or a string with no template in it
    (none of Jinja's delimiters, nor its override header), tagged with nothing but its origin and trust.

    That value is what templating gives: native templating passes a variable's value through as it is (an integer
    stays an integer, a string is not parsed), as ``default`` passes a defined one, and, where the value has no origin
    of its own, tags it with the template's origin (which None and booleans cannot carry)."""
    if is_trusted_as_template is None or not isinstance(value, str) or not is_trusted_as_template(value) or not (
            AnsibleTagHelper.tag_types(value) <= PLAIN_TAGS):
        return TEMPLATE
    match = BARE.match(value)
    if not match or match.group(1) in NOT_VARIABLES or match.group(2) and not _builtin_default():
        return TEMPLATE
    variables = templar.available_variables  # where the template's name would be looked up
    if match.group(1) not in variables:
        return TEMPLATE
    target = variables[match.group(1)]
    if target is None or type(target) is bool:  # pylint: disable=unidiomatic-typecheck
        return target
    kind = AnsibleTagHelper.base_type(target)
    if kind not in (str, int, float) or kind is str and ('{' in target or target.startswith('#jinja2:')):
        return TEMPLATE
    tags = AnsibleTagHelper.tag_types(target)
    if not tags <= PLAIN_TAGS:
        return TEMPLATE
    origin = None if Origin in tags else Origin.get_tag(value)
    return origin.tag(target) if origin is not None else target


def template_value(templar, value):
    """``value`` templated by ``templar`` (``bare_reference``'s where it has it)."""
    found = bare_reference(templar, value)
    return templar.template(value) if found is TEMPLATE else found


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
                value = (templated[name] if templated and name in templated
                         else template_value(templar, variables[name]))
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
    """Whether gpu_node evaluates ``concern``: its switch, and not its ``OFF_WHEN`` (a daemon stopped for maintenance
    leaves the GPUs' modes alone)."""
    if not boolean(resolve(SWITCHES[concern]), strict=False):
        return False
    if concern in OFF_WHEN:
        variable, value = OFF_WHEN[concern]
        try:
            return resolve(variable) != value
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
    names = set(SWITCHES.values()) | {'container_runtime_engines'} | set(
        variable for variable, unused_value in OFF_WHEN.values()) if concerns is None else set()
    for concern in OPTIONS if concerns is None else concerns:
        for unused_option, variable, when in OPTIONS[concern]:
            names.add(variable)
            if isinstance(when, tuple):
                names.add(when[1])
    return sorted(names)


# gpu_node's argument spec (its entry points main and evaluate take the same options), read once per process: when
# ansible-playbook's main process imports node_state's action (its strategy loads each task's action class before it
# forks the task's workers), so that every worker forked after that has it parsed (a worker that parsed it itself
# spent about 10 ms of CPU a host on it, and lost it when it exited).
SPEC_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                         'roles', 'gpu_node', 'meta', 'argument_specs.yml')
_SPEC = {}


def _load_specs():
    with open(SPEC_FILE) as handle:
        specs = yaml_load(handle)['argument_specs']  # ansible-core's safe loader (libyaml's where there is one)
    _SPEC.update((name, spec.get('options') or {}) for name, spec in specs.items())


def role_spec(entry_point='evaluate'):
    """The options of gpu_node's ``entry_point`` (its meta/argument_specs.yml)."""
    if entry_point not in _SPEC:
        _load_specs()
    return _SPEC[entry_point]


try:
    _load_specs()
except Exception:  # pylint: disable=broad-except
    pass  # read again, and the error raised, where the spec is needed (not when a concern's action is imported)


def role_arguments(templar, variables, entry_point='evaluate'):
    """gpu_node's arguments among ``variables``, templated (as Ansible's argument check takes them): in one call of the
    templar, but for those ``bare_reference`` gives (a default that is another variable's value, such as an
    inventory's ``"{{ site_toolkit_version }}"``)."""
    names = [name for name in role_spec(entry_point) if name in variables]
    found = dict((name, bare_reference(templar, variables[name])) for name in names)
    templated = templar.template(dict((name, variables[name]) for name in names if found[name] is TEMPLATE))
    # in the spec's order, as before; an argument whose value is omit is left out, as templating leaves it out
    return dict((name, templated[name] if found[name] is TEMPLATE else found[name]) for name in names
                if found[name] is not TEMPLATE or name in templated)


def validate(templar, variables, entry_point='evaluate', given=None):
    """The error messages of gpu_node's argument check (none when it passes): what Ansible's own role argument
    check (``validate_argument_spec``, the task it prepends to a role) gives for these variables, so that gpu_node
    imported with ``rolespec_validate: false`` (site.yml, drift.yml) is checked the same way in node_state's task,
    not in a task of its own per host. ``given``: ``role_arguments``' answer, when the caller has it already."""
    if given is None:
        given = role_arguments(templar, variables, entry_point)
    return list(ArgumentSpecValidator(role_spec(entry_point)).validate(
        given, validate_role_argument_spec=True).error_messages)
