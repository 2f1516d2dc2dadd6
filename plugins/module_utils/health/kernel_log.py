# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kernel log since boot, for the XID check: ``/dev/kmsg``, else the ring buffer as ``dmesg`` reads it
(``syslog(2)``), else the journal's kernel messages.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change at any time. Read-only; never
blocks (``/dev/kmsg`` is read non-blocking) and never reads without bound. Only the lines that name the NVIDIA
driver (``NVRM:``) are kept. The two kernel sources are read in this process (no command: a converged node's run
stays cheap); ``journalctl`` runs only where neither can be read (a container without ``CAP_SYSLOG``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes
import errno
import os
import re
import stat

KMSG = '/dev/kmsg'
KMSG_DEVICE = (1, 11)  # the kernel's /dev/kmsg; anything else there (a container's FIFO or link) is not the log
# A ring buffer is at most a few MiB (log_buf_len); read no more than this from any source.
MAX_BYTES = 32 << 20
MARK = 'NVRM:'
NOFOLLOW = getattr(os, 'O_NOFOLLOW', 0)
# syslog(2)'s actions (klogctl): read the whole ring buffer without clearing it; the buffer's size.
SYSLOG_ACTION_READ_ALL = 3
SYSLOG_ACTION_SIZE_BUFFER = 10
# The boot's first message is stamped 0 seconds (``<6>[    0.000000] Linux version ...``).
BOOT_STAMP = re.compile(r'^<\d+>\[\s*0\.0+\]')


def read(run_command=None, path=None, kmsg=KMSG, klogctl=None):
    """``{'source', 'lines', 'complete'}`` (the NVRM lines since boot; ``complete`` False when the ring buffer no
    longer holds the boot's first message) or ``{'error'}`` when no source could be read. ``path``: a file of kernel
    log lines instead (kmsg records, dmesg or journal lines), for sites that collect the log elsewhere and for tests;
    ``run_command(argv) -> (rc, out, err)`` runs the journal's fallback; ``klogctl``: libc's (tests: a stand-in)."""
    if path:
        return from_file(path)
    found = from_kmsg(kmsg)
    if found is not None:
        return found
    reasons = ['%s is not the kernel log device here' % kmsg]
    found = from_syslog(reasons, klogctl)
    if found is not None:
        return found
    if run_command is not None:
        argv = ['journalctl', '-k', '-b', '0', '-o', 'cat', '--no-pager', '-q']
        rc, out, err = run_command(argv)
        if rc == 0:
            return {'source': 'journal', 'lines': marked(out.splitlines()), 'complete': True}
        reasons.append('journalctl failed (rc %s): %s' % (rc, (err or out).strip()[:200]))
    return {'error': 'no kernel log could be read: %s' % '; '.join(reasons)}


def from_syslog(reasons, klogctl=None):
    """The ring buffer through ``syslog(2)`` (what ``dmesg`` reads where it has no ``/dev/kmsg``), or None, the
    reason appended to ``reasons``; ``klogctl``: libc's, or a stand-in (tests)."""
    if klogctl is None:
        try:
            klogctl = ctypes.CDLL(None, use_errno=True).klogctl
        except (AttributeError, OSError) as exc:
            reasons.append('syslog(2) is not available: %s' % exc)
            return None
    size = klogctl(SYSLOG_ACTION_SIZE_BUFFER, None, 0)
    if size > 0:
        buffer = ctypes.create_string_buffer(min(size, MAX_BYTES))
        size = klogctl(SYSLOG_ACTION_READ_ALL, buffer, len(buffer))
    if size < 0:
        reasons.append('syslog(2) refused: %s' % os.strerror(ctypes.get_errno()))
        return None
    data = buffer.raw[:size] if size else b''
    # the driver's lines are few: only a buffer that has one is split and decoded
    lines = marked(data.decode('utf-8', 'replace').splitlines()) if MARK.encode() in data else []
    return {'source': 'syslog(2)', 'lines': lines, 'complete': bool(BOOT_STAMP.match(data[:64].decode('ascii', 'replace')))}


def marked(lines):
    return [line for line in lines if MARK in line]


def from_file(path):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | NOFOLLOW)
    except OSError as exc:
        return {'error': '%s: cannot read the kernel log file: %s' % (path, exc.strerror)}
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return {'error': '%s: the kernel log file is not a regular file' % path}
        data = os.read(fd, MAX_BYTES)
    finally:
        os.close(fd)
    lines = [record_text(line) for line in data.decode('utf-8', 'replace').splitlines()]
    return {'source': path, 'lines': marked(lines), 'complete': True}


def record_text(line):
    """A kmsg record's message (``6,1234,5678,-;NVRM: ...`` -> ``NVRM: ...``); other lines as they are."""
    head, sep, message = line.partition(';')
    if sep and head.count(',') >= 3 and head.split(',', 1)[0].isdigit():
        return message
    return line


def from_kmsg(kmsg):
    """The records of ``/dev/kmsg`` (one per read), or None when it is not the kernel's device or cannot be read."""
    try:
        fd = os.open(kmsg, os.O_RDONLY | os.O_NONBLOCK | NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISCHR(st.st_mode) or (os.major(st.st_rdev), os.minor(st.st_rdev)) != KMSG_DEVICE:
            return None
        lines, first, total = [], None, 0
        while total < MAX_BYTES:
            try:
                record = os.read(fd, 8192)
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # overwritten while we read: the next read gives the next record
                    continue
                if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                    break
                return None
            if not record:
                break
            total += len(record)
            if first is None:
                first = record.split(b',', 2)[1] if record.count(b',') >= 2 else b''
            if b'NVRM:' in record:
                lines.append(record_text(record.decode('utf-8', 'replace').split('\n', 1)[0]))
        return {'source': kmsg, 'lines': lines, 'complete': first in (None, b'0')}
    finally:
        os.close(fd)
