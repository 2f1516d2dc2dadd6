# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""containerd.config and containerd.plan: schema choice, the present/absent plans on a corpus of real config.toml shapes, the dump comparison.

The effective configurations (``*.dump-1.6.20``) were recorded with Debian's
containerd 1.6.20 (``containerd --config FILE config dump``); the real
binary checks the same plans in tests/containerd.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import config as cd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import effective as containerd_effective
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import plan as containerd_plan
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import facts
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import procs
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import DocumentError

CORPUS = os.path.join(os.path.dirname(__file__), '..', '..', 'fixtures', 'containerd')
V16 = (1, 6, 20)
V2 = (2, 1, 0)
RUNTIME = '/usr/bin/nvidia-container-runtime'


def fixture(name):
    with open(os.path.join(CORPUS, name), 'rb') as handle:
        return handle.read().decode('utf-8')


def shapes():
    names = sorted(name[:-len('.dump-1.6.20')] for name in os.listdir(CORPUS) if name.endswith('.dump-1.6.20'))
    return [(name, newline) for name in names for newline in ('\n', '\r\n')]


def planned(text, state='present', version=V16, default_runtime=None, before=None, path='config.toml'):
    config = cd.Config(text, path)
    schema = cd.choose_schema(version, config.version, path)
    request = apply.Request(path=path, runtime_path=RUNTIME, state=state, default_runtime=default_runtime)
    return containerd_plan.plan(config, request, schema, before or {}, cd.dump_schema(version)), schema


def strip_ours(values, schema, names):
    """``values`` without the runtimes ``names`` and the tables that only held them."""
    values = copy.deepcopy(values)
    runtimes = cd.get(values, schema.runtimes)
    for name in names:
        runtimes.pop(name, None)
    for size in range(len(schema.runtimes), 0, -1):
        parent = cd.get(values, schema.runtimes[:size - 1])
        if isinstance(parent, dict) and parent.get(schema.runtimes[size - 1]) == {}:
            del parent[schema.runtimes[size - 1]]
    return values


@pytest.mark.parametrize('name, newline', shapes())
def test_present_appends_one_block_and_keeps_every_byte_and_value(name, newline):
    text = fixture(name + '.toml').replace('\n', newline)
    before = cd.loads(fixture(name + '.dump-1.6.20'), name)
    plan, schema = planned(text, before=before)
    assert plan.text.startswith(text.rstrip('\r\n'))            # every original byte, in place
    assert plan.text[len(text):].count(cd.BEGIN) == 1 or not text.endswith('\n')
    if newline == '\r\n':
        assert '\n' not in plan.text.replace('\r\n', '')
    old, new = cd.loads(text, name), cd.loads(plan.text, name)
    nvidia = cd.get(new, schema.runtime('nvidia'))
    assert nvidia['runtime_type'] == 'io.containerd.runc.v2' and nvidia['options']['BinaryName'] == RUNTIME
    # SystemdCgroup comes from runc, else from the default runtime (the kubelet's cgroup driver must match).
    default = cd.get(before, cd.SCHEMAS[2].containerd + ('default_runtime_name',))
    source = cd.get(before, cd.SCHEMAS[2].runtime('runc')) or cd.get(before, cd.SCHEMAS[2].runtime(default))
    assert nvidia['options'].get('SystemdCgroup', False) == (source.get('options') or {}).get('SystemdCgroup', False)
    added = ['nvidia']
    if not cd.get(old, schema.runtimes):
        # The file defined no runtime: containerd's default runtimes come along, as the dump shows them.
        added += sorted(cd.get(before, cd.SCHEMAS[2].runtimes))
        assert cd.get(new, schema.runtime('runc'))['runtime_type'] == 'io.containerd.runc.v2'
    assert strip_ours(new, schema, added) == strip_ours(old, schema, ())
    # Re-planning the result changes nothing; absent gives the original back, byte for byte.
    again, _schema = planned(plan.text, before=before)
    assert again.text == plan.text and not again.changes
    back, _schema = planned(plan.text, state='absent')
    assert back.text == text


@pytest.mark.parametrize('name, newline', shapes())
def test_default_runtime_is_set_and_put_back(name, newline):
    text = fixture(name + '.toml').replace('\n', newline)
    before = cd.loads(fixture(name + '.dump-1.6.20'), name)
    plan, schema = planned(text, before=before, default_runtime=True)
    assert cd.get(cd.loads(plan.text, name), schema.containerd + ('default_runtime_name',)) == 'nvidia'
    again, _schema = planned(plan.text, before=before, default_runtime=True)
    assert again.text == plan.text
    back, _schema = planned(plan.text, state='absent')
    assert back.text == text


def test_an_existing_default_keeps_its_line_and_comment():
    text = fixture('v2-kubeadm.toml')
    before = cd.loads(fixture('v2-kubeadm.dump-1.6.20'), 'x')
    plan, _schema = planned(text, before=before, default_runtime=True)
    assert '      %s"runc"\n      default_runtime_name = "nvidia"\n' % cd.DEFAULT_MARK in plan.text
    off, _schema = planned(plan.text, before=before, default_runtime=False)
    assert off.text.startswith(text) and 'default_runtime_name = "runc"' in off.text and cd.DEFAULT_MARK not in off.text


def test_a_marker_too_deep_to_read_counts_as_no_previous_default():
    """A marker comment we did not write, nested past the TOML reader's recursion: no previous value, no traceback."""
    text = fixture('v2-kubeadm.toml')
    before = cd.loads(fixture('v2-kubeadm.dump-1.6.20'), 'x')
    plan, _schema = planned(text, before=before, default_runtime=True)
    hostile = plan.text.replace(cd.DEFAULT_MARK + '"runc"', cd.DEFAULT_MARK + '[' * 5000)
    assert hostile != plan.text
    config = cd.Config(hostile, 'config.toml')
    assert containerd_plan.default_before_ours(config, cd.choose_schema(V16, 2, 'config.toml'), 'crun') == 'crun'
    again, _schema = planned(hostile, before=before, default_runtime=True)
    assert 'default_runtime_name = "nvidia"' in again.text


@pytest.mark.parametrize('version, file_version, schema', [
    (V16, None, 1), (V16, 1, 1), (V16, 2, 2), (V2, 2, 2), (V2, 3, 3)])
def test_schema_follows_the_binary_and_the_file(version, file_version, schema):
    assert cd.choose_schema(version, file_version, 'f').version == schema


@pytest.mark.parametrize('version, file_version, words', [
    (V16, 3, 'ignores the io.containerd.cri.v1'), (V16, 99, 'reads config versions 1 and 2'),
    (V2, None, 'has no "version" line'), (V2, 1, 'drops its CRI runtime tables'), (V2, 4, 'reads versions 2 and 3'),
    (None, 2, "cannot tell the installed containerd's version"),
    (V16, '2', 'not a number')])
def test_schemas_containerd_would_misread_are_refused(version, file_version, words):
    with pytest.raises(DocumentError, match=words):
        cd.choose_schema(version, file_version, 'f')


def test_v3_tables_for_containerd_2():
    text = fixture('v3-containerd2.toml')
    before = {'plugins': {'io.containerd.cri.v1.runtime': {'containerd': {'default_runtime_name': 'runc', 'runtimes': {
        'runc': {'runtime_type': 'io.containerd.runc.v2', 'options': {'SystemdCgroup': True}}}}}}}
    plan, schema = planned(text, version=V2, before=before)
    assert '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia]' in plan.text
    assert cd.get(cd.loads(plan.text, 'x'), schema.runtime('nvidia'))['options'] == {
        'BinaryName': RUNTIME, 'SystemdCgroup': True}


@pytest.mark.parametrize('name, words', [('v2-bad.refused.toml', 'not valid TOML'),
                                         ('v2-inline-runtimes.refused.toml', 'inline value')])
def test_files_that_cannot_be_edited_safely_are_refused(name, words):
    with pytest.raises(DocumentError, match=words):
        planned(fixture(name), before=cd.loads(fixture('config-default-1.6.dump-1.6.20'), 'd'))


def test_a_runtime_of_that_name_defined_differently_is_refused_and_an_equal_one_is_left():
    base = 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n' \
           '  runtime_type = "io.containerd.runc.v2"\n  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
    with pytest.raises(DocumentError, match='already defined at line 2, differently'):
        planned(base + '    BinaryName = "/opt/other"\n')
    plan, _schema = planned(base + '    BinaryName = "%s"\n' % RUNTIME)
    assert not plan.changes and cd.BEGIN not in plan.text
    gone, _schema = planned(base + '    BinaryName = "%s"\n' % RUNTIME, state='absent')
    assert gone.text == base + '    BinaryName = "%s"\n' % RUNTIME and gone.warnings


def test_a_damaged_block_is_refused():
    with pytest.raises(DocumentError, match='damaged'):
        planned('version = 2\n%s\n' % cd.BEGIN)


def test_the_dump_comparison_names_what_else_changed():
    before = cd.loads(fixture('v2-kubeadm.dump-1.6.20'), 'b')
    request = apply.Request(runtime_path=RUNTIME)
    schema = cd.SCHEMAS[2]
    after = copy.deepcopy(before)
    cd.get(after, schema.runtimes)['nvidia'] = {'runtime_type': 'io.containerd.runc.v2',
                                                'options': {'BinaryName': RUNTIME, 'SystemdCgroup': True}}
    assert containerd_effective.compare_effective(before, after, request, schema, 'runc') == []
    # What a naive drop-in does on containerd 1.x: runc's SystemdCgroup and the pause image back at defaults.
    broken = copy.deepcopy(after)
    cd.get(broken, schema.runtime('runc'))['options']['SystemdCgroup'] = False
    cd.get(broken, schema.cri)['sandbox_image'] = 'registry.k8s.io/pause:3.6'
    problems = containerd_effective.compare_effective(before, broken, request, schema, 'runc')
    assert any('SystemdCgroup' in p for p in problems) and any('sandbox_image' in p for p in problems)
    # A default runtime that names nothing: the CRI plugin would fail at start.
    gone = copy.deepcopy(after)
    del cd.get(gone, schema.runtimes)['runc']
    assert any('names no runtime' in p for p in containerd_effective.compare_effective(before, gone, request, schema, None))


@pytest.mark.parametrize('text, version', [
    ('containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3\n', (1, 6, 20)),
    ('containerd containerd.io v2.1.4 75cb2b7193e4e490e9fbdc236c0e811ccaba3376\n', (2, 1, 4)),
    ('', None)])
def test_binary_version(text, version):
    assert cd.binary_version(text) == version


def test_containerd_error_quotes_the_cri_plugin():
    log = ('time="x" level=info msg="loading plugin"\n'
           'time="x" level=warning msg="failed to load plugin io.containerd.grpc.v1.cri" error="invalid plugin config: '
           '`systemd_cgroup` only works for runtime io.containerd.runtime.v1.linux"\n')
    assert facts.containerd_error(log) == ('CRI plugin: invalid plugin config: `systemd_cgroup` only works for runtime '
                                           'io.containerd.runtime.v1.linux')


def test_containerd_error_quotes_the_cri_plugin_of_containerd_2():
    # What containerd 2.1.9 logs when the CRI runtime plugin refuses its configuration (measured).
    cause = ('invalid plugin config: no corresponding runtime configured in `containerd.runtimes` for `containerd` '
             '`default_runtime_name = \\"nvidia\\"')
    log = ('time="x" level=info msg="loading plugin" id=io.containerd.cri.v1.runtime type=io.containerd.cri.v1\n'
           'time="x" level=warning msg="failed to load plugin" error="%s" id=io.containerd.cri.v1.runtime '
           'type=io.containerd.cri.v1\n'
           'time="x" level=warning msg="failed to load plugin" error="unable to load CRI runtime service plugin '
           'dependency: %s" id=io.containerd.grpc.v1.cri type=io.containerd.grpc.v1\n'
           'time="x" level=error msg="failed to load cni during init" error="cni config load failed"\n') % (cause, cause)
    assert facts.containerd_error(log) == ('CRI plugin: invalid plugin config: no corresponding runtime configured in '
                                           '`containerd.runtimes` for `containerd` `default_runtime_name = "nvidia"')


def test_decide():
    request = apply.Request()
    assert apply.decide(request, None, True, []) == 'deferred'
    assert apply.decide(request, 12, False, []) == 'none'
    assert apply.decide(request, 12, True, []) == 'restart'
    assert apply.decide(request, 12, False, ['/etc/containerd/config.toml']) == 'restart'
    assert apply.decide(apply.Request(apply='none'), 12, True, []) == 'deferred'


def test_changed_since_counts_only_changes_after_the_start(tmp_path):
    path = tmp_path / 'config.toml'
    path.write_text('version = 2\n')
    ctime = os.stat(str(path)).st_ctime
    assert procs.changed_since([str(path)], ctime + 1, tick=0.01) == []
    assert procs.changed_since([str(path)], ctime - 1, tick=0.01) == [str(path)]
    assert procs.changed_since([str(tmp_path / 'missing')], ctime, tick=0.01) == [str(tmp_path / 'missing')]


def effective(runtimes, default='runc', legacy=None):
    """A dump's CRI runtimes (schema 2), as containerd 1.6 lists them (zero values included)."""
    containerd = {'default_runtime_name': default, 'runtimes': runtimes,
                  'default_runtime': legacy or {'runtime_type': '', 'options': {}}}
    return {'plugins': {'io.containerd.grpc.v1.cri': {'containerd': containerd}}}


def runc(**options):
    return {'runtime_type': 'io.containerd.runc.v2', 'privileged_without_host_devices': False, 'runtime_root': '',
            'pod_annotations': [], 'options': options}


@pytest.mark.parametrize('default, runtimes, template', [
    ('custom', {'runc': runc(), 'custom': runc(SystemdCgroup=True)}, 'custom'),
    ('nvidia', {'runc': runc(SystemdCgroup=True), 'nvidia': runc(BinaryName='x')}, 'runc'),
    ('nvidia-legacy', {'crun': runc(BinaryName='/usr/bin/crun')}, 'crun'),
    ('kata', {'kata': dict(runc(), runtime_type='io.containerd.kata.v2'), 'runc': runc()}, 'runc'),
    ('runc', {}, None),
    # an empty runtime_type is runc v2 (containerd runs the runc v2 shim; NVIDIA's tool copies it and sets the type)
    ('runc', {'runc': dict(runc(SystemdCgroup=True), runtime_type='')}, 'runc'),
    ('runc', {'runc': {'options': {'SystemdCgroup': True}}}, 'runc'),
])
def test_the_template_is_the_default_then_runc_then_crun_and_only_runc_v2(default, runtimes, template):
    assert containerd_plan.choose_template(runtimes, default, 'nvidia')[0] == template


def test_the_template_is_copied_whole_but_binary_name_and_runtime_type():
    template = dict(runc(SystemdCgroup=True, NoPivotRoot=True, BinaryName='/usr/bin/crun'),
                    privileged_without_host_devices=True, pod_annotations=['a/*'], sandboxer='shim')
    want = containerd_plan.desired_runtime(apply.Request(runtime_path=RUNTIME), template)
    assert want == {'runtime_type': 'io.containerd.runc.v2', 'privileged_without_host_devices': True,
                    'pod_annotations': ['a/*'], 'sandboxer': 'shim',
                    'options': {'SystemdCgroup': True, 'NoPivotRoot': True, 'BinaryName': RUNTIME}}
    text = 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n  runtime_type = "x"\n'
    plan, _schema = planned(text, before=effective({'runc': template}))
    block = plan.text[len(text):]
    assert '  pod_annotations = ["a/*"]\n' in block and '    NoPivotRoot = true\n' in block
    assert cd.loads(plan.text, 'x')['plugins']['io.containerd.grpc.v1.cri']['containerd']['runtimes']['nvidia'] == want


def test_a_runc_template_with_an_empty_runtime_type_gives_its_systemd_cgroup_to_nvidia():
    template = dict(runc(SystemdCgroup=True), runtime_type='')
    want = containerd_plan.desired_runtime(apply.Request(runtime_path=RUNTIME), template)
    assert want['runtime_type'] == 'io.containerd.runc.v2'
    assert want['options'] == {'SystemdCgroup': True, 'BinaryName': RUNTIME}


def test_the_sandboxer_the_cri_plugin_implies_is_not_copied_and_a_block_carrying_it_is_kept():
    # containerd 2.x dumps runc with sandboxer = 'podsandbox'; a runtime without the key starts on podsandbox too.
    template = dict(runc(SystemdCgroup=True), sandboxer='podsandbox')
    want = containerd_plan.desired_runtime(apply.Request(runtime_path=RUNTIME), template)
    assert 'sandboxer' not in want
    text = 'version = 3\n[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]\n  runtime_type = "x"\n'
    dump = {'plugins': {'io.containerd.cri.v1.runtime': {'containerd': {'default_runtime_name': 'runc',
                                                                        'runtimes': {'runc': template}}}}}
    first, _schema = planned(text, before=dump, version=V2)
    assert 'sandboxer' not in first.text
    # A block an earlier release wrote with the implied value is up to date: no rewrite, no restart.
    carrying = first.text.replace('  runtime_type = "io.containerd.runc.v2"\n',
                                  '  runtime_type = "io.containerd.runc.v2"\n  sandboxer = "podsandbox"\n', 1)
    assert carrying != first.text
    cri = dump['plugins']['io.containerd.cri.v1.runtime']['containerd']
    cri['runtimes']['nvidia'] = dict(want, sandboxer='podsandbox')
    again, _schema = planned(carrying, before=dump, version=V2)
    assert again.text == carrying and not again.changes


def test_the_template_stays_the_default_this_module_replaced():
    text = ('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  default_runtime_name = "custom"\n'
            '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.custom]\n  runtime_type = "io.containerd.runc.v2"\n')
    runtimes = {'runc': runc(), 'custom': runc(SystemdCgroup=True)}
    first, _schema = planned(text, default_runtime=True, before=effective(runtimes, 'custom'))
    again, _schema = planned(first.text, default_runtime=True,
                             before=effective(dict(runtimes, nvidia=first.runtime), 'nvidia'))
    assert first.runtime['options']['SystemdCgroup'] is True
    assert again.text == first.text


def test_the_deprecated_default_runtime_table_is_the_default_and_default_runtime_true_is_refused():
    text = 'version = 1\n[plugins.cri.containerd.default_runtime]\n  runtime_type = "io.containerd.runc.v2"\n'
    before = effective({'runc': runc()}, legacy=runc(SystemdCgroup=True))
    assert containerd_plan.cri_runtimes(before, cd.SCHEMAS[2])[1] == 'default'
    with pytest.raises(DocumentError, match='line 2 sets the deprecated table .*no effect'):
        planned(text, default_runtime=True, before=before)
    plan, _schema = planned(text, before=before)
    assert plan.runtime['options'] == {'BinaryName': RUNTIME, 'SystemdCgroup': True}


STALE = ('version = 2\r\n'
         '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes]\r\n'
         '  runc.runtime_type = "io.containerd.runc.v2"\r\n'
         '  nvidia.runtime_type = "io.containerd.runc.v2"  # installer\r\n'
         '  nvidia.options = { BinaryName = "/old/nvidia-container-runtime" }\r\n'
         '  nvidia.pod_annotations = [\r\n'
         '    "a/*",\r\n'
         '  ]\r\n'
         '\r\n'
         '[debug]\r\n'
         '  level = "info"')


def test_an_existing_definition_is_taken_over_only_on_request_and_given_back_byte_for_byte():
    before = effective({'runc': runc(), 'nvidia': runc(BinaryName='/old/nvidia-container-runtime')})
    with pytest.raises(DocumentError, match='set take_over: true'):
        planned(STALE, before=before)
    config = cd.Config(STALE, 'config.toml')
    request = apply.Request(path='config.toml', runtime_path=RUNTIME, take_over=True)
    plan = containerd_plan.plan(config, request, cd.SCHEMAS[2], before, cd.SCHEMAS[2])
    values = cd.loads(plan.text, 'x')
    assert values['plugins']['io.containerd.grpc.v1.cri']['containerd']['runtimes']['nvidia'] == plan.runtime
    assert values['debug'] == {'level': 'info'} and 'runc' in values['plugins']['io.containerd.grpc.v1.cri'][
        'containerd']['runtimes']
    assert plan.text.count(containerd_plan.took_over_prefix('nvidia')) == 5 and '\n' not in plan.text.replace('\r\n', '')
    again = containerd_plan.plan(cd.Config(plan.text, 'config.toml'), request, cd.SCHEMAS[2], before, cd.SCHEMAS[2])
    assert again.text == plan.text
    gone = containerd_plan.plan(cd.Config(plan.text, 'config.toml'), apply.Request(state='absent'), cd.SCHEMAS[2], before,
                                cd.SCHEMAS[2])
    assert gone.text == STALE  # byte for byte, the missing final line ending included


# ---- relative imports, as each containerd resolves them ----------------------------------------
# Measured with `config dump` run from /: containerd 1.6.20 globs a relative pattern against its working directory
# and takes a relative file name from the directory of the file naming it; containerd 2.1.9 takes both from that
# directory. The planned file is dumped from standard input, so whatever is taken from its directory is made absolute.

IMPORTS = 'version = 2\nimports = ["conf.d/*.toml", "extra.toml", "/etc/abs/*.toml"]\n'


@pytest.mark.parametrize('version, glob_base', [((1, 6, 20), '/cwd'), ((1, 7, 24), '/cwd'), ((2, 1, 9), '/etc/c')])
def test_relative_imports_resolve_as_that_containerd_does(version, glob_base):
    values = cd.loads(IMPORTS, '/etc/c/config.toml')
    found = containerd_effective.import_patterns(values, '/etc/c/config.toml', '/cwd', containerd_effective.globs_from_file(version))
    assert found == [(glob_base + '/conf.d/*.toml', True), ('/etc/c/extra.toml', False), ('/etc/abs/*.toml', True)]


def test_the_probe_names_absolutely_what_containerd_takes_from_the_files_directory():
    one = containerd_effective.probe_text(IMPORTS, '/etc/c/config.toml', '/etc/c', containerd_effective.globs_from_file((1, 6, 20)))
    two = containerd_effective.probe_text(IMPORTS, '/etc/c/config.toml', '/etc/c', containerd_effective.globs_from_file((2, 1, 9)))
    assert cd.loads(one, 'x')['imports'] == ['conf.d/*.toml', '/etc/c/extra.toml', '/etc/abs/*.toml']
    assert cd.loads(two, 'x')['imports'] == ['/etc/c/conf.d/*.toml', '/etc/c/extra.toml', '/etc/abs/*.toml']
    assert containerd_effective.globs_from_file(None) is False


@pytest.mark.parametrize('version, declared, wanted', [
    ((1, 6, 20), {'/d/99.toml': 3}, [('silently ignored', False)]),
    ((1, 7, 24), {'/d/99.toml': 3}, [('refuses it (it reads up to version 2)', True)]),
    ((2, 1, 9), {'/d/99.toml': 4}, [('refuses it (it reads up to version 3)', True)]),
    ((2, 1, 9), {'/d/99.toml': 3}, [('drops settings of the main file', True)]),
    ((2, 1, 9), {'/d/99.toml': 2, '/d/a.toml': None, '/d/b.toml': True, '/d/c.toml': '3'}, []),
    ((1, 6, 20), {'/d/99.toml': 1}, []),
])
def test_an_imported_file_of_another_config_version_is_reported(version, declared, wanted):
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import effective
    found = effective.import_versions(2, declared, version)
    assert [(next(w for w, unused in wanted if w in text) if wanted else text, refused)
            for text, refused in found] == wanted
    for text, unused in found:
        assert text.startswith('/d/99.toml declares config version')
    assert effective.import_versions(None, {'/d/99.toml': 3}, version) == []  # a main file without a version
