"""Fuzzing the CDI spec reader: no spec text, however hostile, gets more than a CdiSpecError (issue 45, defect 4).

cdi_spec reads the spec on the host with ``cdi.apply.summarize`` (and ``stale_reasons``, which names the file in
what it reports). Hypothesis feeds them random and adversarial text: YAML- and JSON-ish characters; nesting of
flow and block collections up to thousands of levels, whole or cut short; dates, binary, sets, Python and local
tags, odd numbers; anchors, aliases and alias bombs; NVIDIA's real spec with such pieces spliced in; fragments
repeated thousands of times. With libyaml, with PyYAML's own parser, and without PyYAML (nvidia-ctk's layout read
line by line), each as a ``.yaml`` and a ``.json`` spec, the only outcomes allowed are a summary holding only
JSON's types or a CdiSpecError (a ValueError); any other exception, a call over 10 s or memory past 1 GiB more
than the test process already has fails the test. Derandomized (the same examples on every run) and without an
example database, so CI is reproducible and nothing is written.
"""

import json
import resource
import sys
import time

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import spec as spec_mod
from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import apply as cdi_apply
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.test_cdi import CTK_YAML, SPEC_JSON

PATHS = {'yaml': '/var/run/cdi/nvidia.yaml', 'json': '/etc/cdi/nvidia.json'}
NEW = spec_mod.parse_spec(SPEC_JSON)
SPEC_YAML = yaml.safe_dump(json.loads(SPEC_JSON), default_flow_style=False, sort_keys=False)
SECONDS = 10
HEADROOM = 1 << 30

CHARS = list('[]{}:,-?&*!|>\'"%@`#\n \t.0123456789abcxyzeETZ_+=<~\\/') + ['\x00', '\x85', '\u2028', '\ufeff', 'é']
SCALARS = [
    '2024-01-01', '2001-12-14t21:59:43.10-05:00', '2002-12-14 21:59:43.10 -5', '!!binary aGVsbG8=', '!!binary',
    '!!set {a, b}', '!!timestamp 2024-01-01', '!!python/object/apply:os.system ["true"]', '!!python/name:os.system',
    '!!omap [a: 1]', '!!pairs [a: 1]', '!!float 1', '!!int x', '!!null ""', '!!str', '! x', '!local x',
    '!<tag:yaml.org,2002:str> x', '.inf', '-.inf', '.nan', '0x_', '0b_', '0o17', '017', '1:30:00', '190:20:30.15',
    '1_000', '~', 'null', 'yes', 'No', 'on', '=', '<<: {a: 1}', '<<: [{a: 1}, {b: 2}]', '<<: 1', '"\\x00"', "'it''s'",
    '|\n  block\n', '>-\n  folded\n', '? complex\n: key', '? [a, b]\n: v', '? {a: 1}\n: v', '1e400', '-0', '+1',
    '9' * 70, '1' * 5000, '"%s"' % ('x' * 10000), '&a x', '*a', '&a [*a]', '[&a x, *a, *a]', '%YAML 1.1\n---\nx',
    '%TAG ! tag:example.com,2000:\n--- !x 1', '---\n...\n---', '--- 1\n--- 2', '"\\ud800"', '"\\U0010ffff"',
]
OPENERS = [('[', ']'), ('{a: ', '}'), ('{"a":', '}'), ('[1, ', ']'), ('{? ', ': 1}')]


def scalars():
    return st.sampled_from(SCALARS) | st.text(st.sampled_from(CHARS), max_size=20)


@st.composite
def nested(draw):
    """Collections nested up to 3000 levels (block mappings 400: their indentation grows), whole or cut short."""
    style = draw(st.sampled_from(['flow', 'block list', 'block map']))
    leaf = draw(scalars())
    if style == 'flow':
        pairs = draw(st.lists(st.sampled_from(OPENERS), min_size=1, max_size=3000))
        text = ''.join(opener for opener, _closer in pairs) + leaf + ''.join(closer for _opener, closer in pairs[::-1])
    elif style == 'block list':
        text = '- ' * draw(st.integers(1, 3000)) + leaf
    else:
        levels = draw(st.integers(1, 400))
        text = ''.join(' ' * level + 'k:\n' for level in range(levels)) + ' ' * levels + leaf
    if draw(st.booleans()):
        text = text[:draw(st.integers(0, len(text)))]
    return text


@st.composite
def alias_bombs(draw):
    levels, width = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    text = 'a0: &a0 [%s]\n' % ','.join(['"lol"'] * width) + ''.join(
        'a%d: &a%d [%s]\n' % (level, level, ','.join(['*a%d' % (level - 1)] * width)) for level in range(1, levels))
    return draw(st.sampled_from(['', 'cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n'])) + text + \
        draw(st.sampled_from(['', 'devices: *a%d\n' % (levels - 1)]))


def fragments():
    return (st.text(st.sampled_from(CHARS), max_size=300) | st.text(max_size=100) | scalars() | nested()
            | alias_bombs())


@st.composite
def spliced(draw):
    """NVIDIA's real spec (JSON, YAML as PyYAML or as nvidia-ctk writes it) with a fragment put in somewhere and,
    maybe, a piece taken out."""
    base = draw(st.sampled_from([SPEC_JSON, SPEC_YAML, CTK_YAML]))
    at = draw(st.integers(0, len(base)))
    cut = draw(st.integers(0, 40))
    return base[:at] + draw(fragments()) + base[at + cut:]


@st.composite
def revalued(draw):
    """NVIDIA's real spec as YAML with the value on one of its lines, or a new member, made a fragment: the spec
    around it stays whole."""
    lines = draw(st.sampled_from([SPEC_YAML, CTK_YAML])).splitlines(True)
    value = draw(scalars() | nested() | alias_bombs().map(lambda text: '\n' + text))
    if draw(st.booleans()):
        return ''.join(lines) + 'x: %s\n' % value
    at = draw(st.sampled_from([n for n, line in enumerate(lines) if ': ' in line]))
    lines[at] = lines[at].split(': ', 1)[0] + ': ' + value + '\n'
    return ''.join(lines)


@st.composite
def repeated(draw):
    return draw(fragments().filter(lambda text: len(text) < 200)) * draw(st.integers(1, 3000))


TEXTS = fragments() | spliced() | revalued() | repeated()


@pytest.fixture
def bounded_memory():
    """No more than HEADROOM more address space than the process has now, for the test."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open('/proc/self/statm') as handle:
        size = int(handle.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (size + HEADROOM, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def only_json_types(value):
    """Whether ``value`` holds only what JSON has (no date, bytes, set), iteratively."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            if not all(isinstance(key, str) for key in item):
                return False
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif item is not None and not isinstance(item, (str, int, float, bool)):
            return False
    return True


def read_every_way(text):
    """``summarize`` and ``stale_reasons`` of ``text`` as each format: a summary or a CdiSpecError, quickly."""
    for fmt, path in sorted(PATHS.items()):
        start = time.monotonic()
        try:
            summary = cdi_apply.summarize(text, fmt)
        except spec_mod.CdiSpecError as exc:
            assert isinstance(exc, ValueError) and str(exc)
        else:
            assert summary is None or (isinstance(summary, dict) and only_json_types(summary)), summary
        reasons = cdi_apply.stale_reasons(text, NEW, fmt, path)
        assert reasons and all(isinstance(reason, str) for reason in reasons), reasons
        if 'cannot be read' in reasons[0]:
            assert reasons[0].startswith('the spec on the host (%s) cannot be read as a CDI spec (' % path)
        assert time.monotonic() - start < SECONDS, 'took %.1fs' % (time.monotonic() - start)


@pytest.mark.parametrize('parser', ['libyaml', 'pure', 'no PyYAML'])
@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                                 HealthCheck.function_scoped_fixture])
@given(text=TEXTS)
def test_any_text_is_a_summary_or_a_cdi_spec_error(bounded_memory, parser, text):
    if parser == 'libyaml' and not getattr(yaml, '__with_libyaml__', False):
        pytest.skip('PyYAML here has no libyaml')
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(spec_mod, '_YAML_LOADER', [])
        if parser == 'pure':
            patch.delattr(yaml, 'CSafeLoader', raising=False)
        elif parser == 'no PyYAML':
            patch.setitem(sys.modules, 'yaml', None)
        read_every_way(text)


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300) | TEXTS.map(lambda text: text.encode('utf-8', 'surrogatepass')),
       garbage=st.sampled_from([b'', b'\xff', b'\xc3', b'\xed\xa0\x80']))
def test_any_bytes_are_a_summary_or_a_cdi_spec_error(bounded_memory, data, garbage):
    for parse in (spec_mod.parse_spec, spec_mod.parse_yaml_spec):
        try:
            summary = parse(data + garbage)
        except spec_mod.CdiSpecError:
            continue
        assert only_json_types(summary), summary
