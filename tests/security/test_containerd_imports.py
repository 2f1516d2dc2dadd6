"""containerd_runtime (root) and the files containerd imports: no other user may be able to add one.

containerd (run as root) loads every file its ``imports`` patterns match
when it starts; a pattern that matches nothing today matches the file a
stranger adds tomorrow. The module refuses, naming the directory, any
pattern whose directories another user can write or owns, whether or not it
matches a file now, on containerd 1.x and 2.x alike; the config file is left
byte-identical. The stranger then really adds a drop-in, to show what the
refusal prevents.

On the code before this check, a glob into the stranger's empty directory was
accepted on 1.x (only files that existed were checked) and nothing was
checked on 2.x.
"""

import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError

V16 = (1, 6, 20)
V21 = (2, 1, 9)


class DumpTools(object):
    """containerd as far as the module asks it: its version and the dump (the config's values, imports listed)."""

    def __init__(self, version, imports):
        self._version = version
        self.imports = imports

    def version(self):
        return self._version

    def dump(self, path):
        return {'version': 2 if self._version[0] < 2 else 3, 'imports': [path] + self.imports}, None

    def dump_text(self, text):
        return self.dump('/dev/stdin')


class NoService(object):
    def pid(self):
        return None


def converge(config, version, imports=(), check_mode=True):
    request = apply.Request(path=config, runtime_path='/bin/true')
    return apply.Converge(request, NoService(), DumpTools(version, list(imports))).run(check_mode=check_mode)


def config_with(sandbox, imports):
    directory = os.path.join(sandbox, 'containerd')
    os.mkdir(directory, 0o755)
    path = os.path.join(directory, 'config.toml')
    with open(path, 'w') as handle:
        handle.write('version = 2\nimports = [%s]\n' % ', '.join('"%s"' % item for item in imports))
    with open(path, 'rb') as handle:
        return path, handle.read()


def assert_refused(path, original, version, words, check_mode=True):
    with pytest.raises(GpufleetError) as exc:
        converge(path, version, check_mode=check_mode)
    assert words in str(exc.value), str(exc.value)
    with open(path, 'rb') as handle:
        assert handle.read() == original


@pytest.mark.parametrize('version', [V16, V21])
@pytest.mark.parametrize('check_mode', [True, False])
def test_a_glob_into_a_strangers_empty_directory_is_refused(sandbox, stranger, version, check_mode):
    dropins = stranger.owned_dir(sandbox, 'conf.d')
    path, original = config_with(sandbox, ['%s/*.toml' % dropins])
    assert_refused(path, original, version, 'the directory %s' % dropins, check_mode)
    # What the refusal prevents: the stranger adds a drop-in that the glob matches.
    made = stranger.python('open(__import__("sys").argv[1], "w").write("[plugins]\\n")',
                           os.path.join(dropins, 'evil.toml'))
    assert made.returncode == 0, made.stderr
    assert os.stat(os.path.join(dropins, 'evil.toml')).st_uid == stranger.uid


@pytest.mark.parametrize('version', [V16, V21])
def test_a_glob_into_a_world_writable_sticky_directory_is_refused(sandbox, version):
    shared = os.path.join(sandbox, 'shared')
    os.mkdir(shared)
    os.chmod(shared, 0o1777)
    path, original = config_with(sandbox, ['%s/*.toml' % shared])
    assert_refused(path, original, version, 'is writable by every user')


@pytest.mark.parametrize('version', [V16, V21])
def test_a_glob_through_a_strangers_directory_is_refused(sandbox, stranger, version):
    """``/x/*/conf.d/*.toml``: a directory the middle ``*`` matches is the stranger's (or could become one)."""
    middle = os.path.join(sandbox, 'layers')
    os.mkdir(middle, 0o755)
    stranger.owned_dir(middle, 'theirs')
    path, original = config_with(sandbox, ['%s/*/conf.d/*.toml' % middle])
    assert_refused(path, original, version, 'is owned by uid %d' % stranger.uid)


@pytest.mark.parametrize('version', [V16, V21])
def test_a_missing_literal_import_in_a_strangers_directory_is_refused(sandbox, stranger, version):
    theirs = stranger.owned_dir(sandbox, 'theirs')
    path, original = config_with(sandbox, ['%s/later.toml' % theirs])
    assert_refused(path, original, version, 'the directory %s' % theirs)


def test_a_glob_that_would_load_our_temp_files_is_refused(sandbox):
    """``*`` in the config's own directory also matches the module's temp file and backups."""
    path, original = config_with(sandbox, [])
    with open(path, 'w') as handle:
        handle.write('version = 2\nimports = ["%s/*"]\n' % os.path.dirname(path))
    with open(path, 'rb') as handle:
        original = handle.read()
    assert_refused(path, original, V16, 'containerd would load them')


@pytest.mark.parametrize('version', [V16, V21])
def test_root_only_directories_are_accepted(sandbox, version, monkeypatch):
    monkeypatch.setattr(apply.Converge, 'check_effective', lambda self, real, text, before, dschema: before)
    dropins = os.path.join(sandbox, 'conf.d')
    os.mkdir(dropins, 0o755)
    path, original = config_with(sandbox, ['%s/*.toml' % dropins, 'conf.d/*.toml'])
    result = converge(path, version)
    assert result['file_changed']
    with open(path, 'rb') as handle:
        assert handle.read() == original
