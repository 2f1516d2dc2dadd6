# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """The audit trail of the modules that change a host (one JSON line per change, in a root-only log) and their
    rollback store (what each run changed, to put it back)."""

    DOCUMENTATION = r'''
options:
  audit_log:
    description:
      - The host's audit trail. A run that changed the host (not in check mode) appends one JSON line to it with the
        time, O(audit_run_id), the user who ran Ansible (C(SUDO_USER) under C(become)), the concern and module, its
        actions and changes, each changed file's SHA-256 before and after, the service actions, and the policy
        that allowed the change.
      - The file is opened in its directory without following a link, must be a regular file of root's with one
        link, and is kept mode 0600; missing directories are made mode 0700, and a directory on the way that
        another user can change is refused. Past 8 MiB the log is renamed to C(.1) (4 kept).
      - An empty value writes no trail. A trail that cannot be written is a warning and C(audit_error) in the result; the change
        itself is made.
    type: path
    default: /var/log/gpufleet/audit.jsonl
  audit_run_id:
    description:
      - The run the audit line belongs to. Set by the module's action plugin, the same for every host and task of
        one C(ansible-playbook) run (the controller's process and its start time); give it to name a run yourself.
    type: str
  rollback_store:
    description:
      - The host's rollback store, a root-only directory. A run that changed files (not in check mode) saves, under
        O(audit_run_id), each changed file's text before the run (or that the run created it), the SHA-256 of its
        text after, and what the run did to its service; M(gpufleet.nvidia.rollback) puts them back.
      - "One file per run, named by a hash of the run id, JSON lines, mode 0600, written as the audit trail is: never
        through a link, a regular file of root's with one link; the directory is made mode 0700 and refused when
        anyone but root can open it. The newest 8 runs are kept; a record over 4 MiB is refused."
      - A file in a directory another user can change, or a diff that is not a file (links, GPU modes), is not
        saved. Not under C(/var/lib/gpufleet), the persistence state directory, which the daemon's service user owns.
      - An empty value saves nothing. A record that cannot be saved is a warning and C(rollback_error) in the result;
        the change itself is made.
    type: path
    default: /var/lib/gpufleet-rollback
'''
