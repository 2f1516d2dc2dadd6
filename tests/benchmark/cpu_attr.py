#!/usr/bin/env python3
"""Where a command's machine CPU goes: the command's own (and its children's), and each long-lived process's.

Not a test, not part of the collection: a measuring tool for the converged-host analysis
(docs/benchmark/converged-host.md). Run as root, so that every process's /proc/PID/stat is readable:

    python3 tests/benchmark/cpu_attr.py -- ansible-playbook playbooks/drift.yml

It reads, for every process alive before and after the command, utime+stime (its own CPU) and cutime+cstime (its
reaped children's), and prints the differences summed by command name. On the lab, a host's sshd gets each
session's CPU as its children's when the session ends: the module's Python, become, the shell and every command the
module ran, on the host. A process started and ended within the command is counted where it was reaped; the
command's own tree (the controller: ansible-playbook, its workers, their ssh clients) is its rusage.
"""

from __future__ import print_function

import collections
import os
import resource
import subprocess
import sys
import time

HZ = os.sysconf('SC_CLK_TCK')


def snapshot():
    """``{(pid, start time): (command name, own CPU ticks, reaped children's ticks)}`` of every process."""
    found = {}
    for pid in os.listdir('/proc'):
        if not pid.isdigit():
            continue
        try:
            with open('/proc/%s/stat' % pid) as handle:
                data = handle.read()
        except OSError:
            continue
        name = data[data.index('(') + 1:data.rindex(')')]
        fields = data[data.rindex(')') + 2:].split()
        # fields from the state on (proc(5) numbers them from 3): utime 14, stime 15, cutime 16, cstime 17, start 22
        found[(int(pid), int(fields[19]))] = (name, int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14]))
    return found


def main(argv):
    if '--' not in argv or argv.index('--') == len(argv) - 1:
        sys.exit('usage: cpu_attr.py -- COMMAND [ARGS...]')
    command = argv[argv.index('--') + 1:]
    before = snapshot()
    used_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    rc = subprocess.call(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - started
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    after = snapshot()
    own, children = collections.Counter(), collections.Counter()
    for key, (name, ticks, child_ticks) in after.items():
        if key in before and key[0] != os.getpid():
            own[name] += (ticks - before[key][1]) / float(HZ)
            children[name] += (child_ticks - before[key][2]) / float(HZ)
    controller = used.ru_utime - used_before.ru_utime + used.ru_stime - used_before.ru_stime
    print('rc %d, wall %.2f s; the command and its children: %.2f s of CPU' % (rc, wall, controller))
    total = collections.Counter(dict((name, own[name] + children[name]) for name in set(own) | set(children)))
    print('long-lived processes (own + reaped children), s:')
    for name, seconds in total.most_common(15):
        if seconds > 0:
            print('  %-24s own %6.2f  children %6.2f' % (name, own[name], children[name]))
    print('all long-lived processes: %.2f s' % sum(total.values()))
    return rc


if __name__ == '__main__':
    sys.exit(main(sys.argv))
