# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""containerd.config and containerd.plan on installer-style layouts: a second and third run change nothing, absent gives the exact bytes back.

The property test writes config.toml files the way installers and hand edits do (indentation by depth or flat, two
or four spaces or tabs, CRLF, comments, a last line without a line ending, trailing blanks) and checks the plans only;
tests/containerd/test_containerd_edges_real.py runs the same shapes against a real containerd.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest
from hypothesis import example, given, settings, strategies as st

from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import config as cd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import plan as containerd_plan
from ansible_collections.gpufleet.nvidia.plugins.module_utils.formats import toml_splice as ts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import DocumentError

V16 = (1, 6, 20)
V2 = (2, 1, 9)
RUNTIME = '/usr/bin/nvidia-container-runtime'

# An installer's layout: every table below [plugins] indented by its depth, no key in the tables above the runtimes
# (the shape that made the inserted default_runtime_name line the file's first key).
INSTALLER = '''version = 2
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".containerd]
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
          runtime_type = "io.containerd.runc.v2"
          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
            SystemdCgroup = true
'''
INSTALLERS = {
    'nested': INSTALLER,
    'nested, sandbox image': INSTALLER.replace('.cri"]\n', '.cri"]\n    sandbox_image = "registry.k8s.io/pause:3.9"\n', 1),
    'nested, tabs': INSTALLER.replace('  ', '\t'),
    'nested, CRLF, no final newline': INSTALLER.replace('\n', '\r\n')[:-2],
    'flat, keys indented four': INSTALLER.replace('\n  ', '\n').replace('\n    [', '\n[').replace('\n      [', '\n[')
                                         .replace('\n        [', '\n['),
    'version 1': INSTALLER.replace('version = 2\n', '').replace('"io.containerd.grpc.v1.cri"', 'cri'),
}


def dump_of(text, version=V16):
    """A stand-in for ``containerd config dump``: the file's runtimes (else runc), in the dump's schema."""
    values = cd.loads(text, 'x')
    file_schema = cd.choose_schema(version, values.get('version'), 'x')
    dschema = cd.dump_schema(version)
    runtimes = cd.get(values, file_schema.runtimes) or {'runc': {'runtime_type': cd.RUNC_V2, 'options': {}}}
    default = cd.get(values, file_schema.containerd + ('default_runtime_name',), 'runc')
    dump = {}
    node = dump
    for part in dschema.containerd:
        node = node.setdefault(part, {})
    node.update(default_runtime_name=default, runtimes=runtimes)
    return dump


def plan(text, state='present', default_runtime=None, version=V16, before=None):
    config = cd.Config(text, 'config.toml')
    schema = cd.choose_schema(version, config.version, 'config.toml')
    request = apply.Request(path='config.toml', runtime_path=RUNTIME, state=state, default_runtime=default_runtime)
    return containerd_plan.plan(config, request, schema, before or dump_of(text, version), cd.dump_schema(version))


@pytest.mark.parametrize('name', sorted(INSTALLERS))
@pytest.mark.parametrize('default_runtime', [True, None])
def test_a_second_and_third_run_change_nothing(name, default_runtime):
    text = INSTALLERS[name]
    first = plan(text, default_runtime=default_runtime)
    assert first.changes and first.text != text
    second = plan(first.text, default_runtime=default_runtime, before=dump_of(text))
    assert second.text == first.text and not second.changes, second.changes
    third = plan(second.text, default_runtime=default_runtime, before=dump_of(text))
    assert third.text == first.text and not third.changes
    assert plan(first.text, state='absent').text == text


def test_the_added_default_line_has_the_tables_indentation():
    first = plan(INSTALLER, default_runtime=True)
    assert ('    [plugins."io.containerd.grpc.v1.cri".containerd]\n      %s\n      default_runtime_name = "nvidia"\n'
            % cd.DEFAULT_ADDED) in first.text
    # The block's keys: one step (what the file uses) below its headers, which start at column 0.
    assert '\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n  runtime_type = ' in first.text


@pytest.mark.parametrize('newline', ['\n', '\r\n'])
@pytest.mark.parametrize('tail', ['  sandbox_image = "x"', '# the end', '   ', '[plugins."io.containerd.grpc.v1.cri".registry]'])
def test_absent_gives_back_a_file_without_a_final_newline(newline, tail):
    text = ('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n' + tail).replace('\n', newline)
    for default_runtime in (None, True):
        added = plan(text, default_runtime=default_runtime)
        assert added.text.count(cd.BEGIN + cd.NO_FINAL_NEWLINE) == 1
        assert plan(added.text, default_runtime=default_runtime, before=dump_of(text)).text == added.text
        assert plan(added.text, state='absent').text == text


def test_a_file_whose_last_table_gets_the_default_line_and_no_final_newline():
    text = 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  snapshotter = "overlayfs"'
    added = plan(text, default_runtime=True)
    assert cd.get(cd.loads(added.text, 'x'), cd.SCHEMAS[2].containerd) == {
        'snapshotter': 'overlayfs', 'default_runtime_name': 'nvidia',
        'runtimes': cd.get(cd.loads(added.text, 'x'), cd.SCHEMAS[2].runtimes)}
    assert plan(added.text, default_runtime=True, before=dump_of(text)).text == added.text
    assert plan(added.text, state='absent').text == text


# ---- many files: present, then present again, then absent --------------------------------------------------------

CRI_TABLES = [
    ('cri', [('sandbox_image', '"registry.k8s.io/pause:3.9"')]),
    ('containerd', [('snapshotter', '"overlayfs"')]),
    ('containerd', [('default_runtime_name', '"runc"'), ('snapshotter', '"overlayfs"')]),
    ('containerd', []),
    ('runc', [('runtime_type', '"io.containerd.runc.v2"')]),
    ('runc-options', [('SystemdCgroup', 'true')]),
    ('runc-options', [('SystemdCgroup', 'false'), ('BinaryName', '"/usr/bin/runc"')]),
]


@st.composite
def config_files(draw):
    version = draw(st.sampled_from([None, 1, 2]))
    cri = ('plugins', 'cri') if version in (None, 1) else ('plugins', 'io.containerd.grpc.v1.cri')
    paths = {'cri': cri, 'containerd': cri + ('containerd',), 'runc': cri + ('containerd', 'runtimes', 'runc'),
             'runc-options': cri + ('containerd', 'runtimes', 'runc', 'options')}
    step = draw(st.sampled_from(['', '  ', '    ', '\t']))
    nested = draw(st.booleans())
    lines = ['# config.toml'] if draw(st.booleans()) else []
    if version is not None:
        lines.append('version = %d' % version)
    if draw(st.booleans()):
        lines += ['root = "/var/lib/containerd"', '', '[grpc]', step + 'address = "/run/containerd/containerd.sock"']
    if draw(st.booleans()):
        lines.append('[plugins]')
    chosen = {}
    for name, keys in CRI_TABLES:
        if name not in chosen and draw(st.booleans()):
            chosen[name] = keys
    if 'runc-options' in chosen:
        chosen.setdefault('runc', CRI_TABLES[4][1])
    for name in ('cri', 'containerd', 'runc', 'runc-options'):
        if name not in chosen:
            continue
        path = paths[name]
        depth = (len(path) - 1) if nested else 0
        lines.append(step * depth + '[%s]' % ts.dotted(path))
        for key, value in chosen[name]:
            lines.append(step * (depth + 1) + '%s = %s' % (key, value))
            if draw(st.booleans()):
                lines.append(step * (depth + 1) + '# a comment')
        if draw(st.booleans()):
            lines.append('')
    text = '\n'.join(lines) + draw(st.sampled_from(['', '\n', '\n\n', '\n  ', '  ', '\n# end', ' # end']))
    if draw(st.booleans()):
        text = text.replace('\n', '\r\n')
    return text


@settings(max_examples=300, deadline=None)
@given(config_files(), st.sampled_from([None, True]))
@example('\n\n', None)  # found by hypothesis: a file of blank lines got the block without a blank line of its own
def test_any_file_present_twice_then_absent_gives_back_the_original_bytes(text, default_runtime):
    try:
        first = plan(text, default_runtime=default_runtime)
    except DocumentError as exc:
        assert 'dotted keys' in str(exc)  # a containerd table only implied by dotted keys: refused, set by hand
        return
    cd.loads(first.text, 'planned')
    again = plan(first.text, default_runtime=default_runtime, before=dump_of(text))
    assert again.text == first.text and not again.changes, again.changes
    assert plan(first.text, state='absent').text == text


# The block's blank line on top is the one right before its BEGIN line, whatever the text above ends with: a file of
# blank lines or blanks, blank lines at the end, CRLF, a last line ending in LF in a CRLF file, no final newline.
ENDINGS = ['', '\n', '\n\n', '\n\n\n', ' \n\n', '\t\n\n', '\n  \n', '  ', '\n  ', '\r\n', '\r\n\r\n', '\r\n\n',
           '\n\r\n', '\n# end\n\n']


@pytest.mark.parametrize('ending', ENDINGS)
@pytest.mark.parametrize('head', ['', 'version = 2', 'version = 2\r\n# CRLF above, LF at the end',
                                  '[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "x"'])
def test_blank_lines_and_line_endings_at_the_end_come_back(head, ending):
    text = head + ending
    for default_runtime in (None, True):
        first = plan(text, default_runtime=default_runtime)
        assert plan(first.text, default_runtime=default_runtime, before=dump_of(text)).text == first.text
        back = plan(first.text, state='absent')
        assert back.text == text and back.changes
        assert plan(back.text, state='absent').text == text


# ---- the messages ----------------------------------------------------------------------------------------------------

def test_an_empty_file_on_containerd_2_is_refused_for_what_it_is():
    config = cd.Config('', '/etc/containerd/config.toml')
    with pytest.raises(DocumentError) as caught:
        cd.choose_schema(V2, config.version, config.path)
    message = str(caught.value)
    assert 'has no "version" line (an empty file has none)' in message and 'version = 1' not in message
    assert 'put `version = 3` at the top of the file' in message


def test_absent_that_would_bring_back_a_broken_default_says_how_to_go_on():
    # The site's own default named a runtime that does not exist; default_runtime: true replaced it and kept it in
    # the marker. Putting it back would stop the CRI plugin: refused, naming the line and what to do.
    text = ('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  default_runtime_name = "custom"\n'
            '  snapshotter = "overlayfs"\n')
    added = plan(text, default_runtime=True, before=dump_of(text.replace('"custom"', '"runc"')))
    config = cd.Config(added.text, 'config.toml')
    back = plan(added.text, state='absent')
    assert back.text == text
    after = dump_of(text.replace('"custom"', '"runc"'))
    cd.get(after, cd.SCHEMAS[2].containerd)['default_runtime_name'] = 'custom'
    message = containerd_plan.dead_default(config, cd.SCHEMAS[2], after, cd.SCHEMAS[2], apply.Request(state='absent'))
    assert ('would leave default_runtime_name = "custom" (line 4 of config.toml, the value it had before this module '
            'set "nvidia")') in message
    assert ('set default_runtime_name at line 4 to a runtime that stays (runc) or remove it (containerd then uses '
            '"runc") and delete the comment line "%s..." above it, then run state=absent again'
            % cd.DEFAULT_MARK.strip()) in message
    assert containerd_plan.dead_default(config, cd.SCHEMAS[2], dump_of(text.replace('"custom"', '"runc"')), cd.SCHEMAS[2],
                                        apply.Request(state='absent')) is None
