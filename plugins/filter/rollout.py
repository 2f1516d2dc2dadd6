# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The health gate of playbooks/site.yml (plugin_utils/_rollout.py), as filters."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import _rollout


def health_regression(before, after):
    return _rollout.regression(before, after)


def node_changed(node):
    return _rollout.changed(node)


def health_gate(before, after, rollback=None):
    return _rollout.gate(before, after, rollback)


def health_verdict(result):
    return _rollout.node_verdict(result)


def rollout_stop(hosts, hostvars):
    return _rollout.stops(hosts, hostvars)


class FilterModule(object):
    def filters(self):
        return {'health_regression': health_regression, 'node_changed': node_changed, 'health_gate': health_gate,
                'rollout_stop': rollout_stop, 'health_verdict': health_verdict}
