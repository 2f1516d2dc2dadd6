# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A request object declared by its module's argument spec: each option once, with the spec's default.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It holds no AnsibleModule so that pytest can drive it directly.

An engine module's operation takes "what the user asked for" as one object
(``Request``). Its fields, their names and their defaults are the module's
argument spec's (``SPEC``, declared next to the ``Request`` that reads it):
the module builds it from its validated parameters (``from_params``) and tests
build it with keyword arguments, so no default is written twice. ``NAMES``
renames an option for the operation's code (``apply_timeout`` is ``timeout``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy


# The disruption policy's option, one declaration for every module that restarts or stops a service (host.workload
# decides with it): defer while the host has GPU work, or force (the modules' default, their behaviour before it);
# drain is defer in a module (the gpu_node role drains the Slurm node before its modules run).
DISRUPTION = dict(type='str', default='force', choices=['defer', 'drain', 'force'])

# The defaults of the audit trail's and the rollback store's options (``host.audit.DEFAULT_PATH``,
# ``host.rollback.DEFAULT_STORE``), here so that a concern's argument spec (concerns/base.py) has them without
# importing the code that writes them: node_state's check path never writes either, and a host compiles every
# module it imports on every run.
AUDIT_LOG = '/var/log/gpufleet/audit.jsonl'
ROLLBACK_STORE = '/var/lib/gpufleet-rollback'


class Options(object):
    """The options ``OPTIONS`` of the argument spec ``SPEC`` as attributes (named as ``NAMES`` says)."""

    SPEC = {}
    OPTIONS = ()
    NAMES = {}

    def __init__(self, **given):
        attributes = dict((self.NAMES.get(option, option), option) for option in self.OPTIONS)
        unknown = sorted(set(given) - set(attributes))
        if unknown:
            raise TypeError('%s got unknown options: %s' % (type(self).__name__, ', '.join(unknown)))
        for attribute, option in attributes.items():
            setattr(self, attribute, given[attribute] if attribute in given
                    else copy.deepcopy(self.SPEC[option].get('default')))

    @classmethod
    def from_params(cls, params):
        """The request of a module's validated parameters."""
        return cls(**dict((cls.NAMES.get(option, option), params[option]) for option in cls.OPTIONS))
