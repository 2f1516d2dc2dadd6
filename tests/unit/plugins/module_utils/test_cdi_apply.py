# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cdi_spec run on a host tree under tmp_path: the spec written only when nvidia-ctk's text changed, the boot
pieces chosen and installed, check mode, failures, absent.

nvidia-ctk is a stand-in here (``Ctk``: the spec NVIDIA's 1.20.0 printed on the driver kit's fake host, as YAML,
with GPUs added or the driver changed on demand); the lab runs NVIDIA's real one (molecule scenario ``cdi``).
The host's commands (systemctl, update-rc.d) are recorded, not run. Runs as root, as the module does: the
nvidia-ctk file must be root's.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import os
import sys

import pytest
import yaml

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import apply as ca
from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import boot
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError

from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.test_cdi import ALIAS_BOMB, SPEC_JSON

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason='the module runs as root; nvidia-ctk must be root\'s')

SPEC = '/var/run/cdi/nvidia.yaml'


def devices_indented(text):
    """PyYAML's text with the devices list indented under its key, as nvidia-ctk (Go's yaml.v3) writes it
    (``    - name: "0"``): still the same YAML."""
    lines, inside = [], False
    for line in text.splitlines(True):
        if line[:1] not in (' ', '-'):
            inside = line.startswith('devices:')
        lines.append('    ' + line if inside and line[:1] in (' ', '-') else line)
    return ''.join(lines)


class Ctk(object):
    """nvidia-ctk cdi generate's answers: the real spec, with ``gpus`` GPUs and driver ``driver``, YAML in Go's
    layout (``layout=False``: PyYAML's own, which ``outline_yaml`` does not read)."""

    def __init__(self, gpus=3, driver='535.171.04', rc=0, layout=True):
        self.gpus, self.driver, self.rc, self.layout = gpus, driver, rc, layout
        self.calls = []

    def document(self):
        document = json.loads(SPEC_JSON.replace('535.171.04', self.driver))
        devices = [d for d in document['devices'] if d['name'] != 'all']
        by_index = [d for d in devices if not d['name'].startswith('GPU-')]
        for index in range(len(by_index), self.gpus):
            node = {'path': '/dev/nvidia%d' % index, 'major': 195, 'minor': index, 'fileMode': 438,
                    'permissions': 'rwm'}
            devices.append({'name': str(index), 'containerEdits': {'deviceNodes': [node]}})
        document['devices'] = devices + [d for d in document['devices'] if d['name'] == 'all']
        return document

    def __call__(self, argv):
        self.calls.append(argv)
        if self.rc:
            return self.rc, '', 'level=error msg="failed to initialize NVML: Driver Not Loaded"'
        fmt = argv[argv.index('--format') + 1]
        document = self.document()
        if fmt == 'json':
            return 0, json.dumps(document, separators=(',', ':')), ''
        text = '---\n' + yaml.safe_dump(document, default_flow_style=False, sort_keys=False)
        return 0, devices_indented(text) if self.layout else text, ''


class Host(object):
    """A host tree under ``root`` with nvidia-ctk installed, and the commands its init system was given."""

    def __init__(self, root, init='systemd', enabled=False):
        self.root = root
        self.init = init
        self.enabled = enabled
        self.commands = []
        ctk = root / 'usr' / 'bin' / 'nvidia-ctk'
        ctk.parent.mkdir(parents=True, exist_ok=True)
        ctk.write_text('#!/bin/sh\n')
        ctk.chmod(0o755)
        for directory in ('var/run', 'etc', 'usr/local/sbin', 'lib/systemd/system'):
            (root / directory).mkdir(parents=True, exist_ok=True)
            (root / directory).chmod(0o755)

    def run(self, argv, data=None):
        self.commands.append(argv)
        if argv[1:2] == ['show']:  # Service.systemd_show: the unit's file state among its properties
            return 0, 'LoadState=loaded\nUnitFileState=%s\n' % ('enabled' if self.enabled else 'disabled'), ''
        return 0, '', ''

    def path(self, path):
        return self.root / path.lstrip('/')

    def converge(self, ctk, check_mode=False, **options):
        request = ca.Request(**options)
        tools = {'systemctl': '/bin/systemctl', 'update-rc.d': '/usr/sbin/update-rc.d', 'initctl': '/sbin/initctl'}
        run = ca.CdiRun(request, self.run, ctk, self.init, tools, check_mode=check_mode, diff=True, host='h1',
                        root=str(self.root))
        result = run.converge()
        return result


@pytest.fixture
def host(tmp_path):
    return Host(tmp_path)


def test_a_fresh_host_gets_the_spec_and_our_boot_refresh(host):
    ctk = Ctk()
    result = host.converge(ctk)
    assert result['actions'] == ['write_spec', 'write_script', 'write_unit', 'enable']
    assert result['changed'] and result['stale'] == ['there is no spec yet']
    assert result['devices'] == ['0', '1', '2', 'GPU-0000a100-1111-2222-3333-000000000000',
                                 'GPU-0000a101-1111-2222-3333-000000000001',
                                 'GPU-0000a102-1111-2222-3333-000000000002', 'all']
    assert result['driver_version'] == '535.171.04'
    assert result['boot']['source'] == 'gpufleet' and 'is not installed' in result['boot']['reason']
    spec = host.path(SPEC)
    assert spec.read_text() == ctk(['nvidia-ctk', '--format', 'yaml'])[1]
    assert oct(spec.stat().st_mode & 0o777) == '0o644'
    assert os.access(str(host.path(boot.SCRIPT_PATH)), os.X_OK)
    assert host.path('/etc/systemd/system/gpufleet-cdi-refresh.service').read_text() == boot.render_unit('systemd')
    assert ['/bin/systemctl', 'enable', 'gpufleet-cdi-refresh'] in host.commands
    # nvidia-ctk's argv: stdout, the file's format, every name strategy.
    assert ctk.calls[0] == ['/usr/bin/nvidia-ctk', '--quiet', 'cdi', 'generate', '--format', 'yaml', '--output=',
                            '--device-name-strategy=index', '--device-name-strategy=uuid']
    assert [d['after_header'] for d in result['diff']] == [SPEC, boot.SCRIPT_PATH,
                                                           '/etc/systemd/system/gpufleet-cdi-refresh.service']


def test_a_converged_host_writes_nothing(host):
    host.converge(Ctk())
    host.enabled = True
    before = host.path(SPEC).stat()
    commands = len(host.commands)
    result = host.converge(Ctk())
    assert result['actions'] == [] and not result['changed'] and result['stale'] == []
    after = host.path(SPEC).stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert host.commands[commands:] == [['/bin/systemctl', 'show', '-p', 'LoadState', '-p', 'ActiveState', '-p',
                                         'UnitFileState', '-p', 'MainPID', '-p', 'ExecStart', 'gpufleet-cdi-refresh']]


def test_a_driver_change_or_a_new_gpu_makes_the_spec_stale_and_rewrites_it_alone(host):
    host.converge(Ctk())
    host.enabled = True
    result = host.converge(Ctk(gpus=4, driver='550.163.01'), check_mode=True)
    assert result['actions'] == ['write_spec']
    assert result['stale'] == ['driver 550.163.01, the spec names 535.171.04', 'devices not in the spec: 3']
    assert '535.171.04' in host.path(SPEC).read_text()  # check mode wrote nothing
    result = host.converge(Ctk(gpus=4, driver='550.163.01'))
    assert result['actions'] == ['write_spec'] and '550.163.01' in host.path(SPEC).read_text()
    assert not any('restart' in argv for argv in host.commands)  # no engine is restarted for a spec


def test_without_pyyaml_nvidia_ctks_yaml_is_outlined_and_stale_reasons_named(host, monkeypatch):
    host.converge(Ctk())
    monkeypatch.setitem(sys.modules, 'yaml', None)  # import yaml fails, as on a host without PyYAML
    ctk = Ctk(gpus=4, driver='570.172.08')
    result = host.converge(ctk, check_mode=True)
    assert [argv[argv.index('--format') + 1] for argv in ctk.calls] == ['yaml']
    assert result['driver_version'] == '570.172.08' and len(result['devices']) == 8
    assert result['stale'] == ['driver 570.172.08, the spec names 535.171.04', 'devices not in the spec: 3']


def test_without_pyyaml_a_yaml_layout_not_nvidia_ctks_is_asked_again_as_json(host, monkeypatch):
    monkeypatch.setitem(sys.modules, 'yaml', None)
    ctk = Ctk(layout=False)
    result = host.converge(ctk)
    assert [argv[argv.index('--format') + 1] for argv in ctk.calls] == ['yaml', 'json']
    assert result['driver_version'] == '535.171.04' and len(result['devices']) == 7
    assert host.path(SPEC).read_text().startswith('---\ncdiVersion')  # the file keeps its own format
    monkeypatch.undo()
    host.converge(Ctk(layout=False))
    monkeypatch.setitem(sys.modules, 'yaml', None)
    assert host.converge(Ctk(gpus=4, layout=False), check_mode=True)['stale'] == [
        'the spec on the host differs from what nvidia-ctk generates now']


def test_nvidia_unit_takes_over_from_ours_and_gets_our_order(host):
    host.converge(Ctk())
    host.enabled = True
    host.path(boot.NVIDIA_UNIT_PATHS[0]).write_text('[Unit]\nDescription=Refresh NVIDIA CDI specification file\n')
    result = host.converge(Ctk())
    assert result['boot']['source'] == 'nvidia'
    assert result['actions'] == ['disable_other', 'remove_unit', 'remove_script', 'write_dropin', 'reload_init']
    assert host.path(boot.DROPIN_PATH).read_text() == boot.render_dropin()
    assert not host.path(boot.SCRIPT_PATH).exists()
    assert ['/bin/systemctl', 'disable', 'gpufleet-cdi-refresh'] in host.commands
    assert result['boot']['files'] == [boot.DROPIN_PATH]
    # NVIDIA's unit not enabled: enabled.
    host.enabled = False
    assert host.converge(Ctk())['actions'] == ['enable']
    assert host.commands[-1] == ['/bin/systemctl', 'enable', 'nvidia-cdi-refresh']


@pytest.mark.parametrize('init, unit, enable', [
    ('sysvinit', '/etc/init.d/gpufleet-cdi-refresh', ['/usr/sbin/update-rc.d', 'gpufleet-cdi-refresh', 'defaults']),
    ('upstart', '/etc/init/gpufleet-cdi-refresh.conf', None),
])
def test_sysv_and_upstart_hosts_get_our_refresh(tmp_path, init, unit, enable):
    host = Host(tmp_path, init=init)
    host.path(boot.NVIDIA_UNIT_PATHS[0]).write_text('[Unit]\n')  # a systemd unit is no use there
    result = host.converge(Ctk())
    assert result['boot']['source'] == 'gpufleet' and 'runs %s' % init in result['boot']['reason']
    assert host.path(unit).read_text() == boot.render_unit(init)
    assert result['actions'] == ['write_spec', 'write_script', 'write_unit', 'enable']
    # Upstart reads a new job file itself (inotify on /etc/init) and starts it on its "start on" events: enabling
    # it runs no command there.
    assert (enable in host.commands) if enable else not any('initctl' in argv[0] for argv in host.commands)


def test_nvidia_ctk_failing_leaves_the_spec_and_names_the_host(host):
    host.converge(Ctk())
    before = host.path(SPEC).read_text()
    with pytest.raises(GpufleetError, match=r'^h1: /usr/bin/nvidia-ctk --quiet cdi generate .* failed \(exit 1\): '
                                            r'.*Driver Not Loaded.*The spec /var/run/cdi/nvidia.yaml was left as it'):
        host.converge(Ctk(rc=1))
    assert host.path(SPEC).read_text() == before


def test_nvidia_ctk_missing_fails_but_check_mode_predicts_the_write(host):
    host.path('/usr/bin/nvidia-ctk').unlink()
    result = host.converge(Ctk(), check_mode=True)
    assert result['actions'][0] == 'write_spec' and 'not installed yet' in result['warnings'][0]
    assert not host.path(SPEC).exists()
    with pytest.raises(GpufleetError, match='cannot run /usr/bin/nvidia-ctk: .*Install NVIDIA\'s container toolkit'):
        host.converge(Ctk())


def test_a_nvidia_ctk_others_can_change_is_not_run(host):
    host.path('/usr/bin/nvidia-ctk').chmod(0o777)
    ctk = Ctk()
    with pytest.raises(GpufleetError, match='not a regular file owned by root and writable only by root'):
        host.converge(ctk)
    assert ctk.calls == []


@pytest.mark.parametrize('path, message', [
    ('/tmp/nvidia.yaml', 'container engines read CDI specs only from'),
    ('/etc/cdi/nvidia.yml', 'reads only <name>.json and <name>.yaml'),
    ('/etc/cdi/a b.yaml', 'give a plain absolute path'),
])
def test_a_spec_path_the_engines_do_not_read_is_refused_before_anything_runs(host, path, message):
    ctk = Ctk()
    with pytest.raises(GpufleetError, match=message):
        host.converge(ctk, path=path)
    assert ctk.calls == [] and host.commands == []


def test_absent_removes_our_pieces_and_the_spec_and_nothing_else(host):
    host.converge(Ctk())
    host.enabled = True
    site_unit = host.path('/etc/systemd/system/other.service')
    site_unit.write_text('[Unit]\n')
    result = host.converge(Ctk(), state='absent')
    assert result['actions'] == ['disable', 'remove_unit', 'remove_script', 'remove_spec']
    assert not host.path(SPEC).exists() and not host.path(boot.SCRIPT_PATH).exists()
    assert site_unit.exists()
    assert host.converge(Ctk(), state='absent')['actions'] == []


def test_absent_leaves_a_spec_of_another_kind(host):
    spec = host.path(SPEC)
    spec.parent.mkdir(parents=True)
    document = copy.deepcopy(json.loads(SPEC_JSON))
    document['kind'] = 'example.com/fpga'
    spec.write_text(yaml.safe_dump(document))
    result = host.converge(Ctk(), state='absent')
    assert 'remove_spec' not in result['actions'] and spec.exists()
    assert 'not an NVIDIA GPU CDI spec (kind example.com/fpga)' in result['warnings'][0]


HOSTILE = {  # name: (the spec on the host, what the reason says is wrong with it)
    'alias bomb': (ALIAS_BOMB, ' has a YAML anchor or alias at line 1 '),
    'date': ('cdiVersion: 2024-01-01\nkind: nvidia.com/gpu\ndevices: []\n', "'s cdiVersion '2024-01-01' is not"),
    'deep lists': ('- ' * 5000 + 'x\n', ' is nested deeper than 64 levels)'),
    'deep maps': (''.join(' ' * level + 'k:\n' for level in range(5000)), ' is nested deeper than 64 levels)'),
    'binary': ('cdiVersion: !!binary aGVsbG8=\n', ' has an explicit YAML tag at line 1 '),
}


@pytest.mark.parametrize('name', sorted(HOSTILE))
def test_a_spec_that_cannot_be_read_is_stale_naming_the_file_and_replaced(host, name):
    text, wrong = HOSTILE[name]
    spec = host.path(SPEC)
    spec.parent.mkdir(parents=True)
    spec.write_text(text)
    result = host.converge(Ctk(), check_mode=True, boot=False)
    assert result['actions'] == ['write_spec']
    assert len(result['stale']) == 1
    assert result['stale'][0].startswith('the spec on the host (%s) cannot be read as a CDI spec (the CDI spec%s'
                                         % (SPEC, wrong))
    assert spec.read_text() == text  # check mode wrote nothing
    host.converge(Ctk(), boot=False)
    assert spec.read_text() == Ctk()(['nvidia-ctk', '--format', 'yaml'])[1]


def test_stale_reasons_say_what_is_wrong():
    new = ca.spec_mod.parse_spec(SPEC_JSON)
    for fmt, text, wrong in [('yaml', ALIAS_BOMB, 'has a YAML anchor or alias at line 1'),
                             ('yaml', HOSTILE['deep maps'][0], 'is nested deeper than 64 levels'),
                             ('json', '[' * 5000 + ']' * 5000, 'is nested deeper than 64 levels'),
                             ('json', b'\xff', 'is not UTF-8 text')]:
        path = '/etc/cdi/nvidia.' + fmt
        reasons = ca.stale_reasons(text, new, fmt, path)
        assert len(reasons) == 1
        assert reasons[0].startswith('the spec on the host (%s) cannot be read as a CDI spec (the CDI spec %s'
                                     % (path, wrong))


def test_absent_leaves_a_spec_that_cannot_be_read_and_says_why(host):
    spec = host.path(SPEC)
    spec.parent.mkdir(parents=True)
    spec.write_text(ALIAS_BOMB)
    result = host.converge(Ctk(), state='absent', boot=False)
    assert result['actions'] == [] and spec.read_text() == ALIAS_BOMB
    assert result['warnings'] == ['%s cannot be read as a CDI spec (the CDI spec has a YAML anchor or alias at '
                                  'line 1 (nvidia-ctk writes none)): left as it is' % SPEC]


def test_a_failed_spec_write_names_the_spec_and_leaves_no_temp_directory_it_made(host, monkeypatch):
    """The spec's temp file goes to a root-only sibling (/var/run/.cdi.gpufleet) made on the way: a write that fails
    (a full or read-only disk) removes it again, and the error names the spec."""
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files as host_files

    def full(path, data, **kwargs):
        raise host_files.write_failed(path, OSError(28, 'No space left on device'))
    monkeypatch.setattr(host_files, 'write_atomic', full)
    with pytest.raises(Exception) as exc:
        host.converge(Ctk())
    assert str(host.path(SPEC)) in str(exc.value) and 'No space left on device' in str(exc.value), str(exc.value)
    # the spec's own directory (made for it) stays; its temp directory is gone
    assert sorted(os.listdir(str(host.path('/var/run')))) == ['cdi'], os.listdir(str(host.path('/var/run')))
