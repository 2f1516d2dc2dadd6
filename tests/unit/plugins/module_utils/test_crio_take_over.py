# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""crio_runtime's take_over: an nvidia runtime a drop-in read after ours defines (an older toolkit's
``99-nvidia.toml``, which sorts after ``99-nvidia.conf``), commented out and put back byte for byte; on files and a
fake service (CRI-O is not installable here, docs/crio.md)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import time

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.crio import config as cr
from ansible_collections.gpufleet.nvidia.plugins.module_utils.crio import apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils.crio import takeover
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import module as concerns_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import DocumentError, ServiceError

from test_crio import FIXTURES, FakeService, FakeTools, RUNTIME, request

OLD = '/usr/local/nvidia/toolkit/nvidia-container-runtime'
MARKER = '# gpufleet.nvidia crio_runtime took over nvidia: '
# The lines of later-nvidia.toml that define nvidia: the table, its keys and the comment among them, its sub-table
# (the blank line between the two stays as it is).
TAKEN = (6, 7, 8, 9, 10, 12, 13)


def fixture(name):
    with open(os.path.join(FIXTURES, name), 'rb') as handle:
        return handle.read()


LATER = fixture('later-nvidia.toml')


@pytest.fixture
def host(tmp_path):
    etc = tmp_path / 'etc' / 'crio'
    (etc / 'crio.conf.d').mkdir(parents=True)
    (etc / 'crio.conf').write_bytes(fixture('typical.crio.conf'))
    (etc / 'crio.conf.d' / '99-nvidia.toml').write_bytes(LATER)
    return etc


def converge(host, service, check_mode=False, **kwargs):
    req = request(path=str(host / 'crio.conf.d' / '99-nvidia.conf'), config_path=str(host / 'crio.conf'),
                  config_dir=str(host / 'crio.conf.d'), timeout=2, **kwargs)
    service.dropin = req.path
    return apply.Converge(req, service, FakeTools(), poll=0.01, find=lambda *a: (None, None, None),
                          runtime_exists=lambda path: True, settle=0.0,
                          started=lambda pid: time.time() + 1).run(check_mode=check_mode)


def files(host):
    """Every file under /etc/crio, with its bytes."""
    found = {}
    for root, unused_dirs, names in os.walk(str(host)):
        for name in names:
            path = os.path.join(root, name)
            with open(path, 'rb') as handle:
                found[os.path.relpath(path, str(host))] = handle.read()
    return found


def effective(host):
    sources, unused_ours = apply.read_sources(request(path=str(host / 'crio.conf.d' / '99-nvidia.conf'),
                                                      config_path=str(host / 'crio.conf'),
                                                      config_dir=str(host / 'crio.conf.d')))
    return cr.Effective(sources)


class Module(object):
    """What ``concerns.module.config_run`` asks of an AnsibleModule, with --diff."""

    _diff = True

    def warn(self, warning):
        pass


def test_without_take_over_a_later_definition_is_refused_naming_take_over(host):
    before = files(host)
    service = FakeService()
    with pytest.raises(DocumentError) as caught:
        converge(host, service)
    message = str(caught.value)
    assert '99-nvidia.toml: the runtime "nvidia" is already defined at line 6' in message
    assert 'set take_over: true' in message and 'name that sorts after it' in message
    assert files(host) == before and not service.calls


def test_take_over_comments_the_old_definition_out_and_writes_ours(host):
    service = FakeService()
    result = converge(host, service, take_over=True)
    assert result['changed'] and result['file_changed'] and result['action'] == 'restart'
    assert service.calls == ['restart']
    later = (host / 'crio.conf.d' / '99-nvidia.toml').read_bytes().decode('utf-8')
    lines = later.split('\n')
    assert [number for number, line in enumerate(lines, 1) if line.startswith(MARKER)] == list(TAKEN)
    # every line of the definition, as it was behind the marker; nothing else of the file changed
    assert later.replace(MARKER, '') == LATER.decode('utf-8')
    values = cr.loads(later, 'x')
    assert 'nvidia' not in values['crio']['runtime']['runtimes'] and values['crio']['runtime']['log_level'] == 'info'
    assert 'crun-site' in values['crio']['runtime']['runtimes']
    assert effective(host).runtimes['nvidia']['runtime_path'] == RUNTIME
    taken = 'the definition of runtime "nvidia" in %s at lines %s commented out (state=absent puts it back)' % (
        host / 'crio.conf.d' / '99-nvidia.toml', ', '.join(str(line) for line in TAKEN))
    assert taken in result['changes'] and taken in result['msg']
    # --diff shows the drop-in and the file taken over
    diff = concerns_module.config_run(Module(), result['path'], lambda: dict(result))['diff']
    assert [(d['before_header'], d['before'] == '') for d in diff] == [
        (result['path'], True), (str(host / 'crio.conf.d' / '99-nvidia.toml'), False)]
    assert diff[1]['before'] == LATER.decode('utf-8') and diff[1]['after'] == later


def test_take_over_run_again_changes_nothing(host):
    converge(host, FakeService(), take_over=True)
    after = files(host)
    service = FakeService()
    for take_over in (True, False):
        again = converge(host, service, take_over=take_over)
        assert not again['changed'] and not again['file_changed'] and again['action'] == 'none', again
        assert again['changes'] == [] and files(host) == after
    assert not service.calls


def test_absent_gives_the_original_bytes_back(host):
    before = files(host)
    converge(host, FakeService(), take_over=True)
    service = FakeService()
    gone = converge(host, service, state='absent')
    assert files(host) == before  # the drop-in removed, 99-nvidia.toml byte for byte
    assert gone['changed'] and gone['action'] == 'restart' and service.calls == ['restart']
    assert gone['changes'] == ['drop-in %s removed' % gone['path'],
                               'the definition of runtime "nvidia" this module took over put back in %s (lines %s)'
                               % (host / 'crio.conf.d' / '99-nvidia.toml', ', '.join(str(line) for line in TAKEN))]
    assert any('is back as %s' % (host / 'crio.conf.d' / '99-nvidia.toml') in warning for warning in gone['warnings'])
    assert effective(host).runtimes['nvidia']['runtime_path'] == OLD
    assert not converge(host, FakeService(), state='absent')['changed']


def test_check_mode_changes_nothing(host):
    before = files(host)
    service = FakeService()
    predicted = converge(host, service, check_mode=True, take_over=True)
    assert predicted['changed'] and predicted['action'] == 'restart' and 'would change' in predicted['msg']
    assert any('commented out' in change for change in predicted['changes'])
    assert files(host) == before and not service.calls
    converge(host, FakeService(), take_over=True)
    taken = files(host)
    predicted = converge(host, service, check_mode=True, state='absent')
    assert predicted['changed'] and any('put back' in change for change in predicted['changes'])
    assert files(host) == taken and not service.calls


def test_a_definition_in_a_drop_in_the_module_does_not_edit_is_refused_naming_it(host):
    # a subdirectory's drop-in, read after ours (CRI-O walks the tree by name): not beside the drop-in
    (host / 'crio.conf.d' / '99-nvidia.toml').unlink()
    site = host / 'crio.conf.d' / 'zz-site'
    site.mkdir()
    (site / '10-nvidia.conf').write_bytes(LATER)
    before = files(host)
    for take_over in (True, False):
        with pytest.raises(DocumentError) as caught:
            converge(host, FakeService(), take_over=take_over)
        message = str(caught.value)
        assert 'take_over cannot help' in message and '%s, which defines the runtime "nvidia" at line 6' % (
            site / '10-nvidia.conf') in message
        assert files(host) == before


def test_a_failed_restart_puts_every_file_back(host):
    before = files(host)
    service = FakeService(fail_on=lambda dropin: RUNTIME in dropin)
    with pytest.raises(ServiceError, match='the previous file was restored'):
        converge(host, service, take_over=True)
    assert files(host) == before and service.calls == ['restart', 'restart']


def test_backup_copies_the_file_taken_over_outside_the_drop_in_directory(host):
    req = request(path=str(host / 'crio.conf.d' / '99-nvidia.conf'), config_path=str(host / 'crio.conf'),
                  config_dir=str(host / 'crio.conf.d'), apply='none', take_over=True)
    result = apply.Converge(req, FakeService(), FakeTools(), backup=True, backup_dir=str(host),
                            find=lambda *a: (None, None, None), runtime_exists=lambda path: True).run()
    assert result['backup_file'] is None and len(result['backup_files']) == 1
    copy = result['backup_files'][0]
    assert os.path.dirname(copy) == str(host) and os.path.basename(copy).startswith('99-nvidia.toml.')
    with open(copy, 'rb') as handle:
        assert handle.read() == LATER
    assert sorted(os.listdir(str(host / 'crio.conf.d'))) == ['99-nvidia.conf', '99-nvidia.toml']


# ---- the plan, on texts ---------------------------------------------------------------------------------------

def main():
    return cr.Source('/etc/crio/crio.conf', fixture('typical.crio.conf').decode('utf-8'), main=True)


@pytest.mark.parametrize('newline', ['\n', '\r\n'])
def test_dotted_keys_into_the_runtime_are_taken_over_and_put_back(newline):
    text = newline.join(['[crio.runtime]', 'runtimes.nvidia.runtime_path = "%s"' % OLD, 'log_level = "info"',
                         'runtimes.nvidia.runtime_type = "oci"', 'runtimes.crun-site.runtime_path = "/usr/bin/crun"',
                         ''])
    later = cr.Source('/etc/crio/crio.conf.d/99-zz.conf', text)
    with pytest.raises(DocumentError, match='set take_over: true'):
        takeover.plan([main(), later], request())
    plan = takeover.plan([main(), later], request(take_over=True))
    ((source, edited),) = plan.edits
    assert source is later and edited == text.replace('runtimes.nvidia', MARKER + 'runtimes.nvidia')
    assert plan.after.runtimes['nvidia']['runtime_path'] == RUNTIME and plan.before.runtimes['nvidia']['runtime_path'] == OLD
    ours = cr.Source(cr.DEFAULT_PATH, plan.text, ours=True)
    again = takeover.plan([main(), ours, cr.Source(later.path, edited)], request(take_over=True))
    assert again.edits == [] and again.changes == [] and again.text == plan.text
    gone = takeover.plan([main(), ours, cr.Source(later.path, edited)], request(state='absent'))
    assert gone.text is None and [text_ for unused, text_ in gone.edits] == [text]


def test_an_inline_definition_cannot_be_taken_over():
    later = cr.Source('/etc/crio/crio.conf.d/99-zz.conf',
                      '[crio.runtime]\nruntimes = { nvidia = { runtime_path = "%s" } }\n' % OLD)
    with pytest.raises(DocumentError, match='inside a value .* cannot be commented out line by line'):
        takeover.plan([main(), later], request(take_over=True))


def test_a_definition_written_again_after_a_take_over_is_refused():
    taken = MARKER + '[crio.runtime.runtimes.nvidia]\n' + MARKER + 'runtime_path = "%s"\n' % OLD
    later = cr.Source('/etc/crio/crio.conf.d/99-zz.conf',
                      taken + '[crio.runtime.runtimes.nvidia]\nruntime_path = "/opt/other/runtime"\n')
    with pytest.raises(DocumentError, match='also holds a definition this module took over earlier'):
        takeover.plan([main(), later], request(take_over=True))
