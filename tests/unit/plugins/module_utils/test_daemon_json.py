# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""daemon.json merge: a corpus of real-world shapes, idempotence, absent, bad input."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker import daemon_json as dj
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files as host_files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import paths as host_paths
from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker import apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker import dockerd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.formats import json_splice as splice

FIXTURES = os.path.join(os.path.dirname(__file__), '..', '..', 'fixtures', 'daemon_json')
GOOD = sorted(os.listdir(os.path.join(FIXTURES, 'good')))
BAD = sorted(os.listdir(os.path.join(FIXTURES, 'bad')))
with open(os.path.join(FIXTURES, 'bad-expected-errors.json')) as _handle:
    BAD_EXPECTED = json.load(_handle)

PARAM_SETS = {
    'defaults': dict(),
    'default+cdi+args': dict(default_runtime=True, cdi=True, runtime_args=['--debug']),
    'other-path': dict(runtime_path='/usr/bin/nvidia-container-runtime', runtime_args=[], cdi=False),
}


def read(kind, name):
    """A fixture's text; ``*.crlf.json`` get CRLF line ends, ``*.bom.json`` a BOM (see the corpus README)."""
    with open(os.path.join(FIXTURES, kind, name), 'rb') as handle:
        text = handle.read().decode('utf-8')
    if '.crlf.' in name:
        text = text.replace('\n', '\r\n')
    if '.bom.' in name:
        text = splice.BOM + text
    return text


def load(text):
    return dj.config_of(text)


def test_corpus_is_big_enough():
    assert len(GOOD) >= 25
    assert set(BAD) == set(BAD_EXPECTED)


def _raw_members(text):
    """Raw text of each top-level member: ``{key: '"key": value'}``."""
    root = splice.parse_document(text)
    if root is None:
        return {}
    return dict((m.key, text[m.key_start:m.node.end]) for m in root.members)


def _trailing(text):
    body = text.rstrip(' \t\r\n')
    return text[len(body):]


def _expected(original, params, state='present'):
    """The config we expect, built on the parsed original with plain dict logic."""
    cfg = json.loads(json.dumps(original))
    name = params.get('name', 'nvidia')
    if state == 'absent':
        if isinstance(cfg.get('runtimes'), dict) and name in cfg['runtimes']:
            del cfg['runtimes'][name]
            if not cfg['runtimes']:  # emptied by this removal: it goes too
                del cfg['runtimes']
        if cfg.get('default-runtime') == name:
            del cfg['default-runtime']
        return cfg
    runtimes = cfg.setdefault('runtimes', {})
    entry = runtimes.get(name)
    path = params.get('runtime_path', 'nvidia-container-runtime')
    args = params.get('runtime_args')
    if isinstance(entry, dict):
        entry['path'] = path
        if args is not None and (args or 'runtimeArgs' in entry):
            entry['runtimeArgs'] = args
    else:
        runtimes[name] = {'path': path, 'runtimeArgs': args or []}
    if params.get('default_runtime'):
        cfg['default-runtime'] = name
    elif params.get('default_runtime') is False and cfg.get('default-runtime') == name:
        del cfg['default-runtime']
    cdi = params.get('cdi')
    if cdi is not None:
        features = cfg.get('features')
        if cdi or (isinstance(features, dict) and 'cdi' in features):
            cfg.setdefault('features', {})['cdi'] = cdi
    return cfg


@pytest.mark.parametrize('params_name', sorted(PARAM_SETS))
@pytest.mark.parametrize('name', GOOD)
def test_corpus_merge_preserves_everything(name, params_name):
    params = PARAM_SETS[params_name]
    text = read('good', name)
    original = load(text)
    merged, warnings = dj.merge_text(text, name, **params)
    result = load(merged)

    # Exactly the expected config: every original key/value kept, ours set.
    assert splice.same_value(result, _expected(original, params))
    # Key order: the original keys in their order, new keys appended.
    keys = list(splice.parse_document(merged).value) if splice.parse_document(merged) else []
    original_keys = [m.key for m in splice.parse_document(text).members] if splice.parse_document(text) else []
    original_keys = [key for key in original_keys if key in result]
    assert keys[:len(original_keys)] == original_keys
    # Untouched members keep their exact bytes (numbers, escapes, spacing).
    before_raw = _raw_members(text)
    for key, raw in before_raw.items():
        if key not in dj.OUR_KEYS:
            assert raw in merged, key
    # Nested: other runtimes and other features keep their exact bytes too.
    root = splice.parse_document(text)
    for outer in ('runtimes', 'features'):
        index, member = root.member(outer) if root else (None, None)
        if member is not None and member.node.kind == 'object':
            for inner in member.node.members:
                if inner.key not in ('nvidia', 'cdi'):
                    assert text[inner.key_start:inner.node.end] in merged
    # Same trailing whitespace, same line endings, same indentation characters.
    if text.strip():
        assert _trailing(merged) == _trailing(text)
    if '\r\n' in text:
        assert '\n' not in merged.replace('\r\n', '')
    if '\t' in text and '\n' in text.strip():
        assert not re.search(r'^ +"', merged, re.M)
    if root is not None and root.members and '\n' not in text.strip():
        assert '\n' not in merged.strip(), 'a one-line file stays one line'
    if text.startswith(splice.BOM):
        assert merged.startswith(splice.BOM)
    nvidia = (original.get('runtimes') or {}).get('nvidia')
    expected_warnings = 0
    if isinstance(nvidia, dict) and nvidia.get('args') and nvidia['args'] != params.get('runtime_args'):
        assert any('"args": ' in w and 'dockerd ignores' in w for w in warnings)
        expected_warnings += 1
    wanted_path = params.get('runtime_path', 'nvidia-container-runtime')
    if isinstance(nvidia, dict) and 'path' in nvidia and nvidia['path'] != wanted_path:
        # A path the user had is replaced: the warning names both.
        assert any(json.dumps(nvidia['path']) in w and json.dumps(wanted_path) in w for w in warnings)
        expected_warnings += 1
    assert len(warnings) == expected_warnings, warnings


@pytest.mark.parametrize('params_name', sorted(PARAM_SETS))
@pytest.mark.parametrize('name', GOOD)
def test_corpus_idempotent(name, params_name):
    params = PARAM_SETS[params_name]
    once, unused = dj.merge_text(read('good', name), name, **params)
    twice, unused = dj.merge_text(once, name, **params)
    assert twice == once


@pytest.mark.parametrize('name', GOOD)
def test_corpus_absent(name):
    text = read('good', name)
    original = load(text)
    removed, unused = dj.merge_text(text, name, state='absent')
    assert splice.same_value(load(removed), _expected(original, {}, state='absent'))
    again, unused = dj.merge_text(removed, name, state='absent')
    assert again == removed
    if 'nvidia' not in (original.get('runtimes') or {}) and original.get('default-runtime') != 'nvidia':
        assert removed == text, 'nothing to remove: byte-identical'


@pytest.mark.parametrize('name', GOOD)
def test_corpus_present_then_absent_keeps_user_data(name):
    text = read('good', name)
    original = load(text)
    merged, unused = dj.merge_text(text, name, default_runtime=True)
    removed, unused = dj.merge_text(merged, name, state='absent')
    result = load(removed)
    for key, value in original.items():
        if key in ('runtimes', 'default-runtime'):
            continue
        assert splice.same_value(result[key], value)
    others = dict((key, value) for key, value in (original.get('runtimes') or {}).items() if key != 'nvidia')
    if others:
        assert splice.same_value(result['runtimes'], others)
    else:
        assert 'runtimes' not in result, 'a "runtimes" object left empty goes with our runtime'
    assert 'default-runtime' not in result
    if 'nvidia' not in (original.get('runtimes') or {}) and 'default-runtime' not in original \
            and original.get('runtimes') != {} and text.strip(splice.BOM + ' \t\r\n'):
        assert removed == text, 'what we added is removed: the file as it was, byte for byte'


def test_unchanged_content_is_byte_identical():
    text = read('good', '33-node-generic-resources.json')
    merged, warnings = dj.merge_text(text, 'x', default_runtime=True, runtime_args=[])
    assert merged is text or merged == text
    assert warnings == []


def test_new_file_layout():
    merged, unused = dj.merge_text('', '/etc/docker/daemon.json')
    assert merged == ('{\n    "runtimes": {\n        "nvidia": {\n            "path": "nvidia-container-runtime",\n'
                      '            "runtimeArgs": []\n        }\n    }\n}\n')


def test_two_space_insert_matches_neighbours():
    text = '{\n  "debug": true\n}\n'
    merged, unused = dj.merge_text(text, 'x', default_runtime=True)
    assert merged == ('{\n  "debug": true,\n  "runtimes": {\n    "nvidia": {\n      "path": "nvidia-container-runtime",'
                      '\n      "runtimeArgs": []\n    }\n  },\n  "default-runtime": "nvidia"\n}\n')


def test_compact_insert():
    merged, unused = dj.merge_text('{"debug":true}', 'x')
    assert merged == '{"debug":true,"runtimes":{"nvidia":{"path":"nvidia-container-runtime","runtimeArgs":[]}}}'


def test_numbers_round_trip_byte_exact():
    text = read('good', '19-numbers-exotic.json')
    merged, unused = dj.merge_text(text, 'x')
    for raw in ('1.0e1', '1.0', '1e3', '123456789012345678901234567890', '-0.0', '1E-7'):
        assert raw in merged


def test_existing_runtime_path_replaced_in_place():
    text = read('good', '26-nvidia-other-path-args.json')
    merged, unused = dj.merge_text(text, 'x')
    assert merged == text.replace('/usr/local/nvidia/toolkit/nvidia-container-runtime', 'nvidia-container-runtime')


def test_runtime_args_none_keeps_existing_args():
    text = read('good', '26-nvidia-other-path-args.json')
    merged, unused = dj.merge_text(text, 'x', runtime_path='/usr/local/nvidia/toolkit/nvidia-container-runtime')
    assert merged == text
    merged, unused = dj.merge_text(text, 'x', runtime_path='/usr/local/nvidia/toolkit/nvidia-container-runtime',
                                   runtime_args=[])
    assert load(merged)['runtimes']['nvidia']['runtimeArgs'] == []


def test_default_false_leaves_other_default_alone():
    text = read('good', '11-other-runtimes-kata-crun.json')
    merged, unused = dj.merge_text(text, 'x', default_runtime=False)
    assert load(merged)['default-runtime'] == 'crun'
    removed, unused = dj.merge_text(merged, 'x', state='absent')
    assert load(removed)['default-runtime'] == 'crun'


def test_default_false_removes_our_default():
    text = read('good', '09-nvidia-ctk-default.json')
    merged, unused = dj.merge_text(text, 'x', default_runtime=False)
    assert 'default-runtime' not in load(merged)


def test_cdi_false_does_not_add_features():
    text = '{\n  "debug": true\n}\n'
    merged, unused = dj.merge_text(text, 'x', cdi=False)
    assert 'features' not in load(merged)


@pytest.mark.parametrize('text', [
    '{\n  "debug": true\n}\n',
    '{"debug": true, "features": {"buildkit": true}}',
    '{\r\n\t"features": {\r\n\t\t"buildkit": false\r\n\t}\r\n}\r\n',
    '{}',
])
def test_absent_with_cdi_gives_back_the_file_present_with_cdi_changed(text):
    merged, unused = dj.merge_text(text, 'x', cdi=True, default_runtime=True)
    assert load(merged)['features']['cdi'] is True
    removed, unused = dj.merge_text(merged, 'x', state='absent', cdi=True)
    assert removed == text


@pytest.mark.parametrize('cdi', [None, False])
def test_absent_without_cdi_true_leaves_features_cdi(cdi):
    text = '{"features": {"cdi": true}, "runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}'
    removed, unused = dj.merge_text(text, 'x', state='absent', cdi=cdi)
    assert load(removed) == {'features': {'cdi': True}}


def test_absent_with_cdi_leaves_a_false_features_cdi():
    text = '{"features": {"cdi": false}}\n'
    assert dj.merge_text(text, 'x', state='absent', cdi=True)[0] == text


def test_absent_on_missing_file_stays_missing():
    assert dj.merge_text('', 'x', state='absent')[0] == ''


@pytest.mark.parametrize('name', BAD)
def test_bad_input_fails_naming_file_and_problem(name, tmp_path):
    path = os.path.join(FIXTURES, 'bad', name)
    with pytest.raises(GpufleetError) as excinfo:
        text = apply.read_config(path).text
        dj.merge_text(text, path)
    message = str(excinfo.value)
    assert path in message
    assert BAD_EXPECTED[name] in message


def test_invalid_utf8_fails_naming_file(tmp_path):
    path = tmp_path / 'daemon.json'
    path.write_bytes(b'{"labels": ["caf\xe9"]}\n')
    with pytest.raises(GpufleetError, match=r'%s: not valid UTF-8' % path):
        apply.read_config(str(path))


def test_corpus_has_crlf_and_bom_variants():
    assert '\r\n' in read('good', '18-crlf-windows-editor.crlf.json')
    assert read('good', '35-bom.bom.json').startswith(splice.BOM)


def test_duplicate_key_message_is_explicit():
    with pytest.raises(GpufleetError, match=r'/etc/docker/daemon.json: duplicate key "debug"'):
        dj.merge_text('{"debug": true, "debug": false}', '/etc/docker/daemon.json')


def test_features_not_object_fails_when_cdi_set():
    with pytest.raises(GpufleetError, match=r'x.json: "features" must be a JSON object, found an array'):
        dj.merge_text('{"features": []}', 'x.json', cdi=True)
    assert dj.merge_text('{"features": []}', 'x.json')[0] != '{"features": []}'


@pytest.mark.parametrize('name', dj.RESERVED_RUNTIMES)
def test_reserved_names_refused(name):
    with pytest.raises(GpufleetError, match='reserved'):
        dj.merge_text('{}', 'x.json', name=name)


def test_style_detection():
    style = splice.Style('{\n\t"a": {\n\t\t"b": 1\n\t}\n}', splice.parse_document('{\n\t"a": {\n\t\t"b": 1\n\t}\n}'))
    assert style.unit == '\t' and not style.compact
    text = '{"a" : 1 , "b" : 2}'
    style = splice.Style(text, splice.parse_document(text))
    assert style.compact and style.kv_sep == ' : ' and style.item_sep == ' , '


# ---------------------------------------------------------------- files


def test_write_atomic_keeps_mode_and_follows_symlink(tmp_path):
    target = tmp_path / 'real.json'
    target.write_text('{}\n')
    os.chmod(str(target), 0o600)
    link = tmp_path / 'daemon.json'
    os.symlink(str(target), str(link))
    real = host_paths.resolve_path(str(link))
    assert real == str(target)
    host_files.write_atomic(real, b'{"a": 1}\n')
    assert os.path.islink(str(link))
    assert target.read_text() == '{"a": 1}\n'
    assert os.stat(str(target)).st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith('.tmp')] == []


def test_dangling_symlink_refused(tmp_path):
    link = tmp_path / 'daemon.json'
    os.symlink(str(tmp_path / 'missing.json'), str(link))
    with pytest.raises(GpufleetError, match='does not exist'):
        host_paths.resolve_path(str(link))


def test_new_file_mode(tmp_path):
    path = str(tmp_path / 'docker' / 'daemon.json')
    host_files.ensure_directory(path)
    host_files.write_atomic(path, b'{}\n')
    assert os.stat(str(tmp_path / 'docker')).st_mode & 0o777 == 0o755
    assert os.stat(path).st_mode & 0o777 == 0o644


def test_directory_is_not_a_file(tmp_path):
    with pytest.raises(GpufleetError, match='not a regular file'):
        apply.read_config(str(tmp_path))


# ---------------------------------------------------------------- flags and comparison


def test_flags_to_keys():
    flags = dockerd.flags_to_keys(['-H', 'fd://', '--containerd=/run/containerd/containerd.sock', '--add-runtime',
                                   'nvidia=/usr/bin/nvidia-container-runtime', '--default-runtime=nvidia', '-D',
                                   '--config-file', '/etc/docker/daemon.json', '--log-opt', 'max-size=1m'])
    assert flags['hosts'] == '-H fd://'
    assert flags['runtimes'].startswith('--add-runtime')
    assert flags['default-runtime'] == '--default-runtime=nvidia'
    assert 'config-file' not in flags
    assert 'log-opts' in flags and 'debug' in flags


def test_flag_conflicts_fatal_only_for_what_we_introduce():
    flags = dockerd.flags_to_keys(['--default-runtime', 'runc', '-H', 'fd://'])
    fatal, pre = dj.flag_conflicts({'hosts': ['x']}, {'hosts': ['x'], 'default-runtime': 'nvidia'}, flags)
    assert len(fatal) == 1 and 'default-runtime' in fatal[0]
    assert len(pre) == 1 and 'hosts' in pre[0]


INFO_PLAIN = {'Runtimes': {'runc': {'path': 'runc'}, 'io.containerd.runc.v2': {'path': 'runc'}},
              'DefaultRuntime': 'runc'}
INFO_NVIDIA = {'Runtimes': {'runc': {'path': 'runc'}, 'nvidia': {'path': 'nvidia-container-runtime'}},
               'DefaultRuntime': 'nvidia'}


def test_compare_running_addition_is_reloadable():
    cfg = {'runtimes': {'nvidia': {'path': 'nvidia-container-runtime', 'runtimeArgs': []}}, 'default-runtime': 'nvidia'}
    diffs, removals = dj.compare_running(cfg, INFO_PLAIN, 'nvidia', 'present')
    assert len(diffs) == 2 and removals == []
    assert dj.compare_running(cfg, INFO_NVIDIA, 'nvidia', 'present') == ([], [])


def test_compare_running_removing_default_needs_restart():
    cfg = {'runtimes': {'nvidia': {'path': 'nvidia-container-runtime'}}}
    diffs, removals = dj.compare_running(cfg, INFO_NVIDIA, 'nvidia', 'present')
    assert diffs and removals
    diffs, removals = dj.compare_running({'runtimes': {}}, INFO_NVIDIA, 'nvidia', 'absent')
    assert any('removed' in r for r in removals)


def test_compare_running_args_differ():
    cfg = {'runtimes': {'nvidia': {'path': 'nvidia-container-runtime', 'runtimeArgs': ['--debug']}},
           'default-runtime': 'nvidia'}
    diffs, removals = dj.compare_running(cfg, INFO_NVIDIA, 'nvidia', 'present')
    assert len(diffs) == 1 and 'runtimeArgs' in diffs[0] and not removals


def test_dockerd_error_picks_fatal_lines():
    log = ('time="x" level=info msg="Starting up"\n'
           'unable to configure the Docker daemon with file /etc/docker/daemon.json: the following directives '
           'are specified both as a flag and in the configuration file: hosts\n')
    assert 'both as a flag' in dockerd.dockerd_error(log)


def test_compare_running_cdi_on_new_dockerd():
    cfg = {'runtimes': {'nvidia': {'path': 'nvidia-container-runtime'}}, 'features': {'cdi': True}}
    info = dict(INFO_PLAIN, Runtimes={'nvidia': {'path': 'nvidia-container-runtime'}}, CDISpecDirs=[])
    diffs, removals = dj.compare_running(cfg, info, 'nvidia', 'present')
    # dockerd sets CDI up when it starts (a SIGHUP leaves it as it was): a restart.
    assert len(diffs) == 1 and 'CDI' in diffs[0] and removals == ['dockerd reads features.cdi only when it starts']
    info['CDISpecDirs'] = ['/etc/cdi', '/var/run/cdi']
    assert dj.compare_running(cfg, info, 'nvidia', 'present') == ([], [])


@pytest.mark.parametrize('version, cdi_on, differs', [
    ('26.1.5+dfsg1', True, True),    # CDI off by default on 26: a dockerd running with it on must restart
    ('26.1.5+dfsg1', False, False),
    ('28.5.2+dfsg3', True, False),   # on by default from 28
    ('28.5.2+dfsg3', False, True),
])
def test_compare_running_without_features_cdi_uses_dockerds_default(version, cdi_on, differs):
    """The file without features.cdi (absent took ours out): the running dockerd must have its release's default."""
    cfg = {'debug': True}
    info = dict(INFO_PLAIN, ServerVersion=version, CDISpecDirs=['/etc/cdi', '/var/run/cdi'] if cdi_on else [])
    diffs, removals = dj.compare_running(cfg, info, 'nvidia', 'absent')
    if differs:
        assert len(diffs) == 1 and 'by default on dockerd %s' % version in diffs[0], diffs
        assert removals == ['dockerd reads features.cdi only when it starts']
    else:
        assert (diffs, removals) == ([], [])


def test_compare_running_without_features_cdi_left_to_a_feature_flag():
    info = dict(INFO_PLAIN, ServerVersion='26.1.5', CDISpecDirs=['/etc/cdi'])
    assert dj.compare_running({}, info, 'nvidia', 'absent', {'features': '--feature cdi=true'}) == ([], [])


# ---------------------------------------------------------------- defaults, warnings, bad input, paths


def test_default_not_given_keeps_the_users_default():
    text = read('good', '09-nvidia-ctk-default.json')
    assert load(text)['default-runtime'] == 'nvidia'
    merged, unused = dj.merge_text(text, 'x')
    assert load(merged)['default-runtime'] == 'nvidia'
    assert dj.merge_text(text, 'x', default_runtime=None)[0] == merged
    removed, unused = dj.merge_text(text, 'x', default_runtime=False)
    assert 'default-runtime' not in load(removed)
    assert apply.Request().default_runtime is None


def test_replacing_a_custom_runtime_path_warns_naming_both():
    text = '{"runtimes": {"nvidia": {"path": "/opt/nvidia/custom-runtime", "runtimeArgs": []}}}\n'
    merged, warnings = dj.merge_text(text, 'daemon.json')
    assert load(merged)['runtimes']['nvidia']['path'] == 'nvidia-container-runtime'
    assert len(warnings) == 1
    assert '"/opt/nvidia/custom-runtime"' in warnings[0] and '"nvidia-container-runtime"' in warnings[0]
    assert dj.merge_text(merged, 'daemon.json')[1] == []


@pytest.mark.parametrize('text', ['[' * 100000, '{"a":' * 100000 + '1' + '}' * 100000,
                                  '{"a": ' + '[' * 70 + ']' * 70 + '}'])
def test_deep_json_is_a_clean_error(text):
    with pytest.raises(GpufleetError, match='daemon.json: JSON nested deeper than 64 levels'):
        splice.parse_document(text, 'daemon.json')


def test_nesting_depth_skips_strings():
    assert splice.nesting_depth('{"a": "[[[{{{\\"[[", "b": [1, {"c": []}]}') == 4
    assert splice.nesting_depth('"unterminated [[[') == 0
    # A configuration as deep as the limit is fine.
    deep = '{"a": ' + '[' * 63 + ']' * 63 + '}'
    assert splice.parse_document(deep).value == {'a': json.loads('[' * 63 + ']' * 63)}


def test_large_file_is_a_clean_error(tmp_path):
    path = tmp_path / 'daemon.json'
    path.write_text('{"labels": ["%s"]}\n' % ('x' * dj.MAX_CONFIG_BYTES))
    with pytest.raises(GpufleetError, match='%s: the file is \\d+ bytes' % re.escape(str(path))):
        apply.read_config(str(path))


def test_fifo_is_not_read(tmp_path):
    path = str(tmp_path / 'daemon.json')
    os.mkfifo(path)
    with pytest.raises(GpufleetError, match='not a regular file'):
        apply.read_config(path)  # returns at once: opened non-blocking


def test_writable_directory_is_refused(tmp_path):
    directory = tmp_path / 'docker'
    directory.mkdir()
    for mode in (0o777, 0o775, 0o1777):
        os.chmod(str(directory), mode)
        with pytest.raises(GpufleetError, match='refusing to use the directory %s: it is writable by'
                           % re.escape(str(directory))):
            host_paths.resolve_path(str(directory / 'daemon.json'))
    os.chmod(str(directory), 0o755)
    assert host_paths.resolve_path(str(directory / 'daemon.json')) == str(directory / 'daemon.json')


def test_directory_or_file_owned_by_another_user_is_refused(tmp_path):
    directory = tmp_path / 'docker'
    directory.mkdir()
    path = directory / 'daemon.json'
    path.write_text('{}\n')
    os.chown(str(path), 4242, 4242)
    with pytest.raises(GpufleetError, match='the file %s: it is owned by uid 4242' % re.escape(str(path))):
        apply.read_config(str(path))
    os.chown(str(path), 0, 0)
    os.chmod(str(path), 0o646)
    with pytest.raises(GpufleetError, match='is writable by every user'):
        apply.read_config(str(path))
    os.chmod(str(path), 0o644)
    os.chown(str(directory), 4242, 4242)
    with pytest.raises(GpufleetError, match='directory %s: it is owned by uid 4242' % re.escape(str(directory))):
        host_paths.resolve_path(str(path))


def test_sticky_ancestor_is_fine_but_not_as_the_files_directory(tmp_path):
    sticky = tmp_path / 'sticky'
    sticky.mkdir()
    os.chmod(str(sticky), 0o1777)
    (sticky / 'docker').mkdir()
    assert host_paths.resolve_path(str(sticky / 'docker' / 'daemon.json')) == str(sticky / 'docker' / 'daemon.json')
    with pytest.raises(GpufleetError, match='refusing to use the directory'):
        host_paths.resolve_path(str(sticky / 'daemon.json'))


def test_links_followed_only_when_trusted(tmp_path):
    target = tmp_path / 'real.json'
    target.write_text('{}\n')
    link = tmp_path / 'daemon.json'
    os.symlink('real.json', str(link))
    assert host_paths.resolve_path(str(link)) == str(target)
    os.lchown(str(link), 4242, 4242)
    with pytest.raises(GpufleetError, match='the symbolic link %s: it is owned by uid 4242' % re.escape(str(link))):
        host_paths.resolve_path(str(link))
    # A link to a directory another user can write is refused at that directory.
    open_dir = tmp_path / 'open'
    open_dir.mkdir()
    os.chmod(str(open_dir), 0o777)
    dir_link = tmp_path / 'docker'
    os.symlink(str(open_dir), str(dir_link))
    with pytest.raises(GpufleetError, match='directory %s' % re.escape(str(open_dir))):
        host_paths.resolve_path(str(dir_link / 'daemon.json'))
    loop = tmp_path / 'loop'
    os.symlink('loop', str(loop))
    with pytest.raises(GpufleetError, match='too many levels'):
        host_paths.resolve_path(str(loop))


def test_ensure_directory_tolerates_a_concurrent_creator(tmp_path, monkeypatch):
    path = str(tmp_path / 'a' / 'b' / 'daemon.json')
    real_mkdir = os.mkdir

    def racing_mkdir(directory, mode=0o777):
        real_mkdir(directory, mode)  # another run made it first
        real_mkdir(directory, mode)

    monkeypatch.setattr(os, 'mkdir', racing_mkdir)
    assert host_files.ensure_directory(path) is False
    monkeypatch.setattr(os, 'mkdir', real_mkdir)
    assert os.path.isdir(os.path.dirname(path))


def test_ensure_directory_refuses_a_link_where_the_directory_should_be(tmp_path, monkeypatch):
    path = str(tmp_path / 'docker' / 'daemon.json')
    elsewhere = tmp_path / 'elsewhere'
    elsewhere.mkdir()
    os.chmod(str(elsewhere), 0o700)
    real_mkdir = os.mkdir

    def planted(directory, mode=0o777):
        os.symlink(str(elsewhere), directory)
        real_mkdir(directory, mode)

    monkeypatch.setattr(os, 'mkdir', planted)
    with pytest.raises(GpufleetError, match='is not a directory we can use'):
        host_files.ensure_directory(path)
    assert os.stat(str(elsewhere)).st_mode & 0o777 == 0o700


def test_write_failure_names_the_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / 'daemon.json'
    path.write_text('{"debug": true}\n')

    def full(tmp, dest):  # the label hook runs on the finished temp file, just before the rename
        raise OSError(28, 'No space left on device')

    with pytest.raises(GpufleetError, match='%s: cannot write: No space left on device' % re.escape(str(path))):
        host_files.write_atomic(str(path), b'{}\n', label=full)
    assert path.read_text() == '{"debug": true}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ['daemon.json']


def test_backup_copy_keeps_mode_and_content(tmp_path):
    path = tmp_path / 'daemon.json'
    path.write_text('{"debug": true}\n')
    os.chmod(str(path), 0o640)
    name = host_files.backup_copy(str(path))
    assert name.startswith(str(path) + '.%d.' % os.getpid()) and name.endswith('~')
    assert open(name).read() == '{"debug": true}\n' and os.stat(name).st_mode & 0o777 == 0o640


# --------------------------------------------------------------------------
# Removal gives back the user's file
# --------------------------------------------------------------------------

HAND_EDITED = (u'{\n\t"log-level":   "warn",\n   "labels": ["site=Z\u00fcrich", "owner=\\u00e9quipe-donn\u00e9es"],\n\n'
               u'\t"max-concurrent-downloads": 3,\n      "log-opts": {"max-size": "10m", "max-file": "3"},\n'
               u'   "debug": false\n}\n')
USER_FILES = {
    'hand-edited': HAND_EDITED,
    'hand-edited-crlf': HAND_EDITED.replace('\n', '\r\n'),
    'empty-object': '{}\n',
    'empty-object-no-newline': '{}',
    'empty-object-crlf': '{}\r\n',
    'one-member': '{\n  "debug": true\n}\n',
    'one-line': '{"debug": true, "log-level": "warn"}',
    'compact': '{"debug":true,"log-level":"warn"}\n',
    'tabs-crlf': '{\r\n\t"debug": true,\r\n\t"log-opts": {\r\n\t\t"max-size": "10m"\r\n\t}\r\n}\r\n',
    'odd-indent': '  {\n     "data-root" :  "/srv/docker",\n  "debug": false\n\n}\n\n',
    'other-runtimes': '{\n    "runtimes": {\n        "crun": {\n            "path": "/usr/bin/crun"\n        }\n    },\n'
                      '    "debug": true\n}\n',
    'other-runtimes-one-line': '{"runtimes": {"crun": {"path": "crun"}, "kata": {"path": "kata"}}}',
    'default-runtime-other': '{\n  "default-runtime": "crun",\n  "runtimes": {"crun": {"path": "crun"}}\n}\n',
}


@pytest.mark.parametrize('params_name', sorted(PARAM_SETS))
@pytest.mark.parametrize('name', sorted(USER_FILES))
def test_present_then_absent_gives_back_the_file(name, params_name):
    text = USER_FILES[name]
    params = dict(PARAM_SETS[params_name], cdi=None)  # features.cdi is not ours to remove
    if 'default-runtime' in text:
        params.pop('default_runtime', None)  # true would replace the user's default (see below)
    merged, unused = dj.merge_text(text, name, **params)
    assert merged != text
    removed, unused = dj.merge_text(merged, name, state='absent')
    assert removed == text


NVIDIA = '{"path": "nvidia-container-runtime"}'


@pytest.mark.parametrize('newline', ['\n', '\r\n'])
@pytest.mark.parametrize('before, after', [
    # "runtimes" holding only ours, first, middle, last and only member of the file.
    ('{\n  "runtimes": {"nvidia": %s},\n  "debug": true,\n  "x": 1\n}\n' % NVIDIA,
     '{\n  "debug": true,\n  "x": 1\n}\n'),
    ('{\n  "debug": true,\n  "runtimes": {\n    "nvidia": %s\n  },\n  "x": 1\n}\n' % NVIDIA,
     '{\n  "debug": true,\n  "x": 1\n}\n'),
    ('{\n  "debug": true,\n  "x": 1,\n\t"runtimes" :{ "nvidia": %s }\n}\n' % NVIDIA,
     '{\n  "debug": true,\n  "x": 1\n}\n'),
    ('{\n  "runtimes": {\n    "nvidia": %s\n  }\n}\n' % NVIDIA, '{}\n'),
    ('{"runtimes":{"nvidia":%s},"debug":true}' % NVIDIA, '{"debug":true}'),
    # Ours first, middle, last among other runtimes: "runtimes" stays, the others byte for byte.
    ('{\n  "runtimes": {\n    "nvidia": %s,\n    "crun": {"path": "crun"}\n  }\n}\n' % NVIDIA,
     '{\n  "runtimes": {\n    "crun": {"path": "crun"}\n  }\n}\n'),
    ('{"runtimes": {"a": {"path": "a"}, "nvidia": %s, "b": {"path": "b"}}}' % NVIDIA,
     '{"runtimes": {"a": {"path": "a"}, "b": {"path": "b"}}}'),
    ('{\n  "runtimes": {\n    "crun": {"path": "crun"},\n    "nvidia": %s\n  }\n}\n' % NVIDIA,
     '{\n  "runtimes": {\n    "crun": {"path": "crun"}\n  }\n}\n'),
    # With default-runtime naming ours, both go.
    ('{\n  "default-runtime": "nvidia",\n  "runtimes": {"nvidia": %s},\n  "debug": true\n}\n' % NVIDIA,
     '{\n  "debug": true\n}\n'),
])
def test_absent_removes_runtimes_it_empties_with_its_separator(before, after, newline):
    before, after = before.replace('\n', newline), after.replace('\n', newline)
    removed, unused = dj.merge_text(before, 'x', state='absent')
    assert removed == after
    assert dj.merge_text(removed, 'x', state='absent')[0] == removed


@pytest.mark.parametrize('text', ['{"runtimes": {}}\n', '{\n  "debug": true,\n  "runtimes": {\n  }\n}\n',
                                  '{\n  "runtimes": {"crun": {"path": "crun"}}\n}\n'])
def test_absent_leaves_runtimes_it_did_not_empty(text):
    """A "runtimes" object without our runtime (empty or not) is the user's: absent changes nothing."""
    assert dj.merge_text(text, 'x', state='absent')[0] == text


def test_users_empty_runtimes_does_not_come_back():
    """Documented: removal cannot tell an empty "runtimes" the user wrote from one we created (no hidden state);
    an object our removal empties goes. dockerd reads a missing "runtimes" as an empty one."""
    text = '{\n  "runtimes": {},\n  "debug": true\n}\n'
    merged, unused = dj.merge_text(text, 'x')
    removed, unused = dj.merge_text(merged, 'x', state='absent')
    assert removed == '{\n  "debug": true\n}\n'
    assert dj.merge_text(removed, 'x', state='absent')[0] == removed


def test_absent_does_not_restore_a_default_runtime_it_replaced():
    """Documented: default_runtime=true replaces the user's default-runtime, and absent removes a default-runtime
    naming ours; the earlier value is not remembered (no hidden state), so dockerd's own default (runc) applies."""
    text = '{\n  "default-runtime": "runc-systemd",\n  "runtimes": {"runc-systemd": {"path": "runc"}}\n}\n'
    merged, unused = dj.merge_text(text, 'x', default_runtime=True)
    assert load(merged)['default-runtime'] == 'nvidia'
    removed, unused = dj.merge_text(merged, 'x', state='absent')
    assert removed == '{\n  "runtimes": {"runc-systemd": {"path": "runc"}}\n}\n'
