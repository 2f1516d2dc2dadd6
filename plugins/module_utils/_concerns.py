# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every concern, for node_state: ``CONCERNS[name]`` is that concern module's ``Concern`` (its argument spec and
its run, the whole body of its ``main``).

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. ``CONCERNS[name].run(module)`` is the whole body of that
concern's module (``device_links``, ``persistenced``, ``gpu_persistence``,
``container_toolkit_info``, ``containerd_runtime``, ``crio_runtime``,
``docker_runtime``): it reads the host, decides, and (unless
``module.check_mode``) acts, then returns the result for ``exit_json`` or calls
``module.fail_json``. The toolkit's concern is read-only (its role installs
with ansible.builtin modules): its result says ``converged`` itself. The module runs it
with its AnsibleModule, from its own file (``_concern_<name>.py``: a concern
module's payload holds that concern's code alone); ``node_state`` runs the
same function in check mode with a stand-in (``_node_state.ConcernModule``),
so both give one verdict from one copy of every decision.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.nvidia.plugins.module_utils._concern_cdi import CONCERN as CDI
from ansible_collections.gpufleet.nvidia.plugins.module_utils._concern_container_toolkit import CONCERN as TOOLKIT
from ansible_collections.gpufleet.nvidia.plugins.module_utils._concern_containerd import CONCERN as CONTAINERD
from ansible_collections.gpufleet.nvidia.plugins.module_utils._concern_crio import CONCERN as CRIO
from ansible_collections.gpufleet.nvidia.plugins.module_utils._concern_device_links import CONCERN as DEVICE_LINKS
from ansible_collections.gpufleet.nvidia.plugins.module_utils._concern_docker import CONCERN as DOCKER
from ansible_collections.gpufleet.nvidia.plugins.module_utils._concern_gpu_persistence import CONCERN as GPU_PERSISTENCE
from ansible_collections.gpufleet.nvidia.plugins.module_utils._concern_persistenced import CONCERN as PERSISTENCED
from ansible_collections.gpufleet.nvidia.plugins.module_utils._engine_names import ENGINES

# In the order gpu_node runs them: the links before anything reloads systemd, the daemon before the GPUs' modes,
# the toolkit's packages before any runtime registration (its postinst writes the runtime's own config.toml, and a
# registered runtime needs the program), the CDI spec after the toolkit (its nvidia-ctk writes it), the CRI engines
# before dockerd (whose verification runs a container last).
CONCERNS = dict((c.name, c) for c in (DEVICE_LINKS, PERSISTENCED, GPU_PERSISTENCE, TOOLKIT, CDI, CONTAINERD, CRIO, DOCKER))
ORDER = ('device_links', 'persistenced', 'gpu_persistence', 'container_toolkit', 'cdi') + ENGINES
