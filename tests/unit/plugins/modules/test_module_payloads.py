# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What each module carries to the host: the module zip Ansible itself builds (AnsiballZ).

Every file of our module_utils in a module's zip is compiled on the host on every run (zipimport keeps
no bytecode). A concern module carries its own concern's code and what that code imports, never the other
concerns': when every module imported all of them (one shared file of every concern's spec and run), each
concern module compiled the collection's ten thousand lines on every run, and a first run got slower. node_state
carries every concern, since it evaluates them all.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
UTILS = 'ansible_collections/gpufleet/nvidia/plugins/module_utils/'

# Each concern's own code (module_utils files no other concern imports).
OWN = {
    'device_links': {'concerns/device_links', 'device_links/links', 'device_links/boot', 'device_links/run'},
    'persistenced': {'concerns/persistenced', 'persistenced/deploy', 'persistenced/facts', 'persistenced/actions'},
    'gpu_persistence': {'concerns/gpu_persistence', 'gpu/apply'},
    'container_toolkit_info': {'concerns/container_toolkit', 'toolkit/rules'},
    'cdi_spec': {'concerns/cdi', 'cdi/apply', 'cdi/boot', 'cdi/refresh', 'cdi/spec'},
    'containerd_runtime': {'concerns/containerd', 'containerd/apply', 'containerd/config', 'containerd/plan',
                           'containerd/cdi', 'containerd/effective', 'containerd/apply_change'},
    'crio_runtime': {'concerns/crio', 'crio/apply', 'crio/config', 'crio/takeover', 'crio/apply_change'},
    'docker_runtime': {'concerns/docker', 'docker/apply', 'docker/daemon_json', 'formats/json_splice',
                       'docker/apply_change'},
}
# What only a change needs, imported inside the function that makes it (node_state's check path never imports it:
# test_node_state.py): Ansible's dependency finder must still pack it into the zips of the modules that change.
APPLY_ONLY = {
    'device_links': {'host/audit', 'host/rollback', 'host/locks'},
    'persistenced': {'host/audit', 'host/rollback', 'host/locks', 'host/workload', 'persistenced/actions'},
    'gpu_persistence': {'host/audit', 'host/rollback', 'host/locks'},
    'cdi_spec': {'host/audit', 'host/rollback', 'host/locks'},
    'containerd_runtime': {'host/audit', 'host/rollback', 'host/locks', 'host/workload', 'containerd/apply_change'},
    'crio_runtime': {'host/audit', 'host/rollback', 'host/locks', 'host/workload', 'crio/apply_change'},
    'docker_runtime': {'host/audit', 'host/rollback', 'host/locks', 'host/workload', 'docker/apply_change'},
}


# Run in a fresh interpreter: Ansible's collection loader is configured once per process, and other tests
# configure it their own way.
BUILD = r"""
import base64, io, json, os, re, sys, zipfile
from ansible.executor import module_common
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar
root, names = sys.argv[1], sys.argv[2:]
init_plugin_loader()
found = {}
for name in names:
    built = module_common.modify_module(
        module_name='gpufleet.nvidia.' + name, module_path=os.path.join(root, 'plugins', 'modules', name + '.py'),
        module_args={}, templar=Templar(loader=DataLoader()), task_vars={'ansible_python_interpreter': sys.executable})
    module_data = built.b_module_data if hasattr(built, 'b_module_data') else built[0]  # 2.18: a tuple
    data = re.search(r"(?:zip_data=|ZIPDATA = )'([A-Za-z0-9+/=]+)'", module_data.decode('utf-8'))  # 2.18: ZIPDATA
    if data is None:
        sys.exit('no zip in the AnsiballZ wrapper of %s (has its layout changed?)' % name)
    with zipfile.ZipFile(io.BytesIO(base64.b64decode(data.group(1)))) as zf:
        found[name] = zf.namelist()
print(json.dumps(found))
"""


@pytest.fixture(scope='module')
def payloads():
    """Per module, the module_utils files (names without .py) of our collection in the zip Ansible builds for it."""
    out = subprocess.run([sys.executable, '-c', BUILD, ROOT, 'node_state'] + sorted(OWN), capture_output=True,
                         text=True, check=False)
    assert out.returncode == 0, out.stderr
    return dict((name, set(os.path.splitext(n[len(UTILS):])[0] for n in names if n.startswith(UTILS) and n.endswith('.py')))
                for name, names in json.loads(out.stdout).items())


@pytest.mark.parametrize('module', sorted(OWN))
def test_a_concern_module_carries_its_own_concern_alone(payloads, module):
    carried = payloads[module]
    assert OWN[module] <= carried
    others = set().union(*(own for name, own in OWN.items() if name != module)) - OWN[module]
    assert carried & others == set(), '%s carries other concerns\' code' % module
    assert 'concerns/registry' not in carried


def test_node_state_carries_every_concern(payloads):
    carried = payloads['node_state']
    assert set().union(*OWN.values()) <= carried
    assert 'concerns/registry' in carried


@pytest.mark.parametrize('module', sorted(APPLY_ONLY))
def test_code_imported_only_to_apply_is_carried(payloads, module):
    assert APPLY_ONLY[module] <= payloads[module]
    assert APPLY_ONLY[module] <= payloads['node_state']
