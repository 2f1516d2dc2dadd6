# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""compiled_once: modules imported from a zip are compiled once each, and run as before."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import marshal
import os
import stat
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


# The code kept between root's runs (compile_once.Store): in a directory of root's alone, used only where nothing
# another user could have written reaches it.

def forget(archive):
    for name in [name for name in sys.modules if name.startswith('gpufleet_zc')]:
        del sys.modules[name]
    sys.path_importer_cache.pop(str(archive), None)


def import_second(archive, store):
    forget(archive)
    with compile_once.compiled_once(store):
        from gpufleet_zc import second
    return second.VALUE


@pytest.fixture
def kept(tmp_path):
    return str(tmp_path / 'bytecode')


def entries(path):
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def test_a_second_run_loads_what_the_first_compiled(archive, kept, monkeypatch):
    calls = counting(monkeypatch)
    assert import_second(archive, compile_once.Store(kept, writable=True)) == 42
    assert len(calls) == 3 and len(entries(kept)) == 3
    assert stat.S_IMODE(os.stat(kept).st_mode) == 0o700
    assert all(stat.S_IMODE(os.stat(os.path.join(kept, name)).st_mode) == 0o600 for name in entries(kept))
    del calls[:]
    assert import_second(archive, compile_once.Store(kept, writable=True)) == 42
    assert calls == []  # nothing compiled: every file's code loaded


def test_the_same_file_in_another_runs_zip_is_the_same_entry(tmp_path):
    interpreter = compile_once._interpreter()
    first = compile_once.key('/tmp/ansible_a1/ansible_node_state_payload.zip/pkg/mod.py', b'X = 1\n', interpreter)
    again = compile_once.key('/tmp/ansible_b2/ansible_node_state_payload.zip/pkg/mod.py', b'X = 1\n', interpreter)
    assert first == again
    assert first != compile_once.key('/tmp/ansible_b2/ansible_node_state_payload.zip/pkg/mod.py', b'X = 2\n',
                                     interpreter)
    assert first != compile_once.key('/tmp/ansible_b2/ansible_node_state_payload.zip/pkg/other.py', b'X = 1\n',
                                     interpreter)
    assert first != compile_once.key('/tmp/ansible_a1/ansible_node_state_payload.zip/pkg/mod.py', b'X = 1\n',
                                     interpreter + b'another interpreter')


def test_a_changed_source_is_compiled_again(archive, kept, monkeypatch):
    assert import_second(archive, compile_once.Store(kept, writable=True)) == 42
    with zipfile.ZipFile(str(archive)) as zf:
        files = dict((name, zf.read(name)) for name in zf.namelist())
    files['gpufleet_zc/first.py'] = b'VALUE = 99\n'  # the next version of first.py
    with zipfile.ZipFile(str(archive), 'w') as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    zipimport._zip_directory_cache.pop(str(archive), None)
    calls = counting(monkeypatch)
    assert import_second(archive, compile_once.Store(kept, writable=True)) == 100
    assert [path.rsplit('/', 1)[-1] for path in calls] == ['first.py']


def test_check_mode_only_reads(archive, kept, monkeypatch):
    assert import_second(archive, compile_once.Store(kept, writable=False)) == 42
    assert not os.path.exists(kept)  # not even the directory
    import_second(archive, compile_once.Store(kept, writable=True))
    calls = counting(monkeypatch)
    assert import_second(archive, compile_once.Store(kept, writable=False)) == 42
    assert calls == []


def forge(kept, archive):
    """Every entry of a run replaced by code whose first.py says 666."""
    import_second(archive, compile_once.Store(kept, writable=True))
    interpreter = compile_once._interpreter()
    for name in ('__init__.py', 'first.py', 'second.py'):
        path = '%s/gpufleet_zc/%s' % (archive, name)
        with zipfile.ZipFile(str(archive)) as zf:
            source = zf.read('gpufleet_zc/' + name)
        text = 'VALUE = 666\n' if name == 'first.py' else source.decode()
        with open(os.path.join(kept, compile_once.key(path, source, interpreter) + compile_once.SUFFIX), 'wb') as out:
            out.write(marshal.dumps(compile(text, path, 'exec')))


@pytest.mark.parametrize('spoil', ['group-writable', 'open to others', 'another user', 'a link'])
def test_a_directory_not_roots_alone_is_not_used(archive, kept, tmp_path, spoil):
    forge(kept, archive)
    assert import_second(archive, compile_once.Store(kept, writable=False)) == 667  # what is forged is used ...
    if spoil == 'group-writable':
        os.chmod(kept, 0o770)
    elif spoil == 'open to others':
        os.chmod(kept, 0o705)
    elif spoil == 'another user':
        os.chown(kept, 65534, 65534)
    else:
        os.rename(kept, str(tmp_path / 'elsewhere'))
        os.symlink(str(tmp_path / 'elsewhere'), kept)
    assert import_second(archive, compile_once.Store(kept, writable=True)) == 42  # ... only where root's alone
    if spoil == 'a link':
        assert os.path.islink(kept)


def test_a_parent_others_can_write_is_not_used(archive, tmp_path):
    parent = tmp_path / 'open'
    parent.mkdir()
    kept = str(parent / 'bytecode')
    forge(kept, archive)
    os.chmod(str(parent), 0o1777)  # sticky or not: another user could have made the directory first
    assert import_second(archive, compile_once.Store(kept, writable=True)) == 42


@pytest.mark.parametrize('spoil', ['readable by others', 'another user', 'a link', 'not code', 'empty', 'truncated'])
def test_an_entry_not_roots_alone_or_not_code_is_compiled_over(archive, kept, tmp_path, monkeypatch, spoil):
    forge(kept, archive)
    interpreter = compile_once._interpreter()
    with zipfile.ZipFile(str(archive)) as zf:
        name = compile_once.key('%s/gpufleet_zc/first.py' % archive, zf.read('gpufleet_zc/first.py'),
                                interpreter) + compile_once.SUFFIX
    path = os.path.join(kept, name)
    if spoil == 'readable by others':
        os.chmod(path, 0o644)
    elif spoil == 'another user':
        os.chown(path, 65534, 65534)
    elif spoil == 'a link':
        os.rename(path, str(tmp_path / 'forged'))
        os.symlink(str(tmp_path / 'forged'), path)
    elif spoil == 'not code':
        with open(path, 'wb') as out:
            out.write(marshal.dumps({'VALUE': 666}))
    elif spoil == 'empty':
        open(path, 'wb').close()
    else:
        with open(path, 'rb') as handle:
            data = handle.read()
        with open(path, 'wb') as out:
            out.write(data[:len(data) // 2])
    calls = counting(monkeypatch)
    assert import_second(archive, compile_once.Store(kept, writable=True)) == 42
    assert [call.rsplit('/', 1)[-1] for call in calls] == ['first.py']
    # compiled over: replaced by root's own file (where the name held a link, the link is replaced, never followed)
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode) and st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o600
    if spoil == 'a link':
        with open(str(tmp_path / 'forged'), 'rb') as handle:
            assert marshal.loads(handle.read()).co_consts  # the link's target left as it was


def test_nothing_is_kept_or_read_for_a_run_that_is_not_roots(archive, kept, monkeypatch):
    forge(kept, archive)
    monkeypatch.setattr(os, 'geteuid', lambda: 1000)
    calls = counting(monkeypatch)
    assert import_second(archive, compile_once.Store(kept, writable=True)) == 42
    assert len(calls) == 3


def test_a_full_directory_is_emptied_before_the_next_is_written(archive, kept, monkeypatch):
    os.mkdir(kept, 0o700)
    for index in range(5):
        open(os.path.join(kept, 'old%d%s' % (index, compile_once.SUFFIX)), 'wb').close()
    monkeypatch.setattr(compile_once, 'MAX_ENTRIES', 5)
    assert import_second(archive, compile_once.Store(kept, writable=True)) == 42
    assert len(entries(kept)) == 3 and not [name for name in entries(kept) if name.startswith('old')]


@pytest.mark.parametrize('args, writable', [
    ({'ANSIBLE_MODULE_ARGS': {'_ansible_check_mode': False}}, True),
    ({'ANSIBLE_MODULE_ARGS': {}}, True),
    ({'ANSIBLE_MODULE_ARGS': {'_ansible_check_mode': True}}, False),
    (None, False),  # not run by Ansible: read only
])
def test_the_store_is_written_only_outside_check_mode(monkeypatch, args, writable):
    from ansible.module_utils import basic
    monkeypatch.setattr(basic, '_ANSIBLE_ARGS', None if args is None else json.dumps(args).encode())
    monkeypatch.setenv(compile_once.BYTECODE_DIR_VARIABLE, '/nonexistent/bytecode')
    store = compile_once._store()
    assert store.writable is writable and store.path == '/nonexistent/bytecode'
