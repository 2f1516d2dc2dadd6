# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the role tests template with: Ansible's own templar, and role variables as Ansible holds them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template


def templar(**variables):
    return Templar(loader=DataLoader(), variables=variables)


def trusted_tree(value):
    """A role's variables as Ansible holds them: every string a trusted template, templated when read."""
    if isinstance(value, dict):
        return dict((key, trusted_tree(item)) for key, item in value.items())
    if isinstance(value, list):
        return [trusted_tree(item) for item in value]
    return trust_as_template(value) if isinstance(value, str) else value
