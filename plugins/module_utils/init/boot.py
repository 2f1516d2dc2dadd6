# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The boot pieces a concern installs (a script, a udev rule, a unit, a drop-in): what to write, enable or remove.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. Pure: texts in, actions out. ``device_links`` and ``cdi_spec``
both plan their boot pieces here; ``kinds`` is the order a concern writes its
pieces in (the unit last, since it runs the script), and they are removed in
the reverse order. A piece is ours when its text carries ``MARKER``: a file
without it is never removed.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from collections import namedtuple

MARKER = 'Managed by gpufleet.nvidia'

# A program a concern runs once at boot, before the container engines start: what every init system's unit for it
# says, each in its own words (init.systems: each class renders it, ``render_boot_task``).
# header: the first line (``header``); service: its name (a SysV script's Provides); summary: a systemd unit's
# Description; short: a SysV Short-Description and an Upstart job's description; lines: a SysV Description;
# after: the systemd units it starts after; should_start: the SysV services it starts after; engines: the services
# it starts before (systemd: their .service units and ``before_units``); chkconfig: a SysV script's priorities;
# script: the program; per_engine: an Upstart instance per engine (each engine's start waits for its own), not one
# task that also starts with the runlevel.
BootTask = namedtuple('BootTask', 'header service summary short lines after should_start engines before_units '
                                  'chkconfig script per_engine rerun_after')
# rerun_after (Upstart, per_engine tasks): the jobs whose start and stop run the task again (an instance each).
BootTask.__new__.__defaults__ = ((),)


def header(comment, module):
    """The first line of every piece: the marker, the module that writes it, and that local changes go."""
    return ('%s %s (gpufleet.nvidia.%s); local changes are overwritten on the next run.\n'
            % (comment, MARKER, module))


def is_ours(text):
    return text is not None and MARKER in text


def plan_present(kinds, current, desired, enabled):
    """``write_<kind>`` per changed piece, ``reload_init`` for a changed unit (or drop-in) the init system has
    read already, ``enable`` when the unit does not start at boot. ``current``/``desired``: {kind: text}; a
    ``desired`` without ``unit`` (a drop-in for another package's unit, or no init system) still enables that
    unit when ``enabled`` is False (``enabled`` None: nothing to enable)."""
    actions = ['write_%s' % kind for kind in kinds if kind in desired and current.get(kind) != desired[kind]]
    loaded = [kind for kind in ('unit', 'dropin') if kind in desired]
    if any('write_' + kind in actions and current.get(kind) is not None for kind in loaded) or (
            'write_dropin' in actions and 'dropin' in desired):
        actions.append('reload_init')
    if loaded and enabled is False:
        actions.append('enable')
    return actions


def plan_absent(kinds, current, enabled):
    """``disable`` (our own unit, when enabled) and ``remove_<kind>`` for the pieces this collection wrote (files
    without its marker stay), in the reverse order; ``reload_init`` after removing a drop-in."""
    actions = []
    if is_ours(current.get('unit')) and enabled:
        actions.append('disable')
    actions += ['remove_%s' % kind for kind in reversed(kinds) if is_ours(current.get(kind))]
    if 'remove_dropin' in actions:
        actions.append('reload_init')
    return actions


def diffs(kinds, files, current, actions):
    """Ansible's diff of each piece of ``kinds`` that ``actions`` write or remove: ``files`` {kind: (path, text,
    mode)}, ``current`` {kind: text or None}; a removed piece's after is empty."""
    found = []
    for kind in kinds:
        if kind not in files or not ({'write_' + kind, 'remove_' + kind} & set(actions)):
            continue
        path, text, _mode = files[kind]
        found.append({'before_header': path, 'after_header': path, 'before': current.get(kind) or '',
                      'after': text if 'write_' + kind in actions else ''})
    return found


# --------------------------------------------------------------------------
# A boot-time program's unit under each init system: it runs once, before the container engines start
# --------------------------------------------------------------------------

def render_systemd(header_line, description, after, before, script):
    """A oneshot unit that stays active once ``script`` ran, started with multi-user.target."""
    return '\n'.join([
        header_line.rstrip('\n'),
        '[Unit]',
        'Description=%s' % description,
        'After=%s' % ' '.join(after),
        'Before=%s' % ' '.join(before),
        '',
        '[Service]',
        'Type=oneshot',
        'RemainAfterExit=yes',
        'ExecStart=%s' % script,
        '',
        '[Install]',
        'WantedBy=multi-user.target',
        '',
    ])


def render_sysv(header_line, service, should_start, start_before, short, description, chkconfig, script):
    """An LSB init script whose start (restart, reload) runs ``script``; ``description``: its lines."""
    lines = ['# Description:       %s' % description[0]]
    lines += ['#                    %s' % line for line in description[1:]]
    return '''#!/bin/sh
%(header)s### BEGIN INIT INFO
# Provides:          %(service)s
# Required-Start:    $local_fs
# Required-Stop:
# Should-Start:      %(should_start)s
# X-Start-Before:    %(start_before)s
# Default-Start:     2 3 4 5
# Default-Stop:
# Short-Description: %(short)s
%(description)s
### END INIT INFO
# chkconfig: 2345 %(chkconfig)s
# description: %(short)s

case "${1:-}" in
    start|restart|reload|force-reload) exec %(script)s ;;
    stop|status) exit 0 ;;
    *) echo "Usage: $0 {start|stop|restart|force-reload|status}" >&2; exit 3 ;;
esac
''' % {'header': header_line, 'service': service, 'should_start': ' '.join(should_start),
       'start_before': ' '.join(start_before), 'short': short, 'description': '\n'.join(lines),
       'chkconfig': chkconfig, 'script': script}


def render_upstart(header_line, description, engines, script, runlevel=True, rerun_after=()):
    """An Upstart task started before each engine (its ``starting`` event waits for the task), and with
    ``runlevel`` at boot too.

    Upstart holds an event only for the jobs that event starts. A task already started by another event (the
    runlevel, or another engine's ``starting``: the lab's containerd job starts on ``starting docker``, so one
    event started both) is not waited for, and the engine starts beside it (measured on Upstart 1.13: containerd
    started 0.06 s before the CDI refresh had written its spec). Without ``runlevel`` the task is an instance
    per engine (``instance $JOB``): each engine's ``starting`` event starts an instance of its own and waits for
    it, whatever else runs.

    ``rerun_after`` (with ``runlevel`` False): jobs whose ``started`` and ``stopped`` events run the task again,
    an instance each, once that job is up or gone. Upstart cannot order a task after a job that another event is
    starting (``start`` of a job already starting returns at once), so the task runs again after it instead.
    """
    starting = ' or '.join('starting %s' % engine for engine in engines)
    if rerun_after and not runlevel:
        starting += ''.join(' or started %s or stopped %s' % (job, job) for job in rerun_after)
    if runlevel:
        lines = ['# A task: the engines\' "starting" events wait until it has run.',
                 'start on (%s or runlevel [2345])' % starting]
    else:
        lines = ['# One instance per engine: each engine\'s "starting" event starts its own and waits until it has run',
                 '# (an event waits only for the jobs it starts).']
        if rerun_after:
            lines.append('# And once more after %s started or stopped (an instance of its own).' % ', '.join(rerun_after))
        lines += ['start on (%s)' % starting, 'instance $JOB']
    return ('%s'
            'description "%s"\n'
            '\n'
            '%s\n'
            'task\n'
            'exec %s\n' % (header_line, description, '\n'.join(lines), script))
