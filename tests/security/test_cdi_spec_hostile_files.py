"""A hostile CDI spec on the host cannot crash cdi_spec or exhaust the host (issue 45, defect 4).

cdi_spec reads the spec file already at its path to say why it is stale (and, for ``state: absent``, whether it
is NVIDIA's). Whoever or whatever wrote that file (another tool, a restored backup, a hand edit) is not
nvidia-ctk, so its text is untrusted: a YAML date made the old reader raise TypeError, 5000 nested lists
RecursionError, and a 700-byte alias bomb expanded to about 13 GB before any check.

Each test writes one hostile file at the spec path of a host tree in a root-owned sandbox and runs the module's
own run (``apply.CdiRun.converge``, with the tree as its root, nvidia-ctk a stand-in printing NVIDIA's real
spec) in a child process under a 1 GiB address-space limit (RLIMIT_AS) and a timeout. The run must end
cleanly and quickly: the spec reported stale with a reason that names the file and says what is wrong, then
replaced by nvidia-ctk's (check mode: left as it is); or, for a file the host layer does not read at all (larger
than the reader takes, not UTF-8), refused with a message naming the file, the file left as it is. A traceback,
MemoryError or timeout in the child fails the test.
"""

import json
import os
import re
import resource
import subprocess
import sys
import time

import pytest
import yaml

import fakehost

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import spec as spec_mod
from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import apply
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.test_cdi import SPEC_JSON

ADDRESS_SPACE = 1 << 30
TIMEOUT = 60
SPEC = '/var/run/cdi/nvidia.yaml'
SPEC_AS_JSON = '/var/run/cdi/nvidia.json'
# nvidia-ctk's spec as YAML (NVIDIA's real JSON fixture, as YAML: the file's own format).
GENERATED_YAML = '---\n' + yaml.safe_dump(json.loads(SPEC_JSON), default_flow_style=False, sort_keys=False)

# The classic billion laughs: 9 levels of 9 aliases, 9**9 "lol"s once expanded; it stands where the devices go.
ALIAS_BOMB = 'cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n' + 'lol1: &lol1 [%s]\n' % ','.join(['"lol"'] * 9) + ''.join(
    'lol%d: &lol%d [%s]\n' % (level, level, ','.join(['*lol%d' % (level - 1)] * 9)) for level in range(2, 10)
) + 'devices: *lol9\n'

# 5000 nested flow collections: libyaml refuses them itself at 1000 levels, before ours does at 65 (PyYAML's own
# parser: ours).
NESTED_5000 = (r' (is nested deeper than 64 levels|is not YAML: while increasing flow level exceeded maximum nesting '
               r'depth .*)[)]')

# The child: one cdi_spec run on the host tree argv[1] for the spec argv[2], nvidia-ctk printing the file argv[3];
# argv[4]: present, check (present in check mode) or absent; argv[5]: libyaml, or pure (PyYAML's own parser, as on
# a host without libyaml). Prints the outcome as JSON.
CHILD = r'''
import json, sys, time
import yaml
if sys.argv[5] == 'pure':
    del yaml.CSafeLoader
from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError
root, path, generated, mode = sys.argv[1:5]
with open(generated) as handle:
    out = handle.read()
request = apply.Request(path=path, boot=False, state='absent' if mode == 'absent' else 'present')
run = apply.CdiRun(request, lambda argv, data=None: (0, '', ''), lambda argv: (0, out, ''), None, {},
                        check_mode=mode == 'check', root=root, host='h1')
start = time.monotonic()
try:
    result = run.converge()
    answer = {'outcome': 'ran', 'stale': result['stale'], 'actions': result['actions'],
              'warnings': result['warnings']}
except GpufleetError as exc:
    answer = {'outcome': 'refused', 'msg': str(exc)}
answer['seconds'] = time.monotonic() - start
print(json.dumps(answer))
'''


@pytest.fixture(autouse=True, params=['libyaml', 'pure'])
def parser(request):
    if request.param == 'libyaml' and not getattr(yaml, '__with_libyaml__', False):
        pytest.skip('PyYAML here has no libyaml')
    return request.param


def limit_address_space():
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def host_tree(sandbox, path, content):
    """A host tree: root-owned nvidia-ctk, spec directory and PATH directories; ``content`` at ``path``."""
    for directory in ('usr/bin', 'usr/local/sbin', 'usr/local/bin', 'usr/sbin', 'sbin', 'bin',
                      os.path.dirname(path).lstrip('/')):
        os.makedirs(os.path.join(sandbox, directory), mode=0o755, exist_ok=True)
    ctk = os.path.join(sandbox, 'usr/bin/nvidia-ctk')
    with open(ctk, 'w') as handle:
        handle.write('#!/bin/sh\n')
    os.chmod(ctk, 0o755)
    generated = os.path.join(sandbox, 'generated')
    with open(generated, 'w') as handle:
        handle.write(SPEC_JSON if path.endswith('.json') else GENERATED_YAML)
    spec = os.path.join(sandbox, path.lstrip('/'))
    with open(spec, 'wb') as handle:
        handle.write(content if isinstance(content, bytes) else content.encode('utf-8'))
    os.chmod(spec, 0o644)
    return spec, generated


def run_child(sandbox, path, generated, mode, parser):
    """The run's answer; fails the test on a traceback, a limit hit or a timeout."""
    env = dict(os.environ, PYTHONPATH=fakehost.COLLECTIONS_DIR, PYTHONDONTWRITEBYTECODE='1')
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, '-c', CHILD, sandbox, path, generated, mode, parser], env=env,
                              preexec_fn=limit_address_space, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail('the run was still going after %ds' % TIMEOUT, pytrace=False)
    assert proc.returncode == 0, 'the run died (rc %d) after %.1fs: %s' % (
        proc.returncode, time.monotonic() - start, proc.stderr[-3000:])
    return json.loads(proc.stdout)


def assert_stale_and_replaced(sandbox, parser, path, content, wrong):
    """In check mode: stale, naming the file and what is ``wrong`` (a pattern), and nothing written; then replaced
    by nvidia-ctk's."""
    spec, generated = host_tree(sandbox, path, content)
    expected = re.escape('the spec on the host (%s) cannot be read as a CDI spec (the CDI spec' % path) + wrong
    answer = run_child(sandbox, path, generated, 'check', parser)
    print(json.dumps(answer))
    assert answer['outcome'] == 'ran' and answer['actions'] == ['write_spec'], answer
    assert len(answer['stale']) == 1 and re.match(expected, answer['stale'][0]), answer
    with open(spec, 'rb') as handle:
        assert handle.read() == (content if isinstance(content, bytes) else content.encode('utf-8'))
    answer = run_child(sandbox, path, generated, 'present', parser)
    assert answer['outcome'] == 'ran' and re.match(expected, answer['stale'][0]), answer
    with open(spec) as handle, open(generated) as wanted:
        assert handle.read() == wanted.read()
    assert oct(os.stat(spec).st_mode & 0o7777) == oct(0o644)


def test_a_yaml_alias_bomb_is_refused_unexpanded(sandbox, parser):
    assert 600 <= len(ALIAS_BOMB) <= 800
    assert_stale_and_replaced(sandbox, parser, SPEC, ALIAS_BOMB, ' has a YAML anchor or alias at line 3 ')


def test_a_yaml_alias_bomb_is_left_by_absent_saying_why(sandbox, parser):
    spec, generated = host_tree(sandbox, SPEC, ALIAS_BOMB)
    answer = run_child(sandbox, SPEC, generated, 'absent', parser)
    assert answer['outcome'] == 'ran' and answer['actions'] == [], answer
    assert answer['warnings'] == ['%s cannot be read as a CDI spec (the CDI spec has a YAML anchor or alias at line '
                                  '3 (nvidia-ctk writes none)): left as it is' % SPEC]
    with open(spec) as handle:
        assert handle.read() == ALIAS_BOMB


def test_a_yaml_date_is_read_as_text(sandbox, parser):
    # Where the spec names a version, a date is a bad version; where it holds free text, it is text.
    dated = GENERATED_YAML.replace('cdiVersion: 0.5.0', 'cdiVersion: 2024-01-01')
    assert dated != GENERATED_YAML
    assert_stale_and_replaced(sandbox, parser, SPEC, dated,
                              "'s cdiVersion '2024-01-01' is not a version such as 0[.]5[.]0")
    spec, generated = host_tree(sandbox, SPEC, GENERATED_YAML + 'created: 2024-01-01 10:00:00\n')
    answer = run_child(sandbox, SPEC, generated, 'check', parser)
    assert answer['outcome'] == 'ran' and answer['stale'] == ["the devices' nodes, libraries or hooks changed"]


def test_5000_nested_flow_lists_are_refused(sandbox, parser):
    # libyaml stops a flow collection 1000 levels deep itself; PyYAML's own parser meets ours at 65.
    assert_stale_and_replaced(sandbox, parser, SPEC, 'cdiVersion: 0.5.0\ndevices: ' + '[' * 5000 + ']' * 5000 + '\n',
                              NESTED_5000)


def test_5000_nested_block_mappings_are_refused(sandbox, parser):
    text = ''.join(' ' * level + 'k:\n' for level in range(5000))  # 12.5 MB, under the 16 MiB the reader takes
    assert_stale_and_replaced(sandbox, parser, SPEC, text, ' is nested deeper than 64 levels[)]')


def test_5000_nested_block_sequences_are_refused(sandbox, parser):
    assert_stale_and_replaced(sandbox, parser, SPEC, 'devices:\n' + '- ' * 5000 + 'x\n',
                              ' is nested deeper than 64 levels[)]')


def test_a_deeply_nested_json_spec_is_refused(sandbox, parser):
    text = '{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":%s}' % ('[' * 5000 + ']' * 5000)
    assert_stale_and_replaced(sandbox, parser, SPEC_AS_JSON, text, ' is nested deeper than 64 levels[)]')


def test_a_deeply_nested_json_text_in_a_yaml_spec_is_refused(sandbox, parser):
    # JSON is YAML: the CDI library reads a .yaml file that holds JSON.
    text = '{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":%s}' % ('[' * 5000 + ']' * 5000)
    assert_stale_and_replaced(sandbox, parser, SPEC, text, NESTED_5000)


def test_an_integer_of_a_million_digits_is_refused(sandbox, parser):
    assert_stale_and_replaced(sandbox, parser, SPEC_AS_JSON, '{"cdiVersion":%s}' % ('1' * 1000000),
                              ' holds an integer of 1000000 characters, more than 64[)]')
    assert_stale_and_replaced(sandbox, parser, SPEC, 'cdiVersion: %s\n' % ('1' * 1000000),
                              ' holds an integer of 1000000 characters, more than 64[)]')


def test_a_yaml_file_of_a_million_values_is_refused(sandbox, parser):
    assert_stale_and_replaced(sandbox, parser, SPEC, '[' + '0,' * 1000000 + '0]', ' holds more than 100000 values[)]')


@pytest.mark.parametrize('path', [SPEC, SPEC_AS_JSON])
def test_a_spec_that_is_not_utf8_is_refused_naming_the_file(sandbox, parser, path):
    content = b'cdiVersion: "\xff\xfe"\n'
    spec, generated = host_tree(sandbox, path, content)
    answer = run_child(sandbox, path, generated, 'present', parser)
    assert answer['outcome'] == 'refused' and path in answer['msg'] and 'not valid UTF-8' in answer['msg'], answer
    with open(spec, 'rb') as handle:
        assert handle.read() == content
    reasons = apply.stale_reasons(content, spec_mod.parse_spec(SPEC_JSON), spec_mod.spec_format(path), path)
    assert reasons[0].startswith('the spec on the host (%s) cannot be read as a CDI spec (the CDI spec is not UTF-8 '
                                 'text' % path)


@pytest.mark.parametrize('path', [SPEC, SPEC_AS_JSON])
def test_a_spec_over_the_size_limit_is_refused_naming_the_file(sandbox, parser, path):
    content = '[' * (spec_mod.MAX_SPEC_BYTES + 1)
    spec, generated = host_tree(sandbox, path, content)
    answer = run_child(sandbox, path, generated, 'present', parser)
    assert answer['outcome'] == 'refused' and path in answer['msg'] and 'refused' in answer['msg'], answer
    assert os.path.getsize(spec) == spec_mod.MAX_SPEC_BYTES + 1
    reasons = apply.stale_reasons(content, spec_mod.parse_spec(SPEC_JSON), spec_mod.spec_format(path), path)
    assert reasons == ['the spec on the host (%s) cannot be read as a CDI spec (the CDI spec is 16777217 characters, '
                       'more than the 16777216 this reader takes)' % path]
