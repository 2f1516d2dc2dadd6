# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The roles' decisions and results (plugin_utils/_results.py), as filters: one template each in the roles."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import _results


def gpu_node_result(state, device_links=None, persistenced=None, gpu_persistence=None, container_toolkit=None,
                    container_runtime=None, cdi=None, gpu_health=None, slurm_node=None, drain=None, health_gate=None):
    return _results.node_result(state, device_links=device_links, persistenced=persistenced,
                                gpu_persistence=gpu_persistence, container_toolkit=container_toolkit,
                                container_runtime=container_runtime, cdi=cdi, gpu_health=gpu_health,
                                slurm_node=slurm_node, drain=drain, health_gate=health_gate)


def gpu_node_run(state, drift_only=False):
    return _results.node_run(state, drift_only)


def container_runtime_engines(named, found=None):
    return _results.runtime_engines(named, found)


def container_runtime_apply_refused(apply, engine_list):
    return _results.runtime_apply_refused(apply, engine_list)


def container_runtime_result(engine_list, containerd=None, crio=None, docker=None, found=None):
    return _results.runtime_result(engine_list, containerd=containerd, crio=crio, docker=docker, found=found)


def host_values(hosts, hostvars, name, key=None, missing=None, every=False):
    return _results.host_values(hosts, hostvars, name, key=key, missing=missing, every=every)


class FilterModule(object):
    def filters(self):
        return {'gpu_node_result': gpu_node_result, 'gpu_node_run': gpu_node_run,
                'container_runtime_engines': container_runtime_engines,
                'container_runtime_apply_refused': container_runtime_apply_refused,
                'container_runtime_result': container_runtime_result, 'host_values': host_values}
