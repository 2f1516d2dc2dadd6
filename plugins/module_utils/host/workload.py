# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU work on a host, before anything disruptive runs (a container engine or the persistence daemon restarted
or stopped), and the disruption policy that decides what happens then.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time.

What counts as work, read from ``/proc`` alone (root sees every process; nothing is opened but ``/proc`` entries,
nothing is followed out of them, a process that ends meanwhile is skipped):

* a process that holds an NVIDIA device file open (``host.procs.open_file_holders``: a CUDA job, a Slurm step, a
  container's process, NVIDIA's tools, DCGM), but the persistence daemon (``is_persistence_daemon``) and the pids a
  run leaves out (``exclude``);
* a container granted GPUs, of any engine (dockerd, containerd, CRI-O, podman, Slurm's container steps): a mount
  namespace other than init's whose ``/dev`` is a file system of its own (not the host's ``/dev``: systemd's
  sandboxed services share that one) holding an NVIDIA GPU node (``nvidia<N>``, a character device: ``lstat``, no
  link followed), one entry per namespace, with the container id its cgroup names, if any. A container granted a
  GPU is work even while it holds nothing open (between two steps of a job);
* on a Slurm node (Slurm's configuration and clients on the host), a job Slurm runs on it (``squeue``: running,
  completing, suspended), whether or not it holds a GPU yet: a job allocated a GPU through gres is work before its
  first CUDA call. A Slurm controller that does not answer is said (``slurm_error``) and counts as no job: the
  processes above are still found.

Policies (``disruption``): ``force`` carries out every change a run plans (the modules' default, their behaviour
before the policies); ``defer`` (the roles' default, ``gpu_node_disruption``) leaves out a disruptive action while
there is work, says so (``deferred``: the action and the work) and changes nothing else in that module's run; the
next run does it once the work is gone. ``drain`` is ``defer`` in a module: the gpu_node role drains the Slurm node
and waits for its jobs before the modules run (``slurm_node``), so what they find then is work outside Slurm.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import pwd
import re
import stat

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.options import DISRUPTION
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import procs
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import slurm as slurm_node

# The modules' default keeps their behaviour; the roles (gpu_node_disruption) default to defer.
DEFAULT_POLICY = DISRUPTION['default']
DEVICE_PREFIX = '/dev/nvidia'
GPU_NODE = re.compile(r'^nvidia[0-9]{1,3}$')
NVIDIA_MAJOR = 195
# A container id in a cgroup path: docker-<64 hex>.scope, /docker/<64 hex>, cri-containerd-..., crio-..., libpod-...
CONTAINER_ID = re.compile(r'(?:^|[/-])([0-9a-f]{64})(?:\.scope)?(?:/|$)')
MAX_LISTED = 10
# The persistence daemon holds every GPU by design and is no work: the processes of its service user (the modules'
# default user, which the driver's packages create), or of NVIDIA's binary run as root (GH200 needs that).
DAEMON_USERS = ('nvidia-persistenced',)
DAEMON_EXES = ('/usr/bin/nvidia-persistenced',)


def _readlink(path):
    try:
        return os.readlink(path)
    except OSError:
        return None


def _container_id(proc, pid):
    try:
        with open('%s/%d/cgroup' % (proc, pid)) as handle:
            text = handle.read(8192)
    except (IOError, OSError):
        return None
    for line in text.splitlines():
        found = CONTAINER_ID.search(line.split(':', 2)[-1])
        if found:
            return found.group(1)[:12]
    return None


_lstat = os.lstat  # the nodes' lstat (tests read regular files as device nodes)


def _gpu_nodes(dev):
    """The NVIDIA GPU nodes in the directory ``dev`` (character devices of the GPU major; no link followed)."""
    try:
        names = os.listdir(dev)
    except OSError:
        return []
    found = []
    for name in names:
        if not GPU_NODE.match(name):
            continue
        try:
            st = _lstat(os.path.join(dev, name))
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == NVIDIA_MAJOR:
            found.append(name)
    return sorted(found, key=lambda name: int(name[6:]))


def gpu_containers(proc='/proc', exclude=()):
    """``[{'pid', 'name', 'container', 'devices'}]``: one entry per container granted GPUs (see the module doc)."""
    init_ns = _readlink('%s/1/ns/mnt' % proc)
    try:
        host_dev = os.stat('/dev').st_dev
        entries = os.listdir(proc)
    except OSError:
        return []
    seen, found = set(), []
    for pid in sorted(int(entry) for entry in entries if entry.isdigit()):
        ns = _readlink('%s/%d/ns/mnt' % (proc, pid))
        if ns is None or ns == init_ns or ns in seen or pid in exclude:
            continue
        seen.add(ns)
        dev = '%s/%d/root/dev' % (proc, pid)
        try:
            st = os.lstat(dev)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_dev == host_dev:
            continue
        nodes = _gpu_nodes(dev)
        if nodes:
            found.append({'pid': pid, 'name': procs._printable(procs._proc_text(proc, pid, 'comm', 64).strip()),
                          'container': _container_id(proc, pid), 'devices': ['/dev/' + node for node in nodes]})
    return found


def _daemon_uids(users):
    uids = set()
    for user in users:
        try:
            uids.add(pwd.getpwnam(user).pw_uid)
        except KeyError:
            pass
    return uids


def is_persistence_daemon(holder, uids, proc='/proc'):
    """Whether a holder is the persistence daemon, which holds every GPU by design: a process of its service user
    (the kernel says whose it is), or one running NVIDIA's binary (its ``exe``, the kernel's, never its name)."""
    if holder.get('uid') in uids:
        return True
    return _readlink('%s/%d/exe' % (proc, holder['pid'])) in DAEMON_EXES


def slurm_jobs(node):
    """``(jobs, error)``: the jobs Slurm runs on ``node`` (a SlurmNode, or None: no Slurm), or the error saying
    why Slurm did not tell."""
    if node is None:
        return [], None
    try:
        return node.jobs(), None
    except slurm_node.SlurmError as exc:
        return [], str(exc)


def find(exclude=(), proc='/proc', daemon_users=DAEMON_USERS, slurm=None):
    """The host's GPU work: ``{'holders': [...], 'containers': [...]}`` (see the module doc), with ``slurm_jobs``
    (and ``slurm_error``) on a Slurm node (``slurm``: a SlurmNode; ``host.slurm.local()``'s where ``proc`` is
    the host's); ``exclude``: pids. The persistence daemon is not work (``is_persistence_daemon``)."""
    uids = _daemon_uids(daemon_users)
    holders = [holder for holder in procs.open_file_holders((DEVICE_PREFIX,), proc)
               if holder['pid'] not in exclude and not is_persistence_daemon(holder, uids, proc)]
    work = {'holders': holders, 'containers': gpu_containers(proc, exclude)}
    if slurm is None and proc == '/proc':
        slurm = slurm_node.local()
    if slurm is not None:
        work['slurm_jobs'], error = slurm_jobs(slurm)
        if error:
            work['slurm_error'] = error
    return work


def describe(work):
    """The work in words, for a message (None when there is none)."""
    parts = ['container %s (pid %d, %s) with %s'
             % (entry['container'] or 'without an id', entry['pid'], entry['name'], ', '.join(entry['devices']))
             for entry in work.get('containers', [])]
    parts += ['pid %d (%s, uid %s) holding %s' % (entry['pid'], entry['name'], entry['uid'], ', '.join(entry['paths']))
              for entry in work.get('holders', [])]
    parts += ['Slurm job %s (%s, user %s, %s)' % (job['id'], job['name'], job['user'], job['state'].lower())
              for job in work.get('slurm_jobs', [])]
    if not parts:
        return None
    more = len(parts) - MAX_LISTED
    return '; '.join(parts[:MAX_LISTED]) + ('; and %d more' % more if more > 0 else '')


def deferral(policy, action, what, exclude=(), proc='/proc', check_mode=False):
    """None when ``action`` (a disruptive step, in words: ``what``) may run under ``policy``; else the result's
    ``deferred`` entry: the action, the policy, the work found and a sentence saying so. Never in check mode: a
    check (node_state's evaluation) says what differs, and the run that would change it decides."""
    if policy not in ('defer', 'drain') or check_mode:
        return None
    work = find(exclude, proc)
    words = describe(work)
    if words is None:
        return None
    return {'action': action, 'policy': policy, 'work': work,
            'msg': '%s deferred (disruption: defer): GPU work runs on this host: %s. Nothing was changed; run again '
                   'once it is gone, drain the node first, or set disruption: force.' % (what, words)}


def defer(result, deferred, actions_key=None):
    """Make ``result`` (a module run's) say that its run was deferred (``deferral``'s entry): nothing changed, its
    planned file texts left as they were; returns ``result``."""
    result['deferred'] = deferred
    result['changed'] = False
    result['msg'] = deferred['msg']
    if 'action' in result:
        result['action'] = 'deferred'
    if actions_key:
        result[actions_key] = []
    if 'before' in result and 'after' in result:
        result['after'] = result['before']
    if 'file_changed' in result:
        result['file_changed'] = False
    return result
