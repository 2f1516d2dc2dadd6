# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""dockerd's keys in another case, against the real dockerd (each version the layer runs).

Go's encoding/json matches a struct field in any case, and where a file spells one field twice the last spelling
wins: measured here, a runtime entry ``{"path": A, "Path": B}`` makes dockerd run B while a reader that looks up
``path`` sees A. docker_runtime refuses such a file, naming the line, with the file byte-identical and dockerd not
restarted; at the top level dockerd itself refuses a key in another case, and the module says so before writing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.errors import GpufleetError

from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker import apply

from .conftest import LabService
from .test_docker_runtime_dockerd import read

TWICE = '{\n  "runtimes": {\n    "probe": {"path": "/bin/true",\n      "Path": "/bin/false"}\n  }\n}\n'
OURS_TWICE = ('{\n  "runtimes": {\n    "nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": [],\n'
              '      "Path": "/tmp/someone-elses-runtime"}\n  }\n}\n')


@pytest.mark.daemon_json(TWICE)
def test_the_last_spelling_of_a_runtime_key_is_the_one_dockerd_runs(lab_dockerd):
    assert lab_dockerd.api.info()['Runtimes']['probe']['path'] == '/bin/false'


@pytest.mark.daemon_json(OURS_TWICE)
def test_our_runtime_with_a_key_in_another_case_is_refused_naming_the_line(lab_dockerd):
    lab = lab_dockerd
    running = lab.api.info()['Runtimes']['nvidia']['path']
    assert running == '/tmp/someone-elses-runtime'  # what a reader of "path" alone would not see
    before, pid = read(lab.config), lab.pid()
    for check_mode in (True, False):
        with pytest.raises(GpufleetError) as exc:
            apply.converge(apply.Request(path=lab.config), LabService(lab), lab.api, check_mode=check_mode, poll=0.1)
        assert '%s line 4: the key runtimes."nvidia"."Path" is dockerd\'s "path"' % lab.config in str(exc.value)
        assert read(lab.config) == before and lab.pid() == pid
