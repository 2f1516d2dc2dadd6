# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every concern, for node_state: ``CONCERNS[name]`` is that concern module's ``Concern`` (its argument spec and
its run, the whole body of its ``main``). Written by scripts/sync-roles from each concern's DECLARATION; do not edit.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. ``CONCERNS[name].run(module)`` is the whole body of that
concern's module: it reads the host, decides, and (unless
``module.check_mode``) acts, then returns the result for ``exit_json`` or calls
``module.fail_json``. The module runs it with its AnsibleModule, from its own
file (``concerns/<name>.py``: a concern module's payload holds that concern's
code alone); ``node_state`` runs the same function in check mode with a
stand-in (``concerns.node_state.ConcernModule``), so both give one verdict from
one copy of every decision.

Each concern's module is imported when node_state first asks for it, not with
this file: a host evaluates only the concerns it is asked for and the engines
it has, and compiles every module it imports on every run (zipimport keeps no
bytecode). The imports are plain statements, so Ansible still packs every
concern into node_state's zip.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from collections.abc import Mapping


def _device_links():
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.device_links import CONCERN
    return CONCERN


def _persistenced():
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.persistenced import CONCERN
    return CONCERN


def _gpu_persistence():
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.gpu_persistence import CONCERN
    return CONCERN


def _container_toolkit():
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.container_toolkit import CONCERN
    return CONCERN


def _cdi():
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.cdi import CONCERN
    return CONCERN


def _containerd():
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.containerd import CONCERN
    return CONCERN


def _crio():
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.crio import CONCERN
    return CONCERN


def _docker():
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.docker import CONCERN
    return CONCERN


def _gpu_health():
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.gpu_health import CONCERN
    return CONCERN


def _slurm_node():
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns.slurm_node import CONCERN
    return CONCERN


# The concerns, in the order node_state evaluates them and gpu_node runs them.
ORDER = (
    'device_links', 'persistenced', 'gpu_persistence', 'container_toolkit', 'cdi', 'containerd', 'crio', 'docker',
    'gpu_health', 'slurm_node',
)
# The container engines among them (node_state evaluates those the host has, or was asked for).
ENGINES = (
    'containerd', 'crio', 'docker',
)
# The concerns whose drift makes node_state run another again.
DEPENDS = {
    'gpu_persistence': ('persistenced',),
    'cdi': ('persistenced', 'container_toolkit'),
}
_LOAD = {
    'device_links': _device_links,
    'persistenced': _persistenced,
    'gpu_persistence': _gpu_persistence,
    'container_toolkit': _container_toolkit,
    'cdi': _cdi,
    'containerd': _containerd,
    'crio': _crio,
    'docker': _docker,
    'gpu_health': _gpu_health,
    'slurm_node': _slurm_node,
}


class _Concerns(Mapping):
    """``CONCERNS[name]``: the concern's ``Concern``, its module imported on first use (then found in
    ``sys.modules``, as every import is); iterates in ``ORDER``."""

    def __getitem__(self, name):
        return _LOAD[name]()

    def __iter__(self):
        return iter(ORDER)

    def __len__(self):
        return len(ORDER)


CONCERNS = _Concerns()


def __getattr__(name):  # ``registry.DOCKER`` and the others (Python 3.7+): the concern's own module, on first use
    if name.isupper() and name.lower() in _LOAD:
        return _LOAD[name.lower()]()
    raise AttributeError(name)
