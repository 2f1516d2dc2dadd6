# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""crio_runtime's ``cdi``: CRI-O reads every wanted CDI spec directory, on files and a fake service.

CRI-O is not installable here: the rules are CRI-O's as read in its source (docs/crio.md, "CDI"): CDI always on from
1.24, ``[crio.runtime] cdi_spec_dirs`` with the built-in ``["/etc/cdi", "/var/run/cdi"]``, a later file's list
replacing an earlier one whole.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import dirs as cdi_dirs
from ansible_collections.gpufleet.nvidia.plugins.module_utils.crio import config as cr
from ansible_collections.gpufleet.nvidia.plugins.module_utils.crio import apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import DocumentError

from test_crio import DROPIN, FakeService, FakeTools, V129, main, planned, table

CONF = '/etc/crio/crio.conf'
DIR = '/etc/crio/crio.conf.d/'
DEFAULT = ['/etc/cdi', '/var/run/cdi']


def conf(dirs=None, runtime=True):
    """crio.conf with runc, and ``cdi_spec_dirs`` when ``dirs`` is given."""
    text = '[crio.runtime]\nconmon = "/usr/bin/conmon"\n'
    if dirs is not None:
        text += 'cdi_spec_dirs = %s\n' % cr.value_text(dirs)
    if runtime:
        text += '\n[crio.runtime.runtimes.runc]\nruntime_path = "/usr/bin/runc"\n'
    return cr.Source(CONF, text, main=True)


def dropin(name, dirs):
    return cr.Source(DIR + name, '[crio.runtime]\ncdi_spec_dirs = %s\n' % cr.value_text(dirs))


def written(plan):
    return cr.get(cr.loads(plan.text, 'x'), cr.CDI_SPEC_DIRS) if plan.text else None


def again(sources, plan, **kwargs):
    """The next run, over the drop-in this plan wrote."""
    return planned(cr.placed_in_order(sources, DROPIN, plan.text), **kwargs)


# ---- CRI-O's rules as the module models them -------------------------------------------------

def test_a_later_files_list_replaces_the_earlier_one_whole():
    # Not appended as crio.storage_option is: BurntSushi/toml's unifySlice sets the length to the new list's.
    effective = cr.Effective([conf(['/a', '/b']), dropin('10-x.conf', ['/c'])])
    assert effective.cdi_spec_dirs == ['/c']
    assert effective.origin(cr.CDI_SPEC_DIRS).path == DIR + '10-x.conf'


def test_the_built_in_list_when_no_file_sets_it():
    assert cr.Effective([conf()]).cdi_spec_dirs == DEFAULT
    assert cr.Effective([conf()]).origin(cr.CDI_SPEC_DIRS) is None


@pytest.mark.parametrize('one, other', [('/run/cdi', '/var/run/cdi'), ('/var/run/cdi/', '/run/cdi'),
                                        ('/etc/cdi/', '/etc//cdi')])
def test_spellings_of_one_directory_are_one(one, other):
    assert cdi_dirs.directory_key(one) == cdi_dirs.directory_key(other)
    assert cdi_dirs.directory_key('/var/runx/cdi') != cdi_dirs.directory_key('/runx/cdi')


# ---- the drop-in ------------------------------------------------------------------------------

def test_nothing_missing_sets_nothing():
    sources = [conf()]
    plan = planned(sources, cdi=True)
    assert plan.cdi_spec_dirs is None and 'cdi_spec_dirs' not in plan.text
    assert plan.text == planned(sources).text          # the same drop-in as without cdi
    assert plan.after.cdi_spec_dirs == DEFAULT


def test_run_cdi_counts_as_var_run_cdi():
    sources = [conf(['/etc/cdi', '/run/cdi'])]
    plan = planned(sources, cdi=True)
    assert written(plan) is None and plan.after.cdi_spec_dirs == ['/etc/cdi', '/run/cdi']


def test_missing_directories_are_added_after_the_other_files_entries():
    sources = [conf(['/opt/a', '/etc/cdi'])]
    plan = planned(sources, cdi=True)
    assert written(plan) == ['/opt/a', '/etc/cdi', '/var/run/cdi']
    assert plan.cdi_spec_dirs == written(plan) and plan.after.cdi_spec_dirs == written(plan)
    assert plan.after.origin(cr.CDI_SPEC_DIRS).path == DROPIN
    assert 'cdi_spec_dirs = ["/opt/a", "/etc/cdi", "/var/run/cdi"] (adds /var/run/cdi)' in plan.changes
    # The runtime table is written as before.
    assert table(plan)['runtime_path'] == '/usr/bin/nvidia-container-runtime'
    rerun = again(sources, plan, cdi=True)
    assert rerun.text == plan.text and rerun.changes == []


def test_the_wanted_order_is_kept_and_duplicates_dropped():
    sources = [conf([])]
    plan = planned(sources, cdi=True, cdi_spec_dirs=['/z', '/etc/cdi', '/z/', '/run/cdi', '/var/run/cdi'])
    assert written(plan) == ['/z', '/etc/cdi', '/run/cdi']


def test_the_list_of_the_last_other_file_is_the_base():
    # crio.conf's /opt/a is gone once 10-x.conf sets its own list: CRI-O reads 10-x.conf's only.
    sources = [conf(['/opt/a']), dropin('10-x.conf', ['/etc/cdi'])]
    plan = planned(sources, cdi=True)
    assert written(plan) == ['/etc/cdi', '/var/run/cdi']


def test_cdi_alone_makes_a_drop_in_with_only_that_line():
    same = cr.Source(DIR + '50-nvidia.conf', '[crio.runtime.runtimes.nvidia]\n'
                                             'runtime_path = "/usr/bin/nvidia-container-runtime"\n')
    sources = [conf(['/etc/cdi']), same]
    assert planned(sources).text is None                # the runtime is there already: no drop-in
    plan = planned(sources, cdi=True)
    assert plan.text == '\n'.join(cr.HEADER) + '\n\n[crio.runtime]\ncdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]\n'
    assert plan.changes[0] == 'drop-in %s created' % DROPIN
    # Off again: nothing left to set, the drop-in goes.
    off = again(sources, plan, cdi=False)
    assert off.text is None and off.after.cdi_spec_dirs == ['/etc/cdi']
    assert 'cdi_spec_dirs no longer set here (CRI-O reads ["/etc/cdi"])' in off.changes


def test_cdi_with_default_runtime_share_one_table():
    sources = [conf(['/etc/cdi'])]
    plan = planned(sources, cdi=True, default_runtime=True)
    values = cr.loads(plan.text, 'x')['crio']['runtime']
    assert values['default_runtime'] == 'nvidia' and values['cdi_spec_dirs'] == DEFAULT
    assert plan.text.count('[crio.runtime]\n') == 1


def test_omitted_keeps_what_the_drop_in_says_and_false_takes_it_out():
    sources = [conf(['/etc/cdi'])]
    plan = planned(sources, cdi=True)
    kept = again(sources, plan)
    assert kept.text == plan.text and kept.changes == []
    off = again(sources, plan, cdi=False)
    assert written(off) is None and 'runtimes' in off.text
    assert off.changes == ['drop-in %s rewritten' % DROPIN, 'cdi_spec_dirs no longer set here (CRI-O reads ["/etc/cdi"])']


def test_the_drop_in_follows_when_the_other_files_change():
    sources = [conf(['/etc/cdi'])]
    plan = planned(sources, cdi=True)
    changed = [conf(['/etc/cdi', '/opt/b'])] + cr.placed_in_order(sources, DROPIN, plan.text)[1:]
    follow = planned(changed, cdi=True)
    assert written(follow) == ['/etc/cdi', '/opt/b', '/var/run/cdi']
    covered = [conf(DEFAULT)] + cr.placed_in_order(sources, DROPIN, plan.text)[1:]
    assert written(planned(covered, cdi=True)) is None


def test_a_later_file_that_sets_the_list_is_refused_naming_it():
    sources = [conf(), dropin('99-zz-cdi.conf', ['/etc/cdi'])]
    with pytest.raises(DocumentError, match=r'/etc/crio/crio.conf.d/99-zz-cdi.conf is read after .*99-nvidia.conf '
                                            r'and sets cdi_spec_dirs = \["/etc/cdi"\]'):
        planned(sources, cdi=True)
    # A later file whose list has every wanted directory needs nothing from the drop-in.
    fine = planned([conf(), dropin('99-zz-cdi.conf', ['/etc/cdi', '/run/cdi'])], cdi=True)
    assert written(fine) is None


def test_a_later_file_over_a_kept_list_is_a_warning():
    sources = [conf(['/etc/cdi'])]
    plan = planned(sources, cdi=True)
    placed = cr.placed_in_order(sources, DROPIN, plan.text) + [dropin('99-zz-cdi.conf', ['/x'])]
    kept = planned(placed)
    assert written(kept) == DEFAULT and kept.after.cdi_spec_dirs == ['/x']
    assert any('99-zz-cdi.conf is read after' in warning for warning in kept.warnings)


@pytest.mark.parametrize('value', ['"/etc/cdi"', '[1, 2]'])
def test_a_list_crio_could_not_decode_is_refused(value):
    bad = cr.Source(CONF, '[crio.runtime]\ncdi_spec_dirs = %s\n' % value, main=True)
    with pytest.raises(DocumentError, match='/etc/crio/crio.conf: cdi_spec_dirs = .* is not a list of strings'):
        planned([bad], cdi=True)


def test_a_relative_directory_is_refused():
    with pytest.raises(DocumentError, match="'cdi' is not an absolute path"):
        planned([conf()], cdi=True, cdi_spec_dirs=['cdi'])


def test_crio_before_1_24_is_warned_about():
    plan = planned([conf(['/etc/cdi'])], version=(1, 23, 5), cdi=True)
    assert any('has no CDI support' in warning for warning in plan.warnings)
    assert not any('CDI' in warning for warning in planned([conf(['/etc/cdi'])], version=V129, cdi=True).warnings)


def test_absent_takes_the_setting_with_the_drop_in():
    sources = [conf(['/etc/cdi'])]
    plan = planned(sources, cdi=True)
    gone = again(sources, plan, state='absent', cdi=True)
    assert gone.text is None and gone.after.cdi_spec_dirs == ['/etc/cdi']


# ---- the whole run against a fake service, on files --------------------------------------------

@pytest.fixture
def host(tmp_path):
    etc = tmp_path / 'etc' / 'crio'
    (etc / 'crio.conf.d').mkdir(parents=True)
    (etc / 'crio.conf').write_text(conf(['/etc/cdi']).text)
    return etc


def converge(host, service, check_mode=False, pid=None, argv=(), **kwargs):
    req = cr.Request(path=str(host / 'crio.conf.d' / '99-nvidia.conf'), config_path=str(host / 'crio.conf'),
                     config_dir=str(host / 'crio.conf.d'), timeout=2, **kwargs)
    service.dropin = req.path
    run = apply.Converge(req, service, FakeTools(), poll=0.01, find=lambda *a: (pid, None, None),
                         runtime_exists=lambda path: True, settle=0.0, started=lambda pid: time.time() + 1,
                         argv=lambda pid: list(argv))
    return run.run(check_mode=check_mode)


def test_converge_writes_reports_and_is_idempotent(host):
    service = FakeService()
    predicted = converge(host, service, check_mode=True, cdi=True)
    assert predicted['changed'] and not (host / 'crio.conf.d' / '99-nvidia.conf').exists() and not service.calls
    assert predicted['cdi'] == {'spec_dirs': DEFAULT, 'set_in': str(host / 'crio.conf.d' / '99-nvidia.conf')}
    result = converge(host, service, cdi=True)
    assert result['action'] == 'restart' and service.calls == ['restart'] and result['cdi'] == predicted['cdi']
    assert 'cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]' in (host / 'crio.conf.d' / '99-nvidia.conf').read_text()
    assert 'adds /var/run/cdi' in result['msg']
    second = converge(host, service, cdi=True)
    assert not second['changed'] and second['action'] == 'none' and service.calls == ['restart']
    gone = converge(host, service, state='absent')
    assert gone['cdi'] == {'spec_dirs': ['/etc/cdi'], 'set_in': str(host / 'crio.conf')}
    assert not (host / 'crio.conf.d' / '99-nvidia.conf').exists()


def test_converge_reports_the_built_in_list(host):
    (host / 'crio.conf').write_text(conf().text)
    result = converge(host, FakeService(), apply='none', cdi=True)
    assert result['cdi'] == {'spec_dirs': DEFAULT, 'set_in': None}
    assert 'cdi_spec_dirs' not in (host / 'crio.conf.d' / '99-nvidia.conf').read_text()


def test_a_crio_started_with_the_flag_is_warned_about(host):
    result = converge(host, FakeService(pid=7), pid=7, apply='none', cdi=True,
                      argv=['/usr/bin/crio', '--log-level', 'info', '--cdi-spec-dirs', '/srv/cdi'])
    assert any('started with --cdi-spec-dirs /srv/cdi' in warning for warning in result['warnings'])
    quiet = converge(host, FakeService(pid=7), pid=7, apply='none', cdi=True, argv=['/usr/bin/crio'])
    assert not any('--cdi-spec-dirs' in warning for warning in quiet['warnings'])


def test_cdi_spec_dirs_without_cdi_is_warned_about(host):
    result = converge(host, FakeService(), apply='none', cdi_spec_dirs=['/srv/cdi'])
    assert 'cdi_spec_dirs is used only with cdi=true; it was ignored.' in result['warnings']
    assert 'cdi_spec_dirs' not in (host / 'crio.conf.d' / '99-nvidia.conf').read_text()


@pytest.mark.parametrize('argv, found', [(['crio', '--cdi-spec-dirs=/a,/b'], ['/a,/b']),
                                         (['crio', '--cdi-spec-dirs', '/a', '--cdi-spec-dirs', '/b'], ['/a', '/b']),
                                         (['crio', '--config', '/x'], None), (['crio', '--cdi-spec-dirs'], None)])
def test_cdi_flag(argv, found):
    assert apply.cdi_flag(argv) == found


def test_main_fixture_unchanged_without_cdi():
    # The typical distribution crio.conf sets no cdi_spec_dirs: CRI-O's built-in list has /var/run/cdi already.
    plan = planned([main('typical.crio.conf')], cdi=True)
    assert 'cdi_spec_dirs' not in plan.text and plan.after.cdi_spec_dirs == DEFAULT
