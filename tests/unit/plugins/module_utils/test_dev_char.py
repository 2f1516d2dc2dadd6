# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The /dev/char links: node discovery on a fake dev root, the pure plans, the boot pieces, the container report.

Device nodes are regular files here, each holding "c MAJOR MINOR", read
through a fake lstat: mknod needs root, and these tests run unprivileged.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import stat
import subprocess

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.device_links import boot as device_links_boot
from ansible_collections.gpufleet.nvidia.plugins.module_utils.device_links import links as dc
from ansible_collections.gpufleet.nvidia.plugins.module_utils.device_links import run as device_links_run
from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker.api import DockerAPIError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import HostFileError


class FakeStat(object):
    def __init__(self, real, major, minor):
        self.st_mode = stat.S_IFCHR | 0o666
        self.st_rdev = os.makedev(major, minor)
        self.st_uid, self.st_gid, self.st_mtime = real.st_uid, real.st_gid, real.st_mtime


def fake_lstat(path):
    """A regular file holding "c MAJOR MINOR" reads as that character device."""
    st = os.lstat(path)
    if stat.S_ISREG(st.st_mode):
        with open(path) as handle:
            words = handle.read().split()
        if len(words) == 3 and words[0] == 'c':
            return FakeStat(st, int(words[1]), int(words[2]))
    return st


def make_dev(root, nodes, char=True):
    """A fake dev root: {relative name: (major, minor)} as fake nodes, plus unrelated files."""
    root = str(root)
    if not os.path.isdir(root):
        os.mkdir(root, 0o755)
    for name, (major, minor) in nodes.items():
        path = os.path.join(root, name)
        if not os.path.isdir(os.path.dirname(path)):
            os.makedirs(os.path.dirname(path), 0o755)
        with open(path, 'w') as handle:
            handle.write('c %d %d\n' % (major, minor))
    if char and not os.path.isdir(os.path.join(root, 'char')):
        os.mkdir(os.path.join(root, 'char'), 0o755)
    os.chmod(root, 0o755)
    return root


ALL_KINDS = {'nvidia0': (195, 0), 'nvidia1': (195, 1), 'nvidiactl': (195, 255), 'nvidia-modeset': (195, 254),
             'nvidia-uvm': (510, 0), 'nvidia-uvm-tools': (510, 1), 'nvidia-caps/nvidia-cap1': (237, 1),
             'nvidia-caps/nvidia-cap2': (237, 2)}


# ---- discovery -----------------------------------------------------------------

def test_find_nodes_finds_every_kind_and_nothing_else(tmp_path):
    dev = make_dev(tmp_path, dict(ALL_KINDS, **{'nvidia0x': (195, 9), 'nvidiafoo': (195, 8),
                                                'nvidia-caps/other': (237, 9), 'sda': (8, 0)}))
    os.symlink('nvidia0', os.path.join(dev, 'nvidia7'))          # a link is never a node
    with open(os.path.join(dev, 'nvidia6'), 'w') as handle:      # a regular file is not a node
        handle.write('not a device\n')
    found = dc.find_nodes(dev, lstat=fake_lstat)
    assert sorted((n.name, n.major, n.minor) for n in found) == sorted(
        (name, major, minor) for name, (major, minor) in ALL_KINDS.items())
    assert [n.link for n in found][:2] == ['195:0', '195:1']
    assert dc.Node('nvidia-caps/nvidia-cap1', 237, 1).target == '../nvidia-caps/nvidia-cap1'


def test_find_nodes_with_the_real_lstat_ignores_regular_files(tmp_path):
    # The lab's kit binds regular files at /dev/nvidiaN: the device cgroup ignores them, and so do we.
    dev = make_dev(tmp_path, {'nvidia0': (195, 0)})
    assert dc.find_nodes(dev) == []


def test_an_nvidia_caps_directory_others_can_write_is_refused(tmp_path):
    dev = make_dev(tmp_path, {'nvidia-caps/nvidia-cap1': (237, 1)})
    os.chmod(os.path.join(dev, 'nvidia-caps'), 0o777)
    with pytest.raises(HostFileError, match='nvidia-caps.*writable by every user'):
        dc.find_nodes(dev, lstat=fake_lstat)


def test_read_char_dir_tells_links_devices_and_files_apart(tmp_path):
    char = str(tmp_path / 'char')
    os.mkdir(char)
    os.symlink('../nvidia0', os.path.join(char, '195:0'))
    open(os.path.join(char, '195:1'), 'w').close()
    os.symlink('../sda', os.path.join(char, 'not-a-number'))
    entries = dc.read_char_dir(char)
    assert sorted(entries) == ['195:0', '195:1']
    assert entries['195:0'].kind == 'link' and entries['195:0'].target == '../nvidia0'
    assert entries['195:1'].kind == 'other'
    assert dc.read_char_dir(str(tmp_path / 'missing')) == {}


# ---- the pure plans --------------------------------------------------------------

NODES = [dc.Node('nvidia0', 195, 0), dc.Node('nvidiactl', 195, 255), dc.Node('nvidia-uvm', 510, 0),
         dc.Node('nvidia-caps/nvidia-cap1', 237, 1)]


def link(target, mtime=100.0):
    return dc.Entry('link', target, None, mtime)


def test_plan_present_creates_every_missing_link_relative_like_udev():
    plan = dc.plan_present(NODES, {})
    assert plan.create == [('195:0', '../nvidia0'), ('195:255', '../nvidiactl'), ('510:0', '../nvidia-uvm'),
                           ('237:1', '../nvidia-caps/nvidia-cap1')]
    assert plan.keep == plan.conflicts == plan.remove == []


def test_plan_present_keeps_right_links_in_any_spelling_and_device_nodes():
    entries = {'195:0': link('../nvidia0'), '195:255': link('/dev/nvidiactl'),
               '510:0': dc.Entry('char', None, (510, 0), 1.0), '237:1': link('../nvidia-caps/./nvidia-cap1')}
    plan = dc.plan_present(NODES, entries)
    assert plan.create == [] and plan.conflicts == [] and not plan.changes
    assert [name for name, _target in plan.keep] == ['195:0', '195:255', '510:0', '237:1']


def test_plan_present_never_replaces_a_wrong_entry_it_reports_it():
    entries = {'195:0': link('../sda'), '195:255': dc.Entry('other', None, None, 1.0),
               '510:0': dc.Entry('char', None, (8, 0), 1.0)}
    plan = dc.plan_present(NODES, entries)
    assert plan.create == [('237:1', '../nvidia-caps/nvidia-cap1')]
    conflicts = dict(plan.conflicts)
    assert sorted(conflicts) == ['195:0', '195:255', '510:0']
    assert 'is a link to ../sda, not a link to ../nvidia0' in conflicts['195:0']
    assert 'not a link' in conflicts['195:255'] and 'the character device 8:0' in conflicts['510:0']


def test_plan_present_with_a_dev_root_that_is_not_dev():
    plan = dc.plan_present([dc.Node('nvidia0', 195, 0)], {'195:0': link('/srv/dev/nvidia0')}, '/srv/dev')
    assert plan.keep == [('195:0', '/srv/dev/nvidia0')]
    plan = dc.plan_present([dc.Node('nvidia0', 195, 0)], {'195:0': link('/dev/nvidia0')}, '/srv/dev')
    assert plan.conflicts and not plan.keep


def test_two_nodes_with_one_number_get_one_link():
    plan = dc.plan_present([dc.Node('nvidia0', 195, 0), dc.Node('nvidia9', 195, 0)], {})
    assert plan.create == [('195:0', '../nvidia0')]


def test_plan_present_removes_the_links_of_nodes_that_are_gone_and_nothing_else():
    # A GPU off the bus, or a driver reloaded with fewer GPUs: its node is gone, its link points nowhere.
    entries = {'195:0': link('../nvidia0'), '195:5': link('../nvidia5'), '195:6': link('/dev/nvidia6'),
               '8:0': link('../sda'), '195:7': dc.Entry('char', None, (195, 7), 1.0),
               '195:255': link('../nvidia9')}
    plan = dc.plan_present(NODES, entries)
    assert plan.remove == [('195:5', '../nvidia5'), ('195:6', '/dev/nvidia6')]
    assert ('195:0', '../nvidia0') in plan.keep and plan.changes
    # the link of a node that is there, pointing at a gone node, is a conflict left alone (never removed)
    assert [name for name, _problem in plan.conflicts] == ['195:255']
    assert dc.diff(plan, '/dev/char')['before'].count('195:5 -> ../nvidia5') == 1


def test_plan_absent_removes_only_links_to_nvidia_nodes():
    entries = {'195:0': link('../nvidia0'), '195:255': link('/dev/nvidiactl'), '237:1': link('../nvidia-caps/nvidia-cap1'),
               '8:0': link('../sda'), '195:7': link('../nvidiafoo'), '195:8': dc.Entry('char', None, (195, 8), 1.0),
               '195:9': link('../../etc/nvidia0')}
    plan = dc.plan_absent(entries)
    assert plan.remove == [('195:0', '../nvidia0'), ('195:255', '/dev/nvidiactl'),
                           ('237:1', '../nvidia-caps/nvidia-cap1')]


def test_diff_lists_links_before_and_after():
    plan = dc.plan_present(NODES[:2], {'195:255': link('../nvidiactl')})
    assert dc.diff(plan, '/dev/char') == {'before_header': '/dev/char', 'after_header': '/dev/char',
                                          'before': '195:255 -> ../nvidiactl\n',
                                          'after': '195:0 -> ../nvidia0\n195:255 -> ../nvidiactl\n'}


def test_links_ready_is_the_last_link_made():
    entries = {'195:255': link('../nvidiactl', mtime=50.0)}
    assert dc.links_ready(dc.plan_present(NODES[:2], entries), entries, 1000.0) == 1000.0
    assert dc.links_ready(dc.plan_present(NODES[1:2], entries), entries, 1000.0) == 50.0
    wrong = {'195:0': link('../sda')}
    assert dc.links_ready(dc.plan_present(NODES[:1], wrong), wrong, 1000.0) is None


# ---- changing the directory -------------------------------------------------------

def test_char_dir_creates_links_and_never_replaces(tmp_path):
    path = str(tmp_path / 'char')
    with dc.CharDir(path) as directory:
        assert directory.create('195:0', '../nvidia0')
        assert not directory.create('195:0', '../other')
        assert not directory.remove('195:0', '../other')
        assert os.readlink(os.path.join(path, '195:0')) == '../nvidia0'
        assert directory.remove('195:0', '../nvidia0')
        assert not directory.remove('195:0', '../nvidia0')
    assert stat.S_IMODE(os.stat(path).st_mode) & 0o022 == 0


def test_check_dirs_refuses_a_dev_root_others_can_write(tmp_path):
    dev = make_dev(tmp_path / 'dev', {})
    assert dc.check_dirs(dev) == os.path.join(dev, 'char')
    os.chmod(dev, 0o777)
    with pytest.raises(HostFileError, match='writable by every user'):
        dc.check_dirs(dev)
    os.chmod(dev, 0o755)
    os.rmdir(os.path.join(dev, 'char'))
    os.symlink(str(tmp_path), os.path.join(dev, 'char'))
    with pytest.raises(HostFileError, match='symbolic link'):
        dc.check_dirs(dev)


# ---- boot pieces -------------------------------------------------------------------

def test_boot_files_per_init_system():
    assert sorted(device_links_boot.boot_files('systemd')) == ['script', 'udev_rule', 'unit']
    assert device_links_boot.boot_files('systemd')['unit'][0] == '/etc/systemd/system/gpufleet-dev-char-links.service'
    assert device_links_boot.boot_files('sysvinit')['unit'][0:3:2] == ('/etc/init.d/gpufleet-dev-char-links', 0o755)
    assert device_links_boot.boot_files('upstart')['unit'][0] == '/etc/init/gpufleet-dev-char-links.conf'
    assert sorted(device_links_boot.boot_files(None)) == ['script', 'udev_rule']
    for init in ('systemd', 'sysvinit', 'upstart', None):
        assert all(device_links_boot.is_ours(text) for _path, text, _mode in device_links_boot.boot_files(init).values())


def test_systemd_unit_runs_before_the_engines():
    unit = device_links_boot.render_unit('systemd')
    assert 'Before=docker.service containerd.service crio.service kubelet.service' in unit.splitlines()
    assert 'Type=oneshot' in unit and 'RemainAfterExit=yes' in unit
    assert 'ExecStart=/usr/local/sbin/gpufleet-dev-char-links' in unit
    assert 'WantedBy=multi-user.target' in unit
    assert 'DefaultDependencies=no' not in unit  # After=nvidia-persistenced would make an ordering cycle


def test_sysv_script_and_upstart_job():
    script = device_links_boot.render_unit('sysvinit')
    assert '# X-Start-Before:    docker containerd crio' in script
    assert '# Default-Start:     2 3 4 5' in script and 'exec /usr/local/sbin/gpufleet-dev-char-links' in script
    job = device_links_boot.render_unit('upstart')
    assert 'start on (starting docker or starting containerd or starting crio or runlevel [2345])' in job
    assert '\ntask\n' in job and 'exec /usr/local/sbin/gpufleet-dev-char-links' in job


def test_udev_rule():
    rule = device_links_boot.render_udev_rule()
    assert 'ACTION=="add", DEVPATH=="/bus/pci/drivers/nvidia", RUN+="/usr/local/sbin/gpufleet-dev-char-links"' in rule
    assert 'KERNEL=="nvidia|nvidia_uvm|nvidia_modeset"' in rule and 'SUBSYSTEM=="module"' in rule


def run_script(dev):
    path = os.path.join(str(dev), '.links.sh')
    with open(path, 'w') as handle:
        handle.write(device_links_boot.render_script().replace('dev=/dev\n', 'dev=%s\n' % dev))
    return subprocess.run(['sh', path], capture_output=True, text=True, check=False)


def test_the_boot_scripts_parse_and_skip_what_is_not_a_node(tmp_path):
    for text in (device_links_boot.render_script(), device_links_boot.render_unit('sysvinit')):
        assert subprocess.run(['sh', '-n', '-c', text], check=False).returncode == 0
    (tmp_path / 'nvidia0').write_text('a regular file, as the lab kit binds\n')
    os.symlink('/dev/null', str(tmp_path / 'nvidia1'))
    res = run_script(tmp_path)
    assert res.returncode == 0, res.stderr
    assert os.listdir(str(tmp_path / 'char')) == []


@pytest.mark.skipif(os.geteuid() != 0, reason='mknod needs root')
def test_the_boot_script_links_like_the_module(tmp_path):
    nodes = dict(ALL_KINDS, **{'nvidia0x': (195, 9), 'nvidia-caps/other': (237, 9)})
    for name, (major, minor) in nodes.items():
        path = tmp_path / name
        path.parent.mkdir(exist_ok=True)
        os.mknod(str(path), 0o600 | stat.S_IFCHR, os.makedev(major, minor))
    os.mkdir(str(tmp_path / 'char'))
    os.symlink('../elsewhere', str(tmp_path / 'char' / '195:1'))  # never replaced
    res = run_script(tmp_path)
    assert res.returncode == 0, res.stderr
    made = dict((name, os.readlink(str(tmp_path / 'char' / name))) for name in os.listdir(str(tmp_path / 'char')))
    expected = dict(('%d:%d' % numbers, '../' + name) for name, numbers in ALL_KINDS.items())
    expected['195:1'] = '../elsewhere'
    assert made == expected
    # what the module plans on the same directory: nothing more to create, the same conflict
    plan = dc.plan_present(dc.find_nodes(str(tmp_path)), dc.read_char_dir(str(tmp_path / 'char')), str(tmp_path))
    assert plan.create == [] and [name for name, _problem in plan.conflicts] == ['195:1']
    assert run_script(tmp_path).returncode == 0  # again: nothing changes
    assert len(os.listdir(str(tmp_path / 'char'))) == len(expected)


def test_plan_boot_present():
    desired = {'script': 's', 'udev_rule': 'r', 'unit': 'u'}
    assert device_links_boot.plan_boot_present({}, desired, False) == ['write_script', 'write_udev_rule', 'write_unit', 'enable']
    assert device_links_boot.plan_boot_present(dict(desired), desired, True) == []
    assert device_links_boot.plan_boot_present(dict(desired, unit='old'), desired, True) == ['write_unit', 'reload_init']
    assert device_links_boot.plan_boot_present(dict(desired), desired, False) == ['enable']
    assert device_links_boot.plan_boot_present({}, {'script': 's', 'udev_rule': 'r'}, False) == ['write_script', 'write_udev_rule']


def test_plan_boot_absent_removes_only_our_files():
    ours = '# %s\n' % dc.MARKER
    current = {'script': ours, 'udev_rule': 'someone else\'s', 'unit': ours}
    assert device_links_boot.plan_boot_absent(current, True) == ['disable', 'remove_unit', 'remove_script']
    assert device_links_boot.plan_boot_absent({'script': None, 'udev_rule': None, 'unit': None}, False) == []


# ---- the container report --------------------------------------------------------------

def container(name, started, devices=(), runtime='runc', env=(), requests=(), running=True):
    return {'Id': (name * 64)[:64].encode().hex()[:64], 'Name': '/' + name,
            'State': {'Running': running, 'StartedAt': started},
            'HostConfig': {'Devices': [{'PathOnHost': d, 'PathInContainer': d, 'CgroupPermissions': 'rwm'}
                                       for d in devices],
                           'Runtime': runtime, 'DeviceRequests': list(requests)},
            'Config': {'Env': list(env)}}


def test_parse_time():
    assert device_links_run.parse_time('1970-01-01T00:01:40Z') == 100
    assert device_links_run.parse_time('1970-01-01T00:01:40.5Z') == 100.5
    assert device_links_run.parse_time('1970-01-01T01:01:40.000000001+01:00') == pytest.approx(100.000000001)
    assert device_links_run.parse_time('0001-01-01T00:00:00Z') is not None
    assert device_links_run.parse_time('soon') is None and device_links_run.parse_time(None) is None


def test_uses_nvidia():
    assert device_links_run.uses_nvidia(container('a', '', devices=['/dev/nvidia0']))
    assert device_links_run.uses_nvidia(container('a', '', devices=['/dev/nvidia-caps/nvidia-cap1']))
    assert device_links_run.uses_nvidia(container('a', '', runtime='nvidia'))
    assert device_links_run.uses_nvidia(container('a', '', env=['NVIDIA_VISIBLE_DEVICES=all']))
    assert device_links_run.uses_nvidia(container('a', '', requests=[{'Driver': '', 'Capabilities': [['gpu']]}]))
    assert not device_links_run.uses_nvidia(container('a', '', devices=['/dev/sda', '/dev/fuse']))
    assert not device_links_run.uses_nvidia(container('a', '', env=['NVIDIA_VISIBLE_DEVICES=void', 'PATH=/bin']))
    assert not device_links_run.uses_nvidia({'Id': 'x'})


def test_exposed_containers_started_before_the_links():
    early = container('early', '1970-01-01T00:01:40Z', devices=['/dev/nvidia0'])
    late = container('late', '1970-01-01T00:03:20Z', devices=['/dev/nvidia0'])
    plain = container('plain', '1970-01-01T00:01:40Z')
    stopped = container('stopped', '1970-01-01T00:01:40Z', runtime='nvidia', running=False)
    found = device_links_run.exposed_containers('systemd', [early, late, plain, stopped], 150.0)
    assert [c['name'] for c in found] == ['early']
    assert found[0]['started_at'] == '1970-01-01T00:01:40Z' and len(found[0]['id']) == 12
    # links made by this run: every running GPU container
    assert [c['name'] for c in device_links_run.exposed_containers('systemd', [early, late], 1000.0)] == ['early', 'late']
    # a node without a working link: every GPU container
    assert [c['name'] for c in device_links_run.exposed_containers('systemd', [early, late], None)] == ['early', 'late']
    # cgroupfs: systemd does not manage the containers' devices
    assert device_links_run.exposed_containers('cgroupfs', [early, late], 1000.0) == []
    warning = device_links_run.exposure_warning(found[0])
    assert 'early' in warning and 'Restart it to be safe' in warning and 'does not touch it' in warning


class FakeAPI(object):
    def __init__(self, answers, error=None):
        self.answers = answers
        self.error = error
        self.asked = []

    def info(self):
        return self.get('/info')

    def get(self, url):
        self.asked.append(url)
        if self.error is not None:
            raise self.error
        return self.answers[url]


def test_docker_report_asks_for_containers_only_with_the_systemd_driver():
    early = container('early', '1970-01-01T00:01:40Z', devices=['/dev/nvidia0'])
    api = FakeAPI({'/info': {'CgroupDriver': 'systemd'}, '/containers/json': [{'Id': early['Id']}, {'Id': '../x'}],
                   '/containers/%s/json' % early['Id']: early})
    driver, exposed = device_links_run.docker_report(api, 1000.0)
    assert driver == 'systemd' and [c['name'] for c in exposed] == ['early']
    assert '/containers/../x/json' not in api.asked
    api = FakeAPI({'/info': {'CgroupDriver': 'cgroupfs'}})
    assert device_links_run.docker_report(api, 1000.0) == ('cgroupfs', []) and api.asked == ['/info']


def test_docker_report_without_dockerd_is_nothing_to_report():
    api = FakeAPI({}, error=DockerAPIError('no socket', unreachable=True))
    assert device_links_run.docker_report(api, 1000.0) == (None, [])
    with pytest.raises(DockerAPIError):
        device_links_run.docker_report(FakeAPI({}, error=DockerAPIError('HTTP 500')), 1000.0)
