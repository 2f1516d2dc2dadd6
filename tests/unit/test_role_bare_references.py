# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A role variable that is exactly another variable's reference (``"{{ name }}"``) of a plain value is taken as
templating gives it, without a template compiled for it (plugin_utils/_role_options.py: ``bare_reference``).

Each case is held to what Ansible's own templar gives for the same value, the same variables: the value, its type
and its tags (ansible-core 2.19 and later: data tagging, an origin and trust); anything else is left to the templar.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from unittest import mock

import pytest

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import _role_options

from core_compat import DATA_TAGGING, trust_as_template
from role_templates import templar
from test_node_state_args import role_variables

needs_tagging = pytest.mark.skipif(not DATA_TAGGING, reason='ansible-core 2.18: every string is a template, the '
                                   'templar renders each')

if DATA_TAGGING:
    from ansible._internal._datatag._tags import Origin
    from ansible.module_utils._internal._datatag import AnsibleTagHelper
    from ansible.module_utils.datatag import deprecate_value

    def origin(value, path='/site/inventory/group_vars/all.yml', line=3):
        return Origin(path=path, line_num=line, col_num=1).tag(value)
else:
    def origin(value, path=None, line=None):
        return value


def trusted(value, **where):
    return origin(trust_as_template(value), **where)


def described(value):
    """A value as it is, with its type and tags (compared as such: two ``Origin`` tags of one place are equal)."""
    tags = sorted((type(tag).__name__, repr(tag)) for tag in AnsibleTagHelper.tags(value)) if DATA_TAGGING else []
    return value, type(value), tags


def targets():
    """Values a referenced variable may hold: plain ones, and others left to the templar."""
    found = {
        'nothing': None, 'yes': True, 'no': False, 'count': 5, 'ratio': 0.5, 'plain': 'defer', 'number': '5',
        'listed': '[1, 2]', 'spaced': ' defer ', 'lines': 'a\nb\n', 'text': trusted('1.17.8-1'),
        'origin_only': origin('http://10.99.0.1:8765/stable'), 'int_origin': origin(7), 'untrusted': '{{ count }}',
        'nested': trusted('{{ count }}'), 'braces': trusted('{"a": 1}'), 'header': trusted('#jinja2:lstrip_blocks: True\nx'),
        'items': ['a'], 'mapping': {'a': 1},
    }
    if DATA_TAGGING:
        found['deprecated'] = deprecate_value('old', 'use another', version='9.0.0')
    return found


TEMPLATES = ['{{ %s }}', '{{%s}}', '{{  %s\t}}', "{{ %s | default('defer') }}", '{{%s|default("")}}']
# Variables whose values are left to the templar: templates, containers, a deprecated value
NOT_PLAIN = ('untrusted', 'nested', 'braces', 'header', 'items', 'mapping', 'deprecated')
# Left to the templar however the variables look: not exactly one reference, or no variable of the task's (Jinja's
# constants, omit, an undefined one)
OTHERS = ['{{ plain }}\n', ' {{ plain }}', '{{- plain }}', '{{ plain ~ "" }}', '{{ plain }}{{ plain }}', '{{ true }}',
          '{{ none }}', '{{ omit }}', '{{ missing }}', '{{ 5 }}', "{{ missing | default('defer') }}",
          "{{ plain | default('defer', true) }}", '{{ plain | default(count) }}', "{{ plain | d('defer') }}",
          "{{ plain | default('{{ count }}') }}", "{{ plain | default('a\\\\b') }}", "{{ plain | lower }}"]


def cases():
    """(template, whether it is taken without the templar)"""
    for name in sorted(targets()):
        for form in TEMPLATES:
            yield form % name, name not in NOT_PLAIN
    for other in OTHERS:
        yield other, False


@needs_tagging
@pytest.mark.parametrize('template, plain', list(cases()))
@pytest.mark.parametrize('template_origin', [True, False])
def test_a_bare_reference_gives_what_templating_gives(template, plain, template_origin):
    variables = dict(targets(), none='a variable named none', true='and true')
    value = trusted(template, path='/roles/x/defaults/main.yml', line=9) if template_origin else trust_as_template(
        template)
    engine = templar(**variables)
    found = _role_options.bare_reference(engine, value)
    assert (found is not _role_options.TEMPLATE) is plain
    if plain:
        # a variable of the task's, top-level (the resolver's) and in a mapping (role_arguments')
        assert described(found) == described(engine.template(value))
        assert described(found) == described(engine.template({'x': value})['x'])
        assert described(_role_options.template_value(engine, value)) == described(found)


@needs_tagging
def test_an_untrusted_or_deprecated_reference_is_left_to_the_templar():
    engine = templar(plain='defer')
    assert _role_options.bare_reference(engine, '{{ plain }}') is _role_options.TEMPLATE
    assert _role_options.bare_reference(engine, 5) is _role_options.TEMPLATE
    # a deprecated variable: the templar warns where it is read
    value = deprecate_value(trust_as_template('{{ plain }}'), 'use another', version='9.0.0')
    assert _role_options.bare_reference(engine, value) is _role_options.TEMPLATE


@needs_tagging
def test_only_ansibles_own_default_filter_passes_a_defined_value_through():
    # a playbook's or role's filter plugins may replace `default`: then the templar renders the template
    engine = templar(plain='defer')
    value = trust_as_template("{{ plain | default('x') }}")
    assert _role_options._builtin_default() is True and _role_options.bare_reference(engine, value) == 'defer'
    with mock.patch('ansible.plugins.loader.filter_loader.get', return_value=mock.Mock(ansible_name='default')):
        assert _role_options._builtin_default() is False
        assert _role_options.bare_reference(engine, value) is _role_options.TEMPLATE
        assert _role_options.bare_reference(engine, trust_as_template('{{ plain }}')) == 'defer'
    with mock.patch('ansible.plugins.loader.filter_loader.get', side_effect=KeyError('default')):
        assert _role_options.bare_reference(engine, value) is _role_options.TEMPLATE


def test_before_data_tagging_the_templar_renders_every_value():
    with mock.patch.object(_role_options, 'is_trusted_as_template', None):
        engine = templar(plain='defer')
        assert _role_options.bare_reference(engine, trust_as_template('{{ plain }}')) is _role_options.TEMPLATE
        assert _role_options.template_value(engine, trust_as_template('{{ plain }}')) == 'defer'


@needs_tagging
def test_the_name_is_looked_up_where_the_template_would_look_it_up():
    # the templar's variables, not the mapping the caller holds
    engine = templar(plain='defer')
    variables = {'value': trust_as_template('{{ plain }}'), 'plain': 'other'}
    assert _role_options.role_arguments(engine, variables, 'evaluate') == {}  # no role argument among them
    assert _role_options.bare_reference(engine, variables['value']) == 'defer'


def lab_variables(**changed):
    """gpu_node's variables as the lab's inventory sets them (tests/lab/lab), references to its own variables
    included, over the roles' defaults."""
    found = role_variables(
        lab_toolkit_repo_url=origin('http://10.99.0.1:8765/stable/deb/$(ARCH)'), lab_toolkit_version='1.17.8-1',
        lab_gpu_count=origin(4), container_toolkit_repo_url=trusted('{{ lab_toolkit_repo_url }}'),
        container_toolkit_version=trusted('{{ lab_toolkit_version }}'),
        gpu_node_drift_only=trusted('{{ lab_drift_only }}'), lab_drift_only=False,
        persistenced_verbose=trusted('{{ omit }}'), container_runtime_timeout=trusted('{{ lab_timeout }}'),
        lab_timeout=origin(90), persistenced_start_timeout=trusted('{{ lab_start_timeout }}'), lab_start_timeout=2.5)
    found.update(changed)
    return found


@pytest.mark.parametrize('changed', [
    {},
    # the lookups templated by Ansible: an undefined one, a nested template, a filter
    {'container_toolkit_version': trusted('{{ lab_undefined_version | default("1.0") }}')},
    {'lab_toolkit_repo_url': trusted('{{ "http://mirror" }}/deb')},
    # the roles' defaults that are gpu_node's (`| default('defer')`): another value, a template, none (the roles alone)
    {'gpu_node_disruption': origin('drain')},
    {'gpu_node_disruption': trusted('{{ lab_disruption }}'), 'lab_disruption': 'force'},
    {'gpu_node_disruption': None},
])
def test_role_arguments_are_what_the_templar_gives_for_all_of_them(changed):
    variables = lab_variables(**changed)
    if changed.get('gpu_node_disruption', 1) is None:
        del variables['gpu_node_disruption']
    engine = templar(**variables)
    names = [name for name in _role_options.role_spec() if name in variables]
    expected = engine.template(dict((name, variables[name]) for name in names))
    given = _role_options.role_arguments(engine, variables)
    assert list(given) == list(expected)  # the same arguments, in the same order (omit's left out)
    assert dict((name, described(value)) for name, value in given.items()) == dict(
        (name, described(value)) for name, value in expected.items())
    assert _role_options.validate(engine, variables, given=given) == []
    # every value read by the resolver is the templar's too (a task's variables, as the action gets them: ansible-core
    # 2.18's include its omit placeholder)
    resolve = _role_options.resolver(engine, engine.available_variables)
    for name in names:
        value = resolve(name)
        if value is not _role_options.OMITTED:
            assert described(value) == described(expected[name]), name


@needs_tagging
def test_role_arguments_template_the_rest_in_one_call():
    variables = lab_variables()
    engine = templar(**variables)
    calls = []
    original = engine.template

    def template(value, *args, **kwargs):
        calls.append(value)
        return original(value, *args, **kwargs)

    with mock.patch.object(engine, 'template', template):
        given = _role_options.role_arguments(engine, variables)
    [rest] = calls
    # the inventory's references of plain values are not templated, nor the roles' defaults that are gpu_node's
    references = ('container_toolkit_repo_url', 'container_toolkit_version', 'gpu_node_drift_only',
                  'container_runtime_timeout', 'persistenced_start_timeout', 'persistenced_disruption',
                  'container_runtime_disruption')
    assert variables['persistenced_disruption'] == "{{ gpu_node_disruption | default('defer') }}"
    assert not set(references) & set(rest) and set(rest) | set(references) == set(given) | {'persistenced_verbose'}
    assert 'persistenced_verbose' not in given  # omit: left out, as templating leaves it out
    assert given['container_runtime_timeout'] == 90 and isinstance(given['container_runtime_timeout'], int)
    assert given['persistenced_start_timeout'] == 2.5 and isinstance(given['persistenced_start_timeout'], float)
    assert given['gpu_node_drift_only'] is False
