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

import re

from ansible_collections.gpufleet.nvidia.plugins.module_utils.health.verdicts import ACTIONS, VERDICTS

TEXT = (type(u''),)
# A Debian package version (policy 5.6.12), as a host reports one.
VERSION = re.compile(r'\A(?:[0-9]+:)?[0-9][A-Za-z0-9.+~:-]*\Z')
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


def expect_version(value, what):
    """A package version a host reported: ``none`` for null, the version when it has a version's shape, else
    Malformed (a version is printed in reports and compared, never trusted as free text)."""
    if value is None:
        return u'none'
    value = expect(value, TEXT, what)
    if not VERSION.match(value):
        raise Malformed('%s is not a package version (%s)' % (what, printable(value[:40])))
    return value


def toolkit_cell(verdict_result, converged, failed):
    """The container toolkit in one word for a report: its installed version (that of the first package) when
    converged, ``INSTALLED->WANTED:ACTION,...`` when not, ``error`` when its evaluation failed."""
    if failed:
        return u'error'
    installed = expect(verdict_result.get('installed'), dict, 'container_toolkit.installed', {})
    versions = [expect_version(installed[name], 'container_toolkit.installed.%s' % printable(name))
                for name in sorted(installed)]
    have = versions[0] if len(set(versions)) == 1 else u'mixed' if versions else u'none'
    if converged:
        return have
    wanted = expect_version(verdict_result.get('version'), 'container_toolkit.version')
    actions = [expect(action, TEXT, 'container_toolkit.actions[]')
               for action in expect(verdict_result.get('actions'), list, 'container_toolkit.actions', [])]
    for action in actions:
        if not re.match(r'\A[a-z_]{1,20}\Z', action):
            raise Malformed('container_toolkit.actions holds %s, not an action' % printable(action[:40]))
    return u'%s%s:%s' % (have, u'' if have == wanted else u'->' + wanted, u','.join(actions) or u'-')


def health_cell(result, failed):
    """The node's GPU health in one word for a report: ``PASS``, or ``VERDICT:action`` (``FAIL:reset_gpu``); ``error``
    when its evaluation failed. A verdict or action outside gpu_health's closed sets is malformed."""
    if failed:
        return u'error'
    health = expect(result.get('verdict'), TEXT, 'gpu_health.verdict')
    action = expect(result.get('action', 'none'), TEXT, 'gpu_health.action')
    if health not in VERDICTS or action not in ACTIONS:
        raise Malformed('gpu_health: %s (%s) is not a verdict and action' % (printable(health), printable(action)))
    return health if health == 'PASS' else u'%s:%s' % (health, action)
