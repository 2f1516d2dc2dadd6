# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the role tests template with: Ansible's own templar, and role variables as Ansible holds them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._fleet_summary import fleet_summary

from core_compat import DATA_TAGGING, trust_as_template

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SITE = os.path.join(ROOT, 'playbooks', 'site.yml')

# ansible-core 2.18 gives each task an ``omit`` variable, a placeholder it removes from the task's arguments
# afterwards (2.19+: a Jinja global whose value disappears by itself).
OMIT = '__omit_place_holder__gpufleet_unit_tests'


class _TemplarWithOmit(Templar):
    """2.18's templar as a task sees it: ``omit`` defined, and its placeholder gone from what a template gives."""

    def template(self, variable, *args, **kwargs):
        from ansible.executor.task_executor import remove_omit
        value = super(_TemplarWithOmit, self).template(variable, *args, **kwargs)
        return remove_omit(value, OMIT) if isinstance(value, (dict, list)) else value


def templar(**variables):
    if DATA_TAGGING:
        return Templar(loader=DataLoader(), variables=variables)
    return _TemplarWithOmit(loader=DataLoader(), variables=dict(variables, omit=OMIT))


def trusted_tree(value):
    """A role's variables as Ansible holds them: every string a trusted template, templated when read."""
    if isinstance(value, dict):
        return dict((key, trusted_tree(item)) for key, item in value.items())
    if isinstance(value, list):
        return [trusted_tree(item) for item in value]
    return trust_as_template(value) if isinstance(value, str) else value


def site_summary(hosts, hostvars):
    """The lines playbooks/site.yml's fleet summary prints for ``hosts`` with these ``hostvars``: the task's
    variables templated by Ansible, then its filter (called here directly: Ansible's collection loader is set up
    once per process, and other tests set it up their own way)."""
    with open(SITE) as handle:
        task = yaml.safe_load(handle)[-1]['tasks'][0]
    assert task['ansible.builtin.debug']['msg'] == (
        '{{ ansible_play_hosts_all | gpufleet.nvidia.fleet_summary(__results, __errors, __stopped) }}')
    variables = templar(**dict(trusted_tree(task['vars']), ansible_play_hosts_all=hosts, hostvars=hostvars))
    stopped = variables.template(trust_as_template('{{ __stopped }}'))
    return fleet_summary(hosts, variables.template(trust_as_template('{{ __results }}')),
                         variables.template(trust_as_template('{{ __errors }}')), stopped)
