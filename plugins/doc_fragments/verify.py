# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """The verification options of the engine modules (docker_runtime, containerd_runtime)."""

    DOCUMENTATION = r'''
options:
  verify:
    description:
      - After a successful apply (not in check mode, not with O(state=absent), and the running engine runs the
        runtime), run one container per value of O(verify_devices) through the registered runtime, with a local
        image, and report the C(/dev/nvidia*) device nodes each container saw (RV(verification)).
      - The container runs C(sh -c) with shell builtins only, so the image needs C(sh); NVIDIA's runtime also
        needs C(/etc) in the image (its hooks write C(/etc/ld.so.conf)).
      - The container prints a last line of its own after the device nodes; a container that exits 0 without it
        (its output lost on the way, which containerd's I/O can do to a container that prints and exits at once)
        is run again, up to 3 times, and is never read as a container that saw no GPU.
      - A verification that fails (a container that does not run, or whose output never arrives) does not fail
        the module; RV(verification.status) is then V(failed) (the C(gpufleet.nvidia.container_runtime) role fails
        on it).
    type: bool
    default: false
  verify_image:
    description:
      - The local image to verify with (a name or ID); never pulled.
      - Empty takes the newest tagged local image (dockerd, as C(docker image ls) lists them), or the first tagged
        image by name in containerd's C(gpufleet) namespace (C(ctr) does not say when an image arrived).
    type: str
    default: ''
  verify_devices:
    description:
      - The values of C(NVIDIA_VISIBLE_DEVICES) to run a container with, one container each (C(all), a GPU index,
        a GPU UUID, a comma-separated list).
    type: list
    elements: str
    default: [all]
'''
