# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""device_links on a fake dev root: check mode, diff, idempotence, absent; the boot pieces into a temp root.

Nodes are regular files read through the fake lstat of test_dev_char (no
mknod, no root needed). Nothing here touches this machine's /dev or /etc:
the module runs with boot off, and the boot pieces are written by the
module's Runner under a temp root with a recording init system.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible.module_utils import basic

from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import device_links as concerns_device_links
from ansible_collections.gpufleet.nvidia.plugins.module_utils.device_links import boot as device_links_boot
from ansible_collections.gpufleet.nvidia.plugins.module_utils.device_links import links as dc
from ansible_collections.gpufleet.nvidia.plugins.module_utils.device_links import run as device_links_run
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import detect as init_detect
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import service
from ansible_collections.gpufleet.nvidia.plugins.modules import device_links
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.test_dev_char import (
    FakeAPI, container, fake_lstat, make_dev)

NODES = {'nvidia0': (195, 0), 'nvidiactl': (195, 255), 'nvidia-uvm': (510, 0)}


@pytest.fixture
def fake_nodes(monkeypatch):
    real = dc.find_nodes
    monkeypatch.setattr(device_links_run, 'find_nodes', lambda root, lstat=None: real(root, lstat=fake_lstat))


@pytest.fixture
def warned(monkeypatch):
    """The module's warnings as it gives them (Ansible routes them differently once its controller side is loaded)."""
    found = []
    monkeypatch.setattr(basic.AnsibleModule, 'warn', lambda self, msg: found.append(msg))
    return found


def links(dev):
    char = os.path.join(dev, 'char')
    return dict((name, os.readlink(os.path.join(char, name))) for name in sorted(os.listdir(char)))


def args(dev, **extra):
    return dict({'dev_root': dev, 'boot': False, 'report_containers': False}, **extra)


def test_check_mode_and_diff_then_create_then_nothing(call_module, tmp_path, fake_nodes):
    dev = make_dev(tmp_path / 'dev', NODES)
    rc, result = call_module(device_links.main, dict(args(dev), _ansible_check_mode=True, _ansible_diff=True))
    assert rc == 0 and result['changed'] and result['actions'] == ['create_links']
    assert result['created'] == [os.path.join(dev, 'char', n) for n in ('195:0', '195:255', '510:0')]
    assert result['diff'][0]['before'] == ''
    assert result['diff'][0]['after'] == '195:0 -> ../nvidia0\n195:255 -> ../nvidiactl\n510:0 -> ../nvidia-uvm\n'
    assert links(dev) == {}
    rc, result = call_module(device_links.main, args(dev))
    assert rc == 0 and result['changed']
    assert links(dev) == {'195:0': '../nvidia0', '195:255': '../nvidiactl', '510:0': '../nvidia-uvm'}
    rc, result = call_module(device_links.main, args(dev))
    assert rc == 0 and not result['changed'] and result['actions'] == [] and result['created'] == []
    assert [item['target'] for item in result['links']] == ['../nvidia0', '../nvidiactl', '../nvidia-uvm']


def test_a_missing_char_directory_is_created(call_module, tmp_path, fake_nodes):
    dev = make_dev(tmp_path / 'dev', NODES, char=False)
    rc, result = call_module(device_links.main, dict(args(dev), _ansible_check_mode=True))
    assert rc == 0 and result['changed'] and not os.path.exists(os.path.join(dev, 'char'))
    rc, result = call_module(device_links.main, args(dev))
    assert rc == 0 and len(links(dev)) == 3
    assert oct(os.stat(os.path.join(dev, 'char')).st_mode & 0o777) == oct(0o755)


def test_a_wrong_link_is_reported_and_kept(call_module, tmp_path, fake_nodes, warned):
    dev = make_dev(tmp_path / 'dev', NODES)
    os.symlink('../sda', os.path.join(dev, 'char', '195:0'))
    rc, result = call_module(device_links.main, args(dev))
    assert rc == 0 and result['changed']
    assert links(dev)['195:0'] == '../sda'
    assert [c['link'] for c in result['conflicts']] == [os.path.join(dev, 'char', '195:0')]
    assert len(warned) == 1 and '195:0 is a link to ../sda' in warned[0]


def test_absent_removes_only_nvidia_links(call_module, tmp_path, fake_nodes):
    dev = make_dev(tmp_path / 'dev', NODES)
    call_module(device_links.main, args(dev))
    os.symlink('../sda', os.path.join(dev, 'char', '8:0'))
    rc, result = call_module(device_links.main, dict(args(dev, state='absent'), _ansible_check_mode=True, _ansible_diff=True))
    assert rc == 0 and result['changed'] and result['actions'] == ['remove_links'] and len(links(dev)) == 4
    assert result['diff'][0]['after'] == ''
    rc, result = call_module(device_links.main, args(dev, state='absent'))
    assert rc == 0 and result['changed'] and links(dev) == {'8:0': '../sda'}
    rc, result = call_module(device_links.main, args(dev, state='absent'))
    assert rc == 0 and not result['changed']


def test_a_dev_root_others_can_write_fails_before_any_change(call_module, tmp_path, fake_nodes):
    dev = make_dev(tmp_path / 'dev', NODES)
    os.chmod(dev, 0o777)
    rc, result = call_module(device_links.main, args(dev))
    assert rc == 1 and 'writable by every user' in result['msg'] and os.uname()[1] in result['msg']
    assert links(dev) == {}


def test_no_dockerd_is_nothing_to_report(call_module, tmp_path, fake_nodes, warned):
    dev = make_dev(tmp_path / 'dev', NODES)
    rc, result = call_module(device_links.main, args(dev, report_containers=True, docker_host='unix://%s/none.sock' % tmp_path))
    assert rc == 0 and result['cgroup_driver'] is None and result['exposed_containers'] == []
    assert warned == []


# ---- the Runner with boot pieces and dockerd, under a temp root ----------------------------------

# systemd's one answer about our unit (``Service.systemd_show``), enabled or disabled.
SHOW = ('show',) + tuple(word for name in service.SYSTEMD_PROPERTIES for word in ('-p', name)) + (dc.SERVICE,)
SHOW_COMMAND = 'systemctl ' + ' '.join(SHOW)


def unit_state(state):
    return {SHOW: (0, 'LoadState=loaded\nActiveState=inactive\nUnitFileState=%s\nMainPID=0\n' % state, '')}


class FakeModule(object):
    def __init__(self, params, check_mode=False, diff=False, answers=None):
        self.params = dict({'state': 'present', 'boot': True, 'init_system': 'auto', 'report_containers': True,
                            'docker_host': 'unix:///nowhere'}, **params)
        self.check_mode = check_mode
        self._diff = diff
        self.answers = unit_state('enabled')
        self.answers.update(answers or {})
        self.commands = []
        self.warnings = []

    def run_command(self, argv, environ_update=None):
        self.commands.append(' '.join(os.path.basename(a) if i == 0 else a for i, a in enumerate(argv)))
        return self.answers.get(tuple(argv[1:]), (0, '', ''))

    def warn(self, msg):
        self.warnings.append(msg)

    def fail_json(self, **kwargs):
        raise AssertionError(kwargs['msg'])

    def selinux_enabled(self):
        return False

    def get_bin_path(self, name, required=False):
        return None  # journalctl (log lines for messages): not on this fake host


@pytest.fixture
def systemd_host(monkeypatch):
    def detect(root, run_command):
        return {'init_system': 'systemd', 'reason': 'test', 'evidence': {'tools': {'systemctl': '/bin/systemctl'}}}
    monkeypatch.setattr(init_detect, 'detect', detect)


class runner(object):  # pylint: disable=invalid-name
    """The module's run (its concern's, with this fake host): ``runner(module, root).converge()``."""

    def __init__(self, module, root, api=None, clock=lambda: 1000.0):
        self.module, self.kwargs = module, dict(root=str(root), lstat=fake_lstat, api=api, clock=clock)

    def converge(self):
        return concerns_device_links.run(self.module, **self.kwargs)


def test_boot_pieces_are_written_after_the_links_and_enabled(tmp_path, systemd_host):
    dev = make_dev(tmp_path / 'dev', NODES)
    root = tmp_path / 'root'
    module = FakeModule({'dev_root': dev}, answers=unit_state('disabled'))
    order = []
    real_create = dc.CharDir.create

    def create(self, link, target):
        order.append('link')
        return real_create(self, link, target)

    recorded = module.run_command

    def run_command(argv, environ_update=None):
        order.append(argv[1])
        return recorded(argv)

    module.run_command = run_command
    dc.CharDir.create = create
    try:
        result = runner(module, root).converge()
    finally:
        dc.CharDir.create = real_create
    assert result['actions'] == ['create_links', 'write_script', 'write_udev_rule', 'write_unit', 'enable']
    assert order.index('enable') > max(i for i, step in enumerate(order) if step == 'link')
    unit = root / 'etc/systemd/system/gpufleet-dev-char-links.service'
    assert unit.read_text() == device_links_boot.render_unit('systemd')
    script = root / 'usr/local/sbin/gpufleet-dev-char-links'
    assert oct(script.stat().st_mode & 0o777) == oct(0o755)
    assert (root / 'etc/udev/rules.d/71-gpufleet-nvidia-dev-char.rules').read_text() == device_links_boot.render_udev_rule()
    assert result['boot_files'] == [dc.SCRIPT_PATH, dc.UDEV_RULE_PATH, dc.UNIT_PATHS['systemd']]
    assert 'systemctl daemon-reload' not in module.commands  # enable reloads once, after the links exist
    # converged: nothing to do, no reload, no enable
    module = FakeModule({'dev_root': dev}, answers=unit_state('enabled'))
    result = runner(module, root).converge()
    assert result['actions'] == [] and not result['changed']
    assert module.commands == [SHOW_COMMAND]  # one question to systemd


def test_a_changed_unit_is_reloaded_and_check_mode_shows_the_diff(tmp_path, systemd_host):
    dev = make_dev(tmp_path / 'dev', NODES)
    root = tmp_path / 'root'
    runner(FakeModule({'dev_root': dev}), root).converge()
    unit = root / 'etc/systemd/system/gpufleet-dev-char-links.service'
    unit.write_text('# %s\nold\n' % dc.MARKER)
    module = FakeModule({'dev_root': dev}, check_mode=True, diff=True)
    result = runner(module, root).converge()
    assert result['actions'] == ['write_unit', 'reload_init']
    assert [d['before_header'] for d in result['diff']] == [os.path.join(dev, 'char'), dc.UNIT_PATHS['systemd']]
    assert result['diff'][1]['before'] == '# %s\nold\n' % dc.MARKER
    assert module.commands == [SHOW_COMMAND]  # one question to systemd
    result = runner(FakeModule({'dev_root': dev}), root).converge()
    assert result['actions'] == ['write_unit', 'reload_init']
    assert unit.read_text() == device_links_boot.render_unit('systemd')


def test_absent_removes_boot_pieces_first_then_links(tmp_path, systemd_host):
    dev = make_dev(tmp_path / 'dev', NODES)
    root = tmp_path / 'root'
    runner(FakeModule({'dev_root': dev}), root).converge()
    rule = root / 'etc/udev/rules.d/71-gpufleet-nvidia-dev-char.rules'
    rule.write_text('a rule the site wrote\n')
    module = FakeModule({'dev_root': dev, 'state': 'absent'})
    result = runner(module, root).converge()
    assert result['actions'] == ['disable', 'remove_unit', 'remove_script', 'remove_links']
    assert 'systemctl disable %s' % dc.SERVICE in module.commands
    assert rule.exists() and not (root / 'usr/local/sbin/gpufleet-dev-char-links').exists()
    assert links(dev) == {}


def test_exposed_containers_are_warned_about_and_left_alone(tmp_path, systemd_host):
    dev = make_dev(tmp_path / 'dev', NODES)
    early = container('trainer', '1970-01-01T00:01:40Z', devices=['/dev/nvidia0'])
    api = FakeAPI({'/info': {'CgroupDriver': 'systemd'}, '/containers/json': [{'Id': early['Id']}],
                   '/containers/%s/json' % early['Id']: early})
    module = FakeModule({'dev_root': dev, 'boot': False})
    result = runner(module, tmp_path / 'root', api=api).converge()
    assert result['cgroup_driver'] == 'systemd'
    assert [c['name'] for c in result['exposed_containers']] == ['trainer']
    assert len(module.warnings) == 1 and 'trainer' in module.warnings[0]
    assert all(url.startswith('/containers/') and url.endswith('json') or url == '/info' for url in api.asked)
    # a container started after the links existed: nothing exposed
    late = container('server', '2100-01-01T00:00:00Z', runtime='nvidia')
    api = FakeAPI({'/info': {'CgroupDriver': 'systemd'}, '/containers/json': [{'Id': late['Id']}],
                   '/containers/%s/json' % late['Id']: late})
    result = runner(FakeModule({'dev_root': dev, 'boot': False}), tmp_path / 'root', api=api).converge()
    assert result['exposed_containers'] == [] and result['actions'] == []


def test_unknown_init_system_installs_script_and_rule_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setattr(init_detect, 'detect', lambda root, run_command: {
        'init_system': 'unknown', 'reason': 'PID 1 is tini', 'evidence': {'tools': {}}})
    dev = make_dev(tmp_path / 'dev', NODES)
    module = FakeModule({'dev_root': dev})
    result = runner(module, tmp_path / 'root').converge()
    assert result['actions'] == ['create_links', 'write_script', 'write_udev_rule'] and result['init_system'] is None
    assert any('only the udev rule' in w for w in module.warnings)
