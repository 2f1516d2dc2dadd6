# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the controller does with a value a host returned: untrusted data, checked before use, escaped when printed.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change at any time.

A managed host answers with whatever its Python prints, so a compromised node can return any JSON: a string where
a dict belongs, a message with a newline that looks like the next row of a report, ANSI escapes that rewrite the
operator's terminal. The controller's reports read host results through ``expect`` (a wrong shape is ``Malformed``,
for that host alone) and print every cell through ``printable``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

TEXT = (type(u''),)
# What a value is, in the words of JSON (Ansible hands templated values over as subclasses of these).
KINDS = ((bool, 'a boolean'), (TEXT[0], 'a string'), (int, 'a number'), (float, 'a number'), (dict, 'a mapping'),
         (list, 'a list'), (type(None), 'null'))


class Malformed(ValueError):
    """A host's result does not have the shape the controller reads."""


def printable(value):
    """``value`` as one line of text: every character that is not printable (newline, carriage return, the ANSI
    escape, other control and format characters) written as its Python escape (``\\n``, ``\\x1b``, ``\\u202e``)."""
    text = value if isinstance(value, TEXT) else u'%s' % (value,)
    return u''.join(ch if ch.isprintable() else ch.encode('unicode_escape').decode('ascii') for ch in text)


def expect(value, kind, what, default=None):
    """``value`` when it is a ``kind`` (a type or a tuple of types); ``default`` when it is None; else Malformed
    naming ``what`` and the type found."""
    if value is None and default is not None:
        return default
    if isinstance(value, kind) and not (isinstance(value, bool) and bool not in _kinds(kind)):
        return value
    wanted = ' or '.join(_name(one) for one in _kinds(kind))
    raise Malformed('%s is %s, not %s' % (what, describe(value), wanted))


def describe(value):
    """What ``value`` is: ``a string``, ``a mapping``, ``a list``, ...; else its type's name."""
    return next((name for kind, name in KINDS if isinstance(value, kind)), type(value).__name__)


def _name(kind):
    return next((name for one, name in KINDS if issubclass(kind, one)), kind.__name__)


def _kinds(kind):
    return kind if isinstance(kind, tuple) else (kind,)
