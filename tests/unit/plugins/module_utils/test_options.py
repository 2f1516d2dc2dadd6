# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each engine module's options are declared once: its Request takes its fields and defaults from the spec."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import registry
from ansible_collections.gpufleet.nvidia.plugins.module_utils.containerd import apply as containerd_apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils.crio import config
from ansible_collections.gpufleet.nvidia.plugins.module_utils.docker import apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils.common.options import Options

REQUESTS = {'containerd': containerd_apply.Request, 'crio': config.Request, 'docker': apply.Request}


@pytest.mark.parametrize('engine', sorted(REQUESTS))
def test_the_module_node_state_and_the_request_read_one_spec(engine):
    request = REQUESTS[engine]
    assert registry.CONCERNS[engine].spec is request.SPEC
    assert set(request.OPTIONS) <= set(request.SPEC)
    # the request's defaults are the module's: what the module builds from no options at all
    params = ArgumentSpecValidator(request.SPEC).validate({}).validated_parameters
    built, bare = request.from_params(params), request()
    assert vars(built) == vars(bare)
    assert bare.timeout == request.SPEC['apply_timeout']['default'] == 60


def test_options_are_named_for_the_code_and_unknown_ones_refused():
    request = apply.Request(timeout=5, cdi=True)
    assert (request.timeout, request.cdi, request.name) == (5, True, 'nvidia')
    assert not hasattr(request, 'apply_timeout')
    with pytest.raises(TypeError, match='unknown options: apply_timeout, backup'):
        apply.Request(apply_timeout=5, backup=True)


def test_a_mutable_default_is_never_shared():
    class Listed(Options):
        SPEC = dict(devices=dict(type='list', default=['all']))
        OPTIONS = ('devices',)

    first, second = Listed(), Listed()
    first.devices.append('0')
    assert second.devices == ['all'] == Listed.SPEC['devices']['default']


def test_the_engine_list_is_written_once():
    # the hosts' code, the controller's, node_state's choices and the roles' argument specs all name the same
    # engines, in the one order of names
    import os
    import yaml
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.device_links import links
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.engines import names
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import engines as concerns_engines
    from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import _results
    engines = names.ENGINES
    assert concerns_engines.ENGINES is _results.ENGINES is engines
    assert registry.ENGINES == engines  # the engines' declarations (registry is written from them) say the same
    # the engines next to each other in node_state's order, as the container runtime role runs them
    first = registry.ORDER.index(engines[0])
    assert registry.ORDER[first:first + len(engines)] == engines and set(concerns_engines.DAEMONS) == set(engines)
    assert sorted(links.ENGINES) == sorted(engines) and links.ENGINES[0] == 'docker'
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
    for role, entry in (('container_runtime', 'main'), ('gpu_node', 'main'), ('gpu_node', 'evaluate')):
        with open(os.path.join(root, 'roles', role, 'meta', 'argument_specs.yml')) as handle:
            options = yaml.safe_load(handle)['argument_specs'][entry]['options']
        assert options['container_runtime_engines']['choices'] == ['auto'] + list(engines), (role, entry)
