# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""crio.config and crio.apply on fixture files and a fake service: CRI-O is not installable here.

The merge and validation rules are CRI-O's as read in its source (docs/crio.md); no real crio checks them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import stat
import subprocess
import sys
import time

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.crio import config as cr
from ansible_collections.gpufleet.nvidia.plugins.module_utils.crio import apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils.crio import apply_change
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import DocumentError, ServiceError

FIXTURES = os.path.join(os.path.dirname(__file__), '..', '..', 'fixtures', 'crio')
RUNTIME = '/usr/bin/nvidia-container-runtime'
DROPIN = '/etc/crio/crio.conf.d/99-nvidia.conf'
V129, V132 = (1, 29, 1), (1, 32, 0)


def text(name):
    with open(os.path.join(FIXTURES, name), 'rb') as handle:
        return handle.read().decode('utf-8')


def main(name):
    return cr.Source('/etc/crio/crio.conf', text(name), main=True)


def dropin(name, as_name=None):
    return cr.Source('/etc/crio/crio.conf.d/' + (as_name or os.path.basename(name)), text(name))


def request(**kwargs):
    kwargs.setdefault('runtime_path', RUNTIME)
    return cr.Request(**kwargs)


def planned(sources, version=V129, **kwargs):
    return cr.plan(sources, request(**kwargs), version)


def table(plan):
    return cr.loads(plan.text, 'x')['crio']['runtime']['runtimes']['nvidia']


def rerun(sources, plan, version=V129, **kwargs):
    """The sources with the planned drop-in in place (what the next run reads)."""
    return cr.placed_in_order(sources, DROPIN, plan.text), version, kwargs


# ---- the effective configuration ------------------------------------------------

def test_walk_order_is_by_name_per_directory():
    # Go's filepath.Walk sorts the names of each directory and enters a directory where its name sorts:
    # "50-site" sorts before "50-site.conf", so the files under it come first.
    assert cr.walk_order(['5-first.conf', '50-site/30-runc.conf', '20-crun.conf', '10-cgroupfs.conf',
                          '99-nvidia.conf', '50-site.conf']) == [
        '10-cgroupfs.conf', '20-crun.conf', '5-first.conf', '50-site/30-runc.conf', '50-site.conf', '99-nvidia.conf']


def test_drop_ins_override_keys_and_replace_runtime_tables_whole(tmp_path):
    root = os.path.join(FIXTURES, 'overrides')
    paths = apply.list_dropins(os.path.join(root, 'crio.conf.d'))
    assert [os.path.relpath(p, root) for p in paths] == [
        'crio.conf.d/10-cgroupfs.conf', 'crio.conf.d/20-crun.conf', 'crio.conf.d/5-first.conf',
        'crio.conf.d/50-site/30-runc.conf']
    sources = [cr.Source('crio.conf', text('overrides/crio.conf'), main=True)]
    sources += [cr.Source(p, text(os.path.relpath(p, FIXTURES))) for p in paths]
    effective = cr.Effective(sources, V129)
    assert effective.cgroup_manager == 'cgroupfs' and effective.default_runtime == 'crun'
    assert effective.get(('crio', 'image', 'pause_image')) == 'registry.example/pause:3.9'
    # runc's table comes whole from the last file: its monitor_path from crio.conf is gone.
    assert effective.runtimes['runc'] == {'runtime_path': '/opt/runc/bin/runc'}
    assert effective.origin(cr.RUNTIMES + ('runc',)).path.endswith('50-site/30-runc.conf')


def test_storage_options_are_appended_without_duplicates():
    first = cr.Source('a', '[crio]\nstorage_option = ["a", "b"]\n', main=True)
    second = cr.Source('b', '[crio]\nstorage_option = ["a", "c"]\n')
    assert cr.Effective([first, second]).get(('crio', 'storage_option')) == ['b', 'a', 'c']


@pytest.mark.parametrize('version, name', [((1, 30, 4), 'runc'), ((1, 31, 0), 'crun'), (None, None)])
def test_built_in_default_runtime(version, name):
    assert cr.Effective([], version).default_runtime == name


# ---- the drop-in -------------------------------------------------------------------

def test_typical_crio_conf_gets_the_default_runtimes_monitor():
    plan = planned([main('typical.crio.conf')])
    assert plan.text.startswith(cr.HEADER[0])
    assert table(plan) == {'runtime_path': RUNTIME, 'runtime_type': 'oci', 'monitor_path': '/usr/bin/conmon',
                           'monitor_cgroup': 'system.slice',
                           'monitor_env': ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin']}
    assert 'default_runtime' not in plan.text
    assert plan.after.runtimes['runc'] == plan.before.runtimes['runc']
    # The next run reads the drop-in it wrote and changes nothing.
    again = planned(cr.placed_in_order([main('typical.crio.conf')], DROPIN, plan.text))
    assert again.text == plan.text and not again.changes


def test_overrides_follow_the_effective_default_runtime_and_cgroupfs():
    root = os.path.join(FIXTURES, 'overrides')
    paths = apply.list_dropins(os.path.join(root, 'crio.conf.d'))
    sources = [cr.Source('/etc/crio/crio.conf', text('overrides/crio.conf'), main=True)]
    sources += [cr.Source('/etc/crio/crio.conf.d/' + os.path.relpath(p, os.path.join(root, 'crio.conf.d')),
                          text(os.path.relpath(p, FIXTURES))) for p in paths]
    plan = planned(sources)
    assert table(plan) == {'runtime_path': RUNTIME, 'runtime_type': 'oci', 'monitor_path': '/usr/local/bin/conmon',
                           'monitor_cgroup': 'pod',
                           'monitor_env': ['PATH=/usr/local/bin:/usr/bin:/bin', 'LOG_LEVEL=info']}


def test_packaged_conmon_rs_default_is_followed():
    plan = planned([dropin('packaged/crio.conf.d/10-crio.conf')], version=V132)
    # The packaged crun table's allowed_annotations come along, as with NVIDIA's tool (the table is copied whole).
    assert table(plan) == {'runtime_path': RUNTIME, 'runtime_type': 'pod',
                           'monitor_path': '/usr/libexec/crio/conmonrs',
                           'allowed_annotations': ['io.containers.trace-syscall']}


@pytest.mark.parametrize('name, cgroup', [('cgroupfs.crio.conf', 'pod'), ('systemd-nothing.crio.conf', 'system.slice')])
def test_monitor_cgroup_matches_the_cgroup_manager(name, cgroup):
    plan = planned([main(name)])
    assert table(plan)['monitor_cgroup'] == cgroup
    assert 'monitor_path' not in table(plan)  # CRI-O finds conmon in $PATH, as for the default runtime


def test_systemd_default_becomes_empty_under_cgroupfs():
    sources = [cr.Source('/etc/crio/crio.conf', '[crio.runtime]\ncgroup_manager = "cgroupfs"\n'
                         '[crio.runtime.runtimes.runc]\nmonitor_cgroup = "system.slice"\n', main=True)]
    assert table(planned(sources))['monitor_cgroup'] == ''


def test_a_monitor_cgroup_crio_would_refuse_is_refused():
    with pytest.raises(DocumentError, match="cgroupfs manager conmon cgroup should be 'pod' or empty"):
        planned([main('cgroupfs-bad.crio.conf')])


@pytest.mark.parametrize('newline', ['\n', '\r\n'])
def test_crlf_and_comments_are_read(newline):
    source = cr.Source('/etc/crio/crio.conf', text('comments.crio.conf').replace('\n', newline), main=True)
    plan = planned([source])
    assert table(plan)['monitor_env'] == ['PATH=/usr/bin:/bin']
    assert table(plan)['monitor_path'] == '/usr/bin/conmon'
    assert '\r' not in plan.text


def test_bad_toml_is_refused_naming_the_file():
    with pytest.raises(DocumentError, match='99-bad.conf: not valid TOML'):
        planned([main('typical.crio.conf'), dropin('bad.conf', '99-bad.conf')])


def test_a_user_defined_nvidia_runtime_that_differs_in_a_later_file_is_refused():
    # Read after our drop-in, its table would win: ours would not count (an earlier one is overridden: test_crio_edges).
    with pytest.raises(DocumentError, match='99-zz-nvidia.conf: the runtime "nvidia" is already defined at line 2'):
        planned([main('typical.crio.conf'), dropin('user-nvidia.conf', '99-zz-nvidia.conf')])


def test_a_user_defined_nvidia_runtime_that_matches_is_left_alone():
    plan = planned([main('typical.crio.conf'), dropin('user-nvidia-same.conf', '50-nvidia.conf')])
    assert plan.text is None and not plan.changes and plan.warnings
    with_default = planned([main('typical.crio.conf'), dropin('user-nvidia-same.conf', '50-nvidia.conf')],
                           default_runtime=True)
    assert 'runtimes' not in with_default.text and 'default_runtime = "nvidia"' in with_default.text


def test_default_runtime_only_on_request_and_kept_on_rerun():
    sources = [main('typical.crio.conf')]
    plan = planned(sources, default_runtime=True)
    assert cr.loads(plan.text, 'x')['crio']['runtime']['default_runtime'] == 'nvidia'
    assert plan.after.default_runtime == 'nvidia'
    placed = cr.placed_in_order(sources, DROPIN, plan.text)
    assert planned(placed).text == plan.text                      # omitted: left as it is
    off = planned(placed, default_runtime=False)
    assert 'default_runtime' not in off.text and off.after.default_runtime == 'runc'
    # The nvidia runtime follows the default runtime as it is without this drop-in (runc), not itself.
    assert table(planned(placed, default_runtime=True)) == table(plan)


def test_default_runtime_set_by_a_later_file_is_refused():
    sources = [main('typical.crio.conf'), dropin('later-default.conf', '99-zz.conf')]
    with pytest.raises(DocumentError, match='99-zz.conf is read after .*99-nvidia.conf and sets default_runtime'):
        planned(sources, default_runtime=True)


def test_absent_removes_exactly_our_drop_in():
    sources = [main('typical.crio.conf')]
    plan = planned(sources, default_runtime=True)
    placed = cr.placed_in_order(sources, DROPIN, plan.text)
    gone = planned(placed, state='absent')
    assert gone.text is None and gone.changes == ['drop-in %s removed' % DROPIN]
    assert gone.after.values == cr.Effective(sources).values
    assert planned(sources, state='absent').changes == []


def test_absent_refuses_when_another_file_makes_nvidia_the_default():
    sources = [main('typical.crio.conf')]
    plan = planned(sources)
    placed = cr.placed_in_order(sources, DROPIN, plan.text)
    placed.insert(1, cr.Source('/etc/crio/crio.conf.d/10-default.conf', '[crio.runtime]\ndefault_runtime = "nvidia"\n'))
    with pytest.raises(DocumentError, match='would name no runtime'):
        planned(placed, state='absent')


def test_a_foreign_file_at_our_path_is_refused():
    with pytest.raises(DocumentError, match='was not written by this module'):
        planned([main('typical.crio.conf'), dropin('user-nvidia.conf', '99-nvidia.conf')])


@pytest.mark.parametrize('output, version', [('crio version 1.29.1\n', (1, 29, 1)),
                                             ('Version:        1.32.0\nGitCommit: abc\n', (1, 32, 0)), ('', None)])
def test_binary_version(output, version):
    assert cr.binary_version(output) == version


# ---- the apply decision ---------------------------------------------------------------

def test_decide():
    auto = cr.Request()
    assert apply.decide(auto, None, True, [], V129) == 'deferred'
    assert apply.decide(auto, 7, False, [], V129) == 'none'
    # No released CRI-O applies a reloaded runtime table (cri-o/cri-o#10202): auto restarts.
    assert apply.decide(auto, 7, True, [], V132) == 'restart'
    assert apply.decide(auto, 7, False, ['/etc/crio/crio.conf.d/99-nvidia.conf'], V132) == 'restart'
    # Once a CRI-O with the fix is known, auto reloads from that version on.
    assert apply.decide(auto, 7, True, [], (1, 37, 0), reload_from=(1, 37, 0)) == 'reload'
    assert apply.decide(auto, 7, True, [], (1, 36, 3), reload_from=(1, 37, 0)) == 'restart'
    assert apply.decide(cr.Request(apply='reload'), 7, True, [], (1, 26, 0)) == 'reload'
    assert apply.decide(cr.Request(apply='reload'), 7, True, [], (1, 25, 4)) == 'deferred'
    assert apply.decide(cr.Request(apply='none'), 7, True, [], V132) == 'deferred'
    assert apply.decide(cr.Request(apply='restart'), 7, True, [], V132) == 'restart'


def test_crio_error_quotes_a_failed_reload():
    log = ('time="t" level=info msg="Reloading configuration"\n'
           'time="t" level=error msg="Unable to reload configuration: unable to reload runtimes: '
           'invalid runtime_path for runtime \'nvidia\'"\n')
    assert apply_change.crio_error(log) == ("Unable to reload configuration: unable to reload runtimes: "
                                            "invalid runtime_path for runtime 'nvidia'")


# ---- the whole run against a fake service, on files --------------------------------------

class FakeService(object):
    """crio as the init system shows it: restart gives a new PID unless the new file makes it fail."""

    def __init__(self, pid=100, fail_on=None):
        self._pid = pid
        self.fail_on = fail_on  # a function of the drop-in text: True when crio would not start with it
        self.calls = []
        self.log = ''
        self.dropin = None

    def pid(self):
        return self._pid

    def is_running(self):
        return self._pid is not None

    def restart(self):
        self.calls.append('restart')
        current = open(self.dropin).read() if os.path.exists(self.dropin) else ''
        if self.fail_on and self.fail_on(current):
            self._pid = None
            self.log = 'time="t" level=fatal msg="validating runtime config: invalid runtime_path for runtime \'nvidia\'"'
            raise ServiceError('restart crio failed (rc=1)')
        self._pid = (self._pid or 100) + 1

    def reload(self):
        self.calls.append('reload')

    def logs(self, since=None, lines=40):
        return self.log


class FakeTools(object):
    def __init__(self, version=V129):
        self._version = version

    def version(self):
        return self._version


@pytest.fixture
def host(tmp_path):
    etc = tmp_path / 'etc' / 'crio'
    (etc / 'crio.conf.d').mkdir(parents=True)
    shutil.copy(os.path.join(FIXTURES, 'typical.crio.conf'), str(etc / 'crio.conf'))
    return etc


def converge(host, service, check_mode=False, **kwargs):
    req = request(path=str(host / 'crio.conf.d' / '99-nvidia.conf'), config_path=str(host / 'crio.conf'),
                  config_dir=str(host / 'crio.conf.d'), timeout=2, **kwargs)
    service.dropin = req.path
    run = apply.Converge(req, service, FakeTools(), poll=0.01, find=lambda *a: (None, None, None),
                         runtime_exists=lambda path: True, settle=0.0,
                         started=lambda pid: time.time() + 1)
    return run.run(check_mode=check_mode)


def test_first_run_writes_and_restarts_then_nothing(host):
    service = FakeService()
    main_before = (host / 'crio.conf').read_bytes()
    result = converge(host, service)
    assert result['action'] == 'restart' and service.calls == ['restart'] and result['crio_pid_after'] == 101
    assert (host / 'crio.conf').read_bytes() == main_before
    assert (host / 'crio.conf.d' / '99-nvidia.conf').read_text().startswith(cr.HEADER[0])
    assert 'nvidia' in result['runtimes'] and result['default_runtime'] in result['runtimes']
    again = converge(host, service)
    assert again['action'] == 'none' and not again['changed'] and service.calls == ['restart']
    # A crio that started before the drop-in last changed (apply=none earlier) is restarted without a change.
    stale = apply.Converge(request(path=str(host / 'crio.conf.d' / '99-nvidia.conf'), config_path=str(host / 'crio.conf'),
                                   config_dir=str(host / 'crio.conf.d')), service, FakeTools(), poll=0.01,
                           find=lambda *a: (None, None, None), runtime_exists=lambda path: True, settle=0.0,
                           started=lambda pid: time.time() - 3600).run()
    assert stale['action'] == 'restart' and not stale['file_changed'] and 'started before' in stale['msg']


def test_check_mode_writes_nothing(host):
    service = FakeService()
    result = converge(host, service, check_mode=True)
    assert result['changed'] and result['action'] == 'restart' and not service.calls
    assert not (host / 'crio.conf.d' / '99-nvidia.conf').exists()


def test_apply_none_writes_only(host):
    service = FakeService()
    result = converge(host, service, apply='none')
    assert result['action'] == 'deferred' and not service.calls
    assert (host / 'crio.conf.d' / '99-nvidia.conf').exists()


def test_apply_reload_sends_sighup_on_1_26_and_later(host):
    service = FakeService()
    result = converge(host, service, apply='reload')
    assert result['action'] == 'reload' and service.calls == ['reload'] and result['crio_pid_after'] == 100


def test_a_failed_restart_is_rolled_back(host):
    previous = '\n'.join(cr.HEADER) + '\n\n[crio.runtime.runtimes.nvidia]\nruntime_path = "/old"\n'
    path = host / 'crio.conf.d' / '99-nvidia.conf'
    path.write_text(previous)
    service = FakeService(fail_on=lambda text: RUNTIME in text)
    with pytest.raises(ServiceError) as exc:
        converge(host, service)
    assert 'previous file was restored and crio restarted with it' in str(exc.value)
    assert "invalid runtime_path for runtime 'nvidia'" in str(exc.value)
    assert path.read_text() == previous and service.calls == ['restart', 'restart'] and service.pid() is not None


def test_a_failed_first_restart_removes_the_new_drop_in(host):
    service = FakeService(fail_on=lambda text: RUNTIME in text)
    with pytest.raises(ServiceError, match='restored'):
        converge(host, service)
    assert not (host / 'crio.conf.d' / '99-nvidia.conf').exists()


def test_a_failed_reload_is_rolled_back(host):
    service = FakeService()

    def reload():
        service.calls.append('reload')
        if len(service.calls) == 1:
            service.log = 'time="t" level=error msg="Unable to reload configuration: unable to reload runtimes: x"'
    service.reload = reload
    with pytest.raises(ServiceError, match='reload failed: Unable to reload configuration'):
        converge(host, service, apply='reload')
    assert not (host / 'crio.conf.d' / '99-nvidia.conf').exists() and service.calls == ['reload', 'reload']


def test_absent_removes_the_drop_in_and_restarts(host):
    service = FakeService()
    converge(host, service)
    result = converge(host, service, state='absent')
    assert result['action'] == 'restart' and not (host / 'crio.conf.d' / '99-nvidia.conf').exists()
    assert 'nvidia' not in result['runtimes'] and result['default_runtime'] in result['runtimes']
    assert converge(host, service, state='absent')['action'] == 'none'


def test_backup_goes_outside_the_drop_in_directory(host):
    service = FakeService()
    converge(host, service)
    req = request(path=str(host / 'crio.conf.d' / '99-nvidia.conf'), config_path=str(host / 'crio.conf'),
                  config_dir=str(host / 'crio.conf.d'), apply='none', default_runtime=True)
    run = apply.Converge(req, service, FakeTools(), backup=True, backup_dir=str(host),
                         find=lambda *a: (None, None, None), runtime_exists=lambda path: True)
    result = run.run()
    assert os.path.dirname(result['backup_file']) == str(host)
    assert os.listdir(str(host / 'crio.conf.d')) == ['99-nvidia.conf']


def test_a_drop_in_outside_the_directory_crio_reads_is_refused(host):
    req = request(path=str(host / '99-nvidia.conf'), config_path=str(host / 'crio.conf'),
                  config_dir=str(host / 'crio.conf.d'))
    run = apply.Converge(req, FakeService(), FakeTools(), find=lambda *a: (None, None, None))
    with pytest.raises(DocumentError, match='CRI-O would never see it'):
        run.run()


def test_a_crio_started_with_another_config_dir_is_refused(host):
    req = request(path=str(host / 'crio.conf.d' / '99-nvidia.conf'), config_path=str(host / 'crio.conf'),
                  config_dir=str(host / 'crio.conf.d'))
    run = apply.Converge(req, FakeService(), FakeTools(), find=lambda *a: (42, str(host / 'crio.conf'), '/srv/x'))
    with pytest.raises(DocumentError, match='reads its drop-ins from /srv/x'):
        run.run()


def test_a_missing_runtime_binary_is_refused_only_as_the_default(host):
    req = request(path=str(host / 'crio.conf.d' / '99-nvidia.conf'), config_path=str(host / 'crio.conf'),
                  config_dir=str(host / 'crio.conf.d'), apply='none')
    run = apply.Converge(req, FakeService(), FakeTools(), find=lambda *a: (None, None, None),
                         runtime_exists=lambda path: False)
    assert 'is being ignored' in ' '.join(run.run()['warnings'])
    req.default_runtime = True
    run = apply.Converge(req, FakeService(), FakeTools(), find=lambda *a: (None, None, None),
                         runtime_exists=lambda path: False)
    with pytest.raises(DocumentError, match='refuses to start without its default runtime'):
        run.run()


# ---- nothing of ours in the drop-in directory CRI-O reads whole ---------------------------------

KILLED_AT_RENAME = r"""
import os, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import test_crio as t
host, backup = sys.argv[2], sys.argv[3] == 'True' or None
req = t.request(path=os.path.join(host, 'crio.conf.d', '99-nvidia.conf'), config_path=os.path.join(host, 'crio.conf'),
                config_dir=os.path.join(host, 'crio.conf.d'), apply='none', default_runtime=True)
run = t.apply.Converge(req, t.FakeService(), t.FakeTools(), backup=backup, backup_dir=host,
                       find=lambda *a: (None, None, None), runtime_exists=lambda path: True)
os.rename = lambda *args, **kw: os._exit(137)  # every rename ends the process on the spot
run.run()
os._exit(1)
"""


def killed_at_rename(host, backup):
    """A run killed (no cleanup at all, as SIGKILL) at its first rename: what it leaves behind.

    In a fresh interpreter (not a fork of this one, which may hold other threads' locks, pytest-xdist's among them).
    """
    done = subprocess.run([sys.executable, '-c', KILLED_AT_RENAME, os.path.abspath(__file__), str(host), str(backup)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 137, done.stderr


@pytest.mark.parametrize('backup', [None, True])
def test_a_run_killed_before_its_rename_leaves_nothing_crio_reads(host, backup):
    dropins = host / 'crio.conf.d'
    converge(host, FakeService(), apply='none')
    before = (dropins / '99-nvidia.conf').read_bytes()
    killed_at_rename(host, backup)
    assert sorted(os.listdir(str(dropins))) == ['99-nvidia.conf']
    assert (dropins / '99-nvidia.conf').read_bytes() == before
    # The leftover is out of CRI-O's reach and the next writing run clears it; absent still removes the runtime.
    private = host / '.crio.conf.d.gpufleet'
    assert stat.S_IMODE(os.stat(str(private)).st_mode) == 0o700 and len(os.listdir(str(private))) == 1
    assert converge(host, FakeService(), apply='none', default_runtime=True)['file_changed']
    assert os.listdir(str(private)) == []
    result = converge(host, FakeService(), apply='none', state='absent')
    assert result['file_changed'] and 'nvidia' not in result['runtimes'] and os.listdir(str(dropins)) == []


def test_an_earlier_versions_leftover_temp_file_is_not_taken_for_a_drop_in(host):
    """Before temp files moved out, a killed run left ``.99-nvidia.conf.*.tmp`` in the drop-in directory."""
    service = FakeService()
    converge(host, service, apply='none')
    dropins = host / 'crio.conf.d'
    leftover = dropins / '.99-nvidia.conf.0123456789ab.tmp'
    leftover.write_bytes((dropins / '99-nvidia.conf').read_bytes())
    predicted = converge(host, service, apply='none', state='absent', check_mode=True)
    assert predicted['changed'] and 'nvidia' not in predicted['runtimes'] and leftover.exists()
    result = converge(host, service, apply='none', state='absent')
    assert 'nvidia' not in result['runtimes'] and os.listdir(str(dropins)) == []


def test_a_restart_under_gpu_work_is_deferred_with_defer_and_made_with_force(host, monkeypatch):
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import workload
    work = {'holders': [{'pid': 7, 'name': 'train', 'uid': 1000, 'paths': ['/dev/nvidia0']}], 'containers': []}
    monkeypatch.setattr(workload, 'find', lambda exclude=(), proc='/proc': work)
    service = FakeService()
    deferred = converge(host, service, disruption='defer')
    assert deferred['action'] == 'deferred' and not deferred['changed'] and service.calls == []
    assert deferred['deferred']['work'] == work and 'Restarting CRI-O deferred' in deferred['msg']
    assert not (host / 'crio.conf.d' / '99-nvidia.conf').exists()  # nothing written either
    assert converge(host, service, disruption='defer', check_mode=True)['action'] == 'restart'  # a check says it
    forced = converge(host, service, disruption='force')
    assert forced['action'] == 'restart' and service.calls == ['restart']
