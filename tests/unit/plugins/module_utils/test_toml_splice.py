# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""formats.toml_splice: structure with spans, found without taking values for structure; splices keep every other byte."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.formats import toml_splice as ts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.formats import _tomli as tomli
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import DocumentError

CORPUS = os.path.join(os.path.dirname(__file__), '..', '..', 'fixtures', 'containerd')


def corpus_texts():
    """The real-world config.toml shapes that are valid TOML (and their containerd 1.6.20 dumps), LF and CRLF."""
    found = []
    for name in sorted(os.listdir(CORPUS)):
        if 'refused' in name:
            continue
        with open(os.path.join(CORPUS, name), 'rb') as handle:
            text = handle.read().decode('utf-8')
        found.append((name, text))
        found.append((name + ' (CRLF)', text.replace('\n', '\r\n')))
    return found


TRICKY = '''version = 2 # top
[proxy_plugins.stargz]
  address = """/run/x/
[not.a.header]
y = 1"""
  note = 'C:\\dir' # [nor.this]
[plugins."io.containerd.grpc.v1.cri"]
  list = [
    "a", # [comment.in.array]
    "b]",
  ]
  inline = { a = "}", b = [1, 2] }
  a."dotted.key".c = 1979-05-27 07:32:00Z
[[array.of.tables]]
  name = 'x'
'''


def test_headers_and_entries_are_found_where_they_are():
    doc = ts.scan(TRICKY)
    assert [(h.path, h.array) for h in doc.headers] == [
        (('proxy_plugins', 'stargz'), False),
        (('plugins', 'io.containerd.grpc.v1.cri'), False),
        (('array', 'of', 'tables'), True)]
    paths = [e.path for e in doc.entries]
    assert paths == [('version',), ('proxy_plugins', 'stargz', 'address'), ('proxy_plugins', 'stargz', 'note'),
                     ('plugins', 'io.containerd.grpc.v1.cri', 'list'),
                     ('plugins', 'io.containerd.grpc.v1.cri', 'inline'),
                     ('plugins', 'io.containerd.grpc.v1.cri', 'a', 'dotted.key', 'c'),
                     ('array', 'of', 'tables', 'name')]
    for entry in doc.entries:
        value = TRICKY[entry.value_start:entry.value_end]
        parsed = tomli.loads('v = ' + value)['v']
        assert parsed == _lookup(tomli.loads(TRICKY), entry)


def _lookup(values, entry):
    node = values
    for part in entry.path:
        node = node[part] if not isinstance(node, list) else node[-1][part]
    return node


def test_every_line_of_the_corpus_is_placed():
    for name, text in corpus_texts():
        tomli.loads(text)
        doc = ts.scan(text, name)
        # Every header line and every entry line is accounted for, in order, without overlap.
        spans = sorted([(h.start, h.end) for h in doc.headers] + [(e.start, e.end) for e in doc.entries])
        for first, second in zip(spans, spans[1:]):
            assert first[1] <= second[0], name


def test_crlf_is_the_newline_when_the_file_uses_it():
    assert ts.scan('a = 1\r\n[b]\r\nc = 2\r\n').newline == '\r\n'
    assert ts.scan('a = 1\n').newline == '\n'


def test_splice_keeps_every_other_byte():
    text = 'a = 1 # one\r\n[b]\r\n  c = "x"\r\n'
    doc = ts.scan(text)
    splice = ts.Splice(text)
    entry = doc.entry(('b', 'c'))
    splice.replace(entry.value_start, entry.value_end, ts.string('y'))
    splice.append_lines(['[d]', '  e = true'], doc.newline)
    out = splice.result()
    assert out == 'a = 1 # one\r\n[b]\r\n  c = "y"\r\n\r\n[d]\r\n  e = true\r\n'


def test_a_last_line_without_newline_gets_one_before_appended_lines():
    splice = ts.Splice('a = 1')
    splice.append_lines(['[b]'], '\n')
    assert splice.result() == 'a = 1\n\n[b]\n'


@pytest.mark.parametrize('text', ['\n', '\n\n', '  \n', 'a = 1\n\n', 'a = 1\r\n\r\n', 'a = 1\r\nb = 2\n'])
def test_appended_lines_get_a_blank_line_that_blank_line_before_finds_again(text):
    splice = ts.Splice(text)
    splice.append_lines(['[b]'], '\r\n' if '\r\n' in text else '\n')
    out = splice.result()
    begin = out.index('[b]')
    assert out[:ts.blank_line_before(out, begin)] == text


@pytest.mark.parametrize('text, start', [('\n[b]', 1), ('a\n\n[b]', 2), ('a\r\n\r\n[b]', 3), ('a\n\r\n[b]', 2),
                                         ('a\n[b]', 2), ('a\n \n[b]', 4), ('[b]', 0)])
def test_blank_line_before_is_one_empty_line_after_another_line(text, start):
    assert ts.blank_line_before(text, text.index('[b]')) == start


@pytest.mark.parametrize('value', ['plain', 'with "quotes"', 'back\\slash', 'tab\tnew\nline', u'\u00e9\u4e2d', '\x01'])
def test_written_strings_read_back(value):
    assert tomli.loads('k = %s' % ts.string(value))['k'] == value


@pytest.mark.parametrize('part, text', [('runc', 'runc'), ('io.containerd.grpc.v1.cri', '"io.containerd.grpc.v1.cri"'),
                                        ('a b', '"a b"'), ('', '""')])
def test_keys_are_quoted_only_when_needed(part, text):
    assert ts.quote_key(part) == text


def test_overlapping_edits_are_a_bug_not_a_file():
    splice = ts.Splice('abcdef')
    splice.replace(0, 3, 'x')
    splice.replace(2, 4, 'y')
    with pytest.raises(DocumentError):
        splice.result()
