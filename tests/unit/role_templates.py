# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the role tests template with: Ansible's own templar, and role variables as Ansible holds them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from core_compat import DATA_TAGGING, trust_as_template

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
