# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA's runtime's mode, changed in place in its config.toml (``cdi.mode``), and cdi_spec's ``runtime_mode``.

The config file is what NVIDIA's nvidia-ctk 1.20.0 writes (``nvidia-ctk config default``, captured in
fixtures/nvidia_runtime; its package's postinst writes the same with ``config --in-place``). nvidia-ctk itself is the
stand-in of test_cdi_apply (``Ctk``), which also answers ``config default`` with that file; the lab runs the real one
(molecule scenario ``cdi``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import mode as cm
from ansible_collections.gpufleet.nvidia.plugins.module_utils.formats import _tomli as tomli
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import DocumentError, GpufleetError

from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.test_cdi_apply import Ctk, Host

FIXTURE = os.path.join(os.path.dirname(__file__), '..', '..', 'fixtures', 'nvidia_runtime',
                       'config-default-1.20.0.toml')
with open(FIXTURE) as _handle:
    DEFAULT = _handle.read()
CONFIG = '/etc/nvidia-container-runtime/config.toml'


def changed_lines(before, after):
    old, new = before.splitlines(True), after.splitlines(True)
    return [(a, b) for a, b in zip(old, new) if a != b], len(new) - len(old)


# ---------------------------------------------------------------- the pure edit


def test_nvidias_file_changes_in_one_value():
    new = cm.set_mode(DEFAULT, CONFIG, 'cdi')
    assert changed_lines(DEFAULT, new) == ([('mode = "auto"\n', 'mode = "cdi"\n')], 0)
    assert cm.set_mode(new, CONFIG, 'cdi') is new


def test_back_to_auto_gives_the_exact_bytes():
    assert cm.set_mode(cm.set_mode(DEFAULT, CONFIG, 'cdi'), CONFIG, 'auto') == DEFAULT


@pytest.mark.parametrize('text, expected', [
    # The table without the key: added after its last key, with its indentation, line endings kept.
    ('[nvidia-container-runtime]\r\n  log-level = "info"\r\n\r\n[nvidia-ctk]\r\npath = "x"\r\n',
     '[nvidia-container-runtime]\r\n  log-level = "info"\r\n  mode = "cdi"\r\n\r\n[nvidia-ctk]\r\npath = "x"\r\n'),
    # The table last, its last line without an ending.
    ('# mine\n[nvidia-container-runtime]\nlog-level = "info"', '# mine\n[nvidia-container-runtime]\n'
     'log-level = "info"\nmode = "cdi"\n'),
    # No table: appended.
    ('disable-require = false\n', 'disable-require = false\n\n[nvidia-container-runtime]\nmode = "cdi"\n'),
    ('', '[nvidia-container-runtime]\nmode = "cdi"\n'),
    # A comment and a quoted value stay.
    ("[nvidia-container-runtime]\nmode = 'legacy'  # ours\n", '[nvidia-container-runtime]\nmode = "cdi"  # ours\n'),
])
def test_the_mode_added_or_changed_in_place(text, expected):
    assert cm.set_mode(text, CONFIG, 'cdi') == expected


def test_a_table_written_only_as_sub_tables_or_dotted_keys_is_refused():
    with pytest.raises(DocumentError, match=r'%s: the table \[nvidia-container-runtime\] is written with dotted '
                                            r'keys or only as sub-tables \(line 1\).*Nothing was changed' % CONFIG):
        cm.set_mode('nvidia-container-runtime.log-level = "info"\n', CONFIG, 'cdi')
    with pytest.raises(DocumentError, match='only as sub-tables'):
        cm.set_mode('[nvidia-container-runtime.modes.cdi]\ndefault-kind = "nvidia.com/gpu"\n', CONFIG, 'cdi')


def test_invalid_toml_names_the_file():
    with pytest.raises(DocumentError, match=r'%s: not valid TOML.*left untouched' % CONFIG):
        cm.set_mode('[nvidia-container-runtime\n', CONFIG, 'cdi')


@pytest.mark.parametrize('name', ['', 'CDI', 'cdi mode', 'x' * 40, '-cdi'])
def test_mode_names_are_words(name):
    with pytest.raises(DocumentError, match='is not a mode name'):
        cm.check_mode_name(name)


@pytest.mark.parametrize('spec_dir, ok', [('/var/run/cdi', True), ('/run/cdi', True), ('/etc/cdi', True),
                                          ('/etc/cdi/x', False)])
def test_the_spec_dir_must_be_one_the_runtime_reads(spec_dir, ok):
    values = tomli.loads(DEFAULT)
    problem = cm.spec_dir_problem(values, values, spec_dir, CONFIG)
    assert (problem is None) is ok
    if not ok:
        assert CONFIG in problem and spec_dir in problem and 'Nothing was changed' in problem


def test_the_spec_dirs_default_to_nvidias():
    values = tomli.loads(DEFAULT)
    assert cm.spec_dir_problem({}, values, '/var/run/cdi', CONFIG) is None
    own = {'nvidia-container-runtime': {'modes': {'cdi': {'spec-dirs': ['/srv/cdi']}}}}
    assert '/srv/cdi' in cm.spec_dir_problem(own, values, '/var/run/cdi', CONFIG)


# ---------------------------------------------------------------- cdi_spec's runtime_mode


class ConfigCtk(Ctk):
    """nvidia-ctk that also answers ``config default`` (NVIDIA's 1.20.0 text)."""

    def __call__(self, argv):
        if argv[1:] == ['--quiet', 'config', 'default']:
            self.calls.append(argv)
            return 0, DEFAULT, ''
        return super(ConfigCtk, self).__call__(argv)


@pytest.fixture
def host(tmp_path):
    return Host(tmp_path)


def write_config(host, text, mode=0o644):
    path = host.path(CONFIG)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def test_cdi_mode_set_in_place_once(host):
    path = write_config(host, DEFAULT, 0o640)
    result = host.converge(ConfigCtk(), boot=False, runtime_mode='cdi')
    assert result['actions'] == ['write_spec', 'write_runtime_config']
    assert result['runtime_mode'] == {'path': CONFIG, 'before': 'auto', 'after': 'cdi'}
    assert path.read_text() == DEFAULT.replace('mode = "auto"', 'mode = "cdi"')
    assert oct(path.stat().st_mode & 0o777) == oct(0o640)  # the file's own mode kept
    diff = [d for d in result['diff'] if d['before_header'] == CONFIG]
    assert diff == [{'before_header': CONFIG, 'after_header': CONFIG, 'before': DEFAULT,
                     'after': path.read_text()}]
    again = host.converge(ConfigCtk(), boot=False, runtime_mode='cdi')
    assert again['actions'] == [] and not again['changed']
    assert again['runtime_mode'] == {'path': CONFIG, 'before': 'cdi', 'after': 'cdi'}


def test_check_mode_writes_nothing(host):
    path = write_config(host, DEFAULT)
    result = host.converge(ConfigCtk(), check_mode=True, boot=False, runtime_mode='cdi')
    assert 'write_runtime_config' in result['actions'] and result['runtime_mode']['after'] == 'cdi'
    assert path.read_text() == DEFAULT


def test_a_missing_config_is_nvidias_default_with_the_mode(host):
    result = host.converge(ConfigCtk(), boot=False, runtime_mode='cdi')
    assert result['runtime_mode'] == {'path': CONFIG, 'before': 'auto', 'after': 'cdi'}
    assert host.path(CONFIG).read_text() == DEFAULT.replace('mode = "auto"', 'mode = "cdi"')
    assert oct(host.path(CONFIG).stat().st_mode & 0o777) == oct(0o644)


def test_no_runtime_mode_leaves_the_config_alone(host):
    path = write_config(host, 'not toml [')
    result = host.converge(ConfigCtk(), boot=False)
    assert result['runtime_mode'] is None and 'write_runtime_config' not in result['actions']
    assert path.read_text() == 'not toml ['


def test_a_spec_the_runtime_would_not_read_is_refused_before_anything_is_written(host):
    path = write_config(host, DEFAULT.replace('spec-dirs = ["/etc/cdi", "/var/run/cdi"]', 'spec-dirs = ["/etc/cdi"]'))
    before = path.read_text()
    with pytest.raises(GpufleetError, match=r'h1: %s: in cdi mode .* not from /var/run/cdi' % CONFIG):
        host.converge(ConfigCtk(), boot=False, runtime_mode='cdi')
    assert path.read_text() == before
    assert not host.path('/var/run/cdi/nvidia.yaml').exists()


def test_absent_puts_nvidias_default_back_only_over_the_asked_mode(host):
    path = write_config(host, DEFAULT)
    host.converge(ConfigCtk(), boot=False, runtime_mode='cdi')
    result = host.converge(ConfigCtk(), boot=False, state='absent', runtime_mode='cdi')
    assert result['actions'] == ['write_runtime_config', 'remove_spec']
    assert path.read_text() == DEFAULT
    path.write_text(DEFAULT.replace('mode = "auto"', 'mode = "legacy"'))
    other = host.converge(ConfigCtk(), boot=False, state='absent', runtime_mode='cdi')
    assert other['actions'] == [] and 'mode = "legacy"' in path.read_text()


def test_absent_without_nvidia_ctk_falls_back_to_auto(host):
    path = write_config(host, DEFAULT.replace('mode = "auto"', 'mode = "cdi"'))
    os.unlink(str(host.path('/usr/bin/nvidia-ctk')))
    result = host.converge(ConfigCtk(), boot=False, state='absent', runtime_mode='cdi')
    assert result['actions'] == ['write_runtime_config'] and path.read_text() == DEFAULT


def test_a_config_another_user_can_change_is_refused(host):
    path = write_config(host, DEFAULT, 0o666)
    with pytest.raises(GpufleetError, match=CONFIG):
        host.converge(ConfigCtk(), boot=False, runtime_mode='cdi')
    assert path.read_text() == DEFAULT


def test_a_link_another_user_planted_at_the_config_is_not_followed(host, tmp_path):
    """A link owned by another user (root's own links, in root's directories, are root's choice and followed)."""
    victim = tmp_path / 'victim.toml'
    victim.write_text(DEFAULT)
    host.path(CONFIG).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(str(victim), str(host.path(CONFIG)))
    os.lchown(str(host.path(CONFIG)), 65534, 65534)
    with pytest.raises(GpufleetError, match=CONFIG):
        host.converge(ConfigCtk(), boot=False, runtime_mode='cdi')
    assert victim.read_text() == DEFAULT
