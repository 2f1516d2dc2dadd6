# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which container engines a host has, and which of them the runtime is registered with on ``auto``.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It holds no AnsibleModule so that pytest can drive it directly.

An engine is installed when its daemon's executable is on the host: dockerd,
containerd, crio (``procs.which``: $PATH and the usual tool directories).
``auto`` takes every installed engine, except a containerd whose CRI plugin
is disabled (``disabled_plugins``, as the containerd.io package that Docker's
own repositories ship writes it): only the CRI plugin reads the runtimes a
config.toml registers (dockerd hands containerd its own runtimes per
container), so registering there would change a file and restart containerd
for nothing. Whether the plugin is disabled is asked of containerd itself
(``containerd config dump``), so imports and defaults count.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import config as cd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import facts as containerd_facts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import procs
from ansible_collections.gpufleet.nvidia.plugins.module_utils.engines.names import DAEMONS, ENGINES
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import DocumentError

# ENGINES, DAEMONS: engines.names (the one list), in the order the container_runtime role registers them.


def detect(run, containerd_config=cd.DEFAULT_PATH, which=procs.which, state=None):
    """``{'engines': {engine: facts}, 'auto': [engines]}`` for this host.

    ``facts``: ``installed``, ``binary`` (the daemon's path or None), ``auto``
    (whether ``auto`` takes it) and ``reason`` (why, in words). ``state``: the run's ``common.run.RunState``
    (node_state's: containerd's dump asked once in its run).
    """
    engines = {}
    for engine in ENGINES:
        binary = which(DAEMONS[engine])
        reason = ('%s is installed' % binary) if binary else 'not installed (no %s executable)' % DAEMONS[engine]
        facts = {'installed': binary is not None, 'binary': binary, 'auto': binary is not None, 'reason': reason}
        if binary and engine == 'containerd':
            facts.update(containerd_cri(containerd_facts.Tools(run, containerd=binary, state=state), containerd_config))
        engines[engine] = facts
    return {'engines': engines, 'auto': [engine for engine in ENGINES if engines[engine]['auto']]}


def containerd_cri(tools, config):
    """``{'auto', 'reason', 'cri_disabled'}`` for a containerd: is its CRI plugin on, per its own dump?"""
    exists = os.path.exists(config)
    try:
        values, error = tools.dump(config if exists else None)
    except DocumentError as exc:
        values, error = None, str(exc)
    if values is None:
        # Taken all the same: containerd_runtime then fails on this host with containerd's own words.
        return {'auto': True, 'cri_disabled': None,
                'reason': 'containerd cannot read %s (%s); taken, so that containerd_runtime reports it'
                          % (config, error)}
    disabled = cd.cri_disabled(values)
    if disabled:
        return {'auto': False, 'cri_disabled': disabled,
                'reason': '%s disables the CRI plugin (disabled_plugins has "%s"): nothing there reads a runtime '
                          'registered in config.toml (dockerd passes its own runtimes to containerd)'
                          % (config if exists else "containerd's default configuration", disabled)}
    return {'auto': True, 'cri_disabled': None,
            'reason': 'containerd is installed and its CRI plugin is enabled%s'
                      % ('' if exists else ' (no %s: containerd\'s defaults)' % config)}
