# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The verification of a registered runtime: containers run through it, and the GPU device nodes they saw.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It holds no AnsibleModule: ``verify`` takes the host's commands as
``run(argv) -> (rc, out, err)``, and everything else here is pure (what to run,
what the answers mean, the published outcome), tested with plain pytest.

After a successful apply (not in check mode, not ``absent``, the runtime
loaded by the running engine) one container is run per value of
``NVIDIA_VISIBLE_DEVICES`` asked for, with a local image (never pulled),
through the registered runtime; it prints the ``/dev/nvidia*`` nodes it sees
with shell builtins only (the image needs ``sh``, and ``/etc`` for NVIDIA's
hooks). dockerd: the docker CLI (``--runtime NAME``). containerd: ``ctr`` in
its own namespace (``NAMESPACE``), through the runtime binary the registration
names (``--runc-binary``): the CRI plugin's runtime table itself is only used
by a kubelet's pods, which ``ctr`` does not go through.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

try:
    from shlex import quote
except ImportError:  # pragma: no cover (Python 2)
    from pipes import quote

# What the container runs: the NVIDIA device nodes it sees, one a line, with shell builtins only (no ls in a
# minimal image), then END. The final echo keeps the exit status about the container, not about how many nodes
# it saw (a loop whose last test fails exits 1, which ctr also gives when the runtime fails), and END says the
# output arrived whole. containerd's I/O can lose the output of a container that prints and exits at once (seen
# once on the lab: a `ctr run` through NVIDIA's runtime exited 0 having printed nothing, where every other run
# printed the nodes), and a lost output must not read as "the container saw no GPU". A run whose END is missing
# is run again, up to ATTEMPTS times; a container that really sees no GPU prints END and stays no_gpu.
END = 'gpufleet-verify-end'
SCRIPT = 'for d in /dev/nvidia*; do [ -e "$d" ] && echo "$d"; done; echo %s' % END
ATTEMPTS = 3
# The containerd namespace of the verification's images and containers (`ctr -n gpufleet images import FILE`):
# apart from a kubelet's (k8s.io) and dockerd's (moby), so that neither sees them.
NAMESPACE = 'gpufleet'
DEFAULT_DEVICES = ('all',)
# Nothing is run: verify is off, check mode, the runtime was removed, or the engine does not run it.
SKIPPED = ('off', 'check_mode', 'absent', 'not_loaded')
STATUSES = SKIPPED + ('no_client', 'no_image', 'failed', 'no_gpu', 'ok')
DEVICE = re.compile(r'^/dev/nvidia\S*$')
# A GPU's own node (the control nodes nvidiactl, nvidia-uvm... are not a GPU).
GPU_DEVICE = re.compile(r'^/dev/nvidia[0-9]+$')
# NVIDIA_VISIBLE_DEVICES values that ask for no GPU (NVIDIA's runtime: void, none, or empty).
NO_GPU_ASKED = (None, '', 'void', 'none')
# The engine modules' verification options (docker_runtime, containerd_runtime), declared once.
SPEC = dict(
    verify=dict(type='bool', default=False),
    verify_image=dict(type='str', default=''),
    verify_devices=dict(type='list', elements='str', default=list(DEFAULT_DEVICES)),
)


class Request(object):
    """The verification options of an engine module (``verify``, ``verify_image``, ``verify_devices``)."""

    def __init__(self, verify=False, image='', devices=DEFAULT_DEVICES, name='nvidia', runtime_path=None):
        self.verify = verify
        self.image = image or ''
        self.devices = list(devices) if devices else list(DEFAULT_DEVICES)
        self.name = name
        self.runtime_path = runtime_path


def request_from(params, runtime_path):
    """The Request of an engine module's validated parameters."""
    return Request(verify=params['verify'], image=params['verify_image'], devices=params['verify_devices'],
                   name=params['name'], runtime_path=runtime_path)


def skipped(request, check_mode, state, loaded):
    """Why nothing is run (a status of ``SKIPPED``), or None when containers are to be run."""
    if not request.verify:
        return 'off'
    if check_mode:
        return 'check_mode'
    if state == 'absent':
        return 'absent'
    if not loaded:
        return 'not_loaded'
    return None


def devices_seen(out):
    """The device nodes a container printed, sorted (one each)."""
    return sorted(set(line.strip() for line in (out or '').splitlines() if DEVICE.match(line.strip())))


def command_text(argv):
    return ' '.join(quote(arg) for arg in argv)


class Docker(object):
    """dockerd through its CLI (``docker``; DOCKER_HOST is the caller's environment)."""

    engine = 'dockerd'
    command = 'docker'
    words = dict(
        lister='docker image ls lists no tagged image',
        load='Load an image on the host (docker load -i FILE.tar, or docker import)',
        place='a local one')

    def __init__(self, docker):
        self.program = self.docker = docker

    def image_lookup(self, image):
        """The command that finds the image: the named one, else every local image (newest first)."""
        if image:
            return [self.docker, 'image', 'inspect', '--format', '{{.Id}}', image]
        return [self.docker, 'image', 'ls', '--format', '{{.Repository}}:{{.Tag}}']

    def image_found(self, image, rc, out):
        """The image to run ('' when none): the named one when it exists, else the newest tagged one."""
        if rc != 0:
            return ''
        if image:
            return image if out.strip() else ''
        return next((line.strip() for line in out.splitlines() if line.strip() and '<none>' not in line), '')

    def runs(self, request, image, default_runtime=None):
        """``[(visible_devices, argv, cleanup)]``: one container per value through the runtime by name, and one plain
        ``docker run`` more (no ``--runtime``, no ``NVIDIA_VISIBLE_DEVICES``: value None) when the runtime is dockerd's
        default runtime. ``docker run --rm`` leaves nothing to clean up."""
        def container(value, options):
            return (value, [self.docker, 'run', '--rm', '--network', 'none'] + options +
                    ['--entrypoint', 'sh', image, '-c', SCRIPT], None)

        planned = [container(value, ['--runtime', request.name, '-e', 'NVIDIA_VISIBLE_DEVICES=%s' % value])
                   for value in request.devices]
        if default_runtime == request.name:
            planned.append(container(None, []))
        return planned


class Ctr(object):
    """containerd through ``ctr`` at its gRPC ``address``, in ``NAMESPACE``; ``run_id`` (the module's PID) tells this
    run's containers apart from another run's."""

    engine = 'containerd'
    command = 'ctr'
    words = dict(
        lister='ctr -n %s images ls lists no tagged image' % NAMESPACE,
        load='Load an image into containerd\'s %s namespace (ctr -n %s images import FILE.tar)' % (NAMESPACE, NAMESPACE),
        place='one in that namespace')

    def __init__(self, ctr, address, run_id):
        self.program = self.ctr = ctr
        self.address = address
        self.run_id = run_id

    def base(self):
        return [self.ctr, '--address', self.address, '--namespace', NAMESPACE]

    def image_lookup(self, image):
        return self.base() + ['images', 'ls', '--quiet']

    def image_found(self, image, rc, out):
        """The named image when containerd has it, else the first tagged one by name ('' when none)."""
        if rc != 0:
            return ''
        refs = [line.strip() for line in out.splitlines() if line.strip()]
        if image:
            return image if image in refs else ''
        tagged = sorted(ref for ref in refs if not ref.startswith('sha256:') and '@' not in ref)
        return tagged[0] if tagged else ''

    def container_id(self, index):
        return 'gpufleet-verify-%s-%d' % (self.run_id, index)

    def runs(self, request, image, default_runtime=None):
        """``[(visible_devices, argv, cleanup)]``: one container per value through the registered runtime binary;
        ``cleanup`` removes the container a failed ``ctr run --rm`` may leave."""
        return [(value, self.base() + ['run', '--rm', '--runc-binary', request.runtime_path,
                                       '--env', 'NVIDIA_VISIBLE_DEVICES=%s' % value, image, self.container_id(index),
                                       'sh', '-c', SCRIPT],
                 self.base() + ['containers', 'delete', self.container_id(index)])
                for index, value in enumerate(request.devices)]


def outcome(request, client, status, image=None, runs=(), lookup_error='', loaded_why=''):
    """The published verification: ``status``, ``verified``, ``image``, ``runs``, ``msg`` (pure)."""
    runs = list(runs)
    return {'status': status,
            'verified': True if status == 'ok' else False if status in ('failed', 'no_gpu') else None,
            'image': image or None,
            'runs': runs,
            'msg': message(request, client, status, runs, lookup_error, loaded_why)}


def _clean(text, limit=200):
    text = ' '.join((text or '').split())
    return text if len(text) <= limit else text[:limit - 3] + '...'


def _asked(run):
    if run['visible_devices'] is None:
        return 'the default runtime'
    return 'NVIDIA_VISIBLE_DEVICES=%s' % run['visible_devices']


def _without_gpu(run):
    """A run that asked for GPUs and whose container saw none of their nodes."""
    return run['visible_devices'] not in NO_GPU_ASKED and not any(GPU_DEVICE.match(d) for d in run['devices'])


def message(request, client, status, runs, lookup_error='', loaded_why=''):
    engine, name = client.engine, request.name
    if status == 'off':
        return 'verify is false; no container was run'
    if status == 'check_mode':
        return 'check mode: no container was run'
    if status == 'absent':
        return 'the runtime was removed (state absent); no container was run'
    if status == 'not_loaded':
        return '%s does not run the "%s" runtime (%s); no container was run' % (engine, name, loaded_why)
    if status == 'no_client':
        return 'the %s client (%s) is not installed; no container was run' % (engine, client.command)
    if status == 'no_image':
        what = ('image "%s" is not present locally' % request.image) if request.image else 'no image is present locally'
        return ('%s (%s), and the module never pulls one: no container was run through the "%s" runtime. %s or name '
                '%s with verify_image to verify it.'
                % (what, _clean(lookup_error) or client.words['lister'], name, client.words['load'],
                   client.words['place']))
    if status == 'failed' and not any(run['rc'] != 0 for run in runs):
        run = [run for run in runs if run.get('lost')][0]
        return ('"%s" exited 0 but its output never arrived (the line %s missing), %d times in a row: %s lost the '
                'output of the verification container, so what it saw is unknown. Run the command by hand, or set '
                'verify to false to skip this check.' % (run['command'], END, run['attempts'], engine))
    if status == 'failed':
        run = [run for run in runs if run['rc'] != 0][0]
        return ('"%s" failed (rc %s): %s. %s has the "%s" runtime (%s) registered but cannot run a container with '
                'it: check that the NVIDIA Container Toolkit is installed and works, or set verify to false to skip '
                'this check.' % (run['command'], run['rc'], _clean(run.get('stderr'), 400).rstrip('.') or 'no message',
                                 engine, name, request.runtime_path))
    if status == 'no_gpu':
        run = [run for run in runs if _without_gpu(run)][0]
        return ('"%s" ran, but the container saw no GPU device node (%s): the "%s" runtime (%s) did not give it the '
                'GPUs %s asks for. Check that it is NVIDIA\'s nvidia-container-runtime and that the driver is loaded '
                '(nvidia-ctk cdi generate lists the GPUs), or set verify to false to skip this check.'
                % (run['command'], ', '.join(run['devices']) or 'no /dev/nvidia* node at all', name,
                   request.runtime_path, _asked(run)))
    seen = '; '.join('%s saw %s' % (_asked(run), ', '.join(run['devices']) or 'no /dev/nvidia* node') for run in runs)
    return 'ran %d container%s: %s runs containers through the "%s" runtime (%s)' % (
        len(runs), '' if len(runs) == 1 else 's', engine, name, seen)


def verify(request, client, run, check_mode, state, loaded, loaded_why='', default_runtime=None):
    """Run the verification containers (when there is anything to verify) and return the outcome.

    ``client``: ``Docker`` or ``Ctr`` (its ``program`` None when not installed); ``run(argv) -> (rc, out, err)``.
    A failed run leaves no container behind (ctr's is deleted); the runs after it still run, so that the
    outcome says what each value gives.
    """
    status = skipped(request, check_mode, state, loaded)
    if status:
        return outcome(request, client, status, loaded_why=loaded_why)
    if client.program is None:
        return outcome(request, client, 'no_client')
    rc, out, err = run(client.image_lookup(request.image))
    image = client.image_found(request.image, rc, out)
    if not image:
        return outcome(request, client, 'no_image', lookup_error=err if rc != 0 else '')
    runs = []
    for value, argv, cleanup in client.runs(request, image, default_runtime):
        for attempt in range(1, ATTEMPTS + 1):
            rc, out, err = run(argv)
            lost = rc == 0 and not output_whole(out)
            if cleanup and (rc != 0 or lost):
                run(cleanup)  # a failed run, or one whose output was lost, may leave ctr's container behind
            if not lost:
                break
        runs.append({'visible_devices': value, 'command': command_text(argv), 'devices': devices_seen(out), 'rc': rc,
                     'stderr': err, 'lost': lost, 'attempts': attempt})
    status = ('failed' if any(entry['rc'] != 0 or entry['lost'] for entry in runs)
              else 'no_gpu' if any(_without_gpu(entry) for entry in runs) else 'ok')
    result = outcome(request, client, status, image=image, runs=runs)
    for entry in result['runs']:
        entry.pop('stderr')
        entry.pop('lost')
        entry.pop('attempts')
    return result


def output_whole(out):
    """True when the container's output arrived whole (its last line is END)."""
    lines = [line.strip() for line in (out or '').splitlines() if line.strip()]
    return bool(lines) and lines[-1] == END
