# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""compiled_once: modules imported from a zip are compiled once each, and run as before."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import sys
import zipfile
import zipimport

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common import compile_once


@pytest.fixture
def archive(tmp_path, monkeypatch):
    path = tmp_path / 'payload.zip'
    with zipfile.ZipFile(str(path), 'w') as zf:
        zf.writestr('gpufleet_zc/__init__.py', '')
        zf.writestr('gpufleet_zc/first.py', 'VALUE = 41\n')
        zf.writestr('gpufleet_zc/second.py', 'from gpufleet_zc import first\nVALUE = first.VALUE + 1\n')
    monkeypatch.syspath_prepend(str(path))
    yield path
    for name in [name for name in sys.modules if name.startswith('gpufleet_zc')]:
        del sys.modules[name]
    sys.path_importer_cache.pop(str(path), None)


def counting(monkeypatch):
    calls = []
    original = zipimport._compile_source

    def compile_source(pathname, source):
        calls.append(pathname)
        return original(pathname, source)

    monkeypatch.setattr(zipimport, '_compile_source', compile_source)
    return calls


def test_each_file_is_compiled_once_and_runs(archive, monkeypatch):
    calls = counting(monkeypatch)
    counted = zipimport._compile_source
    with compile_once.compiled_once():
        from gpufleet_zc import second
    assert second.VALUE == 42 and second.__file__.startswith(str(archive))
    assert sorted(set(calls)) == sorted(calls), calls  # no file twice
    assert len(calls) == 3  # the package and its two modules
    # and zipimport is left as it was
    assert zipimport._compile_source is counted


def test_without_it_zipimport_compiles_twice(archive, monkeypatch):
    # What compiled_once saves (CPython gh-141276); if a Python fixes it, this says so and compiled_once can go.
    calls = counting(monkeypatch)
    from gpufleet_zc import first
    assert first.VALUE == 41
    assert len(calls) == 2 * len(set(calls)), calls


def test_a_failed_import_restores_zipimport(archive):
    original = zipimport._compile_source
    with pytest.raises(ImportError):
        with compile_once.compiled_once():
            import gpufleet_zc.missing  # noqa: F401
    assert zipimport._compile_source is original


def test_nothing_changes_where_zipimport_has_no_compile_step(monkeypatch):
    monkeypatch.delattr(zipimport, '_compile_source')
    with compile_once.compiled_once():
        assert not hasattr(zipimport, '_compile_source')
