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

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import spec as cdi
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError

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
    assert cdi.differences(summary, cdi.parse_spec(SPEC_JSON)) == ['driver 535.171.04, the spec names none']


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
    assert cdi.differences(summary, cdi.parse_spec(SPEC_JSON)) == [
        'devices not in the spec: 0, 1, 2, %s, all' % ', '.join(UUIDS)]


# -- stale: the spec on the host against the one nvidia-ctk generates now -------------------

def gpus_added(count):
    """The real spec as nvidia-ctk writes it with ``count`` GPUs more (indexes 3, 4, ...; their UUID names)."""
    def edit(document):
        whole = [d for d in document['devices'] if d['name'] != 'all']
        everything = document['devices'][-1]
        for index in range(3, 3 + count):
            node = {'path': '/dev/nvidia%d' % index, 'major': 195, 'minor': index, 'fileMode': 438,
                    'permissions': 'rwm'}
            uuid = 'GPU-%08x-1111-2222-3333-%012x' % (0xA100 + index, index)
            whole[index:index] = [{'name': str(index), 'containerEdits': {'deviceNodes': [node]}}]
            whole.append({'name': uuid, 'containerEdits': {'deviceNodes': [node]}})
            everything['containerEdits']['deviceNodes'].append(node)
        document['devices'] = whole + [everything]
    return cdi.parse_spec(spec(edit))


def test_a_new_driver_is_named():
    new = cdi.parse_spec(SPEC_JSON.replace('535.171.04', '550.163.01'))
    assert new['driver_version'] == '550.163.01'
    assert cdi.differences(cdi.parse_spec(SPEC_JSON), new) == ['driver 550.163.01, the spec names 535.171.04']


def test_a_gpu_added_or_gone_is_named_by_its_devices():
    old = cdi.parse_spec(SPEC_JSON)
    assert cdi.differences(old, gpus_added(1)) == [
        'devices not in the spec: 3, GPU-0000a103-1111-2222-3333-000000000003']
    assert cdi.differences(gpus_added(1), old) == [
        'devices in the spec that are gone: 3, GPU-0000a103-1111-2222-3333-000000000003']


def test_mig_turned_on_or_off_is_named_by_its_devices():
    whole, mig = cdi.parse_spec(SPEC_JSON), cdi.parse_spec(mig_spec())
    mig_names = ['0:0', 'MIG-00000000-aaaa-bbbb-cccc-000000000000', '0:1', 'MIG-00000001-aaaa-bbbb-cccc-000000000000']
    assert cdi.differences(whole, mig) == ['devices not in the spec: %s' % ', '.join(mig_names),
                                           'devices in the spec that are gone: 0, %s' % UUIDS[0]]
    assert cdi.differences(mig, whole) == ['devices not in the spec: 0, %s' % UUIDS[0],
                                           'devices in the spec that are gone: %s' % ', '.join(mig_names)]


def test_the_same_devices_and_driver_with_other_nodes_say_so():
    moved = cdi.parse_spec(SPEC_JSON.replace('"minor":1,', '"minor":5,'))
    assert cdi.differences(cdi.parse_spec(SPEC_JSON), moved) == ['the devices\' nodes, libraries or hooks changed']


def test_the_outline_of_nvidia_ctks_yaml_is_compared_the_same_way():
    old = cdi.outline_yaml(CTK_YAML)
    one_more = CTK_YAML.replace('    - name: all\n', '    - name: "1"\n    - name: all\n')
    new = cdi.outline_yaml(one_more.replace('535.171.04', '570.172.08'))
    assert cdi.differences(old, new) == ['driver 570.172.08, the spec names 535.171.04', 'devices not in the spec: 1']


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
                                          'devices': ['0', 'GPU-0000a100-1111-2222-3333-000000000000', 'all'],
                                          'sockets': []}
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


# --------------------------------------------------------------------------
# A hostile spec: bounded before anything is built (issue 45, defect 4)
# --------------------------------------------------------------------------

@pytest.fixture(params=['libyaml', 'pure'])
def yaml_loader(request, monkeypatch):
    """Both of PyYAML's parsers: libyaml's (most hosts) and PyYAML's own (a host without libyaml)."""
    import yaml
    if request.param == 'libyaml' and not getattr(yaml, '__with_libyaml__', False):
        pytest.skip('PyYAML here has no libyaml')
    monkeypatch.setattr(cdi, '_YAML_LOADER', [])
    if request.param == 'pure':
        monkeypatch.delattr(yaml, 'CSafeLoader', raising=False)
    yield request.param


def yaml_spec(edit=None, flow=False):
    """The real spec, changed by ``edit(document)``, as YAML (block style unless ``flow``)."""
    import yaml
    document = json.loads(spec(edit))
    return yaml.safe_dump(document, default_flow_style=flow, sort_keys=False)


def nested(levels, leaf=1, kind='list'):
    value = leaf
    for _level in range(levels):
        value = [value] if kind == 'list' else {'k': value}
    return value


def test_nvidia_ctks_yaml_is_read_as_its_json(yaml_loader):
    assert cdi.parse_yaml_spec(yaml_spec()) == cdi.parse_spec(SPEC_JSON)
    assert cdi.parse_yaml_spec(yaml_spec(flow=True)) == cdi.parse_spec(SPEC_JSON)
    assert cdi.parse_yaml_spec(SPEC_JSON) == cdi.parse_spec(SPEC_JSON)  # JSON text in a .yaml file
    assert cdi.parse_yaml_spec(SPEC_JSON.encode()) == cdi.parse_spec(SPEC_JSON)
    summary = cdi.parse_yaml_spec(CTK_YAML)
    assert dict((key, summary[key]) for key in ('kind', 'devices', 'driver_version', 'sockets')) == cdi.outline_yaml(
        CTK_YAML)


@pytest.mark.parametrize('kind', ['list', 'map'])
def test_a_spec_nested_64_levels_deep_is_read_and_65_refused(yaml_loader, kind):
    # The spec itself is the first level; an extra member holds the rest.
    at_limit = spec(set_at(['x'], nested(cdi.MAX_DEPTH - 1, kind=kind)))
    over = spec(set_at(['x'], nested(cdi.MAX_DEPTH, kind=kind)))
    assert cdi.parse_spec(at_limit) == cdi.parse_spec(SPEC_JSON)
    with pytest.raises(cdi.CdiSpecError, match='the CDI spec is nested deeper than 64 levels'):
        cdi.parse_spec(over)
    for flow in (False, True):
        assert cdi.parse_yaml_spec(yaml_spec(set_at(['x'], nested(cdi.MAX_DEPTH - 1, kind=kind)), flow)) == \
            cdi.parse_spec(SPEC_JSON)
        with pytest.raises(cdi.CdiSpecError, match='the CDI spec is nested deeper than 64 levels'):
            cdi.parse_yaml_spec(yaml_spec(set_at(['x'], nested(cdi.MAX_DEPTH, kind=kind)), flow))


@pytest.mark.parametrize('text', [
    '[' * 5000 + ']' * 5000,
    '{"a":' * 5000 + '1' + '}' * 5000,
    '- ' * 5000 + 'x\n',
    ''.join(' ' * level + 'k:\n' for level in range(5000)),
], ids=['flow lists', 'flow maps', 'block lists', 'block maps'])
def test_5000_levels_are_refused_not_a_recursion_error(yaml_loader, text):
    # libyaml refuses a flow collection 1000 levels deep itself; ours stops at 65 everywhere else.
    with pytest.raises(cdi.CdiSpecError, match='nested deeper than 64 levels|exceeded maximum nesting depth'):
        cdi.parse_yaml_spec(text)
    if text.startswith(('[', '{')):
        with pytest.raises(cdi.CdiSpecError, match='nested deeper than 64 levels'):
            cdi.parse_spec(text)


def test_brackets_inside_json_strings_are_text():
    assert cdi.parse_spec(spec(set_at(['x'], '[' * 5000 + '"\\"{' * 100))) == cdi.parse_spec(SPEC_JSON)


# A billion laughs cut to 3 levels (729 laughs once expanded), so that a reader that expanded it would not take the
# machine down with it; the full 9 levels run under a memory limit in tests/security/test_cdi_spec_hostile_files.py.
ALIAS_BOMB = 'lol1: &lol1 [%s]\n' % ', '.join(['"lol"'] * 9) + ''.join(
    'lol%d: &lol%d [%s]\n' % (level, level, ', '.join(['*lol%d' % (level - 1)] * 9)) for level in range(2, 4))


@pytest.mark.parametrize('text, line', [
    (ALIAS_BOMB, 1),
    ('cdiVersion: 0.5.0\nkind: &k nvidia.com/gpu\ndevices: []\n', 2),  # an anchor alone
    ('cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\nx: *undefined\n', 4),
])
def test_yaml_anchors_and_aliases_are_refused_before_anything_is_built(yaml_loader, text, line):
    with pytest.raises(cdi.CdiSpecError, match='has a YAML anchor or alias at line %d' % line):
        cdi.parse_yaml_spec(text)


@pytest.mark.parametrize('value', ['!!binary aGVsbG8=', '!!set {a, b}', '!!timestamp 2024-01-01', '!!str 0.5.0',
                                   '!!python/object/apply:os.system ["true"]', '!!omap [a: 1]', '! x', '!local x'])
def test_explicit_yaml_tags_are_refused(yaml_loader, value):
    with pytest.raises(cdi.CdiSpecError, match='has an explicit YAML tag at line 2'):
        cdi.parse_yaml_spec('cdiVersion: 0.5.0\nx: %s\nkind: nvidia.com/gpu\ndevices: []\n' % value)


def test_a_date_is_read_as_the_text_it_is(yaml_loader):
    with_date = yaml_spec() + 'created: 2024-01-01\nexpires: 2001-12-14t21:59:43.10-05:00\n'
    assert cdi.parse_yaml_spec(with_date) == cdi.parse_spec(SPEC_JSON)
    with pytest.raises(cdi.CdiSpecError, match="cdiVersion '2024-01-01' is not a version"):
        cdi.parse_yaml_spec(yaml_spec().replace('cdiVersion: 0.5.0', 'cdiVersion: 2024-01-01'))


def test_the_number_of_values_is_bounded(yaml_loader, monkeypatch):
    if yaml_loader == 'libyaml':  # PyYAML's own parser takes seconds for 100000 values
        with pytest.raises(cdi.CdiSpecError, match='the CDI spec holds more than 100000 values'):
            cdi.parse_yaml_spec('[%s]' % ','.join(['1'] * cdi.MAX_VALUES))
    monkeypatch.setattr(cdi, 'MAX_VALUES', 1000)
    # A flow list of n items is n + 1 YAML values; a mapping of n pairs 2n + 1.
    with pytest.raises(cdi.CdiSpecError, match='the CDI spec is a list, not an object'):
        cdi.parse_yaml_spec('[%s]' % ','.join(['1'] * 999))
    with pytest.raises(cdi.CdiSpecError, match='the CDI spec holds more than 1000 values'):
        cdi.parse_yaml_spec('[%s]' % ','.join(['1'] * 1000))
    with pytest.raises(cdi.CdiSpecError, match='the CDI spec holds more than 1000 values'):
        cdi.parse_yaml_spec('\n'.join('k%d: ""' % n for n in range(500)))


def test_the_number_of_json_values_is_bounded():
    with pytest.raises(cdi.CdiSpecError, match='the CDI spec is a list, not an object'):
        cdi.parse_spec('[%s]' % ','.join(['1'] * (cdi.MAX_VALUES // 2)))
    for many in ('[%s]' % ','.join(['1'] * (cdi.MAX_VALUES + 1)), '[%s]' % ','.join(['{}'] * cdi.MAX_VALUES),
                 '{%s}' % ','.join('"k%d":""' % n for n in range(cdi.MAX_VALUES))):
        with pytest.raises(cdi.CdiSpecError, match='the CDI spec holds more than 100000 values'):
            cdi.parse_spec(many)


def test_an_integer_of_more_than_64_characters_is_refused(yaml_loader):
    at_limit = spec(set_at(['x'], int('9' * cdi.MAX_INTEGER_CHARS)))
    assert cdi.parse_spec(at_limit) == cdi.parse_yaml_spec(at_limit) == cdi.parse_spec(SPEC_JSON)
    for text in (spec(set_at(['x'], int('9' * (cdi.MAX_INTEGER_CHARS + 1)))), '{"x": %s}' % ('1' * 100000)):
        for parse in (cdi.parse_spec, cdi.parse_yaml_spec):
            with pytest.raises(cdi.CdiSpecError, match='holds an integer of [0-9]+ characters, more than 64'):
                parse(text)


@pytest.mark.parametrize('text, message', [
    ('', 'is empty'),
    ('---\n# nothing\n', 'is empty'),
    (b'\xff\xfe', 'not UTF-8'),
    ('x' * (cdi.MAX_SPEC_BYTES + 1), 'is 16777217 characters, more than the 16777216'),
    ('a: [1, 2\n', 'not YAML: while parsing a flow sequence'),
    ('a: 0b_\n', 'not YAML: invalid literal for int()'),
    ('a: =\n', 'not YAML: could not determine a constructor'),
    ('a: "\x00"\n', 'not YAML: unacceptable character #x0000'),
    ('--- 1\n--- 2\n', 'not YAML: expected a single document'),
    ('[1, 2]', 'the CDI spec is a list, not an object'),
])
def test_yaml_that_is_no_spec_is_a_cdi_spec_error(yaml_loader, text, message):
    with pytest.raises(cdi.CdiSpecError) as raised:
        cdi.parse_yaml_spec(text)
    assert message in str(raised.value)


SOCKET_MOUNT = ('{"hostPath":"/run/nvidia-persistenced/socket","containerPath":"/run/nvidia-persistenced/socket",'
                '"options":["ro","nosuid","nodev","bind","noexec"]},')


def test_a_spec_without_the_daemons_socket_that_now_exists_is_stale_and_says_why():
    with_socket = cdi.parse_spec(SPEC_JSON.replace('"mounts":[', '"mounts":[' + SOCKET_MOUNT))
    without = cdi.parse_spec(SPEC_JSON)
    assert with_socket['sockets'] == ['/run/nvidia-persistenced/socket'] and without['sockets'] == []
    assert cdi.differences(without, with_socket) == [
        '/run/nvidia-persistenced/socket exists now and the spec does not mount it (made while its daemon was stopped)']
    assert cdi.differences(with_socket, without) == [
        'the spec mounts /run/nvidia-persistenced/socket, which is gone (its daemon stopped or removed)']
    # the driver's own reasons come first, the socket's after
    newer = dict(with_socket, driver_version='550.163.01')
    assert cdi.differences(without, newer)[0] == 'driver 550.163.01, the spec names 535.171.04'
    # a library path that merely ends like a socket elsewhere is not one
    other = cdi.parse_spec(SPEC_JSON.replace('"mounts":[', '"mounts":[' + SOCKET_MOUNT.replace(
        'nvidia-persistenced/socket', 'nvidia-persistenced/socket.bak')))
    assert other['sockets'] == []
