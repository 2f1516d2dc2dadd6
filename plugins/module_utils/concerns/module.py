# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the modules do with their AnsibleModule, once: run host commands, find the init system, finish a run.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. The module_utils below it take plain callables (``run(argv)``)
and dicts, so that pytest drives them without Ansible; these helpers are the
only place that turns an AnsibleModule into them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import detect
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError, RunFailed
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.run import RunState


def runner(module, environ=None):
    """``run(argv, data=None) -> (rc, out, err)`` on the host, in the C locale (the messages we parse are English)
    with ``environ`` added; ``data``: text for the command's standard input."""
    update = dict(environ or {}, LANG='C', LC_ALL='C')

    def run(argv, data=None):
        extra = {} if data is None else {'data': data}
        return module.run_command(argv, environ_update=update, **extra)
    return run


def init_system(module, run, chosen='auto'):
    """``(init_system, tools, detected)``: ``chosen`` unless it is ``auto``, the service tools found (with
    journalctl for log lines), and ``detect.detect``'s whole answer (its ``reason`` for messages)."""
    detected = detect.detect('/', run_command=run)
    tools = dict(detected['evidence']['tools'])
    tools['journalctl'] = module.get_bin_path('journalctl')
    return (detected['init_system'] if chosen == 'auto' else chosen), tools, detected


def config_run(module, path, converge):
    """Run ``converge() -> result`` for the configuration file ``path`` and return the module's result.

    A GpufleetError or an OS error fails the module naming ``path``; the
    result's ``warnings`` become Ansible warnings and its ``before``/``after``
    texts the diff (a list with its ``more_diffs``, other files' diffs, when it has any).
    """
    try:
        result = converge()
    except GpufleetError as exc:
        module.fail_json(msg=str(exc), path=path)
    except (IOError, OSError) as exc:
        module.fail_json(msg='%s: %s. Nothing more was done.' % (path, exc), path=path)
    for warning in result.pop('warnings'):
        module.warn(warning)
    before, after = result.pop('before'), result.pop('after')
    more = result.pop('more_diffs', None) or []  # other files the run changed (crio_runtime's take_over)
    if module._diff:
        result['diff'] = dict(before=before, after=after, before_header=path, after_header=path)
        if more:
            result['diff'] = [result['diff']] + list(more)
    return result


def run_state(module):
    """The run's ``common.run.RunState``: node_state's, handed to each concern it evaluates on its stand-in module,
    else a new one that keeps nothing (a concern module's own run)."""
    state = getattr(module, 'run_state', None)
    return state if isinstance(state, RunState) else RunState()


class HostCalls(object):
    """What an operation that runs a whole module (``persistenced.deploy.Deployer``) asks of the AnsibleModule,
    handed to it so that it holds no AnsibleModule and imports nothing of this layer: ``run(argv)`` (``runner``),
    ``init_system(chosen)``, ``bin_path(name)`` (a missing tool ends the run, as ``get_bin_path(required=True)``
    does), ``backup(path)``, ``label`` (``files.selinux_labeller``), ``check_mode``, ``diff`` and ``together`` (the run's
    ``init.service.Together``, or None)."""

    def __init__(self, module):
        self._module = module
        self.run = runner(module)
        self.check_mode = module.check_mode
        self.diff = module._diff
        self.label = files.selinux_labeller(module)
        self.together = run_state(module).together

    def init_system(self, chosen='auto'):
        return init_system(self._module, self.run, chosen)

    def bin_path(self, name):
        path = self._module.get_bin_path(name)
        if path is None:
            raise RunFailed('%s: %s is needed and was not found on this host (looked in PATH and the sbin '
                            'directories)' % (os.uname()[1], name))
        return path

    def backup(self, path):
        return self._module.backup_local(path)
