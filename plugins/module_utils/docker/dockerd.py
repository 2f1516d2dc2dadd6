# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What dockerd is on this host: its flags, its process, its service, its log, its options.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. ``Dockerd`` is the host's dockerd service (``init.service.Service``
plus dockerd's own facts); the rest are pure readers of dockerd's command
line, ``--help`` and log text.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import shlex

from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import procs
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import systems
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init.systems import log_files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init.service import Service

DEFAULT_PIDFILES = ('/var/run/docker.pid', '/run/docker.pid')

# dockerd flags whose daemon.json key is not simply the long flag name.
FLAG_TO_KEY = {
    'add-runtime': 'runtimes',
    'host': 'hosts',
    'H': 'hosts',
    'label': 'labels',
    'storage-opt': 'storage-opts',
    'log-opt': 'log-opts',
    'registry-mirror': 'registry-mirrors',
    'insecure-registry': 'insecure-registries',
    'exec-opt': 'exec-opts',
    'dns-opt': 'dns-opts',
    'default-ulimit': 'default-ulimits',
    'authorization-plugin': 'authorization-plugins',
    'cluster-store-opt': 'cluster-store-opts',
    'default-address-pool': 'default-address-pools',
    'node-generic-resource': 'node-generic-resources',
    'D': 'debug',
    'G': 'group',
    'l': 'log-level',
    'b': 'bridge',
    's': 'storage-driver',
    'p': 'pidfile',
    'g': 'graph',
}
# Flags that are not daemon.json keys at all.
FLAG_NOT_KEYS = ('config-file', 'validate', 'version', 'v', 'help')
# daemon.json keys dockerd accepts besides its flag names (moby daemon/config: NamedOption names,
# skipValidateOptions, and hidden deprecated flags `dockerd --help` does not list). dockerd refuses to start
# with any other key ("the following directives don't match any configuration option").
EXTRA_OPTION_KEYS = ('features', 'builder', 'deprecated-key-path', 'cluster-advertise', 'cluster-store',
                     'cluster-store-opts', 'graph', 'restart')


# --------------------------------------------------------------------------
# Flags and the command line
# --------------------------------------------------------------------------

def flags_to_keys(argv):
    """Map dockerd command-line flags to daemon.json keys: ``{key: '--flag value'}``."""
    found = {}
    args = list(argv)
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if not arg.startswith('-') or arg in ('-', '--'):
            continue
        stripped = arg.lstrip('-')
        value = None
        if '=' in stripped:
            stripped, value = stripped.split('=', 1)
        elif arg.startswith('-') and not arg.startswith('--') and len(stripped) > 1 and stripped[0] in 'Hlbsgp':
            stripped, value = stripped[0], stripped[1:]
        if stripped in FLAG_NOT_KEYS:
            continue
        key = FLAG_TO_KEY.get(stripped, stripped)
        found.setdefault(key, arg if value is not None else ' '.join(args[index - 1:index + 1]))
    return found


def config_file_of(argv):
    for index, arg in enumerate(argv):
        if arg.startswith('--config-file='):
            return arg.split('=', 1)[1]
        if arg == '--config-file' and index + 1 < len(argv):
            return argv[index + 1]
    return None


def same_file(one, real, path):
    try:
        return os.path.realpath(one) in (os.path.realpath(real), os.path.realpath(path))
    except OSError:
        return False


def read_options_file(path, variables=('DOCKER_OPTS', 'OPTIONS')):
    words = []
    try:
        with open(path) as handle:
            lines = handle.read().splitlines()
    except (IOError, OSError):
        return words
    for line in lines:
        line = line.strip()
        if line.startswith('export '):
            line = line[len('export '):]
        for variable in variables:
            if line.startswith(variable + '='):
                try:
                    parsed = shlex.split(line[len(variable) + 1:])
                    words.extend(shlex.split(parsed[0]) if len(parsed) == 1 else parsed)
                except ValueError:
                    pass
    return words


# --------------------------------------------------------------------------
# The process and its service
# --------------------------------------------------------------------------

def find_dockerd_pid(pids, socket_path=None):
    """Of the docker service's processes ``pids`` (``init.service.Service.processes``), dockerd: the one serving
    ``socket_path`` when there are several, else the only one, else None."""
    if socket_path and len(pids) > 1:
        matching = [pid for pid in pids if any(socket_path in arg for arg in procs.process_argv(pid))]
        if len(matching) == 1:
            return matching[0]
    if len(pids) == 1:
        return pids[0]
    return None


class Dockerd(Service):
    """The host's dockerd, driven through its init system.

    What ``docker.apply.converge`` needs (tests provide their own):
    ``pid()``, ``reload()``, ``restart()``, ``flags()`` (dockerd's
    command-line words as it is or will be started), ``config_file()`` and
    ``recent_log(since)`` (dockerd's own messages).
    """

    def __init__(self, run_command, init_system, tools, service='docker', pidfiles=DEFAULT_PIDFILES,
                 socket_path=None, upstart_job_dir='/etc/init', executable=None, together=None):
        fallback = systems.get(init_system).without_definition
        if fallback and not os.path.exists(os.path.join(upstart_job_dir, service + '.conf')):
            # No Upstart job: Upstart runs the SysV script through its rc job, so manage it as SysV does
            # (what Ubuntu's "service" command does on Upstart hosts).
            init_system = fallback
        self.pidfiles = tuple(pidfiles)
        self.socket_path = socket_path
        Service.__init__(self, init_system, service, run_command, tools,
                         find_pid=lambda: find_dockerd_pid(self.processes(), self.socket_path),
                         log_files=log_files(service),
                         executable=executable, pid_files=self.pidfiles, together=together)

    def flags(self):
        words = []
        pid = self.pid()
        if pid:
            words.extend(procs.process_argv(pid)[1:])
        words.extend(self.command_words())
        for options_file in ('/etc/default/%s' % self.name, '/etc/sysconfig/%s' % self.name):
            words.extend(read_options_file(options_file))
        return words

    def config_file(self):
        """The ``--config-file`` the running dockerd was given, or None (the default)."""
        pid = self.pid()
        return config_file_of(procs.process_argv(pid)) if pid else None

    def recent_log(self, since=None):
        return self.logs(since=since)


# --------------------------------------------------------------------------
# Its log and its options
# --------------------------------------------------------------------------

_ERROR_LINE = re.compile(r'level=(fatal|error)|failed to start daemon|unable to configure the docker daemon|'
                         r'panic:|^\S*Error', re.IGNORECASE)


_LOGRUS_MSG = re.compile(r'msg="((?:[^"\\]|\\.)*)"')


def dockerd_error(log_text, lines=4):
    """What dockerd's log says about why it failed: its last error messages, deduplicated."""
    log_lines = [line.strip() for line in (log_text or '').splitlines() if line.strip()]
    errors = [line for line in log_lines if _ERROR_LINE.search(line)] or log_lines
    messages = []
    for line in errors:
        match = _LOGRUS_MSG.search(line)
        message = match.group(1).replace('\\"', '"') if match else line
        if message in messages:
            messages.remove(message)
        messages.append(message)
    return ' | '.join(messages[-lines:])


def dockerd_help(run_command, dockerd_path):
    """``dockerd --help`` of the installed dockerd, or None."""
    if not dockerd_path:
        return None
    rc, out, err = run_command([dockerd_path, '--help'])
    text = (out or '') + (err or '')
    return text if '--config-file' in text else None


def option_keys_from_help(help_text):
    """Every daemon.json key this dockerd accepts, from its ``--help``; None when unknown."""
    if not help_text:
        return None
    names = set(re.findall(r'^\s+(?:-\w, )?--([a-z0-9][a-z0-9-]*)', help_text, re.M))
    return names | set(FLAG_TO_KEY.values()) | set(EXTRA_OPTION_KEYS)


def unknown_keys(config, option_keys):
    if not option_keys:
        return []
    return [key for key in config if key not in option_keys]


def dockerd_validator(run_command, dockerd_path, help_text=None):
    """A ``validator`` using ``dockerd --validate`` when this dockerd has it (23.0+), else None.

    The text goes to dockerd on its standard input (``--config-file /dev/stdin``): no temporary file, so it works
    on a read-only host (check mode, node_state) and leaves nothing in a directory other users write to."""
    if help_text is None:
        help_text = dockerd_help(run_command, dockerd_path)
    if not help_text or '--validate' not in help_text:
        return None

    def validate(text):
        rc, out, err = run_command([dockerd_path, '--validate', '--config-file', '/dev/stdin'], data=text)
        if rc != 0:
            return (err or out or 'rc=%s' % rc).strip().replace('/dev/stdin', 'the merged file')
        return None
    return validate
