# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cdi_spec run: generate NVIDIA's CDI spec with nvidia-ctk, write it when it changed, and its boot pieces.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It holds no AnsibleModule: the concern hands in the host's
commands (``run``), the init system and its tools; errors are raised
(``GpufleetError``) and the concern fails the module with them.

The spec is NVIDIA's own: ``nvidia-ctk cdi generate`` prints it (no file is
written for it, so check mode and node_state only read), and the module
writes it atomically, mode 0644, only when its text differs from the file's.
A spec that differs is stale: the driver, the GPUs or their MIG layout
changed since it was written (``stale`` says which, from both texts).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import spec as spec_mod
from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import boot
from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import mode as cdi_mode
from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import refresh
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files as host_files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import paths as host_paths
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import procs
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.options import Options

READER = 'the container engines, as root'

# cdi_spec's argument spec: each option's one declaration (the module, node_state and Request read it).
SPEC = dict(
    state=dict(type='str', default='present', choices=['present', 'absent']),
    path=dict(type='path', default=spec_mod.DEFAULT_SPEC_PATH),
    nvidia_ctk=dict(type='path', default='/usr/bin/nvidia-ctk'),
    device_name_strategy=dict(type='list', elements='str', default=list(spec_mod.DEFAULT_STRATEGIES),
                              choices=list(spec_mod.STRATEGIES)),
    boot=dict(type='bool', default=True),
    boot_unit=dict(type='str', default='auto', choices=['auto', 'nvidia', 'gpufleet']),
    init_system=dict(type='str', default='auto', choices=['auto', 'systemd', 'sysvinit', 'upstart']),
    runtime_mode=dict(type='str'),
    runtime_config=dict(type='path', default=cdi_mode.DEFAULT_CONFIG),
)
RUNTIME_READER = 'NVIDIA\'s runtime, run by the container engines as root'


class Request(Options):
    """What the user asked for: every option of ``SPEC``."""

    SPEC = SPEC
    OPTIONS = tuple(sorted(SPEC))


def summarize(text, fmt):
    """``spec_mod.parse_spec``'s summary of a spec in ``fmt`` (its ``kind``, ``devices`` and ``driver_version`` at
    least). YAML on a host without PyYAML: ``spec_mod.outline_yaml``'s, or None when the text is not laid out as
    nvidia-ctk writes it. Raises CdiSpecError (a ValueError) for text that is no spec, whatever the text: the
    readers bound its size, depth and values before they build anything from it."""
    if fmt == 'json':
        return spec_mod.parse_spec(text)
    try:
        return spec_mod.parse_yaml_spec(text)
    except ImportError:  # no PyYAML on this host
        return spec_mod.outline_yaml(text)


def stale_reasons(current, new, fmt, path):
    """Why the spec on the host (``path``; ``current``: its text, or None), whose text differs, is not what
    nvidia-ctk generates now (``new``: its summary). A spec that cannot be read is named with what is wrong
    with it: it is stale all the same, and nvidia-ctk's replaces it."""
    if current is None:
        return ['there is no spec yet']
    try:
        old = summarize(current, fmt)
    except ValueError as exc:
        return ['the spec on the host (%s) cannot be read as a CDI spec (%s)' % (path, exc)]
    if old is None:
        return ['the spec on the host differs from what nvidia-ctk generates now']
    return spec_mod.differences(old, new)


class CdiRun(object):
    """One run of cdi_spec. ``run(argv) -> (rc, out, err)`` runs a host command, ``run_ctk`` nvidia-ctk (in
    ``_cdi_boot.ENVIRONMENT``); ``init_system`` and ``tools`` are ``_module.init_system``'s; ``root`` is where host
    paths are (tests give a directory). The boot refresh's pieces are planned and carried out by
    ``refresh.BootRefresh``."""

    def __init__(self, request, run, run_ctk, init_system, tools, check_mode=False, diff=False, host='', root='/',
                 label=None, together=None):
        self.request = request
        self.run = run
        self.together = together
        self.run_ctk = run_ctk
        self.init = init_system
        self.tools = tools
        self.check_mode = check_mode
        self.want_diff = diff
        self.host = host
        self.root = root
        self.label = label
        self.warnings = []
        self.result = {'changed': False, 'actions': [], 'path': request.path, 'devices': [], 'driver_version': None,
                       'stale': [], 'boot': None, 'runtime_mode': None}

    def fail(self, msg):
        raise GpufleetError('%s: %s' % (self.host, msg) if self.host else msg)

    def host_path(self, path):
        return os.path.join(self.root, path.lstrip('/'))

    # ---- the spec -------------------------------------------------------------
    def read_spec(self):
        """(real path, current text or None)."""
        real = host_paths.resolve_path(self.host_path(self.request.path), reader=READER)
        found = host_files.read_file(self.request.path, real, spec_mod.MAX_SPEC_BYTES, reader=READER)
        return real, (found.text if found.exists else None)

    def generate(self):
        """The spec nvidia-ctk prints now, or None (check mode only) when nvidia-ctk is not installed yet."""
        ctk = self.request.nvidia_ctk
        unused_st, why = procs.trusted_executable(self.host_path(ctk))
        if why is not None:
            if self.check_mode and not os.path.lexists(self.host_path(ctk)):
                self.warnings.append('%s is not installed yet: the spec is written once NVIDIA\'s container toolkit '
                                     'is (gpu_node_container_toolkit)' % ctk)
                return None
            self.fail('cannot run %s: %s. Install NVIDIA\'s container toolkit (nvidia-container-toolkit-base), or '
                      'set nvidia_ctk to its nvidia-ctk; the spec %s was left as it is'
                      % (ctk, why, self.request.path))
        self.check_path_directories()
        fmt = spec_mod.spec_format(self.request.path)
        out = self.ctk(fmt)
        try:
            summary = summarize(out, fmt)
            if summary is None:  # YAML, and no PyYAML here: the same spec as JSON
                summary = spec_mod.parse_spec(self.ctk('json'))
        except ValueError as exc:
            self.fail('nvidia-ctk cdi generate printed no usable CDI spec (%s); the spec %s was left as it is'
                      % (exc, self.request.path))
        if not summary['devices']:
            self.fail('nvidia-ctk cdi generate found no NVIDIA GPU (its spec names no device); the spec %s was left '
                      'as it is' % self.request.path)
        self.result.update(devices=summary['devices'], driver_version=summary['driver_version'])
        return out, summary

    def check_path_directories(self):
        """nvidia-ctk writes into the spec the hooks (``nvidia-cdi-hook``, ``nvidia-ctk``) it finds on ``PATH``, and
        every engine runs them as root for each GPU container; the boot refresh uses the same ``PATH``. So each of its
        directories, present or not, must be out of other users' reach (``resolve_path`` of a name in it)."""
        for directory in boot.ENVIRONMENT['PATH'].split(':'):
            try:
                host_paths.resolve_path(os.path.join(self.host_path(directory), 'nvidia-cdi-hook'),
                                        reader='nvidia-ctk, which records the hooks it finds on PATH in the spec (the '
                                        'engines run them as root)')
            except GpufleetError as exc:
                self.fail('%s. The PATH directory %s is searched for the spec\'s hooks; the spec %s was left as it '
                          'is' % (str(exc).rstrip('.'), directory, self.request.path))

    def ctk_runs(self):
        """Whether nvidia-ctk is there to be run (for ``state: absent``, which generates no spec)."""
        return procs.trusted_executable(self.host_path(self.request.nvidia_ctk))[1] is None

    def ctk(self, fmt):
        """What ``nvidia-ctk cdi generate`` prints as ``fmt``, in the environment of every refresh."""
        argv = spec_mod.generate_argv(self.request.nvidia_ctk, self.request.device_name_strategy, fmt=fmt)
        rc, out, err = self.run_ctk(argv)
        if rc != 0:
            self.fail('%s failed (exit %d): %s. The spec %s was left as it is.'
                      % (' '.join(argv), rc, (err or out or '').strip()[-2000:], self.request.path))
        return out

    # ---- NVIDIA's runtime's mode --------------------------------------------------
    def mode_plan(self, ctk_ready):
        """``(actions, real path, current text, new text)`` for ``runtime_mode``: the runtime's config file changed
        in place (``cdi_mode``), only its mode."""
        p = self.request
        if p.runtime_mode is None:
            return [], None, None, None
        try:
            cdi_mode.check_mode_name(p.runtime_mode)
        except GpufleetError as exc:
            self.fail(str(exc))
        real = host_paths.resolve_path(self.host_path(p.runtime_config), reader=RUNTIME_READER)
        found = host_files.read_file(p.runtime_config, real, cdi_mode.MAX_CONFIG_BYTES, reader=RUNTIME_READER)
        current = found.text if found.exists else None
        if ctk_ready:
            rc, defaults_text, err = self.run_ctk([p.nvidia_ctk, '--quiet', 'config', 'default'])
            if rc != 0:
                self.fail('%s config default failed (exit %d): %s. %s was left as it is.'
                          % (p.nvidia_ctk, rc, (err or defaults_text or '').strip()[-2000:], p.runtime_config))
        elif p.state == 'present':  # check mode before the toolkit is installed: the real run writes the mode
            have = cdi_mode.mode_of(cdi_mode.loads(current, p.runtime_config), None) if current else None
            self.result['runtime_mode'] = {'path': p.runtime_config, 'before': have, 'after': p.runtime_mode}
            return ([] if have == p.runtime_mode else ['write_runtime_config']), real, current, None
        else:  # absent after the toolkit is gone: NVIDIA's documented default mode
            defaults_text = ''
        try:
            defaults = cdi_mode.loads(defaults_text, '`nvidia-ctk config default`')
            default_mode = cdi_mode.mode_of(defaults, cdi_mode.NVIDIA_DEFAULT_MODE)
            before_values = cdi_mode.loads(current, p.runtime_config) if current is not None else defaults
            before = after = cdi_mode.mode_of(before_values, default_mode)
            new = current
            if p.state == 'present':
                new, after = cdi_mode.set_mode(current if current is not None else defaults_text, p.runtime_config,
                                               p.runtime_mode), p.runtime_mode
                # The spec directories the runtime reads: what set_mode left, as it was before (only the mode differs).
                problem = p.runtime_mode == 'cdi' and cdi_mode.spec_dir_problem(
                    before_values, defaults, os.path.dirname(p.path), p.runtime_config)
                if problem:
                    self.fail(problem)
            elif current is not None and before == p.runtime_mode and before != default_mode:
                new, after = cdi_mode.set_mode(current, p.runtime_config, default_mode), default_mode
        except GpufleetError as exc:
            self.fail(str(exc))
        self.result['runtime_mode'] = {'path': p.runtime_config, 'before': before, 'after': after}
        return (['write_runtime_config'] if new != current else []), real, current, new

    # ---- the run ----------------------------------------------------------------
    def converge(self):
        p = self.request
        problem = boot.path_problem(p.path, p.nvidia_ctk)
        if problem:
            self.fail(problem)
        real, current = self.read_spec()
        spec_actions = []
        generated = None
        found = None
        if p.state == 'present':
            found = self.generate()
            if found is None:
                spec_actions = ['write_spec']
                self.result['stale'] = ['there is no nvidia-ctk to generate it with yet']
            else:
                generated, summary = found
                if spec_mod.needs_write(current, generated):
                    spec_actions = ['write_spec']
                    self.result['stale'] = stale_reasons(current, summary, spec_mod.spec_format(p.path), p.path)
        elif current is not None:
            spec_actions = ['remove_spec'] if self.ours(current) else []
        ctk_ready = found is not None or p.state == 'absent' and self.ctk_runs()
        mode_actions, mode_real, mode_current, mode_new = self.mode_plan(ctk_ready)
        # The boot refresh's pieces (``refresh``): none planned without ``boot``.
        pieces = refresh.BootRefresh(p, self.run, self.init, self.tools, self.host_path, self.fail, label=self.label,
                                     together=self.together)
        boot_actions = []
        if p.boot:
            boot_actions = pieces.plan()
            self.result['boot'] = pieces.report
        # present: the spec before the runtime reads it in cdi mode; absent: the mode back before the spec goes.
        actions = (spec_actions + mode_actions + boot_actions if p.state == 'present'
                   else mode_actions + boot_actions + spec_actions)
        self.result.update(actions=actions, changed=bool(actions))
        if self.want_diff:
            self.result['diff'] = self.diff(current, generated, spec_actions, pieces)
            if mode_actions:
                self.result['diff'].append({'before_header': p.runtime_config, 'after_header': p.runtime_config,
                                            'before': mode_current or '', 'after': mode_new or ''})
        self.mode_write = (mode_real, mode_new)
        if not self.check_mode:
            for action in actions:
                self.apply(action, real, generated, pieces)
        self.result['warnings'] = self.warnings
        return self.result

    def ours(self, text):
        """Whether the spec file holds NVIDIA's GPU spec (``state: absent`` removes nothing else)."""
        try:
            kind = (summarize(text, spec_mod.spec_format(self.request.path)) or {}).get('kind')
        except ValueError as exc:
            self.warnings.append('%s cannot be read as a CDI spec (%s): left as it is' % (self.request.path, exc))
            return False
        if kind != spec_mod.KIND:
            self.warnings.append('%s is not an NVIDIA GPU CDI spec (kind %s): left as it is'
                                 % (self.request.path, kind))
            return False
        return True

    def diff(self, current, generated, spec_actions, pieces):
        found = []
        path = self.request.path
        if spec_actions:
            found.append({'before_header': path, 'after_header': path, 'before': current or '',
                          'after': generated or '' if 'write_spec' in spec_actions else ''})
        return found + pieces.diffs()

    def apply(self, action, real, generated, pieces):
        try:
            if action == 'write_spec':
                host_files.ensure_directory(real)
                # The temp file in a private sibling directory: never in a directory the engines read whole (and
                # gone again when this write made it and failed).
                with host_files.temp_directory(os.path.dirname(real), real) as temp_dir:
                    host_files.write_atomic(real, generated.encode('utf-8'), mode=0o644, label=self.label,
                                            temp_dir=temp_dir)
            elif action == 'remove_spec':
                os.unlink(real)
            elif action == 'write_runtime_config':
                mode_real, text = self.mode_write
                host_files.ensure_directory(mode_real)
                host_files.write_atomic(mode_real, text.encode('utf-8'), label=self.label)
            else:  # the boot refresh's
                pieces.apply(action)
        except (GpufleetError, OSError) as exc:
            self.fail('%s failed: %s' % (action, exc))
