# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The docker_runtime operation: daemon.json, then the running dockerd, verified, rolled back on failure.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It holds no AnsibleModule so that pytest can drive it directly.

``converge`` reads the file once (``host.files``), merges (``docker.daemon_json``),
asks the running dockerd (``GET /info``) whether it already runs what the
file says, decides the action, writes the file once, then ``Applier``
(``docker.apply_change``, imported only to apply) applies it: reload
(SIGHUP) when additions/changes suffice, restart when something was
removed (dockerd 20.10 keeps removed keys on reload and panics when the
running default runtime disappears from ``runtimes``), verify through the
API, and on failure restore the file and restart dockerd with it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker import daemon_json as dj
from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker import dockerd as docker_dockerd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import paths
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import procs
from ansible_collections.gpufleet.nvidia.plugins.module_utils.formats import json_splice as splice
from ansible_collections.gpufleet.nvidia.plugins.module_utils.engines import verify as engines_verify
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.options import DISRUPTION, Options
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init.service import found_by

DaemonJsonError = dj.DaemonJsonError


# docker_runtime's argument spec: each option's one declaration (the module, node_state and Request read it).
SPEC = dict(
    path=dict(type='path', default=dj.DEFAULT_PATH),
    name=dict(type='str', default='nvidia'),
    runtime_path=dict(type='str', default='nvidia-container-runtime'),
    runtime_args=dict(type='list', elements='str'),
    default_runtime=dict(type='bool'),
    cdi=dict(type='bool'),
    state=dict(type='str', default='present', choices=['present', 'absent']),
    backup=dict(type='bool', default=False),
    apply=dict(type='str', default='auto', choices=['auto', 'reload', 'restart', 'none']),
    disruption=dict(DISRUPTION),
    docker_host=dict(type='str', default='unix:///var/run/docker.sock'),
    service_name=dict(type='str', default='docker'),
    apply_timeout=dict(type='int', default=60, aliases=['timeout']),
    **engines_verify.SPEC
)


class Request(Options):
    """What the user asked for: these options of the module (``SPEC``), ``apply_timeout`` as ``timeout`` (seconds
    to wait for dockerd to run the new configuration after a reload or restart)."""

    SPEC = SPEC
    OPTIONS = ('path', 'name', 'runtime_path', 'runtime_args', 'default_runtime', 'cdi', 'state', 'apply',
               'apply_timeout', 'disruption')
    NAMES = {'apply_timeout': 'timeout'}

    def merge(self, text):
        return dj.merge(text, self.path, state=self.state, name=self.name, runtime_path=self.runtime_path,
                        runtime_args=self.runtime_args, default_runtime=self.default_runtime, cdi=self.cdi)


class Result(dict):
    def __init__(self, path):
        dict.__init__(self, changed=False, path=path, backup_file=None, action='none', runtimes={},
                      dockerd_pid_before=None, dockerd_pid_after=None, dockerd_found_by=None, msg='',
                      file_changed=False,
                      before='', after='', warnings=[], default_runtime=None)


def read_config(path, real=None):
    """daemon.json as ``files.HostFile``, checked out of other users' reach and within MAX_CONFIG_BYTES."""
    if real is None:
        real = paths.resolve_path(path, reader='dockerd')
    return files.read_file(path, real, dj.MAX_CONFIG_BYTES, reader='dockerd')


def decide(request, info, file_changed, differences, removals):
    """The action on the running dockerd: none, reload, restart or deferred (pure)."""
    if info is None:
        return 'deferred' if file_changed else 'none'
    if not differences:
        return 'none'
    if request.apply == 'none':
        return 'deferred'
    if request.apply == 'restart':
        return 'restart'
    if request.apply == 'reload':
        return 'deferred' if removals else 'reload'
    return 'restart' if removals else 'reload'


def runtime_loaded(result, name):
    """``(loaded, why)``: whether the running dockerd runs the runtime ``name`` after this run, and in words why not
    (for the verification, ``engines.verify``)."""
    why = 'action %s%s' % (result['action'], '' if result['dockerd_pid_after'] else ', dockerd is not running')
    return name in (result.get('runtimes') or {}), why


def _plural(keys):
    return ', '.join('"%s"' % key for key in keys), 'is' if len(keys) == 1 else 'are'


class Converge(object):
    """One docker_runtime run. See ``converge``."""

    def __init__(self, request, service, api, backup=None, label=None, dockerd_checks=None, poll=0.2,
                 reload_wait=5.0):
        self.request = request
        self.service = service
        self.api = api
        self.backup = backup
        self.label = label
        self.dockerd_checks = dockerd_checks
        self._checks = None
        self.poll = poll
        self.reload_wait = reload_wait
        self.result = Result(request.path)
        self.warnings = self.result['warnings'] = []

    def checks(self):
        """``(validator, option_keys)`` of the installed dockerd, asked once and only when needed."""
        if self._checks is None:
            self._checks = self.dockerd_checks() if self.dockerd_checks is not None else (None, None)
        return self._checks

    # ---- the steps --------------------------------------------------------------
    def run(self, check_mode):
        request, result = self.request, self.result
        real = paths.resolve_path(request.path, reader='dockerd')
        if not check_mode and files.ensure_directory(real):
            result['changed'] = True
        with files.directory_lock(real, check_mode=check_mode):
            current = read_config(request.path, real)
            merged = request.merge(current.text)
            self.warnings.extend(merged.warnings)
            file_changed = merged.text != current.text
            result.update(file_changed=file_changed, before=current.text, after=merged.text,
                          changed=result['changed'] or file_changed)
            if request.state == 'present' and not procs.which(request.runtime_path):
                self.warnings.append('the runtime binary "%s" was not found on this host; dockerd accepts the runtime '
                                     'but containers that use it will fail. Install the %s package.'
                                     % (request.runtime_path, dj.RUNTIME_PACKAGE))
            pid, elsewhere = self.running_dockerd(real)
            result['dockerd_pid_before'] = pid
            result['dockerd_found_by'] = found_by(self.service, pid, self.warnings)
            flags = docker_dockerd.flags_to_keys(self.service.flags()) if pid or file_changed else {}
            self.check_flags(merged, flags)
            if file_changed and self.checks()[0] is not None:
                problem = self.checks()[0](merged.text)
                if problem:
                    raise DaemonJsonError('%s: dockerd --validate rejects the merged configuration, the file was '
                                          'left untouched: %s' % (request.path, problem))
            info = self.ask_dockerd(pid)
            differences, removals = dj.compare_running(merged.after, info or {}, request.name, request.state, flags)
            if info is not None and not differences and 'CDISpecDirs' not in info and \
                    not splice.same_value(merged.before.get('features'), merged.after.get('features')):
                # This dockerd does not show features in /info: apply what this run changed.
                differences = ['"features" changed (this dockerd does not report it in /info)']
            action = result['action'] = decide(request, info, file_changed, differences, removals)
            if action in ('reload', 'restart'):
                result['changed'] = True
            self.check_option_keys(merged, action)
            if action == 'restart':  # host.workload: only where dockerd is to be restarted
                from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import workload
                deferred = workload.deferral(request.disruption, 'restart', 'Restarting dockerd', check_mode=check_mode)
                if deferred:
                    return workload.defer(result, deferred)
            if not check_mode:
                self.write(real, current, merged)
                if action in ('reload', 'restart'):
                    # the reload or restart, and its rollback: imported to apply only (docker.apply_change)
                    from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker.apply_change import Applier
                    from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import workload
                    applier = Applier(request, self.service, self.api, real, current.text if current.exists else None,
                                      self.label, dj.compare_running, merged.after, flags, self.poll, self.reload_wait)
                    info = applier.apply(action, result)
                    if result.get('deferred'):
                        return workload.defer(result, result['deferred'])
            result['dockerd_pid_after'] = pid if check_mode else (self.service.pid() if elsewhere is None else None)
            if info:
                result['runtimes'] = dict((info.get('Runtimes') or {}).items())
                result['default_runtime'] = info.get('DefaultRuntime')
            result['msg'] = message(result, differences, removals, request, predicted=check_mode, elsewhere=elsewhere)
            return result

    def running_dockerd(self, real):
        """``(pid, elsewhere)``: the dockerd that reads this file (None when none runs), and a note when one reads
        another file (apply=none only)."""
        request, service = self.request, self.service
        pid = service.pid()
        running_config = service.config_file() if pid and hasattr(service, 'config_file') else None
        if not running_config or docker_dockerd.same_file(running_config, real, request.path):
            return pid, None
        if request.apply != 'none':
            raise DaemonJsonError('dockerd (pid %s) reads %s, not %s: applying %s would not change what dockerd '
                                  'runs. Set path to %s, or apply=none to only write the file.'
                                  % (pid, running_config, request.path, request.path, running_config))
        # Only the dockerd that reads this file matters, and apply=none does not touch it anyway.
        return None, 'dockerd (pid %s) reads %s, not this file' % (pid, running_config)

    def check_flags(self, merged, flags):
        fatal, preexisting = dj.flag_conflicts(merged.before, merged.after, flags)
        if fatal:
            raise DaemonJsonError('%s: refusing to write %s: dockerd would refuse to start because %s. Remove the '
                                  'flag from the docker service (unit, DOCKER_OPTS) or let the flag manage it.'
                                  % (self.request.path, ', '.join(fatal), 'they are set both as flags and in the file'))
        if preexisting:
            self.warnings.append('%s: %s: dockerd refuses keys set both as a flag and in the file.'
                                 % (self.request.path, ', '.join(preexisting)))

    def ask_dockerd(self, pid):
        """dockerd's ``/info``, or None when it is not running (or, with apply=none, does not answer)."""
        if not pid:
            return None
        request, api = self.request, self.api
        try:
            return api.info()
        except Exception as exc:
            where = getattr(api, 'socket_path', None)
            if request.apply != 'none':
                raise DaemonJsonError('dockerd (pid %s) is running but its API at %s does not answer: %s. '
                                      'Nothing was changed; check docker_host, or use apply=none.'
                                      % (pid, where or 'the socket', exc))
            # apply=none only writes the file: what dockerd runs is reported when it can be asked.
            self.warnings.append('dockerd (pid %s) did not answer on %s (%s): whether it runs %s is unknown; '
                                 'apply=none only wrote the file.' % (pid, where or 'its API', exc, request.path))
            return None

    def check_option_keys(self, merged, action):
        """Keys the installed dockerd does not know (when it has no --validate): fatal before applying."""
        if not (self.result['file_changed'] or action in ('reload', 'restart')):
            return
        validator, option_keys = self.checks()
        unknown = docker_dockerd.unknown_keys(merged.after, option_keys) if validator is None else []
        if not unknown:
            return
        keys, verb = _plural(unknown)
        if action in ('reload', 'restart'):
            raise DaemonJsonError(
                '%s: dockerd would refuse this file: %s %s not a dockerd option (per the installed dockerd --help), '
                'so a reload would be rejected and a restart would leave dockerd down. Nothing was changed. Fix or '
                'remove %s, or use apply=none and restart dockerd yourself.'
                % (self.request.path, keys, verb, 'it' if len(unknown) == 1 else 'them'))
        self.warnings.append('%s: %s %s not a dockerd option (per the installed dockerd --help): dockerd will refuse '
                             'to start with this file.' % (self.request.path, keys, verb))

    def write(self, real, current, merged):
        self.result['backup_file'] = files.replace_config(real, merged.text, current, self.backup, self.label)


def converge(request, service, api, check_mode=False, backup=None, label=None, validator=None, option_keys=None,
             dockerd_checks=None, poll=0.2, reload_wait=5.0):
    """Bring the file, then the running dockerd, to ``request``; returns a Result.

    ``service``: see ``docker.dockerd.Dockerd``. ``api``: a DockerAPI. ``backup``:
    True (``files.backup_copy``) or ``backup(path) -> name``. ``label(tmp,
    dest)``: see ``files.write_atomic``. ``dockerd_checks() -> (validator,
    option_keys)`` (or the two directly): ``validator(text) -> error or None``
    runs ``dockerd --validate``; ``option_keys`` are the keys the installed
    dockerd accepts, used when it has no ``--validate``. They are asked only
    when the file or dockerd must change: asking dockerd costs a process start
    that a no-op run skips. Raises GpufleetError; the file is then as it was
    (or restored).
    """
    if dockerd_checks is None and (validator is not None or option_keys is not None):
        def dockerd_checks():
            return validator, option_keys
    return Converge(request, service, api, backup=backup, label=label, dockerd_checks=dockerd_checks, poll=poll,
                    reload_wait=reload_wait).run(check_mode)


def message(result, differences, removals, request, predicted=False, elsewhere=None):
    """What was found and done (would be done, ``predicted``), in one line."""
    verb = 'would' if predicted else 'was'
    parts = []
    if result['file_changed']:
        parts.append('%s %s' % (request.path, 'would change' if predicted else 'changed'))
    else:
        parts.append('%s already up to date' % request.path)
    action = result['action']
    if action == 'reload':
        parts.append('dockerd %s reloaded (SIGHUP, containers keep running): %s' % (verb, '; '.join(differences)))
    elif action == 'restart':
        why = removals or differences
        parts.append('dockerd %s restarted: %s' % (verb, '; '.join(why)))
    elif action == 'deferred':
        if elsewhere:
            parts.append('%s; not applied (apply=none)' % elsewhere)
        elif result['dockerd_pid_before'] is None:
            parts.append('dockerd is not running; the file takes effect when it next starts')
        elif request.apply == 'reload' and removals:
            parts.append('a reload cannot apply this (%s): restart dockerd to apply it' % '; '.join(removals))
        else:
            parts.append('not applied (apply=none); dockerd runs an older configuration: %s' % '; '.join(differences))
    elif elsewhere:
        parts.append(elsewhere)
    else:
        parts.append('dockerd already runs it' if result['dockerd_pid_before'] else 'dockerd is not running')
    return '; '.join(parts)
