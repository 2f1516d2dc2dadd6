# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The error types every layer of the collection shares.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It is the bottom of the import graph: it imports nothing of ours,
so the pure layers (``formats.json_splice``, ``host.files``) and the layers above them can
all raise and catch the same types without an import cycle.

Every message names the thing to fix (a file, a service, a GPU) and what to
do; the modules add the host name and fail with it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class GpufleetError(Exception):
    """A problem the user must fix; the message names what and how."""


class DocumentError(GpufleetError):
    """A configuration document that cannot be edited safely (invalid, ambiguous, too large)."""


class HostFileError(GpufleetError):
    """A file or directory on the host that cannot be read or written safely."""


class ServiceError(GpufleetError):
    """An init-system command failed, or a tool it needs is missing."""


class RunFailed(BaseException):
    """A module's run ends in failure, as ``AnsibleModule.fail_json`` would end it: ``msg`` (naming the host) and
    ``extra`` (result keys to fail with). The operations that run a whole module (``device_links.run.Runner``,
    ``persistenced.deploy.Deployer``) raise it instead of holding an AnsibleModule; the module layer turns it
    into ``fail_json``. A BaseException, as fail_json's SystemExit is, so that no ``except GpufleetError`` or
    ``except Exception`` on the way (a rollback's) takes it for an error to handle."""

    def __init__(self, msg, **extra):
        BaseException.__init__(self, msg)
        self.msg = msg
        self.extra = extra
