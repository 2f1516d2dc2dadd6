# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""docker_runtime's verification through NVIDIA's real nvidia-container-runtime, on a real dockerd.

The container_runtime role (and so the real docker_runtime module: its options, the docker CLI with
DOCKER_HOST) registers the runtime with a private dockerd whose namespace is a fake GPU host
(tests/gpuhost.py: char device nodes, the fake NVML under the driver's versioned names, NVIDIA's
programs at /usr/bin). The runtime builds each container's devices just in time from NVML (jit-cdi):
the verification must report exactly the nodes of the GPUs asked for, by index and by UUID.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest

from gpuhost import expected_nodes, selects_devices

from .test_role_playbook import play


def verify(lab, tmp_path, devices, **variables):
    """The role, for dockerd alone, verifying with ``devices``; its result."""
    extra = dict({'container_runtime_engines': ['docker'], 'container_runtime_default': None,
                  'container_runtime_verify_devices': devices}, **variables)
    return play(lab, tmp_path, '-e', json.dumps(extra))[0]


def seen(verification):
    return [(run['visible_devices'], run['devices'], run['rc']) for run in verification['runs']]


def test_all_gives_every_gpu_and_a_converged_rerun_verifies_again(gpu_dockerd, tmp_path):
    lab = gpu_dockerd
    result = verify(lab, tmp_path, ['all'], container_runtime_verify_image='gpufleet/gpu:1')
    verification = result['verification']
    assert verification['status'] == 'ok' and verification['verified'] is True, (verification, lab.gpu.log_tail())
    assert verification['image'] == 'gpufleet/gpu:1'
    assert seen(verification) == [('all', expected_nodes([0, 1]), 0)]
    assert '--runtime nvidia -e NVIDIA_VISIBLE_DEVICES=all' in verification['runs'][0]['command']
    assert result['engines']['docker']['verification'] == verification
    assert result['action'] == 'reload' and 'nvidia' in lab.api.info()['Runtimes']
    # Converged: nothing changes, and the image is found by itself (the newest tagged one).
    again = verify(lab, tmp_path, ['all'])
    assert not again['changed'] and again['action'] == 'none'
    assert again['verification']['image'] == 'gpufleet/gpu:1'
    assert seen(again['verification']) == [('all', expected_nodes([0, 1]), 0)]


def test_one_gpu_by_index_and_by_uuid(gpu_dockerd, tmp_path):
    lab = gpu_dockerd
    missing = selects_devices()
    if missing:
        pytest.fail(missing, pytrace=False)
    uuids = lab.gpu.uuids
    verification = verify(lab, tmp_path, ['1', uuids[1], '0', uuids[0]])['verification']
    assert verification['status'] == 'ok', (verification, lab.gpu.log_tail())
    assert seen(verification) == [('1', expected_nodes([1]), 0), (uuids[1], expected_nodes([1]), 0),
                                  ('0', expected_nodes([0]), 0), (uuids[0], expected_nodes([0]), 0)]
