#!/usr/bin/env python3
"""The controller's CPU for one host's node_state task in a forked worker, against ansible.builtin.ping's.

Not a test, not part of the collection, no lab and no root needed: every "host" is a fake one whose connection
(``worker_plugins/connection/bench_canned.py``) never leaves the controller and runs nothing. Each module Ansible
builds and pipes to it gets a canned reply: node_state a converged host's result (every concern a converged lab
host evaluates, each concern's result shaped after its module's RETURN samples, the options echoed back as a module
does), ping its pong. What is measured is the worker's own work: the task's templating and its variables, the
action plugin (the role's argument check, the options built from the roles' variables), the module payload (from
Ansible's module cache), the result's processing and its trip back to the main process.

Two playbooks, with the lab's inventory variables (``tests/lab/lab``'s, the toolkit's repository and key lookup
included) on N fake hosts, forks N, pipelining on:

- ``site``: the real ``playbooks/site.yml``: gpu_node's node_state task, then (the canned result converged) the
  role ends on the controller, and the fleet summary;
- ``floor``: ``tests/benchmark/floor.yml``, one ``ansible.builtin.ping`` per host (the lab benchmarks' floor).

The callback ``worker_plugins/callback/bench_worker_cpu.py`` records every forked worker's CPU (user + system, from
its fork to its exit, ``os.wait4`` where the main process reaps it) with its task and host. Per run: the node_state
task's and the ping task's worker CPU per host (mean over the hosts), and, as a cross-check, every worker's CPU
(ansible-playbook's RUSAGE_CHILDREN less its main process's own) per host. The variants run in turn, ``--runs``
times; medians are printed, and the ratio node_state / ping.

    .venv/bin/python tests/benchmark/worker_cpu.py                    # 32 hosts, 7 runs of each
    .venv/bin/python tests/benchmark/worker_cpu.py --hosts 8 --runs 3
    .venv/bin/python tests/benchmark/worker_cpu.py --profile 20       # cProfile of node_state's workers (top 20)
    .venv/bin/python tests/benchmark/worker_cpu.py --timers           # CPU of each step of node_state's workers
    .venv/bin/python tests/benchmark/worker_cpu.py --ref /tmp/before  # and another tree's site.yml, in turn
                                     # (/tmp/before/ansible_collections/gpufleet/nvidia: e.g. git worktree add)

Run it from the repository root with the environment scripts/test sets (PYTHONPATH and ANSIBLE_COLLECTIONS_PATH
on .build/collections).
"""

from __future__ import print_function

import argparse
import ast
import glob
import json
import os
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PLUGINS = os.path.join(HERE, 'worker_plugins')
VENV_BIN = os.path.join(ROOT, '.venv', 'bin')
PLAYBOOKS = {'site': os.path.join(ROOT, 'playbooks', 'site.yml'), 'floor': os.path.join(HERE, 'floor.yml')}
TASK_ACTION = {'site': 'gpufleet.nvidia.node_state', 'ref': 'gpufleet.nvidia.node_state',
               'floor': 'ansible.builtin.ping'}

# What a converged lab host evaluates (gpu_node's defaults, the lab's toolkit on, engines auto: containerd and docker)
EVALUATED = ('device_links', 'persistenced', 'gpu_persistence', 'container_toolkit', 'containerd', 'docker',
             'gpu_health', 'slurm_node')
# Where a RETURN sample would not read as converged and healthy
CONVERGED_VALUES = {
    'device_links': {'actions': [], 'created': [], 'removed': [], 'conflicts': []},
    'persistenced': {'actions': [], 'deferred': None},
    'gpu_persistence': {'state_changed': False, 'missing_library': False,
                        'gpus': [{'index': gpu, 'uuid': 'GPU-0000000%d-0000-0000-0000-000000000000' % gpu,
                                  'before': 'enabled', 'after': 'enabled', 'changed': False} for gpu in range(4)]},
    'container_toolkit': {'converged': True, 'drift': [], 'actions': []},
    'containerd': {'action': 'none', 'file_changed': False, 'deferred': None, 'changes': []},
    'docker': {'action': 'none', 'file_changed': False, 'deferred': None},
    'gpu_health': {'verdict': 'PASS', 'action': 'none', 'reasons': []},
    'slurm_node': {'slurm': False, 'node': None, 'state': None, 'jobs': [], 'actions': [], 'changes': [],
                   'verdict': None, 'health_check': None, 'msg': 'not a Slurm node'},
}


def module_samples(module):
    """``{key: sample}`` of a module's RETURN documentation (read, not imported)."""
    with open(os.path.join(ROOT, 'plugins', 'modules', module + '.py')) as handle:
        tree = ast.parse(handle.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], 'id', None) == 'RETURN':
            return dict((key, (spec or {}).get('sample')) for key, spec in yaml.safe_load(node.value.value).items())
    return {}


def converged_result():
    """node_state's reply on a converged host (its RETURN's shape), every concern of ``EVALUATED`` converged."""
    sys.path.insert(0, os.path.join(ROOT, '.build', 'collections'))
    from ansible_collections.gpufleet.nvidia.plugins.plugin_utils._role_table import DECLARED
    modules = dict((concern['name'], concern['module']) for concern in DECLARED)
    concerns = {}
    for name in EVALUATED:
        result = module_samples(modules[name])
        result.update(CONVERGED_VALUES.get(name, {}), changed=False)
        result.pop('diff', None)
        concerns[name] = {'converged': True, 'failed': False, 'changes': '', 'seconds': 0.021, 'result': result}
    return {'changed': False, 'converged': True, 'drifted': [], 'run': [], 'evaluated': list(EVALUATED),
            'concerns': concerns, 'engine_list': ['containerd', 'docker'], 'engines_seconds': 0.012,
            'engines_found': {'containerd': {'installed': True, 'binary': '/usr/bin/containerd', 'auto': True,
                                             'reason': 'installed'},
                              'crio': {'installed': False, 'binary': None, 'auto': False, 'reason': 'not installed'},
                              'docker': {'installed': True, 'binary': '/usr/sbin/dockerd', 'auto': True,
                                         'reason': 'installed'}},
            'msg': 'converged'}


def write_inventory(path, hosts, key_file):
    """The lab's inventory (tests/lab/lab's inventory_data), each host's connection the canned one."""
    common = {
        'ansible_connection': 'bench_canned',
        'ansible_python_interpreter': '/usr/bin/python3',
        'lab_toolkit_repo_url': 'http://10.99.0.1:8765/stable/deb/$(ARCH)',
        'lab_toolkit_repo_key_file': key_file,
        'lab_toolkit_version': '1.17.8-1',
        'gpu_node_container_toolkit': True,
        'container_toolkit_repo_url': '{{ lab_toolkit_repo_url }}',
        'container_toolkit_repo_key': '{{ lookup("file", lab_toolkit_repo_key_file) }}',
        'container_toolkit_version': '{{ lab_toolkit_version }}',
    }
    kinds = ('systemd', 'sysvinit', 'upstart')
    nodes = {}
    for index in range(hosts):
        kind = kinds[index % len(kinds)]
        nodes['h%02d' % (index + 1)] = {
            'ansible_host': '10.99.0.%d' % (index + 10), 'lab_kind': kind, 'lab_cgroup': 'v2',
            'lab_init_system': kind, 'lab_suite': 'bookworm', 'lab_gpu_tree': '/srv/lab/h%02d/gpu' % (index + 1),
            'lab_gpus': [{'index': gpu, 'uuid': 'GPU-%08d-0000-0000-0000-%012d' % (index, gpu),
                          'name': 'NVIDIA A100-SXM4-80GB', 'pci_bus_id': '00000000:%02X:00.0' % (gpu + 7)}
                         for gpu in range(4)]}
    with open(path, 'w') as handle:
        json.dump({'all': {'children': {'gpu_nodes': {'hosts': nodes, 'vars': common}}}}, handle, indent=1)


def setup(workdir, hosts, forks):
    key_file = os.path.join(workdir, 'repo.key')
    with open(key_file, 'w') as handle:
        handle.write('-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n' + ('mQINBGVwQ2sBEADhTn' * 40 + '\n') * 20
                     + '-----END PGP PUBLIC KEY BLOCK-----\n')
    write_inventory(os.path.join(workdir, 'inventory.json'), hosts, key_file)
    with open(os.path.join(workdir, 'node_state.json'), 'w') as handle:
        json.dump(converged_result(), handle)
    with open(os.path.join(workdir, 'ansible.cfg'), 'w') as handle:
        handle.write('\n'.join([
            '[defaults]', 'inventory = inventory.json', 'forks = %d' % forks, 'host_key_checking = False',
            'retry_files_enabled = False', 'callbacks_enabled = bench_worker_cpu',
            'callback_plugins = %s' % os.path.join(PLUGINS, 'callback'),
            'connection_plugins = %s' % os.path.join(PLUGINS, 'connection'),
            'local_tmp = %s' % os.path.join(workdir, 'tmp'), 'interpreter_python = /usr/bin/python3',
            '[connection]', 'pipelining = True', '']))


def run(workdir, variant, hosts, profile_dir=None, collections=None):
    """One ansible-playbook run of ``variant``: per-host worker CPU of its task, and of every worker."""
    out = os.path.join(workdir, 'workers.json')
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(workdir, 'ansible.cfg'), BENCH_WORKER_CPU_OUT=out,
               BENCH_CANNED_NODE_STATE=os.path.join(workdir, 'node_state.json'), ANSIBLE_NOCOLOR='1',
               PYTHONPATH=collections, ANSIBLE_COLLECTIONS_PATH=collections, PYTHONDONTWRITEBYTECODE='1')
    env.pop('BENCH_PROFILE_DIR', None)
    if profile_dir:
        env.update(BENCH_PROFILE_DIR=profile_dir, BENCH_PROFILE_ACTION=TASK_ACTION[variant])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    playbook = PLAYBOOKS.get(variant)
    if variant in ('site', 'ref'):  # that tree's
        playbook = os.path.join(collections, 'ansible_collections', 'gpufleet', 'nvidia', 'playbooks', 'site.yml')
    proc = subprocess.run([os.path.join(VENV_BIN, 'ansible-playbook'), playbook], cwd=workdir, env=env,
                          capture_output=True, text=True)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        sys.exit('%s failed (%d):\n%s%s' % (variant, proc.returncode, proc.stdout[-4000:], proc.stderr[-2000:]))
    with open(out) as handle:
        data = json.load(handle)
    task = [w for w in data['workers'] if w['action'] == TASK_ACTION[variant]]
    per_host_tasks = [w for w in data['workers'] if w['task'] not in ('Summarise the fleet',)
                      and w['action'] != TASK_ACTION[variant] and not w['task'].startswith(('Leave the run',
                                                                                              'Fail the run'))]
    if len(task) != hosts or data['unreaped']:
        sys.exit('%s: %d workers of %s for %d hosts (%d unreaped)' % (variant, len(task), TASK_ACTION[variant], hosts,
                                                                      len(data['unreaped'])))
    if per_host_tasks:  # a converged host goes through node_state's task alone
        sys.exit('%s: hosts did not come back converged, other tasks ran: %s'
                 % (variant, sorted(set(w['task'] for w in per_host_tasks))))
    if variant != 'floor' and proc.stdout.count('converged') < hosts:
        sys.exit('site: the fleet summary does not show every host converged:\n' + proc.stdout[-3000:])
    total = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    main = data['main']['user'] + data['main']['system']
    return {'task': sum(w['user'] + w['system'] for w in task) / hosts,
            'task_median': statistics.median(w['user'] + w['system'] for w in task),
            'workers': (total - main) / hosts, 'main': main, 'wall': wall}


GPUFLEET = 'ansible_collections.gpufleet.nvidia.plugins.'
TIMERS = (
    'ansible.executor.task_executor:TaskExecutor._execute',
    'ansible.playbook.task:Task.post_validate',
    GPUFLEET + 'action.node_state:ActionModule.module_args',
    GPUFLEET + 'plugin_utils._role_options:role_arguments',
    GPUFLEET + 'plugin_utils._role_options:role_spec',
    GPUFLEET + 'plugin_utils._role_options:validate',
    GPUFLEET + 'plugin_utils._role_options:node_state_args',
    GPUFLEET + 'plugin_utils._bundled:bundled_source',
    'ansible.plugins.action:ActionBase._execute_module',
    'ansible.plugins.action:ActionBase._configure_module',
    'ansible.plugins.action:ActionBase._low_level_execute_command',
    'ansible.plugins.action:ActionBase._parse_returned_data',
    'ansible._internal._task:UnifiedTaskResult.finalize_registered_values',
    'ansible.executor.task_queue_manager:FinalQueue.send_task_result',
)


def timers(workdir, hosts, collections):
    """CPU of the main steps of node_state's workers, unprofiled (process_time around each), median host."""
    directory = os.path.join(workdir, 'timers')
    os.mkdir(directory)
    os.environ['BENCH_TIMERS'] = ','.join(TIMERS)
    try:
        run(workdir, 'site', hosts, profile_dir=directory, collections=collections)
    finally:
        del os.environ['BENCH_TIMERS']
    found = []
    for name in glob.glob(os.path.join(directory, '*.timers.json')):
        with open(name) as handle:
            found.append(json.load(handle))
    print('CPU of node_state\'s workers by step (process_time, nested steps inside their callers), '
          '%d hosts: median host (max) ms' % len(found))
    for spec in ('worker run',) + TIMERS:
        values = [one.get(spec, 0.0) * 1000 for one in found]
        print('  %-90s %6.1f (%.1f)' % (spec.replace(GPUFLEET, ''), statistics.median(values), max(values)))


def profile(workdir, hosts, top, collections):
    directory = os.path.join(workdir, 'profiles')
    os.mkdir(directory)
    run(workdir, 'site', hosts, profile_dir=directory, collections=collections)
    files = sorted(glob.glob(os.path.join(directory, '*.prof')))
    stats = pstats.Stats(files[0])
    for name in files[1:]:
        stats.add(name)
    stats.strip_dirs()
    print('\ncProfile of node_state\'s %d workers (WorkerProcess.run), summed, by cumulative time:' % len(files))
    stats.sort_stats('cumulative').print_stats(top)
    print('... by own time:')
    stats.sort_stats('tottime').print_stats(top)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--hosts', type=int, default=32)
    parser.add_argument('--forks', type=int, default=0, help='default: one per host, at most 32')
    parser.add_argument('--runs', type=int, default=7)
    parser.add_argument('--profile', type=int, metavar='TOP', default=0,
                        help='only profile node_state\'s workers (one run) and print the TOP functions')
    parser.add_argument('--ref', metavar='PATH',
                        help='also run site.yml from this collections path (another tree: the variant "ref"), in '
                        'turn with the others, for a before and after in the same runs')
    parser.add_argument('--timers', action='store_true',
                        help='only time the main steps of node_state\'s workers (one run, unprofiled)')
    parser.add_argument('--keep', action='store_true', help='keep the work directory')
    parser.add_argument('--collections', metavar='PATH', default=os.path.join(ROOT, '.build', 'collections'),
                        help='the collections path to run (a directory holding ansible_collections/gpufleet/nvidia: '
                        'another tree, to compare); default this checkout\'s .build/collections')
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix='worker-cpu.')
    try:
        setup(workdir, args.hosts, args.forks or min(args.hosts, 32))
        if args.timers:
            timers(workdir, args.hosts, args.collections)
            return
        if args.profile:
            profile(workdir, args.hosts, args.profile, args.collections)
            return
        variants = ('site', 'floor') + (('ref',) if args.ref else ())
        trees = {'site': args.collections, 'floor': args.collections, 'ref': args.ref}
        for variant in variants:  # warm the page cache, unmeasured
            run(workdir, variant, args.hosts, collections=trees[variant])
        samples = dict((variant, []) for variant in variants)
        for index in range(args.runs):
            for variant in variants[index % len(variants):] + variants[:index % len(variants)]:
                samples[variant].append(run(workdir, variant, args.hosts, collections=trees[variant]))
        print('%d fake hosts, forks %d, %d runs each, in turn; CPU seconds (user + system) per host, median (min-max)'
              % (args.hosts, args.forks or min(args.hosts, 32), args.runs))

        def cell(variant, key, scale=1000.0):
            values = [sample[key] * scale for sample in samples[variant]]
            return '%.1f (%.1f-%.1f)' % (statistics.median(values), min(values), max(values))
        print('| variant | its task\'s workers, mean ms/host | ... median host, ms | every worker, ms/host '
              '| main process, s | wall, s |')
        print('|---|---|---|---|---|---|')
        labels = (('site', 'site.yml: node_state'), ('floor', 'floor.yml: ping'), ('ref', 'site.yml of --ref'))
        for variant, label in [(v, label) for v, label in labels if v in samples]:
            print('| %s | %s | %s | %s | %s | %s |' % (
                label, cell(variant, 'task'), cell(variant, 'task_median'), cell(variant, 'workers'),
                cell(variant, 'main', 1), cell(variant, 'wall', 1)))
        for key, what in (('task', 'mean over the hosts'), ('task_median', 'median host')):
            med = dict((variant, statistics.median(s[key] for s in samples[variant])) for variant in samples)
            for variant in [v for v in ('site', 'ref') if v in samples]:
                ratios = [a[key] / b[key] for a, b in zip(samples[variant], samples['floor'])]
                print('%s: node_state / ping, worker CPU per host (%s): %.2fx (ratio of the medians; per run '
                      '%.2f-%.2f); node_state costs %.1f ms more a host'
                      % ('this tree' if variant == 'site' else '--ref', what, med[variant] / med['floor'],
                         min(ratios), max(ratios), (med[variant] - med['floor']) * 1000))
    finally:
        if args.keep:
            print('work directory: %s' % workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == '__main__':
    main()
