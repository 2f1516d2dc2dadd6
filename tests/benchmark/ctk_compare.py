#!/usr/bin/env python3
"""Side by side: our docker_runtime / containerd_runtime against NVIDIA's ``nvidia-ctk runtime configure``.

For each input (``tests/benchmark/ctk_inputs``, plus CRLF copies made here) and each tool, on a real engine
(Debian's dockerd 20.10 and containerd 1.6, each in a private mount namespace: the harnesses of tests/dockerd and
tests/containerd), with a container running:

* ours: the modules' own apply code (``docker.apply.converge``, ``containerd.apply.Converge``) with the test
  layers' service (reload = SIGHUP to dockerd's PID, restart = stop + start), then ``state=absent``;
* theirs: ``nvidia-ctk runtime configure --runtime=docker|containerd --config FILE``, run inside the engine's
  namespace (its containerd drop-in lands in that namespace's private /etc/containerd), then the restart its own
  output asks for; then whatever removal it offers (its ``runtime`` command's sub-commands, read from ``--help``).

Measured: the input's lines still in the file (byte for byte, a comma added after what was the last member of a
JSON object aside), comment lines, line endings, the engine's effective configuration (dockerd ``GET /info``,
``containerd config dump``), every other setting unchanged, reload or restart (the engine's PID), the running
container, a second run, removal. It prints the tables and rewrites the generated part of
docs/nvidia-ctk-comparison.md. A measurement, not a test: exit 0 unless it could not run (prerequisites missing, a
case that could not be measured). Usage, as root from the repository root, after ``tests/toolkit/build``::

    .venv/bin/python tests/benchmark/ctk_compare.py [--only docker|containerd] [--no-write] [--ctk PATH]
"""

import argparse
import copy
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(REPO, 'tests'), os.path.join(REPO, '.build', 'collections')]

from containerd.conftest import CTR, LabContainerd, make_busybox_rootfs, settings  # noqa: E402
from containerd.conftest import LabService as ContainerdService  # noqa: E402
from dockerd.conftest import LabDockerd, import_busybox  # noqa: E402
from dockerd.conftest import LabService as DockerService  # noqa: E402

from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import config as cd  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import apply as capply  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import facts  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker import apply as dapply  # noqa: E402

INPUTS = os.path.join(REPO, 'tests', 'benchmark', 'ctk_inputs')
CTK = os.path.join(REPO, '.cache', 'toolkit', 'bin', 'nvidia-ctk')
DOC = os.path.join(REPO, 'docs', 'nvidia-ctk-comparison.md')
BEGIN = '<!-- ctk_compare.py: generated, do not edit by hand -->'
END = '<!-- ctk_compare.py: end of generated part -->'
COMMAND = '.venv/bin/python tests/benchmark/ctk_compare.py'
CRI = ('plugins', 'io.containerd.grpc.v1.cri')
CRI_CONTAINERD = CRI + ('containerd',)
RUNTIMES = CRI_CONTAINERD + ('runtimes',)
# /info fields that come from daemon.json (the rest is counters and clocks).
INFO_FIELDS = ('Runtimes', 'DefaultRuntime', 'Labels', 'Debug', 'LoggingDriver', 'LiveRestoreEnabled')
# dockerd 20.10 lists these in /info after a start but not after a reload; no file names them.
BUILTIN = 'io.containerd.'
WHAT_ITS_OUTPUT_ASKS = re.compile(r'It is recommended that (\w+) daemon be restarted')

# (label, input file, newline, make nvidia the default): each runs once per tool.
DOCKER_CASES = (
    ('hand-edited (tabs, odd indent, unicode)', 'hand-edited.json', '\n', False),
    ('existing runtime, custom options, live-restore', 'existing-runtime.json', '\n', False),
    ('default-runtime already set', 'default-runtime.json', '\n', False),
    ('default-runtime already set; nvidia as default', 'default-runtime.json', '\n', True),
    ('hand-edited, CRLF', 'hand-edited.json', '\r\n', False),
)
CONTAINERD_CASES = (
    ("Debian 12's own (containerd package)", 'debian-default.toml', '\n', False),
    ('comments', 'comments.toml', '\n', False),
    ('imports', 'imports.toml', '\n', False),
    ('custom runc options', 'runc-options.toml', '\n', False),
    ('default runtime already set', 'default-runtime.toml', '\n', False),
    ('default runtime already set; nvidia as default', 'default-runtime.toml', '\n', True),
    ('comments, CRLF', 'comments.toml', '\r\n', False),
)
IMPORTED = 'site.toml'  # imports.toml names it under the lab's directory (@BASE@)


class CouldNotRun(Exception):
    pass


# ---- reading files ---------------------------------------------------------------------------------------------
def read(path):
    with open(path, 'rb') as handle:
        return handle.read()


def write(path, data):
    with open(path, 'wb') as handle:
        handle.write(data)


def with_newline(text, newline):
    return text.replace('\n', newline).encode('utf-8')


def line_key(line):
    """A line without its line ending and without a trailing comma (JSON's separator, moved when a member is added)."""
    return line.rstrip(b'\r\n').rstrip().rstrip(b',')


def lines_kept(user, after):
    """``(kept, total, comments kept, comments)``: the user's lines found in ``after`` (as a multiset)."""
    pool = {}
    for line in after.splitlines():
        pool[line_key(line)] = pool.get(line_key(line), 0) + 1
    kept = comments = comments_kept = 0
    lines = user.splitlines()
    for line in lines:
        key = line_key(line)
        is_comment = b'#' in line
        comments += is_comment
        if pool.get(key):
            pool[key] -= 1
            kept += 1
            comments_kept += is_comment
    return kept, len(lines), comments_kept, comments


def endings(data):
    crlf = data.count(b'\r\n')
    lf = data.count(b'\n') - crlf
    if crlf and lf:
        return 'mixed (%d CRLF, %d LF)' % (crlf, lf)
    return 'CRLF' if crlf else 'LF'


def rewrite(path, before, inode, mtime):
    """How a second run left the file: untouched, written again with the same bytes (in place or replaced), changed."""
    st = os.stat(path)
    if read(path) != before:
        return 'file changed'
    if (st.st_ino, st.st_mtime_ns) == (inode, mtime):
        return 'file untouched'
    return 'same bytes written again (%s)' % ('in place, same inode' if st.st_ino == inode else 'new inode')


def differences(after, before, where=''):
    """Where two parsed configurations differ, as 'dotted.path: before -> after'; [] when equal."""
    if isinstance(after, dict) and isinstance(before, dict):
        return [path for key in sorted(set(after) | set(before))
                for path in differences(after.get(key), before.get(key), '%s.%s' % (where, key) if where else key)]
    if after == before:
        return []

    def short(value):
        if value is None:
            return '(absent)'
        if isinstance(value, dict):
            return '(a table)'
        return json.dumps(value, sort_keys=True, ensure_ascii=False)[:80]
    return ['%s: %s -> %s' % (where or '(all)', short(before), short(after))]


def same_file(now, original):
    """'byte-identical to the input', or how it differs: the lines added and removed (multisets)."""
    if now == original:
        return 'byte-identical to the input'
    if now.replace(b'\r\n', b'\n') == original.replace(b'\r\n', b'\n'):
        return 'differs from the input in line endings only'
    added, removed = list(now.splitlines()), []
    for line in original.splitlines():
        if line in added:
            added.remove(line)
        else:
            removed.append(line)
    if len(added) + len(removed) > 4:
        return 'differs from the input: %d lines added, %d gone' % (len(added), len(removed))

    def show(lines):
        blank = len([line for line in lines if not line.strip()])
        shown = ['`%s`' % line.decode('utf-8', 'replace').strip() for line in lines if line.strip()]
        return ', '.join(shown + (['%d blank' % blank] if blank else [])) or 'none'
    return 'differs from the input: lines added %s; lines gone %s' % (show(added), show(removed))


def new_files(directory, before):
    return sorted(set(os.listdir(directory)) - before)


# ---- nvidia-ctk -------------------------------------------------------------------------------------------------
def ctk(lab, ctk_path, args):
    """``(rc, output)`` of nvidia-ctk run inside the engine's namespace (its /etc is the namespace's)."""
    proc = subprocess.run(lab.inside([ctk_path] + list(args)), capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout + proc.stderr


def ctk_asks(output):
    found = WHAT_ITS_OUTPUT_ASKS.search(output)
    return found.group(0) if found else None


def ctk_removal(ctk_path):
    """What ``nvidia-ctk runtime`` offers: its sub-commands, from its own --help."""
    out = subprocess.run([ctk_path, 'runtime', '--help'], capture_output=True, text=True, timeout=30).stdout
    commands = out.split('COMMANDS:', 1)[1].split('OPTIONS:', 1)[0] if 'COMMANDS:' in out else ''
    return [line.split()[0] for line in commands.splitlines() if line.strip() and line.split()[0] != 'help,']


# ---- dockerd ------------------------------------------------------------------------------------------------------
def docker_running(lab, container):
    try:
        return bool(lab.api.get('/containers/%s/json' % container)['State']['Running'])
    except Exception:
        return False


def docker_settings(info, parsed, default):
    """What must not change: /info's fields from the file and every parsed key, without the nvidia runtime."""
    info = dict((key, copy.deepcopy(info.get(key))) for key in INFO_FIELDS)
    info['Runtimes'] = dict((k, v) for k, v in info['Runtimes'].items() if k != 'nvidia' and not k.startswith(BUILTIN))
    info['Labels'] = sorted(info['Labels'] or [])  # a set: after a reload dockerd 20.10 lists them in any order
    parsed = copy.deepcopy(parsed)
    parsed.get('runtimes', {}).pop('nvidia', None)
    if not parsed.get('runtimes'):
        parsed.pop('runtimes', None)
    if default:
        info.pop('DefaultRuntime')
        parsed.pop('default-runtime', None)
    return {'/info': info, 'file': parsed}


def docker_case(label, name, newline, default, tool, ctk_path, work):
    user = with_newline(open(os.path.join(INPUTS, name), encoding='utf-8').read(), newline)
    base = tempfile.mkdtemp(prefix='gfctk-', dir='/tmp')
    lab = LabDockerd(base)
    write(lab.config, user)
    row = dict(engine='dockerd', input=label, file=name, newline=newline, default=default, tool=tool)
    try:
        lab.start()
        image = import_busybox(lab, os.path.join(work, 'busybox.tar'))
        container = lab.docker('run', '-d', '--runtime', 'runc', '--network', 'none', '--stop-timeout', '1', image,
                               'sh', '-c', "trap 'exit 0' TERM; while :; do sleep 1; done")
        before = docker_settings(lab.api.info(), json.loads(user), default)
        pid = lab.pid()
        listing = set(os.listdir(base))
        if tool == 'ours':
            service = DockerService(lab)
            result = dapply.converge(dapply.Request(path=lab.config, timeout=45, default_runtime=default or None),
                                     service, lab.api, poll=0.1)
            row['applied'] = '%s (%d reload, %d restart)' % (result['action'], service.reloads, service.restarts)
        else:
            rc, out = ctk(lab, ctk_path, ['runtime', 'configure', '--runtime=docker', '--config', lab.config]
                          + (['--set-as-default'] if default else []))
            row['ctk_rc'], row['asks'] = rc, ctk_asks(out)
            if row['asks']:
                lab.restart()
            row['applied'] = 'restart, as its output asks' if row['asks'] else 'nothing asked (rc %d)' % rc
        after = read(lab.config)
        row['new_files'] = new_files(base, listing | {'data', 'exec', 'docker.pid', 'docker.sock'})
        row['up'] = lab.pid() is not None and lab.answers()
        row['same_pid'] = lab.pid() == pid
        row['kept'] = lines_kept(user, after)
        row['endings'] = endings(after)
        row['after_text'] = after.decode('utf-8', 'replace')
        row['container'] = docker_running(lab, container)
        if row['up']:
            info = lab.api.info()
            row['runtimes'] = sorted(k for k in info['Runtimes'] if not k.startswith(BUILTIN))
            row['builtin_listed'] = any(k.startswith(BUILTIN) for k in info['Runtimes'])
            row['default_after'] = info['DefaultRuntime']
            row['entry'] = info['Runtimes'].get('nvidia')
            row['settings_same'] = differences(docker_settings(info, json.loads(after), default), before)
        parsed = json.loads(after)
        row['file_entry'] = parsed.get('runtimes', {}).get('nvidia')
        row['top_keys_sorted'] = list(parsed) == sorted(parsed)
        row['unicode_escapes'] = (user.count(b'\\u'), after.count(b'\\u'))
        # A second run.
        inode, mtime = os.stat(lab.config).st_ino, os.stat(lab.config).st_mtime_ns
        if tool == 'ours':
            service = DockerService(lab)
            again = dapply.converge(dapply.Request(path=lab.config, timeout=45, default_runtime=default or None),
                                    service, lab.api, poll=0.1)
            row['rerun'] = '%s; %s' % (again['action'], rewrite(lab.config, after, inode, mtime))
            # Removal: state=absent (default_runtime=False when this run set it).
            pid = lab.pid()
            service = DockerService(lab)
            gone = dapply.converge(dapply.Request(path=lab.config, timeout=45, state='absent',
                                                  default_runtime=False if default else None),
                                   service, lab.api, poll=0.1)
            info = lab.api.info()
            row['removal'] = ('state=absent: %s; file %s; nvidia %s; container %s'
                              % (gone['action'], same_file(read(lab.config), user),
                                 'still loaded' if 'nvidia' in info['Runtimes'] else 'gone from /info',
                                 'running' if docker_running(lab, container) else 'stopped'))
        else:
            rc, out = ctk(lab, ctk_path, ['runtime', 'configure', '--runtime=docker', '--config', lab.config]
                          + (['--set-as-default'] if default else []))
            row['rerun'] = '%s; asks for a restart again: %s' % (rewrite(lab.config, after, inode, mtime),
                                                                 yes(ctk_asks(out)))
    finally:
        lab.cleanup()
    return row


# ---- containerd -----------------------------------------------------------------------------------------------------
def compose_toml(user_text, base, newline):
    """The file the engine reads: the user's text, the lab's root/state after ``version``, its [grpc] at the end."""
    top, grpc = settings(base).split('\n\n', 1)
    lines = user_text.split('\n')
    at = next(i for i, line in enumerate(lines) if line.startswith('version')) + 1
    text = '\n'.join(lines[:at] + [top] + lines[at:]).rstrip('\n') + '\n\n' + grpc
    return text.replace('\n', newline).encode('utf-8')


def effective(dump, default):
    """The dump without the nvidia runtime and the imports list (default_runtime_name too when nvidia is made it)."""
    values = copy.deepcopy(dump)
    values.pop('imports', None)
    cd.get(values, RUNTIMES).pop('nvidia', None)
    if default:
        cd.get(values, CRI_CONTAINERD).pop('default_runtime_name', None)
    return values


def task_line(lab, name='keeper'):
    rc, out, err = lab.run([CTR, '--address', lab.socket, 'tasks', 'ls'])
    found = [line.split() for line in out.splitlines() if line.startswith(name)]
    return found[0] if found else None


def in_namespace(lab, path):
    """``(bytes or None)`` of a file as the namespace sees it (the drop-in under its private /etc/containerd)."""
    rc, out, err = lab.run(['cat', path])
    return out.encode('utf-8') if rc == 0 else None


def cri_settings_repeated(row):
    """``(repeated, total)``: the input's ``key = value`` lines inside CRI tables that the drop-in has too."""
    inside, total, repeated = False, 0, 0
    drop_in = set(line.strip() for line in row['drop_in_text'].splitlines())
    for line in open(os.path.join(INPUTS, row['file']), encoding='utf-8').read().splitlines():
        setting = line.split('#', 1)[0].strip()
        if setting.startswith('['):
            inside = setting.startswith('[plugins."io.containerd.grpc.v1.cri"')
        elif inside and ' = ' in setting:
            total += 1
            repeated += setting in drop_in
    return repeated, total


def cri_error(log):
    """containerd's reason for not loading its CRI plugin at its last start, from its log."""
    last = log.rsplit('starting containerd', 1)[-1]
    found = re.search(r'failed to load plugin io\.containerd\.grpc\.v1\.cri" error="(.*?)"\s*$', last, re.M)
    return found.group(1).replace('\\"', '"') if found else None


def containerd_case(label, name, newline, default, tool, ctk_path, work):
    user = with_newline(open(os.path.join(INPUTS, name), encoding='utf-8').read(), newline)
    base = tempfile.mkdtemp(prefix='gfctk-', dir='/tmp')
    os.chmod(base, 0o755)
    user = user.replace(b'@BASE@', base.encode())
    lab = LabContainerd(base)
    composed = compose_toml(user.decode('utf-8').replace('\r\n', '\n'), base, newline)
    write(lab.config, composed)
    shutil.copy(os.path.join(INPUTS, IMPORTED), os.path.join(base, IMPORTED))
    row = dict(engine='containerd', input=label, file=name, newline=newline, default=default, tool=tool)
    try:
        lab.start()
        rootfs = make_busybox_rootfs(lab)
        lab.ctr('run', '-d', '--rootfs', rootfs, 'keeper', '/bin/sleep', '600')
        task = task_line(lab)
        before_dump = lab.dump()
        before = effective(before_dump, default)
        pid = lab.pid()
        listing = set(os.listdir(base))
        if tool == 'ours':
            service = ContainerdService(lab)
            result = capply.Converge(capply.Request(path=lab.config, default_runtime=default or None), service,
                                     facts.Tools(lab.run)).run(check_mode=False)
            row['applied'] = '%s (%d restart)' % (result['action'], service.restarts)
        else:
            rc, out = ctk(lab, ctk_path, ['runtime', 'configure', '--runtime=containerd', '--config', lab.config]
                          + (['--set-as-default'] if default else []))
            row['ctk_rc'], row['asks'] = rc, ctk_asks(out)
            drop_ins = re.findall(r'[\w/.-]+conf\.d/[\w.-]+\.toml', out)
            row['drop_in'] = drop_ins[-1] if drop_ins else None
            row['drop_in_text'] = (in_namespace(lab, row['drop_in']) or b'').decode('utf-8', 'replace') \
                if row['drop_in'] else ''
            if row['asks']:
                lab.restart()
            row['applied'] = 'restart, as its output asks' if row['asks'] else 'nothing asked (rc %d)' % rc
        after = read(lab.config)
        row['cri_error'] = cri_error(lab.log_tail(65536))
        row['new_files'] = new_files(base, listing)
        row['up'] = lab.pid() is not None and lab.answers()
        row['same_pid'] = lab.pid() == pid
        row['kept'] = lines_kept(user, after)
        row['endings'] = endings(after)
        row['after_text'] = after.decode('utf-8', 'replace')
        row['imports_added'] = sorted(set(cd.loads(after.decode('utf-8'), 'after').get('imports', []))
                                      - set(cd.loads(composed.decode('utf-8'), 'before').get('imports', [])))
        now = task_line(lab)
        row['container'] = bool(now and task and now[1] == task[1] and 'RUNNING' in now)
        dump = lab.dump()
        runtimes = cd.get(dump, RUNTIMES) or {}
        row['runtimes'] = sorted(runtimes)
        row['default_after'] = cd.get(dump, CRI_CONTAINERD + ('default_runtime_name',))
        nvidia = runtimes.get('nvidia')
        row['entry'] = dict(runtime_type=nvidia.get('runtime_type'), options=nvidia.get('options')) \
            if nvidia else None
        row['settings_same'] = differences(effective(dump, default), before)
        row['cri'] = (facts.Tools(lab.run).plugins(lab.socket) or {}).get('cri')
        # A second run.
        inode, mtime = os.stat(lab.config).st_ino, os.stat(lab.config).st_mtime_ns
        if tool == 'ours':
            again = capply.Converge(capply.Request(path=lab.config, default_runtime=default or None),
                                    ContainerdService(lab), facts.Tools(lab.run)).run(check_mode=False)
            row['rerun'] = '%s; %s' % (again['action'], rewrite(lab.config, after, inode, mtime))
            gone = capply.Converge(capply.Request(path=lab.config, state='absent',
                                                  default_runtime=False if default else None),
                                   ContainerdService(lab), facts.Tools(lab.run)).run(check_mode=False)
            dump = lab.dump()
            now = task_line(lab)
            row['removal'] = ('state=absent: %s; file %s; effective config %s; container %s'
                              % (gone['action'], same_file(read(lab.config), composed),
                                 'as before' if effective(dump, False) == effective(before_dump, False)
                                 and 'nvidia' not in cd.get(dump, RUNTIMES) else 'not as before',
                                 'running' if now and now[1] == task[1] and 'RUNNING' in now else 'not running'))
        else:
            drop_in = in_namespace(lab, row['drop_in']) if row['drop_in'] else None
            rc, out = ctk(lab, ctk_path, ['runtime', 'configure', '--runtime=containerd', '--config', lab.config]
                          + (['--set-as-default'] if default else []))
            row['rerun'] = 'main %s; drop-in %s; asks for a restart again: %s' % (
                rewrite(lab.config, after, inode, mtime),
                'same bytes' if row['drop_in'] and in_namespace(lab, row['drop_in']) == drop_in else 'changed',
                yes(ctk_asks(out)))
            # No removal command: what a user can do by hand is delete the drop-in and restart.
            if row['drop_in']:
                lab.run(['rm', '-f', row['drop_in']])
                lab.restart()
                dump = lab.dump()
                row['by_hand'] = ('drop-in deleted, restart: main file %s; effective config %s'
                                  % (same_file(read(lab.config), composed),
                                     'as before' if effective(dump, False) == effective(before_dump, False)
                                     and 'nvidia' not in cd.get(dump, RUNTIMES) else 'not as before'))
    finally:
        lab.cleanup()
    return row


# ---- report -----------------------------------------------------------------------------------------------------
def yes(value):
    return 'yes' if value else 'no'


def entry_text(row):
    if not row.get('up'):
        return '(engine down)'
    entry = row.get('entry')
    if entry is None:
        return '(none)'
    return '`%s`' % json.dumps(entry, sort_keys=True).replace('|', '\\|')


def settings_cell(row):
    if 'settings_same' not in row:
        return '(engine down)'
    return 'yes' if not row['settings_same'] else 'no: %s differ' % ', '.join('`%s`' % p for p in row['settings_same'])


def cri_cell(row):
    if row['engine'] != 'containerd':
        return ''
    if row.get('cri') == 'ok':
        return '; CRI plugin ok'
    return '; **CRI plugin %s**%s' % (row.get('cri'), ': %s' % row['cri_error'].replace('|', '\\|')
                                      if row.get('cri_error') else '')


def table(rows, removal_offered):
    head = ('| input | tool | user lines kept | comment lines | line endings | runtimes after (default) | nvidia as '
            'the engine reports it | other settings unchanged | applied by | engine PID same | container kept | '
            'second run | removal |')
    lines = [head, '|' + '---|' * 13]
    for row in rows:
        if 'error' in row:
            lines.append('| %s | %s | could not measure: %s |%s' % (row['input'], row['tool'], row['error'],
                                                                    ' |' * 10))
            continue
        kept, total, comments_kept, comments = row['kept']
        if row['tool'] == 'ours':
            removal = row['removal']
        else:
            removal = 'no command (`nvidia-ctk runtime` offers: %s)' % ', '.join('`%s`' % c for c in removal_offered)
            if row.get('by_hand'):
                removal += '; by hand: %s' % row['by_hand']
        lines.append('| %s | %s | %d/%d | %s | %s | %s (%s) | %s | %s | %s | %s | %s | %s | %s |' % (
            row['input'], 'gpufleet' if row['tool'] == 'ours' else 'nvidia-ctk', kept, total,
            '%d/%d' % (comments_kept, comments) if comments else '-', row['endings'],
            ', '.join(row.get('runtimes', [])), row.get('default_after'), entry_text(row) + cri_cell(row),
            settings_cell(row), row['applied'], yes(row['same_pid']), yes(row['container']),
            row['rerun'], removal))
    return '\n'.join(lines)


def findings(rows, removal_offered):
    """What nvidia-ctk did differently, each sentence from the rows (nothing here is written from memory)."""
    out = []
    theirs = [r for r in rows if r['tool'] == 'theirs' and 'error' not in r]
    ours = [r for r in rows if r['tool'] == 'ours' and 'error' not in r]
    docker = [r for r in theirs if r['engine'] == 'dockerd']
    containerd = [r for r in theirs if r['engine'] == 'containerd']
    if docker:
        entries = sorted(set(json.dumps(r['file_entry'], sort_keys=True) for r in docker))
        ours_entries = sorted(set(json.dumps(r['file_entry'], sort_keys=True) for r in ours
                                  if r['engine'] == 'dockerd'))
        out.append('daemon.json: nvidia-ctk writes the runtime as %s; dockerd reads `runtimeArgs`, not `args`, and '
                   '/info shows %s. Ours writes %s.' % (', '.join('`%s`' % e for e in entries),
                                                        ', '.join(sorted(set(entry_text(r) for r in docker))),
                                                        ', '.join('`%s`' % e for e in ours_entries)))
        kept = sum(r['kept'][0] for r in docker), sum(r['kept'][1] for r in docker)
        out.append('daemon.json: nvidia-ctk rewrites the whole file: top-level keys sorted in %d of %d files, '
                   'line endings after %s, %d of %d input lines kept byte for byte; `\\u` escapes in the '
                   'input %d, after %d.' % (
                       sum(r['top_keys_sorted'] for r in docker), len(docker),
                       ', '.join(sorted(set(r['endings'] for r in docker))), kept[0], kept[1],
                       sum(r['unicode_escapes'][0] for r in docker), sum(r['unicode_escapes'][1] for r in docker)))
        down = [r['input'] for r in docker if not r['container']]
        out.append('dockerd: nvidia-ctk asks for a restart (%s) on every run, also when run again on its own output '
                   '(then: %s); the running container was stopped by that restart in %d of %d cases (%s).' % (
                       '; '.join(sorted(set('"%s"' % r['asks'] for r in docker if r.get('asks')))),
                       ', '.join(sorted(set(r['rerun'] for r in docker))), len(down), len(docker),
                       ', '.join(down) or 'none'))
    if containerd:
        out.append('config.toml: nvidia-ctk adds %s to the main file and writes a drop-in (%s).' % (
            ', '.join(sorted(set('`imports = %s`' % json.dumps(r['imports_added']) for r in containerd))),
            ', '.join(sorted(set('`%s`' % r['drop_in'] for r in containerd if r['drop_in'])))))
        repeated = [cri_settings_repeated(r) for r in containerd]
        shown = ([r for r in containerd if r['file'] == 'runc-options.toml'] or containerd)[0]
        out.append('config.toml: its drop-in repeats the settings of the main file\'s CRI tables (%d of %d '
                   '`key = value` lines, all cases together), so the CRI plugin\'s settings then live in two files; '
                   'the drop-in for "%s":\n\n```toml\n%s```' % (
                       sum(n for n, _ in repeated), sum(total for _, total in repeated), shown['input'],
                       shown['drop_in_text']))
        kept = sum(r['kept'][0] for r in containerd), sum(r['kept'][1] for r in containerd)
        comments = sum(r['kept'][2] for r in containerd), sum(r['kept'][3] for r in containerd)
        out.append('config.toml: main file after nvidia-ctk: %d of %d input lines kept, comment lines %d of %d, '
                   'line endings %s.' % (kept + comments + (', '.join(sorted(set(r['endings']
                                                                                 for r in containerd))),)))
        differ = [r['input'] for r in containerd if r['settings_same']]
        out.append('containerd: effective configuration other than the nvidia runtime changed in %d of %d cases '
                   '(%s).' % (len(differ), len(containerd), ', '.join(differ) or 'none'))
        broken = [r for r in containerd if r.get('cri') != 'ok']
        if broken:
            out.append('containerd: after nvidia-ctk and the restart it asks for, the CRI plugin (what the kubelet '
                       'talks to) did not load in %d of %d cases (%s): containerd said "%s". In those cases the main '
                       'file names no runc table (runc is containerd\'s built-in default), nvidia-ctk\'s drop-in '
                       'has none either (%d of %d drop-ins name runc), and with the drop-in imported containerd '
                       'reports the runtimes %s.' % (
                           len(broken), len(containerd), ', '.join(r['input'] for r in broken),
                           '; '.join(sorted(set(r['cri_error'] or '?' for r in broken))),
                           sum('runtimes.runc]' in r['drop_in_text'] for r in broken), len(broken),
                           ', '.join(sorted(set(', '.join(r['runtimes']) for r in broken)))))
    builtin = [r for r in rows if r['engine'] == 'dockerd' and 'builtin_listed' in r]
    if builtin:
        restarted = [r['builtin_listed'] for r in builtin if not r['same_pid']]
        reloaded = [r['builtin_listed'] for r in builtin if r['same_pid']]
        out.append('dockerd 20.10 lists `io.containerd.runc.v2` and `io.containerd.runtime.v1.linux` among the '
                   'runtimes in /info after a start (%d of %d restarted cases) and not after a reload (%d of %d '
                   'reloaded cases); no daemon.json names them, so the tables leave them out.'
                   % (sum(restarted), len(restarted), sum(reloaded), len(reloaded)))
    out.append('Removal: `nvidia-ctk runtime` has the sub-commands %s and no option to remove a runtime; '
               'nvidia-ctk left no backup of the file it rewrote (new files beside it: %s).' % (
                   ', '.join('`%s`' % c for c in removal_offered),
                   ', '.join(sorted(set(f for r in theirs for f in r.get('new_files', [])))) or 'none'))
    return out


def shortfalls(rows):
    """Where ours did not do what it promises, from the rows."""
    out = []
    for row in rows:
        if row['tool'] != 'ours':
            continue
        if 'error' in row:
            out.append('%s, %s: could not be measured (%s).' % (row['engine'], row['input'], row['error']))
            continue
        if 'byte-identical' not in row['removal']:
            out.append('%s, %s: %s.' % (row['engine'], row['input'], row['removal']))
        if row.get('settings_same'):
            out.append('%s, %s: settings other than the runtime changed: %s.' % (
                row['engine'], row['input'], ', '.join(row['settings_same'])))
    return out or ['none measured']


def versions(ctk_path):
    def first_line(argv):
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
        except (OSError, IndexError):
            return '?'
    galaxy = open(os.path.join(REPO, 'galaxy.yml')).read()
    version = re.search(r'^version:\s*(\S+)', galaxy, re.M)
    return [('gpufleet.nvidia', version.group(1) if version else '?'),
            ('nvidia-ctk', first_line([ctk_path, '--version'])),
            ('dockerd', first_line([shutil.which('dockerd') or 'dockerd', '--version'])),
            ('containerd', first_line([shutil.which('containerd') or 'containerd', '--version']))]


def report(rows, removal_offered, ctk_path, seconds):
    now = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
    parts = [BEGIN, '', 'Measured %s in %.0f s. Regenerate (as root, from the repository root, after '
             '`tests/toolkit/build`): `%s`.' % (now, seconds, COMMAND), '']
    parts += ['| program | version |', '|---|---|'] + ['| %s | %s |' % v for v in versions(ctk_path)] + ['']
    for engine, title in (('dockerd', '### dockerd (`daemon.json`)'), ('containerd', '### containerd (`config.toml`)')):
        chosen = [r for r in rows if r['engine'] == engine]
        if chosen:
            parts += [title, '', table(chosen, removal_offered), '']
    parts += ['### What nvidia-ctk does differently (from the rows above)', '']
    parts += ['- ' + line for line in findings(rows, removal_offered)] + ['']
    parts += ['### Where ours fell short (from the rows above)', '']
    parts += ['- ' + line for line in shortfalls(rows)] + ['', END]
    return '\n'.join(parts) + '\n'


def write_doc(path, generated):
    text = open(path, encoding='utf-8').read() if os.path.exists(path) else '%s\n%s\n' % (BEGIN, END)
    if BEGIN not in text or END not in text:
        raise CouldNotRun('%s lacks the markers %s ... %s' % (path, BEGIN, END))
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    with open(path, 'w', encoding='utf-8') as handle:
        handle.write(head + generated.rstrip('\n') + tail)


def prerequisites(ctk_path):
    if os.geteuid() != 0:
        return 'needs root'
    if not os.access(ctk_path, os.X_OK):
        return '%s missing: run tests/toolkit/build' % ctk_path
    for tool in ('dockerd', 'docker', 'containerd', 'ctr', 'unshare', 'nsenter'):
        if not shutil.which(tool):
            return '%s not installed (scripts/bootstrap)' % tool
    if not os.path.exists('/bin/busybox'):
        return 'busybox-static not installed (scripts/bootstrap)'
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--only', choices=('docker', 'containerd'))
    parser.add_argument('--no-write', action='store_true', help='print only; leave the docs as they are')
    parser.add_argument('--ctk', default=CTK, help='nvidia-ctk to compare with (default: %(default)s)')
    parser.add_argument('--out', default=DOC)
    args = parser.parse_args()
    reason = prerequisites(args.ctk)
    if reason:
        print('ctk_compare cannot run: %s' % reason, file=sys.stderr)
        return 2
    removal_offered = ctk_removal(args.ctk)
    work = tempfile.mkdtemp(prefix='gfctk-work-')  # 0700: the modules' lock directory may live in it
    os.environ['GPUFLEET_LOCK_DIR'] = os.path.join(work, 'locks')
    os.environ['GPUFLEET_MEMO_DIR'] = os.path.join(work, 'memo')
    rows, failed = [], 0
    started = time.time()
    plan = []
    if args.only != 'containerd':
        plan += [(docker_case, case) for case in DOCKER_CASES]
    if args.only != 'docker':
        plan += [(containerd_case, case) for case in CONTAINERD_CASES]
    try:
        for function, case in plan:
            for tool in ('ours', 'theirs'):
                case_started = time.time()
                try:
                    rows.append(function(*case, tool=tool, ctk_path=args.ctk, work=work))
                except Exception as exc:  # a case that could not be measured: reported, and the exit status says so
                    failed += 1
                    rows.append(dict(engine='dockerd' if function is docker_case else 'containerd', input=case[0],
                                     tool=tool, error=('%s: %s' % (type(exc).__name__, exc)).replace('|', '/')[:300]))
                print('%-11s %-52s %-6s %5.1f s' % (rows[-1]['engine'], case[0], tool, time.time() - case_started),
                      file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    generated = report(rows, removal_offered, args.ctk, time.time() - started)
    print(generated)
    if not args.no_write:
        write_doc(args.out, generated)
        print('written: %s' % os.path.relpath(args.out, REPO), file=sys.stderr)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
