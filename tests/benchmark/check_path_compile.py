#!/usr/bin/env python3
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What node_state's check path compiles on a host: the modules it imports, their source, and the CPU to compile it.

    .venv/bin/python tests/benchmark/check_path_compile.py                    # this tree
    .venv/bin/python tests/benchmark/check_path_compile.py --ref HEAD~1       # this tree against another commit's
    .venv/bin/python tests/benchmark/check_path_compile.py --ref HEAD --list  # ... and every module, both sides

On the host, Ansible's module zip is imported with zipimport, which keeps no bytecode: every module a run imports
from the zip (the collection's module_utils, node_state itself, Ansible's module_utils) is compiled from source on
every run. This runs node_state's evaluation, as a converged host's run does, in a fresh interpreter (no host is
touched: a stand-in AnsibleModule answers every command "not found" and runs in check mode, so no memo is written),
lists the ``ansible_collections.gpufleet`` and ``ansible.module_utils`` modules it imported, and times ``compile()``
of each one's source, all of them ``--repeat`` times (the median of the totals, CPU time of this process; with
``--ref`` the two trees in turn, round after round).

The tree measured is importable without installing it: this checkout (or, with ``--ref``, a ``git worktree`` of that
commit in a temporary directory, removed afterwards) linked or placed at ``ansible_collections/gpufleet/nvidia``
under a temporary directory put first on the probe's ``sys.path``. Both trees are compiled by this same interpreter.
``--concerns`` names the concerns evaluated (default: what the gpu_node role evaluates on a converged lab host:
every concern on by default, and the engines the lab's hosts have, containerd and docker).
"""

from __future__ import print_function

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_CONCERNS = 'device_links,persistenced,gpu_persistence,containerd,docker,gpu_health,slurm_node'
ENGINES = ('containerd', 'crio', 'docker')

PROBE = r'''
import json, sys
concerns = sys.argv[1].split(',') if sys.argv[1] else []
before = set(sys.modules)
from ansible_collections.gpufleet.nvidia.plugins.modules import node_state as module_file
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import node_state


class Host(object):
    """node_state's AnsibleModule on a host that answers nothing: every command fails, no tool is found."""
    check_mode = True  # the play's check mode: node_state keeps no memo
    _diff = False

    def run_command(self, args, **kwargs):
        return 127, '', 'not found'

    def get_bin_path(self, arg, required=False, opt_dirs=None):
        return None

    def selinux_enabled(self):
        return False

    def warn(self, warning):
        pass


engines = [name for name in concerns if name in %(engines)r]
options = dict((name, {}) for name in concerns)
options['engines'] = engines
result, warnings, diffs = node_state.evaluate(Host(), options)
assert sorted(result['evaluated']) == sorted(concerns), result
mods = {}
for name, mod in sorted(sys.modules.items()):
    if name in before or not name.startswith(('ansible_collections.gpufleet.', 'ansible.module_utils.')):
        continue
    path = getattr(mod, '__file__', None)
    if path and path.endswith('.py'):
        mods[name] = path
print(json.dumps({'modules': mods, 'verdicts': dict((k, v['converged']) for k, v in result['concerns'].items())}))
''' % {'engines': ENGINES}


def collection_path(tree, workdir):
    """A directory to put on sys.path under which ``ansible_collections.gpufleet.nvidia`` is ``tree``."""
    base = os.path.join(workdir, 'path')
    os.makedirs(os.path.join(base, 'ansible_collections', 'gpufleet'))
    os.symlink(tree, os.path.join(base, 'ansible_collections', 'gpufleet', 'nvidia'))
    return base


def probe(tree, concerns, workdir):
    """``{module name: source file}`` of what node_state's evaluation imported from ``tree``."""
    path = collection_path(tree, workdir)
    env = dict(os.environ, PYTHONPATH=path, PYTHONDONTWRITEBYTECODE='1')
    env.pop('ANSIBLE_COLLECTIONS_PATH', None)
    proc = subprocess.run([sys.executable, '-B', '-c', PROBE, concerns], cwd=workdir, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if proc.returncode:
        sys.exit('the probe failed on %s:\n%s%s' % (tree, proc.stdout[-3000:], proc.stderr[-3000:]))
    return json.loads(proc.stdout.strip().splitlines()[-1])['modules']


PARTS = (('collection', 'ansible_collections.gpufleet.'), ('ansible', 'ansible.module_utils.'), ('total', ''))


def sources_of(tree, concerns, workdir):
    """``{module name: (source file, source bytes)}`` of what node_state's check path imports from ``tree``."""
    found = {}
    for name, path in probe(tree, concerns, workdir).items():
        with open(path, 'rb') as handle:
            found[name] = (path, handle.read())
    return found


def compile_once(sources):
    """The CPU time (seconds) to compile every one of ``sources`` once, as zipimport does (``compile``, exec)."""
    started = time.process_time()
    for path, text in sources:
        compile(text, path, 'exec', dont_inherit=True)
    return time.process_time() - started


def summaries(trees, repeat):
    """Per tree (``[{module: (path, source)}]``), per part: modules, bytes, and the median compile time. The trees
    are compiled in turn, round after round, so that a change of this machine's speed falls on all of them."""
    chosen = [dict((part, [found[name] for name in sorted(found) if name.startswith(prefix)])
                   for part, prefix in PARTS) for found in trees]
    times = [dict((part, []) for part, unused in PARTS) for unused in trees]
    for unused in range(repeat):
        for index, parts in enumerate(chosen):
            for part, unused_prefix in PARTS:
                times[index][part].append(compile_once(parts[part]))
    out = []
    for index, parts in enumerate(chosen):
        summary = dict((part, {'modules': len(parts[part]), 'bytes': sum(len(text) for unused, text in parts[part]),
                               'compile_ms': 1000 * statistics.median(times[index][part]),
                               'compile_min_ms': 1000 * min(times[index][part])})
                       for part, unused in PARTS)
        summary['sizes'] = dict((name, len(text)) for name, (unused, text) in trees[index].items())
        out.append(summary)
    return out


def worktree(ref, workdir):
    """A checkout of ``ref`` (``git worktree add --detach``) under ``workdir``; its path."""
    commit = subprocess.check_output(['git', 'rev-parse', '--verify', ref + '^{commit}'], cwd=ROOT,
                                     universal_newlines=True).strip()
    path = os.path.join(workdir, 'tree')
    subprocess.check_call(['git', 'worktree', 'add', '--quiet', '--detach', path, commit], cwd=ROOT)
    return path, commit


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--ref', help='also measure this commit\'s tree (a git worktree in a temporary directory)')
    parser.add_argument('--concerns', default=DEFAULT_CONCERNS,
                        help='the concerns node_state evaluates, comma-separated (default: %(default)s)')
    parser.add_argument('--repeat', type=int, default=21, help='compile rounds, the median is printed (default 21)')
    parser.add_argument('--list', action='store_true', help='print every module imported, with its size')
    parser.add_argument('--json', action='store_true', help='print the numbers as JSON')
    args = parser.parse_args()

    labels, trees = [], []
    workdir = tempfile.mkdtemp(prefix='check-path-compile.')
    tree = None
    try:
        if args.ref:
            tree, commit = worktree(args.ref, workdir)
            os.mkdir(os.path.join(workdir, 'ref'))
            labels.append('%s (%s)' % (args.ref, commit[:7]))
            trees.append(sources_of(tree, args.concerns, os.path.join(workdir, 'ref')))
        os.mkdir(os.path.join(workdir, 'here'))
        labels.append('this tree')
        trees.append(sources_of(ROOT, args.concerns, os.path.join(workdir, 'here')))
    finally:
        if tree:
            subprocess.call(['git', 'worktree', 'remove', '--force', tree], cwd=ROOT)
        shutil.rmtree(workdir, ignore_errors=True)
        if tree:
            subprocess.call(['git', 'worktree', 'prune'], cwd=ROOT)
    measured = list(zip(labels, summaries(trees, args.repeat)))

    if args.json:
        print(json.dumps(dict(measured), indent=1, sort_keys=True))
        return
    print('node_state check path, concerns: %s; Python %s; compile CPU: median (and least) of %d rounds'
          % (args.concerns, sys.version.split()[0], args.repeat))
    labels = [label for label, unused in measured]
    width = max(len(label) for label in labels)
    width = max(width, 38)
    print('%-12s %s' % ('', '  '.join('%*s' % (width, label) for label in labels)))
    for part in ('collection', 'ansible', 'total'):
        cells = ['%*s' % (width, '%d mod, %7d B, %6.1f ms (min %.1f)' % (
            s[part]['modules'], s[part]['bytes'], s[part]['compile_ms'], s[part]['compile_min_ms']))
            for unused, s in measured]
        print('%-12s %s' % (part, '  '.join(cells)))
    if len(measured) == 2:
        (unused, before), (unused, after) = measured
        print('change: %+d modules, %+d bytes (%+.0f %%), %+.1f ms compile (%+.0f %%)' % (
            after['total']['modules'] - before['total']['modules'], after['total']['bytes'] - before['total']['bytes'],
            100.0 * (after['total']['bytes'] - before['total']['bytes']) / before['total']['bytes'],
            after['total']['compile_ms'] - before['total']['compile_ms'],
            100.0 * (after['total']['compile_ms'] - before['total']['compile_ms']) / before['total']['compile_ms']))
    if args.list:
        names = sorted(set().union(*(s['sizes'] for unused, s in measured)))
        for name in names:
            print('  %s  %s' % ('  '.join('%8s' % s['sizes'].get(name, '-') for unused, s in measured), name))


if __name__ == '__main__':
    main()
