# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What one module run keeps for itself between its parts: one object, made by the run and handed down.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. A concern module's run makes a ``RunState()`` that keeps nothing
(each question asked anew); node_state makes one for its whole evaluation and
hands it to every concern it evaluates (``concerns.module.run_state``), so that
the concerns share what one read-only run may share. Nothing of a run lives in
a module-level variable: two runs in one process (tests) never see each
other's answers.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class RunState(object):
    """``dumps``: containerd's ``config dump`` answers of this run, by (containerd, path, the file's bytes), or None
    where each dump is asked anew (``containerd.facts.Tools.dump``); ``store``: keep new containerd answers in
    node_state's memo for later runs (``host.memo``), off in a check-mode play; ``together``: the units asked
    about in one ``systemctl show`` (``init.service.Together``), or None where each service asks for its own;
    ``verdicts``: node_state's verdicts of the concerns evaluated so far, by name (gpu_health reads them: the
    configuration's convergence and gpu_persistence's wish are health checks), or None outside node_state."""

    def __init__(self, dumps=None, store=False, together=None, verdicts=None):
        self.dumps = dumps
        self.store = store
        self.together = together
        self.verdicts = verdicts
