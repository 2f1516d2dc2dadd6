# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""slurmd's health check program: its rules (``decide``) over every kind of node state, one check with a stand-in
node, the program built from the loaded sources (the same bytes twice, and it runs on its own: a Python without
site-packages, fake ``scontrol``/``squeue`` that record their arguments) and its installation as root.

Without NVML the verdict is UNKNOWN; an XID in the kernel log file the configuration names makes it FAIL, so the
built program drains through the fake scontrol. PASS is driven through ``check`` with a health result."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ast
import io
import json
import os
import stat
import subprocess
import sys
import zipfile

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import HostFileError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import backends
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health.verdicts import check as health_check_result
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health.verdicts import node_verdict
from ansible_collections.gpufleet.nvidia.plugins.module_utils.slurm import health_check, program
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import slurm as slurm_node

HEALTH_REASON = 'gpufleet: health xid: XID 79 (GPU has fallen off the bus)'
XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"


# --------------------------------------------------------------------------
# Health results and node states
# --------------------------------------------------------------------------

def health(*checks):
    """A health result as HealthRun.evaluate() makes it (the checks that did not pass, the node's verdict)."""
    verdict, action, reasons = node_verdict(list(checks))
    return {'verdict': verdict, 'action': action, 'reasons': reasons,
            'checks': [c for c in checks if c['verdict'] != 'PASS'], 'msg': verdict}


PASS = health(health_check_result('ecc', 'PASS', gpu=0))
FAIL = health(health_check_result('temperature', 'WARN', 'service', 1, reason='91 C, at or above 89 C'),
              health_check_result('xid', 'FAIL', 'reboot_node', 1, reason='XID 79 (GPU has fallen off the bus)'),
              health_check_result('ecc', 'FAIL', 'reset_gpu', 0, reason='2 volatile uncorrected (double-bit) ECC '
                                                                        'errors, at least 1'))
WARN = health(health_check_result('temperature', 'WARN', 'service', 1, reason='91 C, at or above 89 C'))
UNKNOWN = health(health_check_result('nvml', 'UNKNOWN', 'service', reason='the Python library nvidia-ml-py is '
                                                                          'missing on this host'))


def state(words, reason=None, user=None):
    return slurm_node.describe('h2', words, reason, user, None if reason is None else '2026-12-05T19:36:28')


IDLE = state(['IDLE'])
PERSON = state(['IDLE', 'DRAIN'], 'fan replaced Tuesday', 'alice')
DOWN = state(['DOWN'])
ROLLOUT = state(['MIXED', 'DRAIN'], 'gpufleet: rollout driver 550 (run 7)', 'root')
HEALTH_DRAIN = state(['IDLE', 'DRAIN'], HEALTH_REASON, 'root')
HEALTH_DOWN = state(['DOWN', 'DRAIN'], HEALTH_REASON, 'root')
OTHER_OURS = state(['IDLE', 'DRAIN'], 'gpufleet: maintenance', 'root')


# --------------------------------------------------------------------------
# decide
# --------------------------------------------------------------------------

@pytest.mark.parametrize('node, result, action, why', [
    (IDLE, FAIL, 'drain', 'FAIL'),
    (PERSON, FAIL, 'none', 'alice'),
    (DOWN, FAIL, 'none', 'never touched'),
    (ROLLOUT, FAIL, 'none', 'the rollout resumes it'),
    (HEALTH_DRAIN, FAIL, 'none', 'drained for health already'),
    (OTHER_OURS, FAIL, 'none', 'not for health'),
    (HEALTH_DRAIN, PASS, 'resume', 'PASS'),
    (HEALTH_DOWN, PASS, 'resume', 'PASS'),
    (IDLE, PASS, 'none', 'in service'),
    (PERSON, PASS, 'none', 'fan replaced Tuesday'),
    (DOWN, PASS, 'none', 'never touched'),
    (ROLLOUT, PASS, 'none', 'the rollout resumes it'),
    (OTHER_OURS, PASS, 'none', 'not for health'),
    (IDLE, WARN, 'none', 'WARN'),
    (HEALTH_DRAIN, WARN, 'none', 'WARN'),
    (IDLE, UNKNOWN, 'none', 'UNKNOWN'),
    (HEALTH_DRAIN, UNKNOWN, 'none', 'UNKNOWN'),
    (None, FAIL, 'none', 'does not know'),
    (None, PASS, 'none', 'does not know'),
])
def test_the_rules_drain_on_fail_resume_only_our_health_drain_on_pass(node, result, action, why):
    decision = health_check.decide(node, result)
    assert decision['action'] == action
    assert why in decision['why']


def test_a_fail_drains_with_our_prefix_and_the_first_failing_check():
    decision = health_check.decide(IDLE, FAIL)
    assert decision['reason'] == 'gpufleet: health xid: GPU 1: XID 79 (GPU has fallen off the bus)'
    assert decision['reason'].startswith(slurm_node.HEALTH)


def test_every_verdict_but_pass_names_its_reason_even_without_a_drain():
    # slurm_node turns a rollout's drain into a health drain with it
    assert health_check.decide(ROLLOUT, FAIL)['reason'].startswith('gpufleet: health xid: ')
    assert health_check.decide(IDLE, WARN)['reason'] == 'gpufleet: health temperature: GPU 1: 91 C, at or above 89 C'
    assert health_check.decide(IDLE, UNKNOWN)['reason'].startswith('gpufleet: health nvml: the Python library')
    assert health_check.decide(HEALTH_DRAIN, PASS)['reason'] is None


def test_a_reason_is_one_line_of_at_most_200_characters():
    result = health(health_check_result('pcie', 'FAIL', 'service', 3, reason='x\ny\t' + 'z' * 400))
    reason = health_check.decide(IDLE, result)['reason']
    assert reason.startswith('gpufleet: health pcie: GPU 3: x y z')
    assert len(reason) == slurm_node.MAX_REASON and '\n' not in reason


# --------------------------------------------------------------------------
# check, with a stand-in node
# --------------------------------------------------------------------------

class FakeNode(object):
    """SlurmNode's surface that check() uses: ``name``, ``present``, ``state()``, ``update()`` (recorded)."""

    def __init__(self, answer, present=True, fail=None):
        self.name = 'h2'
        self.present = present
        self.answer = answer
        self.fail = fail or {}
        self.updates = []

    def state(self):
        if 'state' in self.fail:
            raise slurm_node.SlurmError(self.fail['state'])
        return self.answer

    def update(self, new_state, reason=None):
        if 'update' in self.fail:
            raise slurm_node.SlurmError(self.fail['update'])
        self.updates.append((new_state, reason))


def test_a_failing_node_in_service_is_drained_with_our_reason():
    node = FakeNode(IDLE)
    result = health_check.check({'act': True}, node, lambda: FAIL)
    assert node.updates == [('DRAIN', 'gpufleet: health xid: GPU 1: XID 79 (GPU has fallen off the bus)')]
    assert result['acted'] and result['action'] == 'drain' and result['error'] is None
    assert result['failed'] == ['xid', 'ecc'] and result['state'] == IDLE
    assert health_check.summary(result) == ('gpufleet health: FAIL (xid, ecc); node h2 idle; drained: gpufleet: '
                                            'health xid: GPU 1: XID 79 (GPU has fallen off the bus)')


def test_a_passing_node_drained_for_health_is_resumed():
    node = FakeNode(HEALTH_DRAIN)
    result = health_check.check({}, node, lambda: PASS)
    assert node.updates == [('RESUME', None)]
    assert result['acted'] and health_check.summary(result).startswith(
        'gpufleet health: PASS; node h2 idle+drain (%s); resumed' % HEALTH_REASON)


@pytest.mark.parametrize('node_state, result', [(PERSON, FAIL), (DOWN, FAIL), (ROLLOUT, FAIL), (PERSON, PASS),
                                                (ROLLOUT, PASS), (HEALTH_DRAIN, WARN), (IDLE, UNKNOWN)])
def test_nothing_is_updated_where_the_rules_say_no(node_state, result):
    node = FakeNode(node_state)
    found = health_check.check({'act': True}, node, lambda: result)
    assert node.updates == [] and found['action'] == 'none' and not found['acted']
    assert 'no action: ' in health_check.summary(found)


def test_act_false_only_reports():
    node = FakeNode(IDLE)
    result = health_check.check({'act': False}, node, lambda: FAIL)
    assert node.updates == [] and result['action'] == 'drain' and not result['acted']
    assert '; would drain (act is false): gpufleet: health xid: ' in health_check.summary(result)


def test_slurm_errors_are_reported_never_raised():
    node = FakeNode(IDLE, fail={'state': 'scontrol show node h2 failed (rc 1): Unable to contact slurm controller'})
    result = health_check.check({}, node, lambda: FAIL)
    assert result['error'].startswith('scontrol show node h2 failed') and result['state'] is None
    assert health_check.summary(result) == ('gpufleet health: FAIL (xid, ecc); node h2; error: scontrol show node '
                                            'h2 failed (rc 1): Unable to contact slurm controller; no action')
    node = FakeNode(IDLE, fail={'update': 'scontrol update NodeName=h2 State=DRAIN failed (rc 1): Invalid user'})
    result = health_check.check({}, node, lambda: FAIL)
    assert result['action'] == 'drain' and not result['acted'] and 'Invalid user' in result['error']
    assert health_check.summary(result).endswith('Invalid user; not drained')


def test_a_host_without_slurm_clients_or_a_failed_evaluation_changes_nothing():
    result = health_check.check({}, FakeNode(IDLE, present=False), lambda: FAIL)
    assert result['verdict'] == 'FAIL' and 'scontrol' in result['error'] and result['action'] == 'none'

    def broken():
        raise RuntimeError('NVML went away')
    node = FakeNode(IDLE)
    result = health_check.check({}, node, broken)
    assert node.updates == [] and result['verdict'] == 'UNKNOWN'
    assert result['error'] == 'the health evaluation failed: RuntimeError: NVML went away'


# --------------------------------------------------------------------------
# The configuration, read as root
# --------------------------------------------------------------------------

def write(path, text, mode=0o600):
    with open(str(path), 'w') as handle:
        handle.write(text)
    os.chmod(str(path), mode)
    return str(path)


@pytest.mark.parametrize('text, mode, words', [
    ('{"act": true', 0o600, 'not valid JSON'),
    ('[1]', 0o600, 'not an object'),
    ('{"contract": {}, "nodename": "h2"}', 0o600, 'unknown keys nodename'),
    ('{"act": "yes"}', 0o600, '"act" must be a bool'),
    ('{"scontrol": "scontrol"}', 0o600, '"scontrol" must be an absolute path'),
    ('{"contract": {}}', 0o620, 'writable by group'),
    ('{"contract": {}}', 0o646, 'writable by every user'),
])
def test_an_unusable_configuration_exits_1_naming_the_file(tmp_path, capsys, text, mode, words):
    path = write(tmp_path / 'config.json', text, mode)
    assert health_check.main(['--config', path]) == 1
    err = capsys.readouterr().err
    assert err.startswith('gpufleet health: cannot run: %s' % path) and words in err and err.count('\n') == 1


def test_a_missing_configuration_or_a_link_is_refused(tmp_path, capsys):
    missing = str(tmp_path / 'missing.json')
    assert health_check.main(['--config', missing]) == 1
    assert 'the configuration is missing: converge the node with gpufleet.nvidia.slurm_node' in capsys.readouterr().err
    link = str(tmp_path / 'link.json')
    os.symlink(write(tmp_path / 'real.json', '{}'), link)
    assert health_check.main(['--config', link]) == 1
    assert '%s is a symbolic link' % link in capsys.readouterr().err


def test_a_slurm_client_others_can_change_is_refused(tmp_path, capsys):
    scontrol = write(tmp_path / 'scontrol', '#!/bin/sh\n', 0o757)
    path = write(tmp_path / 'config.json', json.dumps({'scontrol': scontrol}))
    assert health_check.main(['--config', path]) == 1
    assert '"scontrol" is %s, which is not an executable file owned by root' % scontrol in capsys.readouterr().err


def test_the_defaults_fill_in_and_the_installed_configuration_reads_back(tmp_path):
    config = health_check.validate_config('c.json', {'contract': None})
    assert config['act'] is True and config['contract'] == {}
    path = str(tmp_path / 'etc' / 'slurm-health-check.json')
    program.install_config(path, {'contract': {'gpu_count': 8}, 'act': False, 'node_name': 'h2'})
    assert health_check.read_config(path) == {'contract': {'gpu_count': 8}, 'act': False, 'node_name': 'h2'}


# --------------------------------------------------------------------------
# The program, built and run on its own
# --------------------------------------------------------------------------

SCONTROL = '''#!/bin/sh
for arg in "$@"; do printf '%%s|' "$arg"; done >> %(dir)s/argv
echo >> %(dir)s/argv
case "$1" in
  --json) echo "scontrol: unrecognized option '--json'" >&2; exit 1 ;;
  -o) cat %(dir)s/node.txt ;;
esac
'''


@pytest.fixture(scope='module')
def built(tmp_path_factory):
    data = program.build()
    path = tmp_path_factory.mktemp('program') / 'gpufleet-slurm-health-check'
    path.write_bytes(data)
    return data, str(path)


@pytest.fixture
def slurm(tmp_path):
    """A directory with fake scontrol and squeue (root's, 0755), the node's ``scontrol -o show node`` line in
    node.txt, every call's arguments in argv, an empty kernel log and the program's configuration."""
    directory = str(tmp_path)
    for name in ('scontrol', 'squeue'):
        write(tmp_path / name, SCONTROL % {'dir': directory}, 0o755)
    write(tmp_path / 'kernel.log', '', 0o644)
    config = {'contract': {}, 'node_name': 'h2', 'kernel_log': str(tmp_path / 'kernel.log'),
              'scontrol': str(tmp_path / 'scontrol'), 'squeue': str(tmp_path / 'squeue')}

    class Slurm(object):
        def node(self, state_words, reason=None):
            line = 'NodeName=h2 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=1 State=%s ThreadsPerCore=1' % state_words
            write(tmp_path / 'node.txt', line + (' Reason=%s' % reason if reason else '') + '\n', 0o644)

        def configure(self, **changed):
            return write(tmp_path / 'config.json', json.dumps(dict(config, **changed)))

        def calls(self):
            if not os.path.exists(os.path.join(directory, 'argv')):
                return []
            with open(os.path.join(directory, 'argv')) as handle:
                return [line.rstrip('|\n').split('|') for line in handle]
    return Slurm()


def run_program(path, *args):
    """The program run by a Python without site-packages nor PYTHONPATH: only the zip's own modules."""
    proc = subprocess.run([sys.executable, '-I', '-S', path] + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=60, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def test_the_program_without_nvml_is_unknown_and_touches_nothing(built, slurm):
    slurm.node('IDLE+DRAIN', 'gpufleet: health xid: 79 [root@2026-12-05T19:36:28]')
    rc, out, err = run_program(built[1], '--config', slurm.configure())
    assert (rc, err) == (0, '')
    assert out.startswith('gpufleet health: UNKNOWN; node h2 idle+drain (gpufleet: health xid: 79); no action: the '
                          'health verdict is UNKNOWN (nvml: UNKNOWN (service): the Python library nvidia-ml-py')
    assert out.count('\n') == 1
    assert slurm.calls() == [['--json', 'show', 'node', 'h2'], ['-o', 'show', 'node', 'h2']]


def test_the_program_drains_a_node_in_service_on_an_xid_79(built, slurm, tmp_path):
    write(tmp_path / 'kernel.log', XID_79, 0o644)
    slurm.node('IDLE')
    rc, out, err = run_program(built[1], '--config', slurm.configure())
    assert (rc, err) == (0, '')
    assert out == 'gpufleet health: FAIL (xid); node h2 idle; drained: %s\n' % HEALTH_REASON
    assert slurm.calls()[-1] == ['update', 'NodeName=h2', 'State=DRAIN', 'Reason=%s' % HEALTH_REASON]


def test_the_program_leaves_a_persons_drain_and_reports_only_when_told(built, slurm, tmp_path):
    write(tmp_path / 'kernel.log', XID_79, 0o644)
    slurm.node('IDLE+DRAIN', 'fan replaced Tuesday [alice@2026-12-05T19:36:28]')
    rc, out, unused = run_program(built[1], '--config', slurm.configure())
    assert rc == 0 and 'no action: drained or down by alice for a reason of theirs (fan replaced Tuesday)' in out
    slurm.node('IDLE')
    rc, out, unused = run_program(built[1], '--config', slurm.configure(act=False))
    assert rc == 0 and '; would drain (act is false): %s' % HEALTH_REASON in out
    rc, out, unused = run_program(built[1], '--config', slurm.configure(), '--no-act')
    assert rc == 0 and '; would drain (act is false): ' in out
    assert not [call for call in slurm.calls() if call[0] == 'update']


def test_the_program_refuses_its_configuration_with_exit_1(built, tmp_path):
    path = write(tmp_path / 'config.json', '{"contract": {}}', 0o666)
    rc, out, err = run_program(built[1], '--config', path)
    assert (rc, out) == (1, '') and err.startswith('gpufleet health: cannot run: %s: refusing to use' % path)


def test_the_program_runs_on_its_own_modules_only(built, slurm, tmp_path):
    # worth something only if it can fail: the same zip without host/slurm.py cannot start
    left_out = 'ansible_collections/gpufleet/nvidia/plugins/module_utils/host/slurm.py'
    source = zipfile.ZipFile(io.BytesIO(built[0]))
    path = str(tmp_path / 'broken')
    with open(path, 'wb') as handle:
        handle.write(b'#!/usr/bin/python3\n')
        with zipfile.ZipFile(handle, 'w') as archive:
            for name in source.namelist():
                if name != left_out:
                    archive.writestr(name, source.read(name))
    slurm.node('IDLE')
    rc, unused, err = run_program(path, '--config', slurm.configure())
    assert rc == 1 and "ImportError: cannot import name 'slurm' from 'ansible_collections.gpufleet.nvidia." in err


def test_in_process_main_prints_one_line(slurm, monkeypatch, capsys):
    def missing():
        raise ImportError('No module named pynvml')
    monkeypatch.setattr(backends, 'load_pynvml', missing)
    slurm.node('IDLE')
    assert health_check.main(['--config', slurm.configure()]) == 0
    out = capsys.readouterr().out
    assert out.startswith('gpufleet health: UNKNOWN; node h2 idle; no action: ') and out.count('\n') == 1


def test_the_same_sources_build_the_same_bytes(built):
    data = program.build()
    assert data == built[0]
    assert data.startswith(b'#!/usr/bin/python3\n')
    archive = zipfile.ZipFile(io.BytesIO(data))
    names = archive.namelist()
    assert names == sorted(names)
    assert set(info.date_time for info in archive.infolist()) == {program.STAMP}
    assert set(info.compress_type for info in archive.infolist()) == {zipfile.ZIP_STORED}
    assert program.build(interpreter='/opt/python/bin/python3')[:len('#!/opt/python/bin/python3\n')] == \
        b'#!/opt/python/bin/python3\n'


def test_the_program_holds_the_entry_its_imports_and_every_package_level(built):
    names = set(zipfile.ZipFile(io.BytesIO(built[0])).namelist())
    base = 'ansible_collections/gpufleet/nvidia/plugins/module_utils/'
    for name in ('__main__.py', 'ansible/__init__.py', 'ansible/module_utils/__init__.py', 'ansible/module_utils/basic.py',
                 'ansible_collections/__init__.py', 'ansible_collections/gpufleet/__init__.py', base + '__init__.py',
                 base + 'slurm/__init__.py', base + 'slurm/health_check.py', base + 'host/slurm.py',
                 base + 'health/apply.py', base + 'gpu/backends.py', base + 'host/files.py',
                 'ansible/module_utils/distro/__init__.py', 'ansible/module_utils/distro/_distro.py'):
        assert name in names
    # what the entry does not import stays out, whatever this process has loaded
    assert base + 'slurm/program.py' not in names and base + 'concerns/gpu_health.py' not in names
    assert zipfile.ZipFile(io.BytesIO(built[0])).read(base + 'host/slurm.py') == program.source_of(
        'ansible_collections.gpufleet.nvidia.plugins.module_utils.host.slurm')[0]


def ast_imports(source, name, package):
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = name.split('.') if package else name.split('.')[:-1]
            module = '.'.join(parts[:len(parts) - node.level + 1] + [node.module or ''] if node.level else
                              [node.module]).strip('.')
            found.append(module)
            found.extend('%s.%s' % (module, alias.name) for alias in node.names)
    return found


def test_the_import_scan_finds_what_ast_finds_in_every_module_it_carries():
    # the regular expression stands in for ast (ten times cheaper): on the real sources they agree
    for name, (source, package) in program.modules().items():
        source = source.decode('utf-8')
        wanted = set(n for n in ast_imports(source, name, package) if program.ours(n))
        assert set(n for n in program.imported(source, name, package) if program.ours(n)) >= wanted, name


def test_the_import_scan_reads_every_form_of_import():
    source = ('from . import a, b as c  # why\n'
              'from ..x.y import (\n    d,  # one\n    e as f,\n)\n'
              'if True:\n    import g.h as i, j\n'
              'from k import \\\n    l\n'
              'from m import *\n')
    assert program.imported(source, 'p.q.r', False) == [
        'p.q', 'p.q.a', 'p.q.b', 'p.x.y', 'p.x.y.d', 'p.x.y.e', 'g.h', 'j', 'k', 'k.l', 'm']
    assert program.imported('from . import s\n', 'p.q', True) == ['p.q', 'p.q.s']


def test_a_module_another_took_the_place_of_is_read_from_its_package(monkeypatch):
    # ansible.module_utils.distro puts a system distro in its own place in sys.modules
    stand_in = type(sys)('distro')
    monkeypatch.setitem(sys.modules, 'ansible.module_utils.distro', stand_in)
    source, package = program.source_of('ansible.module_utils.distro')
    assert package and b'_BUNDLED_METADATA' in source
    assert program.source_of('ansible.module_utils.no_such_module') is None


# --------------------------------------------------------------------------
# Installing, as root
# --------------------------------------------------------------------------

def test_install_writes_a_root_program_once(tmp_path):
    path = str(tmp_path / 'sbin' / 'gpufleet-slurm-health-check')
    assert program.install(path, b'one', check_mode=True) == (True, None, program.sha256(b'one'))
    assert not os.path.exists(path)
    assert program.install(path, b'one') == (True, None, program.sha256(b'one'))
    st = os.lstat(path)
    assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o755, 0)
    assert program.install(path, b'one') == (False, program.sha256(b'one'), program.sha256(b'one'))
    os.chmod(path, 0o775)
    assert program.install(path, b'one')[0] is True and stat.S_IMODE(os.lstat(path).st_mode) == 0o755
    assert program.install(path, b'two') == (True, program.sha256(b'one'), program.sha256(b'two'))
    with open(path, 'rb') as handle:
        assert handle.read() == b'two'
    assert sorted(os.listdir(os.path.dirname(path))) == ['gpufleet-slurm-health-check']


def test_install_config_is_sorted_json_mode_0600_and_idempotent(tmp_path):
    path = str(tmp_path / 'slurm-health-check.json')
    config = {'node_name': 'h2', 'act': True, 'contract': {'gpu_count': 8}}
    changed, before, after = program.install_config(path, config)
    assert changed and before is None and stat.S_IMODE(os.lstat(path).st_mode) == 0o600
    with open(path) as handle:
        text = handle.read()
    assert text == json.dumps(config, sort_keys=True, indent=2) + '\n' and program.sha256(text.encode()) == after
    assert program.install_config(path, dict(reversed(list(config.items())))) == (False, after, after)


def test_a_link_or_a_directory_others_can_write_is_refused(tmp_path):
    link = str(tmp_path / 'program')
    os.symlink(str(tmp_path / 'elsewhere'), link)
    with pytest.raises(HostFileError, match='is a symbolic link: refusing to write through it'):
        program.install(link, b'one')
    assert not os.path.lexists(str(tmp_path / 'elsewhere'))
    with pytest.raises(HostFileError, match='is a symbolic link'):
        program.remove(link)
    shared = tmp_path / 'shared'
    shared.mkdir()
    os.chmod(str(shared), 0o1777)
    path = str(shared / 'program')
    with pytest.raises(HostFileError, match='^%s: refusing to use the directory %s: it is writable by every user'
                       % (path, shared)):
        program.install(path, b'one')
    with pytest.raises(HostFileError, match='give an absolute path'):
        program.install_config('relative.json', {})


def test_remove_says_whether_there_was_a_file(tmp_path):
    path = str(tmp_path / 'program')
    program.install(path, b'one')
    assert program.remove(path, check_mode=True) is True and os.path.exists(path)
    assert program.remove(path) is True and not os.path.exists(path)
    assert program.remove(path) is False


def test_the_program_keeps_its_code_compiled_for_its_next_run(built, slurm, private_memo_dir):
    # root's program (slurmd runs it as root), as a module: its code kept in the bytecode directory
    # (common.compile_once; the test's own directory), loaded by the next run instead of compiled again
    kept = os.environ['GPUFLEET_BYTECODE_DIR']
    assert kept == private_memo_dir + '-bytecode' and not os.path.exists(kept)
    slurm.node('IDLE')
    first = run_program(built[1], '--config', slurm.configure())
    assert first[0] == 0
    entries = dict((name, os.stat(os.path.join(kept, name)).st_ino) for name in os.listdir(kept))
    with zipfile.ZipFile(io.BytesIO(built[0])) as archive:
        sources = [name for name in archive.namelist() if name.endswith('.py') and name != '__main__.py']
    assert len(sources) // 2 < len(entries) <= len(sources)  # what the run imported, each once
    assert run_program(built[1], '--config', slurm.configure()) == first
    assert dict((name, os.stat(os.path.join(kept, name)).st_ino) for name in os.listdir(kept)) == entries
