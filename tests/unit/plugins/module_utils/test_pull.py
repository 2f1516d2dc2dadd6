# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pull mode's program (``pull.runner``) and what gpufleet.nvidia.pull writes (``pull.install``).

The runner's rules are pure functions tested on ansible-pull's real output shapes; ``run`` is tested end to end with
a stand-in for ansible-pull (a shell script: what it prints and leaves is what the real one does, checked on the
lab by tests/lab/test_pull.py), in private directories: the lock, the log, the state and the metrics.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fcntl
import json
import os
import stat
import subprocess
import sys
import time

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.pull import install, outcome as pull_outcome, runner

NAME = 'h1'
CHECKOUT_FAILED = '''Starting Ansible Pull at 2026-12-05 23:00:00
/opt/gpufleet-pull/venv/bin/ansible-pull --url git://10.250.0.1/site.git
localhost | FAILED! => {
    "before": "0123",
    "changed": false,
    "msg": "Failed to verify GPG signature of commit/tag \\"HEAD\\"",
    "stderr": "error: no signature found\\n"
}
'''
PARSE_ERROR = '''localhost | CHANGED => {"after": "abc", "before": "def", "changed": true}
[ERROR]: We were unable to read either as JSON nor YAML, these are the errors we got from each:
JSON: Expecting value: line 1 column 1 (char 0)
'''
UNCHANGED = '''localhost | SUCCESS => {"after": "abc", "before": "abc", "changed": false}
Repository has not changed, quitting: b'...'
'''
RECAP = '''PLAY RECAP *********************************************************************
h1                         : ok=3    changed=1    unreachable=0    failed=0    skipped=0    rescued=0    ignored=0
'''


def node(drifted=(), evaluated=('device_links', 'persistenced', 'container_runtime'), **more):
    result = {'state': {'converged': not drifted, 'drifted': list(drifted), 'evaluated': list(evaluated)}}
    result.update(more)
    return result


def results(node_result=None, error=None, stopped=None):
    return {'hosts': {NAME: node_result} if node_result is not None else {},
            'errors': {NAME: error} if error else {}, 'stopped': {NAME: stopped} if stopped else {}}


# --------------------------------------------------------------------------
# The outcome
# --------------------------------------------------------------------------

def test_a_refused_checkout_is_refused_with_git_s_message():
    outcome, reason, drift = pull_outcome.classify(2, False, CHECKOUT_FAILED, None, NAME)
    assert outcome == 'refused'
    assert 'Failed to verify GPG signature of commit/tag "HEAD"' in reason
    assert drift is None


def test_a_playbook_that_cannot_be_parsed_is_refused():
    outcome, reason, dummy = pull_outcome.classify(4, False, PARSE_ERROR, None, NAME)
    assert outcome == 'refused'
    assert 'could not be parsed' in reason and 'unable to read either as JSON nor YAML' in reason


def test_an_unchanged_repository_is_unchanged():
    assert pull_outcome.classify(0, False, UNCHANGED, None, NAME)[0] == 'unchanged'


def test_a_timed_out_run_failed():
    outcome, reason, dummy = pull_outcome.classify(-15, True, '', None, NAME, timeout=60)
    assert outcome == 'failed' and '60 s' in reason


@pytest.mark.parametrize('result, outcome', [
    (results(node()), 'ok'),
    (results(node(drifted=['persistenced'])), 'changed'),
    (results(node(drifted=['container_runtime'], container_runtime={'engines': {'containerd': {
        'deferred': {'action': 'restart'}}}})), 'deferred'),
    (results(node(), error="failed at 'x': boom"), 'failed'),
    (results(node(), stopped={'stop': True}), 'failed'),
])
def test_the_result_the_playbook_left_decides(result, outcome):
    found = pull_outcome.classify(0, False, RECAP, result, NAME)
    assert found[0] == outcome
    assert found[2] == {'device_links': False, 'persistenced': 'persistenced' in node_drift(result),
                        'container_runtime': 'container_runtime' in node_drift(result)}


def node_drift(result):
    return result['hosts'][NAME]['state']['drifted']


def test_a_failed_playbook_without_result_failed_with_its_error():
    outcome, reason, dummy = pull_outcome.classify(2, False, 'fatal: [h1]: FAILED! => {}\nERROR! boom\n', None, NAME)
    assert outcome == 'failed' and 'exited 2' in reason


def test_a_playbook_of_the_site_s_own_is_judged_by_its_recap():
    assert pull_outcome.classify(0, False, RECAP, None, NAME)[0] == 'changed'
    assert pull_outcome.classify(0, False, RECAP.replace('changed=1', 'changed=0'), None, NAME)[0] == 'ok'


@pytest.mark.parametrize('hostile', [
    [], 'x', {'hosts': []}, {'hosts': {NAME: 'x'}}, {'hosts': {NAME: {'state': {'drifted': 'all'}}}},
    {'hosts': {NAME: {'state': {'evaluated': [1, None], 'drifted': []}}}},
])
def test_a_result_of_another_shape_is_no_crash(hostile):
    outcome, _reason, _drift = pull_outcome.classify(0, False, RECAP, hostile, NAME)
    assert outcome in pull_outcome.OUTCOMES


# --------------------------------------------------------------------------
# ansible-pull's command line
# --------------------------------------------------------------------------

def config(tmp, **more):
    state = os.path.join(tmp, 'state')
    base = {
        'ansible_pull': os.path.join(tmp, 'ansible-pull'), 'url': 'git://10.250.0.1/site.git', 'checkout': None,
        'directory': os.path.join(state, 'checkout'), 'playbook': 'local.yml',
        'inventories': [], 'name': NAME, 'only_if_changed': False,
        'verify_commit': False, 'gnupg_home': os.path.join(state, 'gnupg'), 'splay': 0, 'timeout': 60,
        'log': os.path.join(tmp, 'log', 'pull.log'), 'log_max_bytes': 1 << 20, 'log_keep': 2,
        'textfile_directory': os.path.join(tmp, 'textfile'), 'state_directory': state, 'extra_vars': {},
        'git': '/usr/bin/git', 'groups': ['gpu_nodes'], 'python': '/usr/bin/python3'}
    base.update(more)
    return runner.validate_config('pull.json', base)


def test_only_if_changed_only_after_a_success_on_the_commit_checked_out(tmp_path):
    conf = config(str(tmp_path), only_if_changed=True, verify_commit=True, checkout='production')
    argv = runner.pull_argv(conf, '/r.json', {'outcome': 'ok', 'applied': 'a' * 40}, 'a' * 40)
    assert '--only-if-changed' in argv and '--verify-commit' in argv
    assert argv[argv.index('--checkout') + 1] == 'production' and argv[argv.index('--limit') + 1] == NAME
    assert json.loads(argv[argv.index('--extra-vars') + 1]) == {'gpufleet_pull_results_file': '/r.json'}
    assert argv[-1] == 'local.yml'
    for previous, head in (({'outcome': 'failed', 'applied': 'a' * 40}, 'a' * 40),
                           ({'outcome': 'refused', 'applied': 'a' * 40}, 'b' * 40),
                           ({'outcome': 'ok', 'applied': 'a' * 40}, 'b' * 40), (None, 'a' * 40)):
        assert '--only-if-changed' not in runner.pull_argv(conf, '/r.json', previous, head)
    assert '--only-if-changed' not in runner.pull_argv(conf, '/r.json', {'outcome': 'ok', 'applied': 'a' * 40},
                                                       'a' * 40, converge=True)


def test_the_environment_has_a_utf8_locale_and_the_site_s_keyring(tmp_path):
    conf = config(str(tmp_path))
    env = runner.environment(conf, base={'PATH': '/bin'})
    assert env['LC_ALL'] == 'C.UTF-8' and env['GNUPGHOME'] == conf['gnupg_home'] and env['ANSIBLE_NOCOLOR'] == '1'


@pytest.mark.parametrize('key, value', [('splay', -1), ('timeout', 0), ('url', 3), ('only_if_changed', 1),
                                        ('ansible_pull', 'bin/ansible-pull'), ('checkout', 5)])
def test_a_bad_configuration_names_the_key(tmp_path, key, value):
    with pytest.raises(runner.ConfigError, match=key):
        config(str(tmp_path), **{key: value})


# --------------------------------------------------------------------------
# Runs, end to end, with a stand-in for ansible-pull
# --------------------------------------------------------------------------

FAKE = r'''#!/bin/sh
# ansible-pull's stand-in: prints what it was given, and what $FAKE_MODE says it does
echo "Starting Ansible Pull"
echo "$@"
echo $$ > "$FAKE_DIR/pid"
result=$(echo "$@" | sed -n 's/.*"gpufleet_pull_results_file": "\([^"]*\)".*/\1/p')
case "$FAKE_MODE" in
  refuse) printf 'localhost | FAILED! => {\n    "msg": "Failed to verify GPG signature of commit/tag \\"HEAD\\""\n}\n'; exit 2 ;;
  sleep) sleep 300 & echo $! > "$FAKE_DIR/child"; wait; exit 0 ;;
  noisy) head -c 300000 /dev/zero | tr '\0' 'x'; echo; exit 0 ;;
  *) printf '%s' "$FAKE_RESULT" > "$result"; echo "PLAY RECAP"; exit 0 ;;
esac
'''


@pytest.fixture
def pull(tmp_path, monkeypatch):
    tmp = str(tmp_path)
    os.chmod(tmp, 0o755)
    fake = os.path.join(tmp, 'ansible-pull')
    with open(fake, 'w') as handle:
        handle.write(FAKE)
    os.chmod(fake, 0o755)
    os.mkdir(os.path.join(tmp, 'state'), 0o700)
    os.mkdir(os.path.join(tmp, 'textfile'), 0o755)
    monkeypatch.setenv('FAKE_DIR', tmp)
    monkeypatch.setenv('FAKE_RESULT', json.dumps(results(node(drifted=['persistenced']))))
    return tmp


def state_of(tmp):
    with open(os.path.join(tmp, 'state', runner.STATE_FILE)) as handle:
        return json.load(handle)


def metrics_of(tmp):
    with open(os.path.join(tmp, 'textfile', runner.METRICS_FILE)) as handle:
        return handle.read()


def test_a_run_keeps_its_outcome_metrics_and_log(pull):
    conf = config(pull)
    assert runner.run(conf, now=True) == 0
    state = state_of(pull)
    assert state['outcome'] == 'changed' and state['drift'] == {
        'device_links': False, 'persistenced': True, 'container_runtime': False}
    text = metrics_of(pull)
    assert 'gpufleet_last_run_outcome{outcome="changed"} 1' in text
    assert 'gpufleet_last_run_outcome{outcome="failed"} 0' in text
    assert 'gpufleet_concern_drifted{concern="persistenced"} 1' in text
    assert 'gpufleet_last_run_timestamp_seconds %r' % float(state['ended']) in text
    with open(conf['log']) as handle:
        log = handle.read()
    assert 'run started' in log and '--limit h1' in log and 'run ended: changed' in log
    st = os.stat(conf['log'])
    assert stat.S_IMODE(st.st_mode) == 0o600 and stat.S_IMODE(os.stat(os.path.dirname(conf['log'])).st_mode) == 0o700
    assert not os.path.exists(os.path.join(pull, 'state', 'running.json'))


def test_a_refused_run_keeps_the_commit_applied_before_and_exits_1(pull, monkeypatch):
    conf = config(pull)
    assert runner.run(conf, now=True) == 0
    first = state_of(pull)
    monkeypatch.setenv('FAKE_MODE', 'refuse')
    assert runner.run(conf, now=True) == 1
    state = state_of(pull)
    assert state['outcome'] == 'refused' and 'Failed to verify GPG signature' in state['reason']
    assert state['last_success'] == first['last_success'] and state['drift'] == first['drift']
    assert 'gpufleet_last_run_outcome{outcome="refused"} 1' in metrics_of(pull)
    assert [run['outcome'] for run in state['history']] == ['changed', 'refused']
    assert state['history'][0]['ended'] <= state['history'][1]['started']


def test_a_second_run_while_one_holds_the_lock_ends_at_once(pull, capsys):
    conf = config(pull)
    dfd = os.open(conf['state_directory'], os.O_RDONLY)
    try:
        fcntl.flock(dfd, fcntl.LOCK_EX)
        assert runner.run(conf, now=True) == 0
    finally:
        os.close(dfd)
    assert 'holds the lock' in capsys.readouterr().out
    assert not os.path.exists(os.path.join(pull, 'pid'))  # ansible-pull never started
    assert not os.path.exists(os.path.join(pull, 'state', runner.STATE_FILE))


def test_a_run_past_its_timeout_is_ended_with_its_children(pull, monkeypatch):
    monkeypatch.setenv('FAKE_MODE', 'sleep')
    conf = config(pull, timeout=2)
    assert runner.run(conf, now=True) == 1
    assert state_of(pull)['outcome'] == 'failed'
    with open(os.path.join(pull, 'child')) as handle:
        child = int(handle.read())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and os.path.exists('/proc/%d' % child) and not zombie(child):
        time.sleep(0.05)
    assert not os.path.exists('/proc/%d' % child) or zombie(child)


def zombie(pid):
    try:
        with open('/proc/%d/stat' % pid) as handle:
            return handle.read().rsplit(')', 1)[1].split()[0] == 'Z'
    except (IOError, OSError):
        return True


def test_the_log_is_bounded(pull, monkeypatch):
    monkeypatch.setenv('FAKE_MODE', 'noisy')
    conf = config(pull, log_max_bytes=65536, log_keep=2)
    for dummy in range(5):
        runner.run(conf, now=True)
    logs = sorted(name for name in os.listdir(os.path.dirname(conf['log'])))
    assert logs == ['pull.log', 'pull.log.1', 'pull.log.2']
    for name in logs:
        assert os.path.getsize(os.path.join(os.path.dirname(conf['log']), name)) < 65536 + 4096
    with open(conf['log']) as handle:
        assert 'left out of the log' in handle.read()


def test_a_state_directory_others_can_open_is_refused(pull):
    conf = config(pull)
    os.chmod(conf['state_directory'], 0o755)
    with pytest.raises(runner.HostFileError, match='open to root alone'):
        runner.run(conf, now=True)


def test_the_program_refuses_a_configuration_others_can_write(tmp_path):
    path = str(tmp_path / 'pull.json')
    with open(path, 'w') as handle:
        json.dump(config(str(tmp_path)), handle)
    os.chmod(str(tmp_path), 0o755)
    os.chmod(path, 0o666)
    proc = subprocess.run([sys.executable, '-c', 'import sys; from ansible_collections.gpufleet.nvidia.plugins.'
                           'module_utils.pull import runner; sys.exit(runner.main(sys.argv[1:]))', '--config', path,
                           '--now'], capture_output=True, text=True, check=False)
    assert proc.returncode == 1 and 'cannot run' in proc.stderr and path in proc.stderr


# --------------------------------------------------------------------------
# What gpufleet.nvidia.pull writes
# --------------------------------------------------------------------------

@pytest.mark.parametrize('interval, fields', [(1, '* * * * *'), (15, '*/15 * * * *'), (30, '*/30 * * * *'),
                                              (60, '0 * * * *'), (180, '0 */3 * * *'), (1440, '0 */24 * * *')])
def test_cron_says_each_interval_it_can(interval, fields):
    assert install.cron_schedule(interval) == fields


@pytest.mark.parametrize('interval', [7, 45, 90, 100, 2880])
def test_cron_refuses_an_interval_it_cannot_say(interval):
    with pytest.raises(install.PullError, match='interval %d' % interval):
        install.cron_schedule(interval)


def params(**more):
    p = dict((key, spec.get('default')) for key, spec in install.SPEC.items())
    p.update(url='git://10.250.0.1/site.git', name=NAME)
    p.update(more)
    return p


@pytest.mark.parametrize('more, word', [({'url': None}, 'url is required'), ({'playbook': '../x.yml'}, 'playbook'),
                                        ({'checkout': 'a\nb'}, 'checkout'), ({'verify_commit': True}, 'gpg_keys'),
                                        ({'interval': 0}, 'interval'), ({'textfile_directory': 'x'}, 'textfile')])
def test_bad_options_are_refused_naming_the_option(more, word):
    with pytest.raises(install.PullError, match=word):
        install.check_params(params(**more))


def test_the_configuration_is_one_the_program_takes():
    p = params(checkout='production', inventories=['inventory/site.yml'])
    conf = runner.validate_config('pull.json', install.config(p, NAME))
    assert conf['inventories'] == ['inventory/site.yml'] and conf['groups'] == ['gpu_nodes']
    assert conf['ansible_pull'] == '/opt/gpufleet-pull/venv/bin/ansible-pull'


def test_the_node_s_inventory_has_it_in_its_groups_and_the_checkout_runs_on_one_host(tmp_path):
    conf = config(str(tmp_path), groups=['gpu_nodes', 'rack7'])
    inv = runner.inventory(conf, {'node17', 'node17.example'})['all']['children']
    assert set(inv) == {'gpu_nodes', 'rack7', 'ungrouped'}
    assert inv['gpu_nodes']['hosts'][NAME] == {'ansible_connection': 'local', 'ansible_python_interpreter':
                                               '/usr/bin/python3'}
    assert inv['ungrouped']['hosts']['localhost']['ansible_python_interpreter'] == os.path.join(str(tmp_path),
                                                                                                'python')
    # the node under one of the host's own names: ansible-pull's checkout runs on it, and on no localhost beside it
    inv = runner.inventory(conf, {NAME, NAME + '.example'})['all']['children']
    assert set(inv) == {'gpu_nodes', 'rack7'}


def test_the_units_and_the_cron_job():
    p = params(interval=15, splay=300, timeout=1800, boot_delay=90)
    assert 'OnUnitInactiveSec=15min' in install.render_timer(p) and 'OnBootSec=90' in install.render_timer(p)
    assert 'TimeoutStartSec=2220' in install.render_service(p)
    cron = install.render_cron(p)
    assert '*/15 * * * * root /usr/sbin/gpufleet-pull >/dev/null 2>&1' in cron
    assert '@reboot root sleep 90 && /usr/sbin/gpufleet-pull --now' in cron


def test_pip_uses_the_site_s_index_or_wheelhouse_alone():
    argv = install.pip_argv(params(pip_find_links='http://10.250.0.1:8766/'))
    assert argv[-1] == 'ansible-core>=2.18' and '--no-index' in argv
    argv = install.pip_argv(params(pip_index_url='https://pypi.example/simple'))
    assert '--no-index' not in argv and argv[argv.index('--index-url') + 1] == 'https://pypi.example/simple'


def test_a_link_in_place_of_a_file_it_writes_is_refused_naming_gpufleet_pull(tmp_path):
    os.chmod(str(tmp_path), 0o755)
    link = str(tmp_path / 'gpufleet-pull')
    os.symlink('/etc/passwd', link)
    with pytest.raises(runner.HostFileError, match='symbolic link: refusing to write through it a file for '
                                                   'gpufleet-pull, which its timer or cron job runs as root'):
        install.install_text(link, 'x', 0o644, check_mode=False)
    assert os.path.islink(link) and os.readlink(link) == '/etc/passwd'
