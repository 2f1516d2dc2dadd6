# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each concern module's entry point: its argument spec and its run, once, for the module and for node_state.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. ``CONCERNS[name].run(module)`` is the whole body of that
concern's module (``device_links``, ``persistenced``, ``gpu_persistence``,
``containerd_runtime``, ``crio_runtime``, ``docker_runtime``): it reads the
host, decides, and (unless ``module.check_mode``) acts, then returns the
result for ``exit_json`` or calls ``module.fail_json``. The module runs it
with its AnsibleModule; ``node_state`` runs the same function in check mode
with a stand-in (``_node_state.ConcernModule``), so both give one verdict from
one copy of every decision.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpufleet.nvidia.plugins.module_utils import _containerd
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _containerd_apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _crio
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _crio_apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _daemon_json
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _docker_apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _dockerd
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _gpu
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _gpu_apply
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _host
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _module
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _persistence_state as state
from ansible_collections.gpufleet.nvidia.plugins.module_utils import _persistenced as pd
from ansible_collections.gpufleet.nvidia.plugins.module_utils._dev_char import Runner as DevCharRunner
from ansible_collections.gpufleet.nvidia.plugins.module_utils._docker_api import DockerAPI, socket_path_from_host
from ansible_collections.gpufleet.nvidia.plugins.module_utils._persistenced_deploy import Deployer
from ansible_collections.gpufleet.nvidia.plugins.module_utils._service import Service


class Concern(object):
    """A concern module: ``spec`` (its argument spec), ``checks`` (AnsibleModule's cross-option rules) and
    ``run(module) -> result``."""

    def __init__(self, name, module, spec, run, **checks):
        self.name = name
        self.module = module
        self.spec = spec
        self.run = run
        self.checks = checks

    def module_args(self):
        """The keyword arguments of the concern module's AnsibleModule."""
        args = dict(argument_spec=self.spec, supports_check_mode=True)
        args.update(self.checks)
        return args


# device_links

DEVICE_LINKS_SPEC = dict(
    state=dict(type='str', default='present', choices=['present', 'absent']),
    boot=dict(type='bool', default=True),
    init_system=dict(type='str', default='auto', choices=['auto', 'systemd', 'sysvinit', 'upstart']),
    dev_root=dict(type='path', default='/dev'),
    report_containers=dict(type='bool', default=True),
    docker_host=dict(type='str', default='unix:///var/run/docker.sock'),
)


def run_device_links(module):
    api = DockerAPI(module.params['docker_host'], timeout=5.0) if module.params['report_containers'] else None
    return DevCharRunner(module, api=api).converge()


# persistenced

PERSISTENCED_SPEC = dict(
    state=dict(type='str', default='present', choices=['present', 'absent', 'stopped']),
    daemon=dict(type='str', default='auto', choices=['auto', 'driver', 'bundled']),
    driver_path=dict(type='path', default=pd.DRIVER_PATH),
    bundled_path=dict(type='path', default=pd.BUNDLED_PATH),
    init_system=dict(type='str', default='auto', choices=['auto', 'systemd', 'sysvinit', 'upstart']),
    service_name=dict(type='str', default='nvidia-persistenced'),
    user=dict(type='str', default='nvidia-persistenced'),
    group=dict(type='str'),
    create_user=dict(type='bool', default=True),
    allow_other_primary_group=dict(type='bool', default=False),
    persistence_mode=dict(type='bool', default=True),
    uvm_persistence_mode=dict(type='bool'),
    verbose=dict(type='bool', default=False),
    nvidia_cfg_path=dict(type='path'),
    extra_args=dict(type='list', elements='str', default=[]),
    state_file=dict(type='path', default=pd.STATE_FILE),
    backup=dict(type='bool', default=True),
    start_timeout=dict(type='float', default=30.0),
    remove_user=dict(type='bool', default=False),
    bundled_source=dict(type='str', no_log=True),
)


def run_persistenced(module):
    p = module.params
    if p['group'] is None and (p['user'] == 'root' or p['state'] != 'present'):
        # present: an existing user's own primary group (Deployer.resolve_identity); absent and stopped: the group
        # this module would have created for the user
        p['group'] = 'root' if p['user'] == 'root' else p['user']
    if p['state'] == 'present' and not p['bundled_source']:
        module.fail_json(msg='the bundled daemon was not passed in: call this module as gpufleet.nvidia.persistenced '
                             '(its action plugin supplies it), not through a renamed copy')
    try:
        pd.validate(p)
    except pd.ConfigError as exc:
        module.fail_json(msg=str(exc))
    return Deployer(module).converge()


# gpu_persistence

GPU_PERSISTENCE_SPEC = dict(
    gpus=dict(type='list', elements='raw', default=['all']),
    mode=dict(type='str', choices=['enabled', 'disabled']),
    modes=dict(type='list', elements='dict', options=dict(
        gpu=dict(type='raw', required=True),
        mode=dict(type='str', required=True, choices=['enabled', 'disabled']),
    )),
    persist=dict(type='bool', default=True),
    state_file=dict(type='path', default=state.DEFAULT_PATH),
    service_user=dict(type='str'),
)
GPU_PERSISTENCE_SPEC.update(_gpu.ACCESS_ARGUMENT_SPEC)


def run_gpu_persistence(module):
    params = module.params
    if params['modes'] is not None and params['gpus'] != ['all']:
        module.fail_json(msg='gpus and modes are mutually exclusive: name each GPU in modes')
    try:
        backend, unused_answers = _gpu.open_backend(params, 'to set persistence through NVML')
    except _gpu.GpuError as exc:
        module.fail_json(**exc.fail_json_args())
    run = _gpu_apply.PersistenceRun(params, backend)
    try:
        run.plan()  # every GPU and the state file first: a bad state file fails before any GPU changes
        if not module.check_mode:
            run.apply()
    except _gpu_apply.RunError as exc:
        module.fail_json(**exc.fields)
    for warning in run.warnings():
        module.warn(warning)
    return run.result(diff=module._diff)


# containerd_runtime

CONTAINERD_SPEC = dict(
    path=dict(type='path', default=_containerd.DEFAULT_PATH),
    name=dict(type='str', default='nvidia'),
    runtime_path=dict(type='str', default='/usr/bin/nvidia-container-runtime'),
    default_runtime=dict(type='bool'),
    state=dict(type='str', default='present', choices=['present', 'absent']),
    backup=dict(type='bool', default=False),
    apply=dict(type='str', default='auto', choices=['auto', 'restart', 'none']),
    service_name=dict(type='str', default='containerd'),
    apply_timeout=dict(type='int', default=60),
)


def engine_service(module, find_pid, **kwargs):
    """``(Service, run_command)``: the engine's service (``service_name``) under this host's init system."""
    run_command = _module.runner(module)
    init, tools, unused_detected = _module.init_system(module, run_command)
    return Service(init, module.params['service_name'], run_command, tools, find_pid, **kwargs), run_command


def engine_binary(module, name, install):
    """The engine daemon's executable; the module fails, naming its file (``path``), when there is none."""
    binary = module.get_bin_path(name)
    if binary is None:
        module.fail_json(msg='%s is not installed on this host (no %s executable found); %s'
                             % (name, name, install), path=module.params['path'])
    return binary


def run_containerd(module):
    params = module.params
    service, run_command = engine_service(module, lambda: _containerd_apply.find_pid(params['path']),
                                          log_files=_containerd_apply.log_files(params['service_name']))
    containerd = engine_binary(module, 'containerd', 'install the containerd package first.')
    programs = _containerd_apply.Tools(run_command, containerd=containerd,
                                       ctr=module.get_bin_path('ctr') or 'ctr')
    request = _containerd_apply.Request(
        path=params['path'], name=params['name'], runtime_path=params['runtime_path'],
        default_runtime=params['default_runtime'], state=params['state'], apply=params['apply'],
        timeout=params['apply_timeout'])
    converge = _containerd_apply.Converge(request, service, programs, backup=params['backup'] or None,
                                          label=_host.selinux_labeller(module))
    return _module.config_run(module, params['path'], lambda: converge.run(check_mode=module.check_mode))


# crio_runtime

CRIO_SPEC = dict(
    path=dict(type='path', default=_crio.DEFAULT_PATH),
    config_path=dict(type='path', default=_crio.DEFAULT_CONFIG),
    config_dir=dict(type='path', default=_crio.DEFAULT_DIR),
    name=dict(type='str', default='nvidia'),
    runtime_path=dict(type='str', default='/usr/bin/nvidia-container-runtime'),
    default_runtime=dict(type='bool'),
    state=dict(type='str', default='present', choices=['present', 'absent']),
    backup=dict(type='bool', default=False),
    apply=dict(type='str', default='auto', choices=['auto', 'reload', 'restart', 'none']),
    service_name=dict(type='str', default='crio'),
    apply_timeout=dict(type='int', default=60),
)


def run_crio(module):
    params = module.params
    service, run_command = engine_service(
        module, lambda: _crio_apply.find_pid(params['config_path'], params['config_dir'])[0])
    crio = engine_binary(module, 'crio', 'install CRI-O first.')
    request = _crio.Request(
        path=params['path'], config_path=params['config_path'], config_dir=params['config_dir'], name=params['name'],
        runtime_path=params['runtime_path'], default_runtime=params['default_runtime'], state=params['state'],
        apply=params['apply'], timeout=params['apply_timeout'])
    converge = _crio_apply.Converge(request, service, _crio_apply.Tools(run_command, crio=crio),
                                    backup=params['backup'] or None,
                                    backup_dir=os.path.dirname(params['config_dir'].rstrip('/')),
                                    label=_host.selinux_labeller(module))
    return _module.config_run(module, params['path'], lambda: converge.run(check_mode=module.check_mode))


# docker_runtime

DOCKER_SPEC = dict(
    path=dict(type='path', default=_daemon_json.DEFAULT_PATH),
    name=dict(type='str', default='nvidia'),
    runtime_path=dict(type='str', default='nvidia-container-runtime'),
    runtime_args=dict(type='list', elements='str'),
    default_runtime=dict(type='bool'),
    cdi=dict(type='bool'),
    state=dict(type='str', default='present', choices=['present', 'absent']),
    backup=dict(type='bool', default=False),
    apply=dict(type='str', default='auto', choices=['auto', 'reload', 'restart', 'none']),
    docker_host=dict(type='str', default='unix:///var/run/docker.sock'),
    service_name=dict(type='str', default='docker'),
    apply_timeout=dict(type='int', default=60, aliases=['timeout']),
)


def build_dockerd(module, socket_path):
    """``(dockerd service, run_command)`` on this host."""
    run_command = _module.runner(module)
    init, tools, unused_detected = _module.init_system(module, run_command)
    return _dockerd.Dockerd(run_command, init, tools, service=module.params['service_name'],
                            socket_path=socket_path), run_command


def run_docker(module):
    params = module.params
    socket_path = socket_path_from_host(params['docker_host'])
    service, run_command = build_dockerd(module, socket_path)
    api = DockerAPI(socket_path, timeout=min(10, max(1, params['apply_timeout'])))
    request = _docker_apply.Request(
        path=params['path'], name=params['name'], runtime_path=params['runtime_path'],
        runtime_args=params['runtime_args'], default_runtime=params['default_runtime'], cdi=params['cdi'],
        state=params['state'], apply=params['apply'], timeout=params['apply_timeout'])

    def dockerd_checks():
        dockerd_path = module.get_bin_path('dockerd')
        help_text = _dockerd.dockerd_help(run_command, dockerd_path)
        if help_text is None:  # no dockerd here, or one too old to say: nothing to check against
            return None, None
        return (_dockerd.dockerd_validator(run_command, dockerd_path, help_text=help_text),
                _dockerd.option_keys_from_help(help_text))

    return _module.config_run(module, params['path'], lambda: _docker_apply.converge(
        request, service, api, check_mode=module.check_mode, backup=params['backup'] or None,
        label=_host.selinux_labeller(module), dockerd_checks=dockerd_checks))


DEVICE_LINKS = Concern('device_links', 'device_links', DEVICE_LINKS_SPEC, run_device_links)
PERSISTENCED = Concern('persistenced', 'persistenced', PERSISTENCED_SPEC, run_persistenced)
GPU_PERSISTENCE = Concern('gpu_persistence', 'gpu_persistence', GPU_PERSISTENCE_SPEC, run_gpu_persistence,
                          mutually_exclusive=[['mode', 'modes']], required_one_of=[['mode', 'modes']])
CONTAINERD = Concern('containerd', 'containerd_runtime', CONTAINERD_SPEC, run_containerd)
CRIO = Concern('crio', 'crio_runtime', CRIO_SPEC, run_crio)
DOCKER = Concern('docker', 'docker_runtime', DOCKER_SPEC, run_docker)

# In the order gpu_node runs them: the links before anything reloads systemd, the daemon before the GPUs' modes,
# the CRI engines before dockerd (whose verification runs a container last).
CONCERNS = dict((c.name, c) for c in (DEVICE_LINKS, PERSISTENCED, GPU_PERSISTENCE, CONTAINERD, CRIO, DOCKER))
ORDER = ('device_links', 'persistenced', 'gpu_persistence', 'containerd', 'crio', 'docker')
ENGINES = ('containerd', 'crio', 'docker')
