# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""containerd_runtime's verification through NVIDIA's real nvidia-container-runtime, on a real containerd.

A private containerd runs in a namespace that is a fake GPU host (tests/gpuhost.py: char device nodes,
the fake NVML under the driver's versioned names, NVIDIA's programs at /usr/bin). The runtime is
registered (the module's own code, the fixture restarting containerd), then the real module runs in that
namespace (``python -m``: its options, process discovery, ctr) and verifies: ``ctr run`` in containerd's
gpufleet namespace, through the registered runtime binary. The runtime builds each container's devices
just in time from NVML (jit-cdi): the verification must report exactly the nodes of the GPUs asked for,
by index and by UUID.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys

import pytest

from gpuhost import expected_nodes, selects_devices, write_docker_archive

from .test_containerd_runtime_real import RUNTIME, converge


def run_module(lab, args):
    """The real containerd_runtime module, run in the lab's namespace; its result."""
    args_file = os.path.join(lab.base, 'args.json')
    with open(args_file, 'w') as handle:
        json.dump({'ANSIBLE_MODULE_ARGS': args}, handle)
    proc = subprocess.run(lab.inside([sys.executable, '-m',
                                      'ansible_collections.gpufleet.nvidia.plugins.modules.containerd_runtime',
                                      args_file]), capture_output=True, text=True, timeout=300)
    assert 'Traceback' not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert proc.stdout.strip(), 'the module printed nothing (rc %s): %s' % (proc.returncode, proc.stderr)
    return json.loads(proc.stdout)


def import_image(lab):
    lab.ctr('--namespace', 'gpufleet', 'images', 'import',
            write_docker_archive(os.path.join(lab.base, 'gpu.tar'), 'gpufleet/gpu:1'))


def verified(lab, devices, **args):
    """Register the runtime (restarting containerd), then the real module's verification with ``devices``."""
    registered, service = converge(lab, runtime_path=args.get('runtime_path', RUNTIME))
    assert registered['action'] == 'restart' and service.restarts == 1
    result = run_module(lab, dict({'path': lab.config, 'verify': True, 'verify_devices': devices}, **args))
    assert not result.get('failed'), result['msg']
    assert not result['changed'] and result['action'] == 'none', result['msg']
    return result['verification']


def seen(verification):
    return [(run['visible_devices'], run['devices'], run['rc']) for run in verification['runs']]


def test_all_gives_every_gpu_and_leaves_no_container(gpu_containerd):
    lab = gpu_containerd
    import_image(lab)
    verification = verified(lab, ['all'])
    assert verification['status'] == 'ok' and verification['verified'] is True, (verification, lab.gpu.log_tail())
    assert verification['image'] == 'docker.io/gpufleet/gpu:1'
    assert seen(verification) == [('all', expected_nodes([0, 1]), 0)]
    assert ' --namespace gpufleet run --rm --runc-binary %s ' % RUNTIME in verification['runs'][0]['command']
    # ctr run --rm left no container behind, and none in the namespaces of a kubelet or dockerd.
    assert lab.ctr('--namespace', 'gpufleet', 'containers', 'ls', '--quiet').strip() == ''
    assert lab.ctr('namespaces', 'ls', '--quiet').split() == ['gpufleet']


def test_one_gpu_by_index_and_by_uuid(gpu_containerd):
    lab = gpu_containerd
    missing = selects_devices()
    if missing:
        pytest.fail(missing, pytrace=False)
    import_image(lab)
    uuids = lab.gpu.uuids
    verification = verified(lab, ['1', uuids[1], '0', uuids[0]])
    assert verification['status'] == 'ok', (verification, lab.gpu.log_tail())
    assert seen(verification) == [('1', expected_nodes([1]), 0), (uuids[1], expected_nodes([1]), 0),
                                  ('0', expected_nodes([0]), 0), (uuids[0], expected_nodes([0]), 0)]


def test_no_image_then_a_runtime_that_cannot_run_a_container(gpu_containerd):
    lab = gpu_containerd
    nothing = verified(lab, ['all'], runtime_path='/bin/false')
    assert nothing['status'] == 'no_image' and nothing['runs'] == [] and 'ctr -n gpufleet images import' in nothing['msg']
    import_image(lab)
    result = run_module(lab, {'path': lab.config, 'runtime_path': '/bin/false', 'verify': True})
    assert not result.get('failed'), result['msg']
    verification = result['verification']
    assert verification['status'] == 'failed' and verification['verified'] is False
    assert verification['runs'][0]['rc'] != 0 and verification['runs'][0]['devices'] == []
    assert verification['msg'].startswith('"%s" failed (rc ' % verification['runs'][0]['command'])
    assert lab.ctr('--namespace', 'gpufleet', 'containers', 'ls', '--quiet').strip() == ''
