# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lab containerd changes nothing on the host: /etc, /opt and /var/lib are copy-on-write in its namespace.

containerd 1.6 makes /opt/containerd/{bin,lib} (the opt plugin) and /etc/cni/net.d (the CRI plugin) when they are
missing, whatever its config's root and state say.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import uuid

from privatedaemon import COPY_ON_WRITE, host_paths, new_host_paths


def test_what_the_daemons_namespace_writes_stays_there(lab_containerd):
    lab = lab_containerd
    probe = 'gpufleet-probe-%s' % uuid.uuid4().hex[:12]
    made = [os.path.join(root, probe) for root in COPY_ON_WRITE]
    try:
        for path in made:
            rc, out, err = lab.run(['mkdir', '-p', os.path.join(path, 'inner')])
            assert rc == 0, err
            assert lab.run(['test', '-d', os.path.join(path, 'inner')])[0] == 0   # the namespace sees it
        leaked = [path for path in made if os.path.lexists(path)]
        assert not leaked, 'written in the namespace, visible on the host: %s' % leaked
        # What containerd itself made where its config does not point: there in the namespace.
        for path in ('/opt/containerd/bin', '/etc/cni/net.d'):
            assert lab.run(['test', '-d', path])[0] == 0, path
    finally:
        for path in made:  # only a broken harness leaves them: take them back off the host
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)


def test_the_check_names_new_paths_two_levels_down(tmp_path):
    root = str(tmp_path)
    os.makedirs(os.path.join(root, 'old'))
    before = host_paths(roots=[root])
    os.makedirs(os.path.join(root, 'old', 'new', 'deeper'))
    os.makedirs(os.path.join(root, 'top'))
    assert new_host_paths(before, roots=[root]) == [os.path.join(root, 'old', 'new'), os.path.join(root, 'top')]
