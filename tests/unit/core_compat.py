# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the unit tests need from ansible-core, on every release the collection supports (2.18 to the newest).

2.19 brought data tagging and, with it, ``patch_module_args``, ``trust_as_template`` and
``Templar.evaluate_conditional``. On 2.18 the same behaviour comes from what that release has: module
arguments through ``basic._ANSIBLE_ARGS``, every template string trusted as it is, a conditional as a
template that renders a boolean.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import json

from ansible.module_utils.common.text.converters import to_bytes
from ansible.template import Templar

try:
    from ansible.module_utils.testing import patch_module_args  # pylint: disable=unused-import
except ImportError:  # ansible-core 2.18
    @contextlib.contextmanager
    def patch_module_args(args=None):
        from ansible.module_utils import basic
        args = dict(args or {})
        args.setdefault('_ansible_remote_tmp', '/tmp')
        args.setdefault('_ansible_keep_remote_files', False)
        saved = basic._ANSIBLE_ARGS
        basic._ANSIBLE_ARGS = to_bytes(json.dumps({'ANSIBLE_MODULE_ARGS': args}))
        try:
            yield
        finally:
            basic._ANSIBLE_ARGS = saved

try:
    from ansible.template import trust_as_template  # pylint: disable=unused-import
except ImportError:  # ansible-core 2.18: every string in a playbook or role is a template
    def trust_as_template(value):
        return value

DATA_TAGGING = hasattr(Templar, 'evaluate_conditional')


def evaluate_conditional(templar, condition):
    """A ``when:`` condition's value, as the running ansible-core evaluates it."""
    if DATA_TAGGING:
        return templar.evaluate_conditional(condition)
    from ansible.playbook.conditional import Conditional
    from ansible.parsing.dataloader import DataLoader
    holder = Conditional(loader=DataLoader())
    holder.when = [condition]
    return holder.evaluate_conditional(templar, templar.available_variables)
