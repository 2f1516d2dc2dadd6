# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA's CDI spec: reading what nvidia-ctk wrote, the stale check against the host's GPUs, the write decision.

The fixture is real: NVIDIA's ``nvidia-ctk cdi generate --format json`` (toolkit 1.20.0, built by
tests/toolkit/build) on the driver kit's fake host of tests/kit/test_kit_toolkit.py's ``gpu_host`` (three
GPUs: two A100s, an L40S; driver 535.171.04), byte for byte: the host tree was /tmp/gfhmib9ph2d, and
nvidia-cdi-hook was found on PATH in .cache/toolkit/bin. The variants below are built from it, and each was
checked equal to what nvidia-ctk gave with the option it stands for (``--disable-hooks all``,
``--disable-hook enable-cuda-compat``, ``--no-all-device``, ``--device-name-strategy uuid``). The fake NVML
cannot enable MIG, so the MIG spec is made by hand from nvidia-ctk's naming rules (pkg/nvcdi/namer.go,
lib-nvml.go: a GPU with MIG enabled appears only as its MIG devices, ``<gpu>:<mig>`` and ``MIG-<uuid>``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils import _cdi as cdi
from ansible_collections.gpufleet.nvidia.plugins.module_utils._errors import GpufleetError

# nvidia-ctk --quiet cdi generate --format json, verbatim (3167 bytes, one line, no trailing newline).
SPEC_JSON = (
    '{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[{"name":"0","containerEdits":{"deviceNodes":[{"path":"/'
    'dev/nvidia0","major":195,"fileMode":438,"permissions":"rwm"}]}},{"name":"1","containerEdits":{"deviceNodes":[{"p'
    'ath":"/dev/nvidia1","major":195,"minor":1,"fileMode":438,"permissions":"rwm"}]}},{"name":"2","containerEdits":{"'
    'deviceNodes":[{"path":"/dev/nvidia2","major":195,"minor":2,"fileMode":438,"permissions":"rwm"}]}},{"name":"GPU-0'
    '000a100-1111-2222-3333-000000000000","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0","major":195,"fileMo'
    'de":438,"permissions":"rwm"}]}},{"name":"GPU-0000a101-1111-2222-3333-000000000001","containerEdits":{"deviceNode'
    's":[{"path":"/dev/nvidia1","major":195,"minor":1,"fileMode":438,"permissions":"rwm"}]}},{"name":"GPU-0000a102-11'
    '11-2222-3333-000000000002","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia2","major":195,"minor":2,"fileMo'
    'de":438,"permissions":"rwm"}]}},{"name":"all","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0","major":19'
    '5,"fileMode":438,"permissions":"rwm"},{"path":"/dev/nvidia1","major":195,"minor":1,"fileMode":438,"permissions":'
    '"rwm"},{"path":"/dev/nvidia2","major":195,"minor":2,"fileMode":438,"permissions":"rwm"}]}}],"containerEdits":{"e'
    'nv":["NVIDIA_CTK_LIBCUDA_DIR=/tmp/gfhmib9ph2d/lib","NVIDIA_VISIBLE_DEVICES=void"],"deviceNodes":[{"path":"/dev/n'
    'vidia-modeset","major":195,"minor":254,"fileMode":438,"permissions":"rwm"},{"path":"/dev/nvidia-uvm","major":510'
    ',"fileMode":438,"permissions":"rwm"},{"path":"/dev/nvidia-uvm-tools","major":510,"minor":1,"fileMode":438,"permi'
    'ssions":"rwm"},{"path":"/dev/nvidiactl","major":195,"minor":255,"fileMode":438,"permissions":"rwm"}],"hooks":[{"'
    'hookName":"createContainer","path":"/work/main/.cache/toolkit/bin/nvidia-cdi-hook","args":["nvidia-cdi-hook","cr'
    'eate-symlinks","--link","libcuda.so.1::/tmp/gfhmib9ph2d/lib/libcuda.so","--link","libcuda.so.535.171.04::/tmp/gf'
    'hmib9ph2d/lib/libcuda.so.1","--link","libnvidia-ml.so.535.171.04::/tmp/gfhmib9ph2d/lib/libnvidia-ml.so.1"],"env"'
    ':["NVIDIA_CTK_DEBUG=false"]},{"hookName":"createContainer","path":"/work/main/.cache/toolkit/bin/nvidia-cdi-hook'
    '","args":["nvidia-cdi-hook","enable-cuda-compat","--host-driver-version=535.171.04"],"env":["NVIDIA_CTK_DEBUG=fa'
    'lse"]},{"hookName":"createContainer","path":"/work/main/.cache/toolkit/bin/nvidia-cdi-hook","args":["nvidia-cdi-'
    'hook","update-ldcache","--folder","/tmp/gfhmib9ph2d/lib"],"env":["NVIDIA_CTK_DEBUG=false"]},{"hookName":"createC'
    'ontainer","path":"/work/main/.cache/toolkit/bin/nvidia-cdi-hook","args":["nvidia-cdi-hook","disable-device-node-'
    'modification"],"env":["NVIDIA_CTK_DEBUG=false"]},{"hookName":"createContainer","path":"/work/main/.cache/toolkit'
    '/bin/nvidia-cdi-hook","args":["nvidia-cdi-hook","update-application-profile"],"env":["NVIDIA_CTK_DEBUG=false"]}]'
    ',"mounts":[{"hostPath":"/tmp/gfhmib9ph2d/lib/libcuda.so.535.171.04","containerPath":"/tmp/gfhmib9ph2d/lib/libcud'
    'a.so.535.171.04","options":["ro","nosuid","nodev","rbind","rprivate"]},{"hostPath":"/tmp/gfhmib9ph2d/lib/libnvid'
    'ia-ml.so.535.171.04","containerPath":"/tmp/gfhmib9ph2d/lib/libnvidia-ml.so.535.171.04","options":["ro","nosuid",'
    '"nodev","rbind","rprivate"]}]}}'
)

UUIDS = ['GPU-0000a100-1111-2222-3333-000000000000', 'GPU-0000a101-1111-2222-3333-000000000001',
         'GPU-0000a102-1111-2222-3333-000000000002']
# The first lines of the same spec as nvidia-ctk writes it by default (YAML).
SPEC_YAML = '---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n    - name: "0"\n'


def facts(gpus=3, driver='535.171.04'):
    """The host as the collection reads it (_gpu.read_proc_gpus: index, uuid, minor) plus the driver version."""
    return {'driver_version': driver,
            'gpus': [{'index': i, 'uuid': 'GPU-%08x-1111-2222-3333-%012x' % (0xA100 + i, i), 'minor': i,
                      'pci_bus_id': '00000000:%02X:00.0' % (i + 1)} for i in range(gpus)]}


def spec(edit=None):
    """The real spec, changed by ``edit(document)``, as JSON text."""
    document = json.loads(SPEC_JSON)
    if edit:
        edit(document)
    return json.dumps(document)


def mig_spec():
    """GPU 0 in MIG mode with two MIG devices (its parent node and a cap node each), GPUs 1 and 2 whole."""
    document = json.loads(SPEC_JSON)
    whole = [d for d in document['devices'] if d['name'] not in ('0', UUIDS[0], 'all')]
    mig = []
    for j, cap in ((0, 21), (1, 30)):
        edits = {'deviceNodes': [{'path': '/dev/nvidia0', 'major': 195},
                                 {'path': '/dev/nvidia-caps/nvidia-cap%d' % cap, 'major': 238, 'minor': cap}]}
        for name in ('0:%d' % j, 'MIG-0000000%d-aaaa-bbbb-cccc-000000000000' % j):
            mig.append({'name': name, 'containerEdits': copy.deepcopy(edits)})
    nodes = []
    for device in mig + whole:
        for node in device['containerEdits']['deviceNodes']:
            if node not in nodes:
                nodes.append(node)
    document['devices'] = whole + mig + [{'name': 'all', 'containerEdits': {'deviceNodes': nodes}}]
    return json.dumps(document)


def mig_facts():
    host = facts()
    host['gpus'][0].update(mig_enabled=True, mig_devices=[
        {'index': j, 'uuid': 'MIG-0000000%d-aaaa-bbbb-cccc-000000000000' % j} for j in (0, 1)])
    return host


# -- reading ---------------------------------------------------------------

def test_the_real_spec_is_read():
    summary = cdi.parse_spec(SPEC_JSON)
    assert summary['cdi_version'] == '0.5.0' and summary['kind'] == 'nvidia.com/gpu'
    assert summary['devices'] == ['0', '1', '2'] + UUIDS + ['all']
    assert summary['device_nodes']['1'] == [{'path': '/dev/nvidia1', 'major': 195, 'minor': 1}]
    assert summary['device_nodes'][UUIDS[0]] == [{'path': '/dev/nvidia0', 'major': 195, 'minor': 0}]
    assert [n['path'] for n in summary['device_nodes']['all']] == ['/dev/nvidia0', '/dev/nvidia1', '/dev/nvidia2']
    assert summary['common_device_nodes'] == ['/dev/nvidia-modeset', '/dev/nvidia-uvm', '/dev/nvidia-uvm-tools',
                                              '/dev/nvidiactl']
    assert (summary['driver_version'], summary['driver_version_source']) == ('535.171.04', 'hook')


def test_bytes_read_as_text():
    assert cdi.parse_spec(SPEC_JSON.encode('utf-8')) == cdi.parse_spec(SPEC_JSON)


def drop_hooks(document):
    del document['containerEdits']['hooks']


def drop_compat_hook(document):
    hooks = document['containerEdits']['hooks']
    hooks[:] = [h for h in hooks if h['args'][1] != 'enable-cuda-compat']


@pytest.mark.parametrize('edit', [drop_hooks, drop_compat_hook])
def test_without_the_compat_hook_the_version_comes_from_the_libraries(edit):
    summary = cdi.parse_spec(spec(edit))
    assert (summary['driver_version'], summary['driver_version_source']) == ('535.171.04', 'libraries')


def test_a_spec_without_libraries_or_hooks_names_no_version():
    def bare(document):
        drop_hooks(document)
        del document['containerEdits']['mounts']
    summary = cdi.parse_spec(spec(bare))
    assert (summary['driver_version'], summary['driver_version_source']) == (None, None)
    assert cdi.stale_reasons(summary, facts()) == ['the spec names no driver version (the driver is 535.171.04)']


def set_at(path, value):
    """An edit that sets document[path...] = value (a path of keys and indexes)."""
    def edit(document):
        target = document
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return edit


def delete_at(path):
    def edit(document):
        target = document
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
    return edit


def two_hook_versions(document):
    document['containerEdits']['hooks'].append({'hookName': 'createContainer', 'path': '/usr/bin/nvidia-cdi-hook',
                                                'args': ['nvidia-cdi-hook', 'enable-cuda-compat',
                                                         '--host-driver-version=550.163.01']})


def two_library_versions(document):
    drop_hooks(document)
    document['containerEdits']['mounts'][0]['hostPath'] = '/usr/lib/x86_64-linux-gnu/libcuda.so.550.163.01'


MALFORMED = [
    ('', 'is empty'),
    ('{"cdiVersion": "0.5.0",', 'not valid JSON'),
    (SPEC_YAML, 'is YAML'),
    ('[]', 'the CDI spec is a list, not an object'),
    (b'\xff\xfe', 'not UTF-8'),
    (spec(delete_at(['cdiVersion'])), 'cdiVersion is missing'),
    (spec(set_at(['cdiVersion'], 5)), 'cdiVersion is a number'),
    (spec(set_at(['cdiVersion'], 'five')), "cdiVersion 'five' is not a version"),
    (spec(delete_at(['kind'])), 'kind is missing'),
    (spec(set_at(['kind'], 'nvidia.com')), "kind 'nvidia.com' is not vendor/class"),
    (spec(delete_at(['devices'])), 'has no devices list'),
    (spec(set_at(['devices'], {'0': {}})), 'devices is an object, not a list'),
    (spec(set_at(['devices', 2], 'gpu2')), 'devices[2] is a string, not an object'),
    (spec(delete_at(['devices', 1, 'name'])), 'devices[1].name is missing'),
    (spec(set_at(['devices', 1, 'name'], '')), 'devices[1].name is empty'),
    (spec(set_at(['devices', 1, 'name'], '0')), "devices[1]: the device name '0' is already used"),
    (spec(set_at(['devices', 0, 'containerEdits'], [])), 'devices[0].containerEdits is a list'),
    (spec(delete_at(['devices', 0, 'containerEdits', 'deviceNodes', 0, 'path'])),
     'devices[0].containerEdits.deviceNodes[0].path is missing'),
    (spec(set_at(['devices', 2, 'containerEdits', 'deviceNodes', 0, 'minor'], -2)),
     'devices[2].containerEdits.deviceNodes[0].minor is -2, not a device number'),
    (spec(set_at(['devices', 2, 'containerEdits', 'deviceNodes', 0, 'major'], True)), 'major is True'),
    (spec(set_at(['containerEdits', 'hooks'], 'all')), 'containerEdits.hooks is a string, not a list'),
    (spec(set_at(['containerEdits', 'hooks', 1, 'args', 2], 535)), 'containerEdits.hooks[1].args holds a number'),
    (spec(delete_at(['containerEdits', 'mounts', 0, 'hostPath'])), 'containerEdits.mounts[0].hostPath is missing'),
    (spec(two_hook_versions), 'hooks name two driver versions: 535.171.04, 550.163.01'),
    (spec(two_library_versions), 'libraries of two versions: 535.171.04, 550.163.01'),
]


@pytest.mark.parametrize('text, message', MALFORMED, ids=[m for _t, m in MALFORMED])
def test_a_malformed_spec_is_refused_naming_what_is_wrong(text, message):
    with pytest.raises(cdi.CdiSpecError) as raised:
        cdi.parse_spec(text)
    assert message in str(raised.value)


def test_the_error_is_a_value_error_and_ours():
    with pytest.raises(ValueError):
        cdi.parse_spec('{')
    with pytest.raises(GpufleetError):
        cdi.parse_spec('{')


def test_an_empty_device_list_is_read_and_is_stale():
    summary = cdi.parse_spec(spec(set_at(['devices'], [])))
    assert summary['devices'] == []
    assert cdi.stale_reasons(summary, facts(1)) == ['GPU 0 (%s) is not in the spec' % UUIDS[0],
                                                    'the spec has no "all" device']


# -- stale -----------------------------------------------------------------

def test_the_spec_of_this_host_is_fresh():
    assert cdi.stale_reasons(cdi.parse_spec(SPEC_JSON), facts()) == []


def test_a_new_driver_makes_it_stale():
    assert cdi.stale_reasons(cdi.parse_spec(SPEC_JSON), facts(driver='550.163.01')) == [
        'the spec is for driver 535.171.04, the driver is 550.163.01']


def test_a_gpu_added_makes_it_stale():
    assert cdi.stale_reasons(cdi.parse_spec(SPEC_JSON), facts(4)) == [
        'GPU 3 (GPU-0000a103-1111-2222-3333-000000000003) is not in the spec']


def test_a_gpu_gone_makes_it_stale():
    assert cdi.stale_reasons(cdi.parse_spec(SPEC_JSON), facts(2)) == [
        'the spec\'s "all" device gives /dev/nvidia0, /dev/nvidia1, /dev/nvidia2, its GPUs /dev/nvidia0, /dev/nvidia1',
        'the spec has device 2, which no GPU of the host is',
        'the spec has device %s, which no GPU of the host is' % UUIDS[2]]


def test_a_gpu_with_another_minor_makes_it_stale():
    host = facts()
    host['gpus'][1]['minor'] = 5
    assert cdi.stale_reasons(cdi.parse_spec(SPEC_JSON), host) == [
        'GPU 1 (%s) is /dev/nvidia5, but the spec\'s device 1 gives /dev/nvidia1' % UUIDS[1],
        'GPU 1 (%s) is /dev/nvidia5, but the spec\'s device %s gives /dev/nvidia1' % (UUIDS[1], UUIDS[1])]


def test_another_uuid_at_an_index_makes_it_stale():
    host = facts()
    host['gpus'][2]['uuid'] = 'GPU-0000beef-1111-2222-3333-000000000002'
    assert cdi.stale_reasons(cdi.parse_spec(SPEC_JSON), host) == [
        'GPU 2 (GPU-0000beef-1111-2222-3333-000000000002) is in the spec only as 2 '
        '(missing: GPU-0000beef-1111-2222-3333-000000000002)',
        'the spec has device %s, which no GPU of the host is' % UUIDS[2]]


def test_mig_enabled_on_a_gpu_the_spec_has_whole_makes_it_stale():
    assert cdi.stale_reasons(cdi.parse_spec(SPEC_JSON), mig_facts()) == [
        'GPU 0 (%s) has MIG enabled, but the spec offers it whole as 0' % UUIDS[0],
        'GPU 0 (%s) has MIG enabled, but the spec offers it whole as %s' % (UUIDS[0], UUIDS[0]),
        'MIG device 0:0 (MIG-00000000-aaaa-bbbb-cccc-000000000000) of GPU 0 (%s) is not in the spec as 0:0, '
        'MIG-00000000-aaaa-bbbb-cccc-000000000000' % UUIDS[0],
        'MIG device 0:1 (MIG-00000001-aaaa-bbbb-cccc-000000000000) of GPU 0 (%s) is not in the spec as 0:1, '
        'MIG-00000001-aaaa-bbbb-cccc-000000000000' % UUIDS[0],
        'the spec\'s "all" device gives /dev/nvidia0, /dev/nvidia1, /dev/nvidia2, its GPUs /dev/nvidia1, /dev/nvidia2']


def test_the_mig_spec_is_fresh_for_its_layout():
    assert cdi.stale_reasons(cdi.parse_spec(mig_spec()), mig_facts()) == []


def test_mig_disabled_makes_the_mig_spec_stale():
    reasons = cdi.stale_reasons(cdi.parse_spec(mig_spec()), facts())
    assert reasons[0] == 'GPU 0 (%s) is not in the spec' % UUIDS[0]
    assert reasons[-4:] == ['the spec has MIG device %s, which no GPU of the host is' % name for name in (
        '0:0', 'MIG-00000000-aaaa-bbbb-cccc-000000000000', '0:1', 'MIG-00000001-aaaa-bbbb-cccc-000000000000')]


def test_a_mig_device_gone_makes_it_stale():
    host = mig_facts()
    del host['gpus'][0]['mig_devices'][1]
    assert cdi.stale_reasons(cdi.parse_spec(mig_spec()), host) == [
        'the spec\'s "all" device gives /dev/nvidia-caps/nvidia-cap21, /dev/nvidia-caps/nvidia-cap30, /dev/nvidia0, '
        '/dev/nvidia1, /dev/nvidia2, its GPUs /dev/nvidia-caps/nvidia-cap21, /dev/nvidia0, /dev/nvidia1, /dev/nvidia2',
        'the spec has MIG device 0:1, which no GPU of the host is',
        'the spec has MIG device MIG-00000001-aaaa-bbbb-cccc-000000000000, which no GPU of the host is']


def test_the_options_it_was_made_with_are_honoured():
    # --device-name-strategy uuid: only UUID names (and cdiVersion 0.3.0, the minimum nvidia-ctk sets for them).
    def uuid_only(document):
        document['devices'] = [d for d in document['devices'] if not d['name'].isdigit()]
        document['cdiVersion'] = '0.3.0'
    summary = cdi.parse_spec(spec(uuid_only))
    assert cdi.stale_reasons(summary, facts(), strategies=('uuid',)) == []
    assert cdi.stale_reasons(summary, facts())[0] == 'GPU 0 (%s) is in the spec only as %s (missing: 0)' % (
        UUIDS[0], UUIDS[0])
    # --no-all-device
    summary = cdi.parse_spec(spec(lambda d: d.update(devices=d['devices'][:-1])))
    assert cdi.stale_reasons(summary, facts(), all_device=False) == []
    assert cdi.stale_reasons(summary, facts()) == ['the spec has no "all" device']


def test_another_kind_is_stale():
    summary = cdi.parse_spec(spec(set_at(['kind'], 'example.com/gpu')))
    assert cdi.stale_reasons(summary, facts()) == ['the spec\'s kind is example.com/gpu, not nvidia.com/gpu']


def test_an_unknown_strategy_is_refused():
    with pytest.raises(cdi.CdiSpecError, match='give one or more of index, uuid, type-index'):
        cdi.stale_reasons(cdi.parse_spec(SPEC_JSON), facts(), strategies=('bogus',))


# -- running nvidia-ctk, the file ------------------------------------------

def test_generate_argv_asks_for_json_on_stdout():
    assert cdi.generate_argv('/usr/bin/nvidia-ctk') == [
        '/usr/bin/nvidia-ctk', '--quiet', 'cdi', 'generate', '--format', 'json', '--output=',
        '--device-name-strategy=index', '--device-name-strategy=uuid']
    assert cdi.generate_argv('nvidia-ctk', strategies=('type-index',), all_device=False)[-2:] == [
        '--device-name-strategy=type-index', '--no-all-device']
    with pytest.raises(cdi.CdiSpecError):
        cdi.generate_argv('nvidia-ctk', strategies=('uuid', 'uuid'))


@pytest.mark.parametrize('path, expected', [
    ('/var/run/cdi/nvidia.yaml', 'yaml'), ('/etc/cdi/nvidia.json', 'json'), ('/run/cdi/gpufleet-nvidia.json', 'json'),
])
def test_spec_format_follows_the_extension(path, expected):
    assert cdi.spec_format(path) == expected


@pytest.mark.parametrize('path, message', [
    ('nvidia.yaml', 'absolute path'),
    ('/etc/cdi/nvidia.yml', 'only <name>.json and <name>.yaml'),
    ('/etc/cdi/nvidia', 'only <name>.json and <name>.yaml'),
    ('/etc/cdi/.yaml', 'only <name>.json and <name>.yaml'),
    ('/etc/cdi/.hidden.yaml', 'only <name>.json and <name>.yaml'),
    ('/etc/cdi/sub/nvidia.yaml', 'only from /etc/cdi and /var/run/cdi'),
    ('/etc/cdi/../passwd.json', 'only from'),
    ('/tmp/nvidia.json', 'only from'),
    (None, 'absolute path'),
])
def test_a_spec_path_engines_would_not_read_is_refused(path, message):
    with pytest.raises(cdi.CdiSpecError) as raised:
        cdi.spec_format(path)
    assert message in str(raised.value)


def test_write_only_when_the_bytes_differ():
    assert cdi.needs_write(None, SPEC_JSON)
    assert not cdi.needs_write(SPEC_JSON, SPEC_JSON)
    assert not cdi.needs_write(SPEC_JSON.encode(), SPEC_JSON.encode())
    assert cdi.needs_write(SPEC_JSON + '\n', SPEC_JSON)
    assert cdi.needs_write(spec(set_at(['containerEdits', 'hooks', 1, 'args', 2], '--host-driver-version=550.163.01')),
                           SPEC_JSON)


# NVIDIA's own YAML (nvidia-ctk cdi generate 1.20.0 on the driver kit's fake host with 3 GPUs, its first device and
# the hook that names the driver; paths of the fake host tree shortened), outlined without PyYAML.
CTK_YAML = '''---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
    - name: "0"
      containerEdits:
        deviceNodes:
            - path: /dev/nvidia0
              major: 195
              fileMode: 438
              permissions: rwm
    - name: GPU-0000a100-1111-2222-3333-000000000000
      containerEdits:
        deviceNodes:
            - path: /dev/nvidia0
              major: 195
              fileMode: 438
              permissions: rwm
    - name: all
      containerEdits:
        deviceNodes:
            - path: /dev/nvidia0
              major: 195
              fileMode: 438
              permissions: rwm
containerEdits:
    hooks:
        - hookName: createContainer
          path: /usr/bin/nvidia-cdi-hook
          args:
            - nvidia-cdi-hook
            - enable-cuda-compat
            - --host-driver-version=535.171.04
          env:
            - NVIDIA_CTK_DEBUG=false
'''


def test_nvidia_ctks_yaml_is_outlined_without_a_yaml_parser():
    assert cdi.outline_yaml(CTK_YAML) == {'kind': 'nvidia.com/gpu', 'driver_version': '535.171.04',
                                          'devices': ['0', 'GPU-0000a100-1111-2222-3333-000000000000', 'all']}
    # what PyYAML reads from the same text
    import yaml
    document = yaml.safe_load(CTK_YAML)
    assert [d['name'] for d in document['devices']] == cdi.outline_yaml(CTK_YAML)['devices']


@pytest.mark.parametrize('text', [
    '',
    '{"kind": "nvidia.com/gpu"}',
    CTK_YAML.replace('    - name:', '  - name:'),  # another layout: nothing is guessed
    CTK_YAML.replace('kind: nvidia.com/gpu\n', ''),
    CTK_YAML + '            - --host-driver-version=550.163.01\n',  # two versions
])
def test_text_not_in_nvidia_ctks_layout_is_not_outlined(text):
    assert cdi.outline_yaml(text) is None
