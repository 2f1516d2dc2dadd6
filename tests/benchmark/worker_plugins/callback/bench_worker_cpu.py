# Copyright: gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Callback for tests/benchmark/worker_cpu.py: the CPU of every forked worker, by task and host.

Not shipped with the collection. Loaded in ansible-playbook's main process before any worker is forked, it replaces
two things there (so every worker inherits them):

- ``multiprocessing``'s reaping of a forked process (``Popen.poll``) by ``os.wait4``, which also gives the reaped
  worker's whole resource use (user + system CPU, from its fork to its exit, its own children included);
- ``WorkerProcess.start``, to note which task and host each worker pid runs; and, with $BENCH_PROFILE_DIR set,
  ``WorkerProcess.run``: a worker whose task's action is $BENCH_PROFILE_ACTION runs under cProfile and leaves its
  profile in that directory (``<host>-<pid>.prof``).

At exit the main process writes one JSON record per worker to $BENCH_WORKER_CPU_OUT (task, action, host, user and
system seconds), and its own CPU (``main``).
"""

from __future__ import annotations

import atexit
import json
import multiprocessing.popen_fork
import os
import resource

from ansible.executor.process.worker import WorkerProcess
from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: bench_worker_cpu
type: aggregate
short_description: every worker's CPU, by task and host (worker CPU benchmark)
description:
  - Records each forked worker's CPU (os.wait4) with its task and host; writes them at exit.
requirements:
  - BENCH_WORKER_CPU_OUT names the JSON file to write.
"""

MAIN = os.getpid()
WORKERS = {}  # pid: {task, action, host}
RECORDS = []


def _poll(self, flag=os.WNOHANG):
    if self.returncode is None:
        try:
            pid, status, usage = os.wait4(self.pid, flag)
        except OSError:
            return None
        if pid == self.pid:
            self.returncode = os.waitstatus_to_exitcode(status)
            if pid in WORKERS:
                RECORDS.append(dict(WORKERS.pop(pid), user=usage.ru_utime, system=usage.ru_stime))
    return self.returncode


_start, _run = WorkerProcess.start, WorkerProcess.run


def _started(self):
    _start(self)
    WORKERS[self.pid] = {'task': self._task.get_name(), 'action': self._task.action, 'host': self._host.name}


def _profiled_run(self):
    import sys
    if os.environ.get('BENCH_MODULES_OUT') and os.getpid() != MAIN:
        with open(os.environ['BENCH_MODULES_OUT'], 'w') as handle:
            handle.write('\n'.join(sorted(name for name in sys.modules if 'gpufleet' in name)))
    directory, action = os.environ.get('BENCH_PROFILE_DIR'), os.environ.get('BENCH_PROFILE_ACTION')
    if not directory or self._task.action != action:
        return _run(self)
    if TIMERS is not None and os.environ.get('BENCH_TIMERS'):
        import time
        started = time.process_time()
        try:
            return _run(self)
        finally:
            TIMERS['worker run'] = time.process_time() - started
            with open(os.path.join(directory, '%s-%d.timers.json' % (self._host.name, os.getpid())), 'w') as handle:
                json.dump(TIMERS, handle)
    import cProfile
    import time
    profile = cProfile.Profile(time.process_time)  # CPU, not wall: a loaded machine and lock waits aside
    profile.enable()
    try:
        return _run(self)
    finally:
        profile.disable()
        profile.dump_stats(os.path.join(directory, '%s-%d.prof' % (self._host.name, os.getpid())))


def _timed(spec, totals):
    """Wrap ``module:Class.method`` (or ``module:function``) to add its CPU time (process_time) to ``totals``."""
    import importlib
    import time
    module_name, path = spec.split(':')
    owner = importlib.import_module(module_name)
    names = path.split('.')
    for name in names[:-1]:
        owner = getattr(owner, name)
    original = getattr(owner, names[-1])
    depth = [0]

    def timed(*args, **kwargs):
        depth[0] += 1
        started = time.process_time()
        try:
            return original(*args, **kwargs)
        finally:
            depth[0] -= 1
            if not depth[0]:  # the outermost call alone (recursion counted once)
                totals[spec] = totals.get(spec, 0.0) + time.process_time() - started
    setattr(owner, names[-1], timed)


def _timers():
    """$BENCH_TIMERS: ``module:qualname`` specs, comma-separated; each worker of $BENCH_PROFILE_ACTION writes their
    CPU times to $BENCH_PROFILE_DIR/<host>-<pid>.timers.json."""
    totals = {}
    for spec in filter(None, os.environ.get('BENCH_TIMERS', '').split(',')):
        _timed(spec.strip(), totals)
    return totals


TIMERS = _timers()


def _write():
    if os.getpid() != MAIN or not os.environ.get('BENCH_WORKER_CPU_OUT'):
        return
    for pid in list(WORKERS):  # the last task's workers, which ansible-playbook leaves to exit
        try:
            unused_pid, unused_status, usage = os.wait4(pid, 0)
        except OSError:
            continue
        RECORDS.append(dict(WORKERS.pop(pid), user=usage.ru_utime, system=usage.ru_stime))
    own = resource.getrusage(resource.RUSAGE_SELF)
    with open(os.environ['BENCH_WORKER_CPU_OUT'], 'w') as handle:
        json.dump({'workers': RECORDS, 'unreaped': list(WORKERS.values()),
                   'main': {'user': own.ru_utime, 'system': own.ru_stime}}, handle)


multiprocessing.popen_fork.Popen.poll = _poll
WorkerProcess.start = _started
WorkerProcess.run = _profiled_run
atexit.register(_write)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'aggregate'
    CALLBACK_NAME = 'bench_worker_cpu'
    CALLBACK_NEEDS_ENABLED = True
