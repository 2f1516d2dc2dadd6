# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``gpufleet-pull``: one pull-mode run of a node, as its timer or cron job starts it.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change at any time. ``slurm.program`` builds it
into a program (a Python zip application of this collection's code) that gpufleet.nvidia.pull installs with its
configuration (``/etc/gpufleet/pull.json``); ``main`` is that program.

One run: wait a random time up to ``splay`` seconds (not with ``--now``), take the run lock (``flock`` on the state
directory, root's and 0700: nobody else can open it, so nobody else can hold it; a second run while one holds it
ends at once, saying so), then ``ansible-pull`` from the collection's virtual environment: the site's repository
checked out (``--verify-commit`` where the site signs its commits, with the keyring of the site's keys alone), its
playbook applied to this node (``-c local``), with the site's inventory and this node's, and
``-e gpufleet_pull_results_file=...``, where ``playbooks/site.yml`` leaves each node's ``gpu_node_result``. Its output
goes to a bounded log (rotated at the start of a run past ``log_max_bytes``, ``log_keep`` kept; one run writes at most
``log_max_bytes``); a run past ``timeout`` is ended (its process group: SIGTERM, then SIGKILL).

The outcome (``pull.outcome``, pure): ``ok`` (nothing drifted), ``changed``, ``deferred`` (a change waits for the
node's GPU work), ``unchanged`` (``only_if_changed`` and the repository had no new commit), ``refused`` (the checkout
failed or was refused, an unsigned commit among them, or the playbook could not be parsed: nothing ran), ``failed``.
It is kept in ``last-run.json`` (with the last ``HISTORY`` runs) and written as metrics to node_exporter's textfile
directory (``gpufleet_pull.prom``): when the run ended, how long it took, its outcome, when a run last succeeded, the
commit last applied and the one fetched, and per concern whether the run found it drifted. With ``only_if_changed``,
``--only-if-changed`` is given only when the last run succeeded on the commit checked out now: a failed or refused run
is tried again.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import errno
import fcntl
import json
import os
import platform
import random
import re
import select
import signal
import socket
import subprocess
import sys
import time

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import HostFileError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health import metrics
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import audit, files, paths
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import config as program_config
from ansible_collections.gpufleet.nvidia.plugins.module_utils.pull import outcome as pull_outcome
from ansible_collections.gpufleet.nvidia.plugins.module_utils.pull.outcome import SUCCESS

DEFAULT_CONFIG = '/etc/gpufleet/pull.json'
CONFIG_LIMIT = 1 << 20
RESULT_LIMIT = 64 << 20
READER = 'gpufleet-pull, as root'
METRICS_FILE = 'gpufleet_pull.prom'
STATE_FILE = 'last-run.json'
INVENTORY_FILE = 'inventory.json'
RESULT_FILE = 'result.json'
# The configuration's keys (gpufleet.nvidia.pull writes them) and their types; None: may be null.
CONFIG_KEYS = {
    'ansible_pull': (str,), 'url': (str,), 'checkout': (str, type(None)), 'directory': (str,), 'playbook': (str,),
    'inventories': (list,), 'name': (str,), 'only_if_changed': (bool,), 'verify_commit': (bool,),
    'gnupg_home': (str,), 'splay': (int,), 'timeout': (int,), 'log': (str,), 'log_max_bytes': (int,),
    'log_keep': (int,), 'textfile_directory': (str, type(None)), 'state_directory': (str,),
    'extra_vars': (dict,), 'git': (str,), 'groups': (list,), 'python': (str,),
}
# The output kept in memory to read the outcome from (the log keeps the rest).
TAIL = 1 << 16


class ConfigError(Exception):
    """The program's own configuration cannot be used: the message names the file and what to do."""


# --------------------------------------------------------------------------
# The configuration
# --------------------------------------------------------------------------

def read_config(path):
    """The configuration at ``path`` (``host.config.read_program_config``: root's alone, never through a link),
    validated. Raises ConfigError naming the file and the remedy."""
    return validate_config(path, program_config.read_program_config(
        path, READER, 'gpufleet.nvidia.pull (state: present)', ConfigError, CONFIG_LIMIT))


def validate_config(path, config):
    """``config``, every key present with its type; ConfigError naming ``path`` otherwise."""
    if not isinstance(config, dict):
        raise ConfigError('%s: the configuration is a JSON %s, not an object' % (path, type(config).__name__))
    for key in sorted(CONFIG_KEYS):
        if key not in config:
            raise ConfigError('%s: %s is missing: converge the node with gpufleet.nvidia.pull to write it again'
                              % (path, key))
        if not isinstance(config[key], CONFIG_KEYS[key]) or isinstance(config[key], bool) != (bool in CONFIG_KEYS[key]):
            raise ConfigError('%s: %s must be %s, not %r' % (path, key, ' or '.join(
                t.__name__ for t in CONFIG_KEYS[key]), config[key]))
    for key in ('ansible_pull', 'directory', 'gnupg_home', 'log', 'state_directory', 'git', 'python'):
        if not config[key].startswith('/'):
            raise ConfigError('%s: %s must be an absolute path, not %r' % (path, key, config[key]))
    for key in ('splay', 'timeout', 'log_max_bytes', 'log_keep'):
        if config[key] < (1 if key in ('timeout', 'log_max_bytes', 'log_keep') else 0):
            raise ConfigError('%s: %s must be a positive number, not %r' % (path, key, config[key]))
    return config


# --------------------------------------------------------------------------
# The run's lock and state
# --------------------------------------------------------------------------

def open_state_directory(path):
    """A descriptor of the state directory: root's, open to nobody else, every directory above it root's; never a
    link. Raises HostFileError naming it."""
    real = paths.resolve_path(path, reader=READER, file_directory=False)
    try:
        dfd = files.open_directory(real)
    except OSError as exc:
        raise HostFileError('%s: cannot open the state directory (%s): converge the node with gpufleet.nvidia.pull, '
                            'which makes it' % (path, exc.strerror))
    try:
        # root's and open to root alone: nobody else can hold the run lock or change the run's state
        audit._check_directory(path, real, os.fstat(dfd), STATE)
    except BaseException:
        os.close(dfd)
        raise
    return dfd


def try_lock(dfd):
    """Take the run lock (an exclusive ``flock`` on the state directory's descriptor) without waiting: whether it
    was free."""
    try:
        fcntl.flock(dfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def read_private(dfd, name, limit):
    """The text of the root-only file ``name`` in the state directory, or None where there is none."""
    fd, size = audit.open_private(dfd, name, name, place=STATE, flags=os.O_RDONLY)
    if fd is None:
        return None
    try:
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    finally:
        os.close(fd)
    if total > limit:
        raise HostFileError('%s is larger than %d bytes: not read' % (name, limit))
    return b''.join(chunks).decode('utf-8', 'replace')


def read_json(dfd, name, limit=CONFIG_LIMIT):
    """The JSON value of a state file of ours, or None where it is missing or not JSON."""
    try:
        text = read_private(dfd, name, limit)
    except HostFileError:
        return None
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def write_json(dfd, name, value):
    files.write_at(dfd, name, (json.dumps(value, sort_keys=True, indent=1) + '\n').encode('utf-8'), 0o600)


def remove_at(dfd, name):
    try:
        os.unlink(name, dir_fd=dfd)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise


STATE = audit.Place('the pull run\'s state', READER, 'The run did not start.', closed=0o077)
LOG = audit.Place('the pull log', READER, 'The run did not start.')


# --------------------------------------------------------------------------
# ansible-pull
# --------------------------------------------------------------------------

def host_names():
    """The names ansible-pull limits its checkout to, besides localhost: the host's name and fully qualified name,
    and their first labels."""
    node, fqdn = platform.node(), socket.getfqdn()
    return set(name for name in (node, fqdn, node.split('.')[0], fqdn.split('.')[0]) if name)


def inventory(config, names):
    """This node in the site's groups (connection local, the host's Python for the modules), and localhost (the
    collection's Python) unless the node's name is one of the host's ``names``.

    ansible-pull checks the repository out on every host of the inventory named localhost or as this host is
    (``names``), at once: a node under one of those names and localhost would run two git commands in the one
    checkout at the same time (seen on the lab: "shallow file has changed since we read it"). The checkout runs on
    the node itself then, or on localhost alone."""
    node = {'ansible_connection': 'local', 'ansible_python_interpreter': config['python']}
    children = dict((group, {'hosts': {config['name']: node}}) for group in config['groups'])
    if config['name'] not in names and config['name'] != 'localhost':
        python = os.path.join(os.path.dirname(config['ansible_pull']), 'python')
        children['ungrouped'] = {'hosts': {'localhost': {'ansible_connection': 'local',
                                                         'ansible_python_interpreter': python}}}
    return {'all': {'children': children}}


def pull_argv(config, result_path, previous, head, converge=False):
    """ansible-pull's command line for this run; ``previous``: the last run's state (or None), ``head``: the commit
    checked out now (or None); ``converge``: run the playbook whatever ``only_if_changed`` says."""
    argv = [config['ansible_pull'], '--url', config['url'], '--directory', config['directory'],
            '--limit', config['name'], '--inventory', os.path.join(config['state_directory'], INVENTORY_FILE)]
    if config['checkout']:
        argv += ['--checkout', config['checkout']]
    for path in config['inventories']:
        argv += ['--inventory', path]
    if config['verify_commit']:
        argv.append('--verify-commit')
    if config['only_if_changed'] and not converge and previous and previous.get('outcome') in SUCCESS \
            and head and previous.get('applied') == head:
        argv.append('--only-if-changed')
    extra = dict(config['extra_vars'])
    extra['gpufleet_pull_results_file'] = result_path
    argv += ['--extra-vars', json.dumps(extra, sort_keys=True), config['playbook']]
    return argv


def environment(config, base=None):
    """The environment of ansible-pull: the site's keyring for ``git verify-commit``, a UTF-8 locale (Ansible
    refuses to start without one, and cron gives none), no colour, no retry files."""
    env = dict(base if base is not None else os.environ)
    env.update(GNUPGHOME=config['gnupg_home'], LC_ALL='C.UTF-8', LANG='C.UTF-8', ANSIBLE_NOCOLOR='1',
               ANSIBLE_FORCE_COLOR='0', ANSIBLE_RETRY_FILES_ENABLED='0', HOME=env.get('HOME') or '/root',
               PATH=env.get('PATH') or '/usr/sbin:/usr/bin:/sbin:/bin')
    # git packs the checkout in the background after a fetch (gc --auto, detached), and a shallow checkout's next
    # command then fails ("shallow file has changed since we read it", "shallow.lock: File exists", seen on the
    # lab): the packing runs in the fetch itself, under the run's lock
    env.update(GIT_CONFIG_COUNT='2', GIT_CONFIG_KEY_0='gc.autoDetach', GIT_CONFIG_VALUE_0='false',
               GIT_CONFIG_KEY_1='maintenance.autoDetach', GIT_CONFIG_VALUE_1='false')
    return env


# git's lock files at the top of the checkout's .git: one left by a run that was ended (its time limit, a reboot)
# would refuse every later fetch; the run lock says no git of ours is running there.
GIT_LOCKS = ('index.lock', 'shallow.lock', 'HEAD.lock', 'config.lock', 'packed-refs.lock', 'FETCH_HEAD.lock')


def clear_stale_git_locks(config):
    """Remove git's lock files left in the checkout's .git by a run that was ended; their names."""
    removed = []
    git_dir = os.path.join(config['directory'], '.git')
    try:
        dfd = files.open_directory(git_dir)
    except OSError:
        return removed
    try:
        for name in GIT_LOCKS:
            try:
                os.unlink(name, dir_fd=dfd)
                removed.append(name)
            except OSError:
                pass
    finally:
        os.close(dfd)
    return removed


def git_head(config):
    """The commit checked out in the run's directory, or None."""
    if not os.path.isdir(os.path.join(config['directory'], '.git')):
        return None
    try:
        # a program of its own (no AnsibleModule): run_command is not there
        proc = subprocess.run(  # pylint: disable=ansible-bad-function
            [config['git'], '-C', config['directory'], 'rev-parse', '--verify', '-q', 'HEAD'],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=60, env=environment(config), check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    head = proc.stdout.decode('ascii', 'replace').strip()
    return head if proc.returncode == 0 and re.match(r'^[0-9a-f]{40,64}$', head) else None


class Output(object):
    """ansible-pull's output: written to the log (at most ``limit`` bytes of one run) and its last bytes kept."""

    def __init__(self, fd, limit):
        self.fd, self.limit, self.written, self.tail, self.dropped = fd, limit, 0, b'', 0

    def add(self, data):
        self.tail = (self.tail + data)[-TAIL:]
        room = self.limit - self.written
        if self.fd is not None and room > 0:
            files.write_all(self.fd, data[:room])
            self.written += min(room, len(data))
        self.dropped += max(0, len(data) - max(room, 0))

    def close(self):
        if self.dropped and self.fd is not None:
            files.write_all(self.fd, ('[gpufleet-pull: %d bytes of this run\'s output left out of the log]\n'
                                      % self.dropped).encode('utf-8'))


def execute(argv, env, cwd, output, timeout, clock=time.monotonic):
    """Run ``argv`` in a process group of its own, its output (standard output and error) to ``output``; ended
    (SIGTERM, then SIGKILL after 30 s) past ``timeout`` seconds. ``(exit status, timed out)``."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                            stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True, close_fds=True)
    try:
        timed_out = _follow(proc, proc.stdout.fileno(), output, clock() + timeout, clock)
    except BaseException:
        # the program itself is ending (SIGTERM from a person or cron, an error): its run does not outlive it
        _signal_group(proc.pid, signal.SIGTERM)
        raise
    finally:
        proc.stdout.close()
    return proc.wait(), timed_out


def _follow(proc, stream, output, deadline, clock):
    """Copy the output until ansible-pull closes it, or has ended and nothing more came for a second (a process it
    left behind may hold the pipe); SIGTERM to its group past ``deadline``, SIGKILL 30 s later. Whether it was
    ended for its time."""
    pid = proc.pid
    timed_out = False
    killed_at = None
    while True:
        now = clock()
        if not timed_out and now >= deadline:
            timed_out = True
            killed_at = now
            _signal_group(pid, signal.SIGTERM)
        elif timed_out and killed_at is not None and now >= killed_at + 30:
            _signal_group(pid, signal.SIGKILL)
            killed_at = None
        ended = proc.poll() is not None
        wait = 1.0 if ended or timed_out else max(0.05, min(deadline - now, 1.0))
        ready, _w, _x = select.select([stream], [], [], wait)
        if not ready:
            if ended:
                return timed_out
            continue
        data = os.read(stream, 1 << 16)
        if not data:
            return timed_out
        output.add(data)


def _signal_group(pid, sig):
    try:
        os.killpg(pid, sig)
    except OSError:
        pass


# --------------------------------------------------------------------------
# The program
# --------------------------------------------------------------------------

def open_log(config):
    """The log's descriptor, for appending (rotated first when past ``log_max_bytes``)."""
    with audit.locked_directory(config['log'], place=LOG) as (dfd, name):
        fd, size = audit.open_private(dfd, config['log'], name, place=LOG)
        if size > config['log_max_bytes']:
            os.close(fd)
            audit._rotate(dfd, name, config['log_keep'])
            fd, size = audit.open_private(dfd, config['log'], name, place=LOG)
    return fd


def say(log_fd, text):
    line = '%s gpufleet-pull: %s\n' % (time.strftime('%Y-%m-%dT%H:%M:%S%z'), text)
    if log_fd is not None:
        files.write_all(log_fd, line.encode('utf-8', 'replace'))
    sys.stdout.write(line)
    sys.stdout.flush()


def run(config, now=False, converge=False, sleep=time.sleep, clock=time.time):
    """One run; its exit status (0: a success or another run holds the lock, 1: failed or refused)."""
    if config['splay'] and not now:
        sleep(random.SystemRandom().uniform(0, config['splay']))
    dfd = open_state_directory(config['state_directory'])
    try:
        if not try_lock(dfd):
            holder = read_json(dfd, 'running.json') or {}
            sys.stdout.write('gpufleet-pull: another run (pid %s) holds the lock: this one ends\n'
                             % holder.get('pid', '?'))
            return 0
        return _locked_run(config, dfd, clock, converge)
    finally:
        os.close(dfd)


def _locked_run(config, dfd, clock, converge):
    started = clock()
    write_json(dfd, 'running.json', {'pid': os.getpid(), 'started': started})
    previous = read_json(dfd, STATE_FILE)
    write_json(dfd, INVENTORY_FILE, inventory(config, host_names()))
    stale = clear_stale_git_locks(config)
    head = git_head(config)
    remove_at(dfd, RESULT_FILE)
    result_path = os.path.join(config['state_directory'], RESULT_FILE)
    argv = pull_argv(config, result_path, previous, head, converge)
    log_fd = open_log(config)
    try:
        say(log_fd, 'run started (pid %d): %s' % (os.getpid(), ' '.join(argv)))
        if stale:
            say(log_fd, 'removed git lock files an ended run left in the checkout: %s' % ', '.join(stale))
        output = Output(log_fd, config['log_max_bytes'])
        try:
            rc, timed_out = execute(argv, environment(config), config['state_directory'], output, config['timeout'])
        except OSError as exc:
            rc, timed_out = 127, False
            output.add(('ERROR! cannot run %s: %s\n' % (argv[0], exc.strerror)).encode('utf-8'))
        output.close()
        result = read_json(dfd, RESULT_FILE, RESULT_LIMIT)
        outcome, reason, found = pull_outcome.classify(rc, timed_out, output.tail.decode('utf-8', 'replace'),
                                                       result, config['name'], config['timeout'])
        head = git_head(config)
        state = pull_outcome.next_state(previous, outcome, reason, found, started, clock(), head)
        write_json(dfd, STATE_FILE, state)
        remove_at(dfd, 'running.json')
        say(log_fd, 'run ended: %s (%s); commit applied %s, fetched %s; %.1f s'
            % (outcome, reason, state['applied'] or 'none', head or 'none', state['duration']))
        if config['textfile_directory']:
            try:
                metrics.write(config['textfile_directory'], pull_outcome.render_metrics(state), name=METRICS_FILE)
            except (metrics.MetricsError, OSError) as exc:
                say(log_fd, 'the metrics were not written: %s' % exc)
    finally:
        if log_fd is not None:
            os.close(log_fd)
    return 0 if outcome in SUCCESS else 1


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


def main(argv=None):
    parser = argparse.ArgumentParser(prog='gpufleet-pull', description=(
        'One pull-mode run of this node: ansible-pull of the site repository, applied to this node alone, its '
        'outcome logged and written for node_exporter (gpufleet.nvidia.pull installs it).'))
    parser.add_argument('--config', default=DEFAULT_CONFIG, help='its configuration (default: %(default)s)')
    parser.add_argument('--now', action='store_true', help='start at once, without the random delay (splay)')
    parser.add_argument('--converge', action='store_true', help='run the playbook even where only_if_changed would '
                        'skip it (no new commit since the last successful run)')
    options = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _terminated)
    try:
        config = read_config(options.config)
        return run(config, now=options.now, converge=options.converge)
    except (ConfigError, HostFileError) as exc:
        sys.stderr.write('gpufleet-pull: cannot run: %s\n' % ' '.join(str(exc).split()))
        return 1
