# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_state asks systemd about the units an earlier run asked about in one ``systemctl show`` (``init.service.Together``).

Each unit's answer must be what ``systemctl show`` of that unit alone gives; an answer that is not one block per unit,
or a failed call, falls back to one call per unit; a unit the list lacks is asked alone and remembered (``memo``)
for the next run, which a check-mode play does not write.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import base
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import module as concerns_module
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import registry
from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import memo
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import node_state as concerns_node_state
from ansible_collections.gpufleet.nvidia.plugins.module_utils.init import service as init_service

UNITS = {
    'docker': {'LoadState': 'loaded', 'ActiveState': 'active', 'UnitFileState': 'enabled', 'MainPID': '812',
               'ExecStart': '{ path=/usr/bin/dockerd ; argv[]=/usr/bin/dockerd -H fd:// ; ignore_errors=no }'},
    'containerd': {'LoadState': 'loaded', 'ActiveState': 'active', 'UnitFileState': 'enabled', 'MainPID': '640',
                   'ExecStart': '{ path=/usr/bin/containerd ; argv[]=/usr/bin/containerd ; ignore_errors=no }'},
    'nvidia-persistenced': {'LoadState': 'loaded', 'ActiveState': 'inactive', 'UnitFileState': 'disabled',
                            'MainPID': '0', 'ExecStart': ''},
}
# systemd prints a unit's properties in its own order, whatever the order of -p
ORDER = ('MainPID', 'ExecStart', 'LoadState', 'ActiveState', 'UnitFileState')
PREFIX = len(['systemctl', 'show']) + 2 * len(init_service.SYSTEMD_PROPERTIES)


class Systemctl(object):
    """``systemctl show -p ... UNIT...`` as systemd answers it: a block per unit, a blank line between two."""

    def __init__(self, rc=0, merge_blocks=False):
        self.calls = []
        self.rc = rc
        self.merge_blocks = merge_blocks

    def __call__(self, argv, **kwargs):
        if argv[1] != 'show':
            return 1, '', 'unexpected'
        units = argv[PREFIX:]
        self.calls.append(units)
        if len(units) > 1 and self.rc:
            return self.rc, '', 'Failed to get properties: Access denied'
        blocks = []
        for unit in units:
            values = UNITS.get(unit, {'LoadState': 'not-found', 'ActiveState': 'inactive', 'UnitFileState': '',
                                      'MainPID': '0', 'ExecStart': ''})
            blocks.append(''.join('%s=%s\n' % (key, values[key]) for key in ORDER))
        return 0, ('' if self.merge_blocks else '\n').join(blocks), ''


def service(name, run, together=None):
    return init_service.Service('systemd', name, run, {'systemctl': 'systemctl'}, together=together)


def alone(name):
    return service(name, Systemctl()).systemd_show()


def test_the_units_an_earlier_run_asked_about_are_shown_in_one_call():
    systemctl = Systemctl()
    together = init_service.Together(['docker', 'containerd', 'nvidia-persistenced'])
    names = ('containerd', 'docker', 'nvidia-persistenced')
    shown = dict((name, service(name, systemctl, together).systemd_show()) for name in names)
    assert systemctl.calls == [['docker', 'containerd', 'nvidia-persistenced']]
    assert shown == dict((name, alone(name)) for name in shown)
    assert shown['docker']['MainPID'] == '812' and shown['nvidia-persistenced']['ActiveState'] == 'inactive'
    assert together.asked == ['containerd', 'docker', 'nvidia-persistenced']


def test_a_unit_the_list_lacks_is_asked_alone_and_remembered():
    systemctl = Systemctl()
    together = init_service.Together(['docker'])
    assert service('containerd', systemctl, together).systemd_show() == alone('containerd')
    assert service('docker', systemctl, together).systemd_show() == alone('docker')
    assert systemctl.calls == [['containerd'], ['docker']]
    assert together.asked == ['containerd', 'docker']


def test_an_answer_that_is_not_a_block_per_unit_or_a_failed_call_falls_back_to_one_call_each():
    for systemctl in (Systemctl(merge_blocks=True), Systemctl(rc=1)):
        together = init_service.Together(['docker', 'containerd'])
        assert service('docker', systemctl, together).systemd_show() == alone('docker')
        assert service('containerd', systemctl, together).systemd_show() == alone('containerd')
        assert systemctl.calls == [['docker', 'containerd'], ['docker'], ['containerd']]


def test_names_that_are_not_unit_names_are_never_passed_to_systemctl():
    together = init_service.Together(['docker', '--all', 'a b', '../etc', 'x' * 300, 'docker\n', 'containerd'])
    assert together.units == ['docker', 'containerd']


class Asking(base.Concern):
    """A concern whose run asks systemd about its units."""

    def __init__(self, name, units):
        def run(module):
            for unit in units:
                service(unit, module.run_command, concerns_module.run_state(module).together).systemd_show()
            return {'changed': False}
        base.Concern.__init__(self, name, name + '_module', {}, run)


class SystemdHost(object):
    def __init__(self, check_mode=False):
        self.systemctl = Systemctl()
        self.check_mode = check_mode

    def run_command(self, argv, **kwargs):
        return self.systemctl(argv)

    def get_bin_path(self, arg, required=False, opt_dirs=None):
        return None


def evaluate(monkeypatch, host):
    monkeypatch.setattr(registry, 'CONCERNS', dict(registry.CONCERNS,
                                                   persistenced=Asking('persistenced', ['nvidia-persistenced']),
                                                   docker=Asking('docker', ['containerd', 'docker'])))
    result = concerns_node_state.evaluate(host, {'persistenced': {}, 'docker': {}, 'engines': []})[0]
    assert result['converged'], result
    return host.systemctl.calls


def test_node_state_asks_systemd_once_from_its_second_run_on(monkeypatch, private_memo_dir):
    assert evaluate(monkeypatch, SystemdHost()) == [['nvidia-persistenced'], ['containerd'], ['docker']]
    assert evaluate(monkeypatch, SystemdHost()) == [['nvidia-persistenced', 'containerd', 'docker']]
    assert evaluate(monkeypatch, SystemdHost()) == [['nvidia-persistenced', 'containerd', 'docker']]
    assert memo.load(concerns_node_state.UNITS_MEMO) == {'units': ['nvidia-persistenced', 'containerd', 'docker']}
    # nothing of the run outlives it: the batch was the run's own (common.run.RunState), no module-level state
    assert [name for name in vars(init_service) if name.isupper() and name.startswith('TOGETHER')] == []


def test_a_check_mode_play_writes_no_unit_list(monkeypatch, private_memo_dir):
    assert len(evaluate(monkeypatch, SystemdHost(check_mode=True))) == 3
    assert len(evaluate(monkeypatch, SystemdHost(check_mode=True))) == 3
    assert not os.path.exists(private_memo_dir)
