# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_state: every concern's check-mode verdict on one host, in one process.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. Each concern is evaluated by running that concern module's own
body (``registry.CONCERNS[name].run``) in check mode, with a stand-in for
its AnsibleModule (``ConcernModule``) whose options are validated against the
concern module's own argument spec. There is no second copy of any decision:
what node_state says about a concern is what the concern's module, run in
check mode with the same options, says.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time
import traceback

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import registry
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.run import RunState
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import engines as concerns_engines
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import memo as host_memo
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import module as concerns_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import service

# A concern that must run whenever one it depends on runs (its declaration's ``after``): a persistence daemon that is
# (re)started, installed or removed may bring the GPUs back to its global default, so their modes are set again after
# it.
DEPENDS = registry.DEPENDS
# The memo of the systemd units a run asked about (host_memo): the next run asks about them together.
UNITS_MEMO = 'systemd-units.json'
# A run asks about a few units; a kept list is read no further than this.
MAX_KEPT_UNITS = 256


class ConcernExit(BaseException):
    """A concern's run ended (exit_json or fail_json); BaseException, as AnsibleModule's SystemExit is."""

    def __init__(self, result, failed):
        BaseException.__init__(self, result.get('msg', ''))
        self.result = result
        self.failed = failed


def _frozen(value):
    """``value`` (a command's argv and keyword arguments) as a dictionary key."""
    if isinstance(value, dict):
        return tuple(sorted((key, _frozen(item)) for key, item in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(item) for item in value)
    return value


class ConcernModule(object):
    """What a concern's run uses of its AnsibleModule, for node_state: its own options, check mode, always.

    Commands and tool lookups go to node_state's AnsibleModule; warnings are
    collected; ``fail_json``/``exit_json`` end the concern's run only. The same
    command with the same input is run once per node_state run (``answers``,
    shared by the concerns): nothing here changes the host, so a second run of
    a query would answer the same (dockerd's concern asked systemd about the
    docker unit four times, three of them the same question).
    """

    def __init__(self, module, concern, params, diff=False, answers=None, run_state=None):
        self._module = module
        self.run_state = run_state
        self._answers = {} if answers is None else answers
        self.concern = concern
        self.check_mode = True
        self._diff = diff
        self.warnings = []
        validated = ArgumentSpecValidator(concern.argument_spec(), **concern.checks).validate(dict(params))
        if validated.error_messages:
            raise ConcernExit({'msg': '%s: %s' % (concern.module, '; '.join(validated.error_messages))}, True)
        self.params = validated.validated_parameters

    def run_command(self, args, **kwargs):
        try:
            key = (_frozen(args), _frozen(kwargs))
            hash(key)
        except TypeError:  # an argument that cannot be a key (none of ours): asked each time
            return self._module.run_command(args, **kwargs)
        if key not in self._answers:
            self._answers[key] = self._module.run_command(args, **kwargs)
        return self._answers[key]

    def get_bin_path(self, arg, required=False, opt_dirs=None):
        path = self._module.get_bin_path(arg, required=False, opt_dirs=opt_dirs)
        if required and path is None:
            self.fail_json(msg='Failed to find required executable "%s" in PATH' % arg)
        return path

    def warn(self, warning):
        self.warnings.append(warning)

    def fail_json(self, **result):
        raise ConcernExit(result, True)

    def exit_json(self, **result):
        raise ConcernExit(result, False)

    def backup_local(self, path):
        raise AssertionError('%s wrote a backup of %s in check mode' % (self.concern.module, path))

    def selinux_enabled(self):
        return self._module.selinux_enabled()

    def selinux_context(self, path):
        return self._module.selinux_context(path)

    def selinux_default_context(self, path):
        return self._module.selinux_default_context(path)

    def set_context_if_different(self, *args, **kwargs):
        raise AssertionError('%s set a file context in check mode' % self.concern.module)


def check(module, concern, params, diff=False, answers=None, state=None):
    """``{'converged', 'result', 'failed', 'warnings'}``: the concern module's check-mode run with ``params``
    (``answers``: the commands already run in this node_state run, and their answers; ``state``: the run's
    ``common.run.RunState``, handed to the concern on its stand-in module)."""
    try:
        stand_in = ConcernModule(module, concern, params, diff=diff, answers=answers, run_state=state)
    except ConcernExit as exc:
        return {'converged': False, 'failed': True, 'result': exc.result, 'warnings': []}
    try:
        result, failed = concern.run(stand_in), False
    except ConcernExit as exc:
        result, failed = exc.result, exc.failed
    except Exception as exc:  # one concern's unexpected error must not hide the others' verdicts
        result, failed = {'msg': '%s could not be evaluated: %s: %s' % (
            concern.module, type(exc).__name__, exc), 'exception': traceback.format_exc()}, True
    result = dict(result)
    # A read-only concern (container_toolkit) changes nothing in any mode and says ``converged: false`` itself.
    converged = not failed and not result.get('changed') and result.get('converged') is not False
    return {'converged': converged, 'failed': failed, 'result': result,
            'warnings': stand_in.warnings}


def engine_list(wanted, run, containerd_config, state=None):
    """``(engines, found)``: the engines of ``wanted`` (``auto`` = those installed, as container_engines_info says),
    in the order they are registered; ``found`` is container_engines_info's report, or None without ``auto``."""
    found = concerns_engines.detect(run, containerd_config=containerd_config, state=state) if 'auto' in wanted else None
    chosen = set(wanted) | set(found['auto'] if found else ())
    return [engine for engine in registry.ENGINES if engine in chosen], found


def describe(name, verdict):
    """What would change for one concern, in one line ('' when converged)."""
    if verdict['converged']:
        return ''
    result = verdict['result']
    if verdict['failed']:
        return 'fails: %s' % result.get('msg', 'no message')
    if name == 'gpu_persistence':
        gpus = ['%s %s->%s' % (gpu.get('index'), gpu.get('before'), gpu.get('after'))
                for gpu in result.get('gpus', []) if gpu.get('changed')]
        if result.get('state_changed'):
            gpus.append('state file')
        return ', '.join(gpus)
    if name == 'container_toolkit':
        return '; '.join(result.get('drift', []))
    if name == 'cdi':
        return '; '.join((['stale: ' + ', '.join(result['stale'])] if result.get('stale') else [])
                         + [', '.join(result.get('actions', []))])
    if name in registry.ENGINES:
        return 'action %s%s' % (result.get('action'), ', file changes' if result.get('file_changed') else '')
    return ', '.join(result.get('actions', [])) or result.get('msg', 'changes')


def kept_units(kept):
    """The unit names in the units memo ``kept`` (what ``host.memo.load`` answered): the strings of its ``units`` list;
    anything else is ignored (``service.Together`` then keeps only unit names)."""
    units = kept.get('units') if isinstance(kept, dict) else None
    if not isinstance(units, list):
        return []
    return [unit for unit in units[:MAX_KEPT_UNITS] if isinstance(unit, str)]


def evaluate(module, options, diff=False):
    """node_state's result for ``options`` (the module's parameters): every requested concern's verdict."""
    run = concerns_module.runner(module)
    # one dump per containerd config file; containerd's answers of earlier runs used where their inputs are the same,
    # new ones kept for later runs (host_memo: node_state's only write, root's alone), except in a check-mode play
    store = not getattr(module, 'check_mode', False)
    # the units the last run asked systemd about: asked together, in one `systemctl show`, when the first is asked
    together = service.Together(kept_units(host_memo.load(UNITS_MEMO)))
    result = _evaluate(module, options, run, diff, RunState(dumps={}, store=store, together=together))
    if store and together.asked and together.asked != together.units:
        host_memo.store(UNITS_MEMO, {'units': together.asked})
    return result


def _evaluate(module, options, run, diff, state):
    requested = [name for name in registry.ORDER if options.get(name) is not None]
    engines, found = [], None
    started = time.time()
    if any(name in registry.ENGINES for name in requested):
        if options['engines']:
            containerd_config = (options.get('containerd') or {}).get('path') or registry.CONTAINERD.spec['path'][
                'default']
            engines, found = engine_list(options['engines'], run, containerd_config, state)
        else:
            engines = [name for name in requested if name in registry.ENGINES]
        requested = [name for name in requested if name not in registry.ENGINES or name in engines]
    engines_seconds = round(time.time() - started, 3)
    concerns, warnings, diffs, answers = {}, [], [], {}
    state.verdicts = concerns  # gpu_health, evaluated last, reads the others' verdicts
    for name in requested:
        params = dict(options[name])
        if name == 'persistenced' and options.get('bundled_source'):
            params.setdefault('bundled_source', options['bundled_source'])
        started = time.time()
        verdict = check(module, registry.CONCERNS[name], params, diff=diff, answers=answers, state=state)
        verdict['seconds'] = round(time.time() - started, 3)
        verdict['changes'] = describe(name, verdict)
        concerns[name] = verdict
        warnings.extend('%s: %s' % (registry.CONCERNS[name].module, w) for w in verdict.pop('warnings'))
        # node_state runs no container: an engine's verification (check_mode, or off) would say nothing.
        verdict['result'].pop('verification', None)
        produced = verdict['result'].pop('diff', None)
        if produced:
            diffs.extend(produced if isinstance(produced, list) else [produced])
    drifted = [name for name in requested if not concerns[name]['converged']]
    to_run = [name for name in requested
              if name in drifted or any(dep in drifted for dep in DEPENDS.get(name, ()))]
    if drifted:
        msg = 'drifted: ' + '; '.join('%s (%s)' % (name, concerns[name]['changes']) for name in drifted)
    else:
        msg = 'converged: %s' % (', '.join(requested) or 'nothing evaluated')
    health = concerns.get('gpu_health', {}).get('result', {})
    if health.get('verdict'):
        msg += '; health %s (%s)' % (health['verdict'], health.get('action'))
    result = dict(changed=False, converged=not drifted, drifted=drifted, run=to_run, evaluated=requested,
                  concerns=concerns, engine_list=engines, engines_found=found['engines'] if found else None,
                  engines_seconds=engines_seconds, msg=msg)
    return result, warnings, diffs
