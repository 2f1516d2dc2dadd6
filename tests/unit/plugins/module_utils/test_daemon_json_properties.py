# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Property tests: any daemon.json, in any layout, keeps everything and converges in one step."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from hypothesis import assume, given, settings, strategies as st

from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker import daemon_json as dj
from ansible_collections.gpufleet.nvidia.plugins.module_utils.formats import json_splice as splice

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-10 ** 30, max_value=10 ** 30),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=12)
# The user's own keys: neither ours nor ours in another case (refused: test_key_case.py).
USER_KEYS = st.text(min_size=1, max_size=16).filter(lambda key: dj.fold(key) not in [dj.fold(k) for k in dj.OUR_KEYS])
RUNTIME = st.fixed_dictionaries({'path': st.text(min_size=1, max_size=20)},
                                optional={'runtimeArgs': st.lists(st.text(max_size=6), max_size=3),
                                          'args': st.lists(st.text(max_size=6), max_size=3)})
RUNTIMES = st.dictionaries(st.sampled_from(['nvidia', 'crun', 'kata', 'sysbox-runc', 'youki']), RUNTIME, max_size=3)
LAYOUTS = st.sampled_from([
    dict(indent=None, separators=(',', ':')),
    dict(indent=None, separators=(', ', ': ')),
    dict(indent=2), dict(indent=4), dict(indent='\t'), dict(indent=3, separators=(',', ' : ')),
])


@st.composite
def documents(draw):
    config = draw(st.dictionaries(USER_KEYS, VALUES, max_size=6))
    if draw(st.booleans()):
        config['runtimes'] = draw(RUNTIMES)
    if draw(st.booleans()):
        config['default-runtime'] = draw(st.sampled_from(['nvidia', 'runc', 'crun']))
    if draw(st.booleans()):
        config['features'] = draw(st.dictionaries(st.sampled_from(['cdi', 'buildkit']), st.booleans(), max_size=2))
    items = list(config.items())
    order = draw(st.permutations(range(len(items))))
    config = dict(items[i] for i in order)
    text = json.dumps(config, ensure_ascii=draw(st.booleans()), **draw(LAYOUTS))
    text += draw(st.sampled_from(['', '\n', '\n\n']))
    if draw(st.booleans()):
        text = text.replace('\n', '\r\n')
    return config, text


PARAMS = st.fixed_dictionaries({
    'default_runtime': st.sampled_from([None, True, False]),
    'cdi': st.sampled_from([None, True, False]),
    'runtime_args': st.sampled_from([None, [], ['--debug']]),
    'runtime_path': st.sampled_from(['nvidia-container-runtime', '/usr/bin/nvidia-container-runtime']),
})


@settings(max_examples=300, deadline=None)
@given(documents(), PARAMS)
def test_merge_keeps_user_data_and_is_idempotent(document, params):
    config, text = document
    merged, unused = dj.merge_text(text, 'daemon.json', **params)
    result = dj.config_of(merged)
    for key, value in config.items():
        if key not in dj.OUR_KEYS:
            assert splice.same_value(result[key], value)
    for name, runtime in (config.get('runtimes') or {}).items():
        if name != 'nvidia':
            assert splice.same_value(result['runtimes'][name], runtime)
    assert result['runtimes']['nvidia']['path'] == params['runtime_path']
    if params['default_runtime'] is None:  # not given: left exactly as it was
        assert splice.same_value(result.get('default-runtime'), config.get('default-runtime'))
    else:
        assert (result.get('default-runtime') == 'nvidia') == params['default_runtime']
    if params['cdi'] is not None:
        assert result.get('features', {}).get('cdi', False) == params['cdi']
    assert [k for k in result if k in config] == [k for k in config if k in result]
    assert dj.merge_text(merged, 'daemon.json', **params)[0] == merged
    if '\r\n' in text:
        assert '\n' not in merged.replace('\r\n', '')
    removed, unused = dj.merge_text(merged, 'daemon.json', state='absent')
    assert 'nvidia' not in dj.config_of(removed).get('runtimes', {})
    assert dj.merge_text(removed, 'daemon.json', state='absent')[0] == removed


@settings(max_examples=200, deadline=None)
@given(documents())
def test_nothing_to_do_means_byte_identical(document):
    config, text = document
    merged, unused = dj.merge_text(text, 'daemon.json')
    again, unused = dj.merge_text(merged, 'daemon.json')
    assert again == merged
    if isinstance((config.get('runtimes') or {}).get('nvidia'), dict) and \
            config['runtimes']['nvidia']['path'] == 'nvidia-container-runtime':
        # default_runtime not given: a "default-runtime" the user set (nvidia or not) stays as it is.
        assert merged == text


@settings(max_examples=300, deadline=None)
@given(documents(), st.sampled_from([None, False]), st.sampled_from([None, [], ['--debug']]))
def test_add_then_remove_is_byte_identical(document, default_runtime, runtime_args):
    """Whatever the layout: registering the runtime where there was none, then state=absent, gives back the
    file byte for byte (with the "runtimes" object, when the runtime came with it)."""
    config, text = document
    runtimes = config.get('runtimes')
    # Not: ours already there, or an empty "runtimes" of the user's (documented: it goes).
    assume('nvidia' not in (runtimes or {}) and runtimes != {} and config.get('default-runtime') != 'nvidia')
    merged, unused = dj.merge_text(text, 'daemon.json', default_runtime=default_runtime, runtime_args=runtime_args)
    assert merged != text
    removed, unused = dj.merge_text(merged, 'daemon.json', state='absent')
    assert removed == text
