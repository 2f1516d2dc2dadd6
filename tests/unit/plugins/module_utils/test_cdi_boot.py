# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The CDI spec's boot pieces: whose refresh is chosen, their texts, and the boot script run by a real sh."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import boot as init_boot
from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import boot
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files as host_files

NVIDIA_UNIT = '/lib/systemd/system/nvidia-cdi-refresh.service'
PATH = '/var/run/cdi/nvidia.yaml'
NAMES = ['index', 'uuid']
# NVIDIA's own environment file (toolkit 1.20.0, deployments/systemd/nvidia-cdi-refresh.env): comments only.
NVIDIA_ENV = '''# This file can be used to override the configuration of the
#   nvidia-ctk cdi generate
# command invoked by the nvidia-cdi-refresh.service.
# NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/var/run/cdi/nvidia.yaml
'''


def test_nvidia_unit_is_chosen_where_it_writes_the_same_file_the_same_way():
    source, reason = boot.choose_source('auto', 'systemd', NVIDIA_UNIT, NVIDIA_ENV, PATH, NAMES)
    assert source == 'nvidia' and NVIDIA_UNIT in reason
    same_path = NVIDIA_ENV + 'NVIDIA_CTK_CDI_OUTPUT_FILE_PATH="/var/run/cdi/nvidia.yaml"\n'
    assert boot.choose_source('auto', 'systemd', NVIDIA_UNIT, same_path, PATH, NAMES)[0] == 'nvidia'
    assert boot.choose_source('nvidia', 'systemd', NVIDIA_UNIT, None, PATH, NAMES)[0] == 'nvidia'


@pytest.mark.parametrize('init, unit, env, path, names, why', [
    ('sysvinit', NVIDIA_UNIT, NVIDIA_ENV, PATH, NAMES, 'this host runs sysvinit'),
    ('upstart', None, None, PATH, NAMES, 'this host runs upstart'),
    ('systemd', None, None, PATH, NAMES, 'is not installed'),
    ('systemd', NVIDIA_UNIT, 'NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/etc/cdi/nvidia.yaml\n', PATH, NAMES,
     'writes /etc/cdi/nvidia.yaml'),
    ('systemd', NVIDIA_UNIT, NVIDIA_ENV, '/etc/cdi/nvidia.yaml', NAMES, 'writes /var/run/cdi/nvidia.yaml'),
    ('systemd', NVIDIA_UNIT, 'NVIDIA_CTK_CDI_GENERATE_DEVICE_NAME_STRATEGIES=index\n', PATH, NAMES,
     'sets NVIDIA_CTK_CDI_GENERATE_DEVICE_NAME_STRATEGIES'),
    ('systemd', NVIDIA_UNIT, NVIDIA_ENV, PATH, ['index'], 'names devices by index and uuid'),
])
def test_our_refresh_where_nvidia_unit_cannot_do_it(init, unit, env, path, names, why):
    source, reason = boot.choose_source('auto', init, unit, env, path, names)
    assert source == 'gpufleet' and why in reason
    with pytest.raises(ValueError, match='boot_unit is nvidia, but .*%s' % why.split(' ')[0]):
        boot.choose_source('nvidia', init, unit, env, path, names)


def test_ours_when_asked_and_none_without_an_init_system():
    assert boot.choose_source('gpufleet', 'systemd', NVIDIA_UNIT, NVIDIA_ENV, PATH, NAMES)[0] == 'gpufleet'
    assert boot.choose_source('auto', None, None, None, PATH, NAMES)[0] is None


def test_units_order_the_refresh_before_every_engine_and_after_the_device_nodes():
    for text in (boot.render_unit('systemd'), boot.render_dropin()):
        assert 'After=systemd-modules-load.service systemd-udev-settle.service nvidia-persistenced.service ' \
               'gpufleet-dev-char-links.service' in text
        assert 'Before=containerd.service crio.service docker.service podman.service kubelet.service' in text
    assert '# X-Start-Before:    containerd crio docker podman' in boot.render_unit('sysvinit')
    assert '# Should-Start:      nvidia-persistenced gpufleet-dev-char-links' in boot.render_unit('sysvinit')
    # Before each engine, an instance of its own: an event waits only for the jobs it starts; and once more after
    # the persistence daemon started or stopped (Upstart cannot order it after a job another event is starting).
    assert 'start on (starting containerd or starting crio or starting docker or starting podman' \
        ' or started nvidia-persistenced or stopped nvidia-persistenced)\n' \
        'instance $JOB\ntask\n' in boot.render_unit('upstart')
    # The drop-in orders NVIDIA's unit and changes nothing else of it.
    assert [line for line in boot.render_dropin().splitlines() if not line.startswith('#')] == [
        '[Unit]', boot._order_lines()[0], boot._order_lines()[1]]


@pytest.mark.parametrize('init', ['systemd', 'sysvinit', 'upstart'])
def test_boot_files_are_ours_and_named_per_init_system(init):
    files = boot.boot_files('gpufleet', init, PATH, '/usr/bin/nvidia-ctk', NAMES)
    assert sorted(files) == ['script', 'unit']
    assert files['script'][0] == boot.SCRIPT_PATH and files['script'][2] == 0o755
    assert files['unit'][0] == {'systemd': '/etc/systemd/system/gpufleet-cdi-refresh.service',
                                'sysvinit': '/etc/init.d/gpufleet-cdi-refresh',
                                'upstart': '/etc/init/gpufleet-cdi-refresh.conf'}[init]
    assert all(init_boot.is_ours(text) for _path, text, _mode in files.values())
    assert boot.boot_files('nvidia', 'systemd', PATH, '/usr/bin/nvidia-ctk', NAMES) == {
        'dropin': (boot.DROPIN_PATH, boot.render_dropin(), 0o644)}


@pytest.mark.parametrize('path', ['/var/run/cdi/nvidia spec.yaml', '/var/run/cdi/$(reboot).yaml',
                                  '/var/run/cdi/../x.yaml', 'relative/nvidia.yaml', '/var/run/cdi/nvidia.yml'])
def test_a_path_the_script_cannot_carry_or_the_engines_cannot_read_is_refused(path):
    assert boot.path_problem(path) is not None


def test_plans_write_reload_enable_and_remove_only_ours():
    desired = {'script': 's', 'unit': 'u'}
    assert init_boot.plan_present(('script', 'unit'), {}, desired, False) == [
        'write_script', 'write_unit', 'enable']
    assert init_boot.plan_present(('script', 'unit'), dict(desired), desired, True) == []
    assert init_boot.plan_present(('script', 'unit'), {'script': 's', 'unit': 'old'}, desired, True) == [
        'write_unit', 'reload_init']
    # A drop-in is read by systemd whenever it is written; NVIDIA's unit is enabled when it is not.
    assert init_boot.plan_present(('dropin',), {}, {'dropin': 'd'}, False) == ['write_dropin', 'reload_init',
                                                                               'enable']
    assert init_boot.plan_present(('dropin',), {'dropin': 'd'}, {'dropin': 'd'}, True) == []
    ours = init_boot.header('#', 'cdi_spec')
    current = {'dropin': ours, 'script': '#!/bin/sh\n# a site script\n', 'unit': ours}
    assert init_boot.plan_absent(('dropin', 'script', 'unit'), current, True) == [
        'disable', 'remove_unit', 'remove_dropin', 'reload_init']


# ---- the boot script, run by sh with a stand-in nvidia-ctk --------------------------------------------------------

def fake_ctk(tmp_path, text, rc=0):
    """An nvidia-ctk stand-in that prints ``text`` and records its arguments."""
    ctk = tmp_path / 'nvidia-ctk'
    ctk.write_text('#!/bin/sh\necho "$@" > %s/args\nprintf %%s %s\nexit %d\n'
                   % (tmp_path, "'" + text.replace("'", "'\\''") + "'", rc))
    ctk.chmod(0o755)
    return str(ctk)


def run_script(tmp_path, ctk, spec):
    script = tmp_path / 'refresh'
    script.write_text(boot.render_script(str(spec), ctk, NAMES, 'yaml'))
    return subprocess.run(['sh', str(script)], capture_output=True, text=True, check=False)


def test_the_boot_script_writes_the_spec_and_replaces_it_only_when_it_differs(tmp_path):
    spec = tmp_path / 'cdi' / 'nvidia.yaml'
    proc = run_script(tmp_path, fake_ctk(tmp_path, 'kind: nvidia.com/gpu\n'), spec)
    assert proc.returncode == 0, proc.stderr
    assert spec.read_text() == 'kind: nvidia.com/gpu\n'
    assert oct(spec.stat().st_mode & 0o777) == '0o644'
    assert (tmp_path / 'args').read_text().split() == ['--quiet', 'cdi', 'generate', '--format', 'yaml', '--output=',
                                                       '--device-name-strategy=index', '--device-name-strategy=uuid']
    before = spec.stat()
    assert run_script(tmp_path, fake_ctk(tmp_path, 'kind: nvidia.com/gpu\n'), spec).returncode == 0
    assert (spec.stat().st_ino, spec.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # not rewritten
    assert run_script(tmp_path, fake_ctk(tmp_path, 'kind: nvidia.com/gpu\ndevices: []\n'), spec).returncode == 0
    assert spec.read_text() == 'kind: nvidia.com/gpu\ndevices: []\n'
    assert sorted(os.listdir(str(spec.parent))) == ['nvidia.yaml']  # no temp file, ever, where the engines read
    private = tmp_path / '.cdi.gpufleet'
    assert os.listdir(str(private)) == [] and oct(private.stat().st_mode & 0o777) == '0o700'  # the lock is the directory


def test_refreshes_started_together_run_one_at_a_time_and_write_the_spec_once(tmp_path):
    """Upstart starts one instance per engine at once: the second waits for the first, finds the spec current and
    leaves it (unserialised, both replaced it, the second after an engine had started)."""
    spec = tmp_path / 'cdi' / 'nvidia.yaml'
    log = tmp_path / 'ctk.log'
    ctk = tmp_path / 'nvidia-ctk'
    # A slow nvidia-ctk that logs when each run starts and ends (one line each, appended).
    ctk.write_text('#!/bin/sh\necho "start $$" >> %s\nsleep 0.5\necho "end $$" >> %s\nprintf "kind: nvidia.com/gpu\\n"\n'
                   % (log, log))
    ctk.chmod(0o755)
    script = tmp_path / 'refresh'
    script.write_text(boot.render_script(str(spec), str(ctk), NAMES, 'yaml'))
    procs = [subprocess.Popen(['sh', str(script)], stderr=subprocess.PIPE) for unused in range(3)]
    assert [proc.wait() for proc in procs] == [0, 0, 0]
    events = log.read_text().split('\n')[:-1]
    # Each run ends before the next starts: start, end, start, end, start, end, whatever the machine's load.
    assert [line.split()[0] for line in events] == ['start', 'end'] * 3, events
    assert [line.split()[1] for line in events[0::2]] == [line.split()[1] for line in events[1::2]]
    assert spec.read_text() == 'kind: nvidia.com/gpu\n'
    assert os.listdir(str(tmp_path / '.cdi.gpufleet')) == []  # no temp file, no lock file: the lock is the directory


def test_the_boot_script_and_the_module_share_the_temp_directory(tmp_path):
    directory = str(tmp_path / 'cdi')
    os.mkdir(directory)
    assert boot.temp_directory(directory) == host_files.private_directory(directory) == str(tmp_path / '.cdi.gpufleet')
    assert boot.temp_directory('/var/run/cdi') == '/var/run/.cdi.gpufleet'


def test_the_boot_script_does_not_make_its_temp_file_through_a_link(tmp_path):
    spec = tmp_path / 'cdi' / 'nvidia.yaml'
    elsewhere = tmp_path / 'elsewhere'
    elsewhere.mkdir()
    os.symlink(str(elsewhere), str(tmp_path / '.cdi.gpufleet'))
    proc = run_script(tmp_path, fake_ctk(tmp_path, 'kind: nvidia.com/gpu\n'), spec)
    assert proc.returncode == 1 and not spec.exists() and os.listdir(str(elsewhere)) == []


def test_the_boot_script_keeps_the_spec_when_nvidia_ctk_fails_and_skips_without_it(tmp_path):
    spec = tmp_path / 'cdi' / 'nvidia.yaml'
    spec.parent.mkdir()
    spec.write_text('old\n')
    proc = run_script(tmp_path, fake_ctk(tmp_path, 'half', rc=1), spec)
    assert proc.returncode == 1 and spec.read_text() == 'old\n'
    assert os.listdir(str(spec.parent)) == ['nvidia.yaml']
    assert os.listdir(str(tmp_path / '.cdi.gpufleet')) == []  # no temp file left
    proc = run_script(tmp_path, str(tmp_path / 'missing-ctk'), spec)
    assert proc.returncode == 0 and 'is not installed' in proc.stderr and spec.read_text() == 'old\n'
