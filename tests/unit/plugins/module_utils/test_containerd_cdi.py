# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""containerd.cdi's plans: enable_cdi and cdi_spec_dirs set in place behind a marker, added to the file's CRI
table, or written in the block; put back byte for byte by ``cdi: false`` and ``state: absent``.

The dumps are shaped as the real ones (measured with 1.6.20, 1.7.24 and 2.1.9: docs/containerd.md); the real
binaries check the same plans in tests/containerd/test_containerd_cdi_real.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import dirs as cdi_dirs
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import cdi as containerd_cdi
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import config as cd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import effective as containerd_effective
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import plan as containerd_plan
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import DocumentError

V17 = (1, 7, 24)
V2 = (2, 1, 9)
DIRS = ['/etc/cdi', '/var/run/cdi']
RUNC = '''[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
'''
# The CRI table as `containerd config default` (1.7.24) writes it, cut to the lines that matter here.
DEFAULT_17 = '''version = 2

[plugins]

  [plugins."io.containerd.grpc.v1.cri"]
    cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
    device_ownership_from_security_context = false
    enable_cdi = false
    sandbox_image = "registry.k8s.io/pause:3.8"

    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
          runtime_type = "io.containerd.runc.v2"
'''
# A kubeadm-style file: the CRI table, no CDI key.
KUBE = '''version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"   # the kubelet's pause image
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
'''
# An installer's file: sub-tables of the CRI table only (the table itself defined implicitly).
NESTED = 'version = 2\n' + RUNC
SHAPES = {'default 1.7': DEFAULT_17, 'kubeadm': KUBE, 'nested': NESTED, 'minimal': 'version = 2\n'}


def dump(version=V17, enabled=None, dirs=None, nvidia=False):
    """A dump as containerd writes it: 1.7 (CDI off by default) or 2.x (on), with runc (and nvidia)."""
    schema = cd.dump_schema(version)
    values = {}
    node = values
    for part in schema.cri:
        node = node.setdefault(part, {})
    node.update(enable_cdi=version >= (2,) if enabled is None else enabled,
                cdi_spec_dirs=list(DIRS if dirs is None else dirs),
                containerd={'default_runtime_name': 'runc',
                            'runtimes': {'runc': {'runtime_type': cd.RUNC_V2, 'options': {}}}})
    if nvidia:
        node['containerd']['runtimes']['nvidia'] = {'runtime_type': cd.RUNC_V2,
                                                    'options': {'BinaryName': '/usr/bin/nvidia-container-runtime'}}
    return values


def effective(text, version=V17):
    """What containerd makes of ``text`` for CDI: its values over the defaults of ``version``."""
    values = cd.loads(text, 'x')
    schema = cd.choose_schema(version, values.get('version'), 'x')
    return dump(version, cd.get(values, schema.cri + ('enable_cdi',)), cd.get(values, schema.cri + ('cdi_spec_dirs',)))


def planned(text, version=V17, before=None, **options):
    options.setdefault('runtime_path', '/usr/bin/nvidia-container-runtime')
    config = cd.Config(text, 'config.toml')
    schema = cd.choose_schema(version, config.version, 'config.toml')
    request = apply.Request(path='config.toml', **options)
    return containerd_plan.plan(config, request, schema, effective(text, version) if before is None else before,
                                cd.dump_schema(version))


def variants(text):
    """The file as written, with CRLF, and without its final line ending."""
    return [text, text.replace('\n', '\r\n'), text.rstrip('\n'), text.replace('\n', '\r\n').rstrip('\r\n')]


def cdi_of(text, version=V17):
    state = containerd_cdi.cdi_state(effective(text, version), cd.dump_schema(version))
    return state['enabled'], state['spec_dirs']


@pytest.mark.parametrize('shape', sorted(SHAPES))
@pytest.mark.parametrize('variant', range(4))
def test_cdi_true_turns_it_on_once_and_false_and_absent_give_the_bytes_back(shape, variant):
    registered = planned(variants(SHAPES[shape])[variant]).text  # the runtime alone
    plan = planned(registered, cdi=True)
    assert plan.cdi_keys == ['enable_cdi']
    assert cdi_of(plan.text) == (True, DIRS)
    assert plan.text != registered and ('\r\n' not in registered or '\n' not in plan.text.replace('\r\n', ''))
    again = planned(plan.text, cdi=True)
    assert again.text == plan.text and again.changes == [] and again.cdi_keys == []
    assert planned(plan.text).text == plan.text                  # cdi omitted: left as it is
    off = planned(plan.text, cdi=False)
    assert off.text == registered and off.warnings == [] and off.cdi_keys == ['enable_cdi']
    assert planned(plan.text, state='absent').text == variants(SHAPES[shape])[variant]


def test_the_config_default_value_is_changed_in_place_behind_a_marker():
    plan = planned(planned(DEFAULT_17).text, cdi=True)
    assert '    %sfalse\n    enable_cdi = true\n' % cd.key_mark('enable_cdi') in plan.text
    assert plan.changes == ['enable_cdi set to true (was false)']
    assert cd.BEGIN not in plan.text.split('[plugins."io.containerd.grpc.v1.cri".containerd]')[0]


def test_a_cri_table_without_the_key_gets_it_added_behind_a_marker():
    plan = planned(planned(KUBE).text, cdi=True)
    assert ('  sandbox_image = "registry.k8s.io/pause:3.9"   # the kubelet\'s pause image\n  %s\n  enable_cdi = true\n'
            '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]' % cd.key_added('enable_cdi')) in plan.text
    assert plan.changes == ['enable_cdi = true added to [plugins."io.containerd.grpc.v1.cri"]']


@pytest.mark.parametrize('shape', ['nested', 'minimal'])
def test_no_cri_table_of_the_users_writes_it_in_the_block_after_the_runtimes(shape):
    plan = planned(SHAPES[shape], cdi=True, default_runtime=True, cdi_spec_dirs=['/opt/cdi'])
    block = plan.text[plan.text.index(cd.BEGIN):]
    indent = '    ' if shape == 'nested' else '  '   # the file's own step
    assert block.endswith('[plugins."io.containerd.grpc.v1.cri".containerd]\n%sdefault_runtime_name = "nvidia"\n'
                          '[plugins."io.containerd.grpc.v1.cri"]\n%senable_cdi = true\n'
                          '%scdi_spec_dirs = ["/etc/cdi", "/var/run/cdi", "/opt/cdi"]\n%s\n'
                          % (indent, indent, indent, cd.END))
    assert plan.changes == ['default_runtime_name = "nvidia" added',
                            'runtime "nvidia" added (plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia)',
                            'enable_cdi = true added (in the block)',
                            'cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi", "/opt/cdi"] added (in the block)']
    assert cdi_of(plan.text) == (True, DIRS + ['/opt/cdi'])
    # The block keeps its CDI lines on a run that leaves CDI alone, and drops them on cdi=false.
    assert planned(plan.text, default_runtime=True).text == plan.text
    off = planned(plan.text, default_runtime=True, cdi=False)
    assert off.changes == ['enable_cdi, cdi_spec_dirs removed from the block'], off.changes
    assert off.text == planned(SHAPES[shape], default_runtime=True).text


def test_a_version_3_file_on_2x_uses_the_cri_runtime_table():
    text = 'version = 3\n'
    plan = planned(text, version=V2, cdi=True, cdi_spec_dirs=['/opt/cdi'])
    assert '[plugins."io.containerd.cri.v1.runtime"]\n  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi", "/opt/cdi"]\n' \
        in plan.text
    assert 'enable_cdi' not in plan.text and plan.cdi_keys == ['cdi_spec_dirs']


@pytest.mark.parametrize('version', [V2, (2, 0, 0)])
def test_on_2x_cdi_is_on_by_default_and_nothing_is_written(version):
    registered = planned('version = 3\n', version=version).text
    plan = planned(registered, version=version, cdi=True)
    assert plan.text == registered and plan.changes == [] and plan.cdi_keys == []


@pytest.mark.parametrize('dirs, missing', [
    (['/etc/cdi', '/var/run/cdi'], []), (['/run/cdi'], []), (['/var/run/cdi/'], []), (['/etc/cdi/../cdi'], []),
    (['/opt/cdi', '/opt/cdi', '/run/cdi'], ['/opt/cdi']), ([], [])])
def test_run_cdi_is_var_run_cdi_and_a_list_that_reads_every_directory_is_left_alone(dirs, missing):
    assert cdi_dirs.missing_directories(DIRS, dirs) == missing
    plan = planned(planned(DEFAULT_17).text, cdi=True, cdi_spec_dirs=dirs)
    assert ('cdi_spec_dirs' in plan.cdi_keys) == bool(missing)


def test_a_users_list_that_lacks_a_directory_is_extended_in_place_and_put_back():
    original = KUBE.replace('[plugins."io.containerd.grpc.v1.cri"]\n', '[plugins."io.containerd.grpc.v1.cri"]\n'
                            '  cdi_spec_dirs = [\'/etc/cdi\']\n  enable_cdi = true\n')
    text = planned(original).text
    plan = planned(text, cdi=True)
    assert plan.cdi_keys == ['cdi_spec_dirs']
    assert "  %s['/etc/cdi']\n  cdi_spec_dirs = [\"/etc/cdi\", \"/var/run/cdi\"]\n" % cd.key_mark('cdi_spec_dirs') \
        in plan.text
    # Another list later: the marker keeps the first value, so cdi=false still gives the file's own back.
    wider = planned(plan.text, cdi=True, cdi_spec_dirs=['/opt/cdi'])
    assert wider.text.count(cd.key_mark('cdi_spec_dirs')) == 1
    assert cdi_of(wider.text)[1] == DIRS + ['/opt/cdi']
    assert planned(wider.text, cdi=False).text == text
    assert planned(wider.text, state='absent').text == original


def test_cdi_false_leaves_a_value_it_did_not_set_and_warns_when_it_is_on():
    text = planned(KUBE.replace('  sandbox', '  enable_cdi = true\n  sandbox')).text
    plan = planned(text, cdi=False)
    assert plan.text == text and plan.changes == []
    assert plan.warnings == ['config.toml: CDI (enable_cdi = true) was not switched on by this module (line 3 sets '
                             'it); it was left on.']
    on_2x = planned(planned('version = 3\n', version=V2).text, version=V2, cdi=False)
    assert on_2x.warnings and 'containerd 2.x has it on by default' in on_2x.warnings[0]
    assert planned(planned(DEFAULT_17).text, cdi=False).warnings == []   # off: nothing to say


def test_default_runtime_markers_keep_their_exact_text():
    # Files in the field carry these lines: the generalised markers must not change them.
    assert cd.DEFAULT_MARK == '# gpufleet.nvidia containerd_runtime: default_runtime_name was '
    assert cd.DEFAULT_ADDED == '# gpufleet.nvidia containerd_runtime: default_runtime_name added'
    plan = planned(planned(KUBE).text, default_runtime=True, cdi=True)
    assert cd.DEFAULT_MARK not in plan.text
    both = planned(planned(DEFAULT_17).text, default_runtime=True, cdi=True)
    assert '%s"runc"\n      default_runtime_name = "nvidia"' % cd.DEFAULT_MARK in both.text
    assert '%sfalse\n    enable_cdi = true' % cd.key_mark('enable_cdi') in both.text
    # Each marker puts back its own key only.
    assert planned(both.text, default_runtime=True, cdi=False).text == planned(DEFAULT_17, default_runtime=True).text


def test_absent_keeps_the_cdi_lines_while_another_runtime_stays_in_the_block():
    one = planned('version = 2\n', cdi=True)
    two = planned(one.text, name='nvidia-cdi')
    assert two.text.count('enable_cdi = true') == 1
    first_gone = planned(two.text, state='absent')
    assert 'enable_cdi = true' in first_gone.text and first_gone.cdi_keys == []
    assert planned(first_gone.text, name='nvidia-cdi', state='absent').text == 'version = 2\n'


def test_containerd_16_has_no_cdi_and_is_refused_naming_file_and_version():
    request = apply.Request(path='/etc/containerd/config.toml', cdi=True)
    before = dump()
    del before['plugins']['io.containerd.grpc.v1.cri']['enable_cdi']
    with pytest.raises(DocumentError, match=r'^/etc/containerd/config.toml: cdi=true, but the installed containerd '
                                            r'1.6.20 has no CDI \(its `config dump` has no enable_cdi'):
        containerd_cdi.check_cdi_request(request, request.path, before, cd.SCHEMAS[2], '1.6.20')
    containerd_cdi.check_cdi_request(apply.Request(cdi=False), 'f', before, cd.SCHEMAS[2], '1.6.20')  # nothing asked: fine
    with pytest.raises(DocumentError, match='must be absolute directories, not cdi'):
        containerd_cdi.check_cdi_request(apply.Request(cdi=True, cdi_spec_dirs=['cdi']), 'f', dump(), cd.SCHEMAS[2], '1.7.24')


def test_a_cri_table_written_with_dotted_keys_is_refused():
    text = 'version = 2\n[plugins]\n  "io.containerd.grpc.v1.cri".sandbox_image = "x"\n'
    with pytest.raises(DocumentError, match='line 3 writes the table plugins."io.containerd.grpc.v1.cri" with '
                                            'dotted keys'):
        planned(text, before=dump(), cdi=True)


def test_the_dump_check_accepts_exactly_the_cdi_keys_asked_for():
    request = apply.Request(cdi=True)
    schema = cd.SCHEMAS[2]
    before = dump(nvidia=True)
    assert containerd_effective.compare_effective(before, dump(nvidia=True, enabled=True), request, schema, 'runc', cdi_keys=['enable_cdi']) == []
    # A key the plan did not change may not move.
    assert containerd_effective.compare_effective(before, dump(nvidia=True, enabled=True, dirs=DIRS + ['/x']), request, schema, 'runc',
                                                  cdi_keys=['enable_cdi']) == ['plugins."io.containerd.grpc.v1.cri".cdi_spec_dirs changed']
    # What containerd did not take (an imported file wins): caught.
    assert containerd_effective.compare_effective(before, dump(nvidia=True, enabled=False), request, schema, 'runc', cdi_keys=['enable_cdi']) == [
        'enable_cdi is false, not true']
    assert containerd_effective.compare_effective(before, dump(nvidia=True, enabled=True, dirs=['/etc/cdi']), request, schema, 'runc',
                                                  cdi_keys=CD_KEYS) == ['cdi_spec_dirs ["/etc/cdi"] lacks /var/run/cdi']
    # Another CRI setting changed along: caught.
    other = dump(nvidia=True, enabled=True)
    other['plugins']['io.containerd.grpc.v1.cri']['sandbox_image'] = 'x'
    assert containerd_effective.compare_effective(before, other, request, schema, 'runc', cdi_keys=CD_KEYS) == [
        'plugins."io.containerd.grpc.v1.cri".sandbox_image added']
    # cdi=false/absent: the keys put back may change, to anything.
    assert containerd_effective.compare_effective(dump(nvidia=True, enabled=True), before, apply.Request(cdi=False), schema, 'runc',
                                                  cdi_keys=['enable_cdi']) == []
    assert containerd_effective.compare_effective(dump(nvidia=True, enabled=True), before, apply.Request(cdi=False), schema, 'runc') == [
        'plugins."io.containerd.grpc.v1.cri".enable_cdi changed']


CD_KEYS = list(cd.CDI_KEYS)


def test_the_result_reports_the_effective_cdi_state():
    assert containerd_cdi.cdi_state(dump(V2), cd.SCHEMAS[3]) == {'enabled': True, 'spec_dirs': DIRS}
    assert containerd_cdi.cdi_state(dump(), cd.SCHEMAS[2]) == {'enabled': False, 'spec_dirs': DIRS}
    assert containerd_cdi.cdi_state({'plugins': {'io.containerd.grpc.v1.cri': {'sandbox_image': 'x'}}}, cd.SCHEMAS[2]) is None
