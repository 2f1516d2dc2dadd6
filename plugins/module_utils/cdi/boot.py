# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The CDI spec's boot pieces: which refresh runs at boot (NVIDIA's units or ours) and their texts.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. Pure: facts in, texts and choices out.

At every boot, before the container engines start, the spec is generated
again with NVIDIA's ``nvidia-ctk cdi generate``, so a driver upgraded or a GPU
added while the host was down is in the spec before any container asks for
it (a container with ``restart: always`` is started by its engine at boot).

* ``nvidia``: NVIDIA's toolkit (1.18 and later) ships ``nvidia-cdi-refresh.service``
  (and a ``.path`` unit that starts it when the driver's modules or
  ``nvidia-ctk`` change). It has no order against the engines; a drop-in of
  ours adds it (``After=`` the device nodes and links, ``Before=`` the engines)
  and the unit is enabled. Chosen on systemd hosts that have the unit, when it
  writes the same file the same way (its environment file sets nothing that
  changes the spec, and the device names are NVIDIA's default).
* ``gpufleet``: a POSIX sh script of ours (generate to a temp file beside the
  spec, replace the spec only when the text differs) run by a unit of the
  host's init system (systemd unit, LSB script, Upstart task), ordered the
  same way. Everywhere else.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import boot as init_boot
from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import spec as spec_mod
from ansible_collections.gpufleet.nvidia.plugins.module_utils.engines import names as engines_names
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import systems
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init.systems import unit_mode, unit_path

SERVICE = 'gpufleet-cdi-refresh'
SCRIPT_PATH = '/usr/local/sbin/gpufleet-cdi-refresh'
NVIDIA_SERVICE = 'nvidia-cdi-refresh'
# Where NVIDIA's packages put the unit (Debian's /lib and the merged /usr/lib), and its environment file.
NVIDIA_UNIT_PATHS = ('/lib/systemd/system/nvidia-cdi-refresh.service', '/usr/lib/systemd/system/nvidia-cdi-refresh.service')
NVIDIA_ENV_FILE = '/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env'
NVIDIA_OUTPUT_VAR = 'NVIDIA_CTK_CDI_OUTPUT_FILE_PATH'
DROPIN_PATH = '/etc/systemd/system/nvidia-cdi-refresh.service.d/50-gpufleet-order.conf'
BOOT_KINDS = {'gpufleet': ('script', 'unit'), 'nvidia': ('dropin',)}
SOURCES = ('nvidia', 'gpufleet')

# The engines' services (and the kubelet's), which start after the spec; the device nodes' and links' before it.
ENGINE_SERVICES = tuple(engines_names.ENGINES) + ('podman',)
AFTER = ('systemd-modules-load.service', 'systemd-udev-settle.service', 'nvidia-persistenced.service',
         'gpufleet-dev-char-links.service')
# A path the script can carry without quoting: what nvidia-ctk and the engines accept is far wider, but a spec
# path or nvidia-ctk with spaces or quotes is refused rather than escaped into a root script.
SAFE_PATH = re.compile(r'^/[A-Za-z0-9._/+-]+$')
# The environment nvidia-ctk generates in, the module's, our script's and NVIDIA's unit's alike: the spec records
# the nvidia-cdi-hook that PATH finds, so another PATH would give other bytes and the two writers would disagree.
# systemd's default PATH; TMPDIR: nvidia-ctk prints through a temp file there, and /run is root's alone.
ENVIRONMENT = {'PATH': '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'TMPDIR': '/run'}


def path_problem(path, nvidia_ctk='/usr/bin/nvidia-ctk'):
    """Why ``path`` cannot be the spec file, or ``nvidia_ctk`` the generator (a sentence), or None."""
    for given in (path, nvidia_ctk):
        if not SAFE_PATH.match(given) or '/../' in given + '/' or '/./' in given + '/':
            return ('%s: give a plain absolute path of letters, digits and ._+-/ only (it is written into a root '
                    'script that runs at boot)' % given)
    try:
        spec_mod.spec_format(path)
    except spec_mod.CdiSpecError as exc:
        return str(exc)
    return None


def env_assignments(text):
    """The ``NAME=value`` lines of a systemd EnvironmentFile (comments and blank lines left out)."""
    found = {}
    for line in (text or '').splitlines():
        line = line.strip()
        if not line or line.startswith(('#', ';')) or '=' not in line:
            continue
        name, value = line.split('=', 1)
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in '"\'':
            value = value[1:-1]
        found[name.strip()] = value
    return found


def choose_source(wanted, init_system, nvidia_unit, env_text, path, names):
    """``(source, reason)``: whose refresh runs at boot (``nvidia``, ``gpufleet``, or None: none can), and why.

    ``nvidia_unit``: the path of NVIDIA's unit on the host, or None; ``env_text``: its environment file's text.
    Raises ValueError (the message) when ``wanted`` is ``nvidia`` and NVIDIA's unit cannot do it.
    """
    why_not = None
    if not systems.get(init_system).runs_systemd_units:
        why_not = ('NVIDIA ships its refresh as systemd units only; this host runs %s'
                   % (init_system or 'no init system we know'))
    elif nvidia_unit is None:
        why_not = 'NVIDIA\'s nvidia-cdi-refresh.service is not installed (toolkit 1.18 and later ship it)'
    else:
        env = env_assignments(env_text)
        output = env.pop(NVIDIA_OUTPUT_VAR, spec_mod.DEFAULT_SPEC_PATH)
        if output != path:
            why_not = 'nvidia-cdi-refresh.service writes %s (%s), not %s' % (output, NVIDIA_ENV_FILE, path)
        elif env:
            why_not = '%s sets %s, which changes the spec it writes' % (NVIDIA_ENV_FILE, ', '.join(sorted(env)))
        elif tuple(names) != spec_mod.DEFAULT_STRATEGIES:
            why_not = ('nvidia-cdi-refresh.service names devices by %s, not %s'
                       % (' and '.join(spec_mod.DEFAULT_STRATEGIES), ' and '.join(names)))
    if wanted == 'nvidia' and why_not:
        raise ValueError('boot_unit is nvidia, but %s' % why_not)
    if wanted in ('auto', 'nvidia') and not why_not:
        return 'nvidia', 'NVIDIA\'s nvidia-cdi-refresh.service (%s) with our order' % nvidia_unit
    if init_system is None:
        return None, 'no init system recognised: no boot refresh'
    if wanted == 'gpufleet':
        return 'gpufleet', 'boot_unit is gpufleet'
    return 'gpufleet', 'our own %s (%s)' % (SERVICE, why_not)


def _order_lines():
    engines = ' '.join('%s.service' % name for name in ENGINE_SERVICES)
    return ['After=%s' % ' '.join(AFTER), 'Before=%s kubelet.service' % engines]


def temp_directory(directory):
    """Where the refresh makes its temp file for a spec in ``directory``: the root-only sibling the module uses too
    (``host.files.private_directory``: ``<parent>/.<name>.gpufleet``), never a directory the engines read."""
    parent, name = directory.rstrip('/').rsplit('/', 1)
    return '%s/.%s.gpufleet' % (parent, name)


def render_script(path, nvidia_ctk, names, fmt):
    """The boot-time program: generate the spec (as ``fmt``) in a root-only sibling directory and replace the spec
    only when the text differs, one run at a time (util-linux's ``flock`` on that root-only directory, where the
    host has it).

    On Upstart each engine's ``starting`` event runs an instance of its own, at the same time. Unserialised, two
    instances that both found the spec stale each replaced it (measured on the lab's Upstart 1.13 under load: the
    second rename landed 0.09 s after containerd had started on the first one's spec); serialised, the second
    finds the spec current and leaves it."""
    directory, name = path.rsplit('/', 1)
    return '''#!/bin/sh
%(header)s# Writes the NVIDIA CDI spec %(path)s with NVIDIA's nvidia-ctk, as gpufleet.nvidia.cdi_spec
# does: at boot, before the container engines start, so that a driver or GPU change made while
# the host was down is in the spec before any container asks for it.
set -u
PATH=%(env_path)s
TMPDIR=%(tmpdir)s
export PATH TMPDIR
ctk=%(ctk)s
spec=%(path)s
[ -x "$ctk" ] || { echo "$0: $ctk is not installed: the CDI spec was not refreshed" >&2; exit 0; }
[ -d %(directory)s ] || mkdir -p -m 0755 %(directory)s || exit 1
# The temp file outside the directory the engines read, in a root-only sibling on the same file system.
if [ ! -d %(private)s ] || [ -L %(private)s ]; then
    mkdir -m 0700 %(private)s 2>/dev/null
    # Made by another refresh at the same moment, or not made at all (a link in its place: never used).
    if [ ! -d %(private)s ] || [ -L %(private)s ]; then
        echo "$0: cannot create the directory %(private)s" >&2
        exit 1
    fi
fi
# One refresh at a time (Upstart runs one instance per engine, together): the next one finds the spec current and
# leaves it, so it is written once, before the first engine starts. The lock is the root-only directory itself,
# opened for reading: no lock file to create, truncate or follow, and no other user can open it to hold the lock.
if command -v flock >/dev/null 2>&1; then
    exec 9<%(private)s && flock 9 || exit 1
fi
tmp=$(mktemp %(private)s/.%(name)s.XXXXXX) || exit 1
if ! "$ctk" %(args)s >"$tmp"; then
    rm -f "$tmp"
    exit 1
fi
if cmp -s "$tmp" "$spec"; then
    rm -f "$tmp"
    exit 0
fi
chmod 0644 "$tmp" && mv -f "$tmp" "$spec" || { rm -f "$tmp"; exit 1; }
''' % {'header': init_boot.header('#', 'cdi_spec'), 'path': path, 'ctk': nvidia_ctk, 'directory': directory,
       'name': name, 'private': temp_directory(directory), 'args': ' '.join(spec_mod.generate_argv(nvidia_ctk, names, fmt=fmt)[1:]),
       'env_path': ENVIRONMENT['PATH'], 'tmpdir': ENVIRONMENT['TMPDIR']}


# Our refresh's unit (SysV script, Upstart task instance per engine), before the engines (init.systems renders it).
# After the persistence daemon: NVIDIA's generator mounts its socket only while it exists, and a spec naming a socket
# that is gone fails every GPU container. systemd (After=) and SysV (Should-Start) order the refresh after the daemon
# at boot; Upstart cannot (an engine's "starting" event may come before the runlevel starts the daemon), so there the
# task runs again once the daemon has started or stopped (rerun_after), whoever started or stopped it.
TASK = init_boot.BootTask(
    header=init_boot.header('#', 'cdi_spec'), service=SERVICE,
    summary='NVIDIA CDI spec, written before the container engines start', short='NVIDIA CDI spec',
    lines=('Writes the NVIDIA CDI spec before the container engines start.',), after=AFTER,
    should_start=('nvidia-persistenced', 'gpufleet-dev-char-links'), engines=ENGINE_SERVICES,
    before_units=('kubelet.service',), chkconfig='15 85', script=SCRIPT_PATH, per_engine=True,
    rerun_after=('nvidia-persistenced',))


def render_unit(init_system):
    """Our refresh unit's text under ``init_system``, or None where no unit of ours can run."""
    return systems.get(init_system).render_boot_task(TASK)


def render_dropin():
    """The order NVIDIA's nvidia-cdi-refresh.service lacks."""
    return '\n'.join([
        init_boot.header('#', 'cdi_spec').rstrip('\n'),
        '# NVIDIA\'s refresh, before the container engines start (the unit itself has no order against them).',
        '[Unit]',
    ] + _order_lines() + [''])


def boot_files(source, init_system, path, nvidia_ctk, names):
    """{kind: (path, text, mode)} of ``source``'s pieces on a host running ``init_system``."""
    if source == 'nvidia':
        return {'dropin': (DROPIN_PATH, render_dropin(), 0o644)}
    if source != 'gpufleet':
        return {}
    files = {'script': (SCRIPT_PATH, render_script(path, nvidia_ctk, names, spec_mod.spec_format(path)), 0o755)}
    if init_system in systems.SYSTEMS:
        files['unit'] = (unit_path(init_system, SERVICE), render_unit(init_system), unit_mode(init_system))
    return files


def every_piece(init_system):
    """{kind: path} of every piece either source may have written on this host (``state: absent`` looks at all)."""
    found = {'dropin': DROPIN_PATH, 'script': SCRIPT_PATH}
    if init_system in systems.SYSTEMS:
        found['unit'] = unit_path(init_system, SERVICE)
    return found
