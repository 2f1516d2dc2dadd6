# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The health verdicts and raw GPU values in Prometheus' text format, for node_exporter's textfile collector.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change at any time. ``render`` is pure;
``write`` puts the text in the textfile directory as node_exporter wants it: a temp file in that directory (its
name does not end in ``.prom``, so the collector never reads it half-written), renamed over ``gpufleet_health.prom``.
No sample carries a timestamp (the collector skips a file that has one); node_exporter's own
``node_textfile_mtime_seconds`` says when the checks last ran (the file is rewritten on every run).

The directory is often another user's (Debian's ``/var/lib/prometheus/node-exporter`` belongs to ``prometheus``):
root opens every component of its path without following a link (``O_NOFOLLOW``), creates the temp file with
``O_EXCL|O_NOFOLLOW`` and renames within the directory it opened, so nothing planted there sends root's write
anywhere else.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os

from ansible_collections.gpufleet.nvidia.plugins.module_utils.host import files
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health.rules import Unread
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health.verdicts import ACTIONS, STATUS, VERDICTS

FILE_NAME = 'gpufleet_health.prom'
DEFAULT_DIRECTORY = '/var/lib/prometheus/node-exporter'

# name: (help, [(labels, value)]) is built per run; the help texts live here.
HELP = {
    'gpufleet_health_status': "The node's GPU health verdict: 0 PASS, 1 UNKNOWN, 2 WARN, 3 FAIL.",
    'gpufleet_health_verdict': "The node's GPU health verdict as a state set: 1 for the current verdict.",
    'gpufleet_health_action': "The node's recommended action as a state set: 1 for the current action.",
    'gpufleet_health_check_status': 'Each health check\'s verdict: 0 PASS, 1 UNKNOWN, 2 WARN, 3 FAIL.',
    'gpufleet_gpu_info': 'A GPU NVML lists: its index, UUID, PCI bus id and name (always 1).',
    'gpufleet_gpu_ecc_errors': 'ECC error counts by counter (volatile: since the driver loaded; aggregate: lifetime).',
    'gpufleet_gpu_retired_pages': 'Retired memory pages by cause.',
    'gpufleet_gpu_retired_pages_pending': 'A page retirement waits for the next GPU reset (1) or not (0).',
    'gpufleet_gpu_remapped_rows': 'Remapped memory rows by the kind of error that caused them.',
    'gpufleet_gpu_remapped_rows_pending': 'A row remapping waits for the next GPU reset (1) or not (0).',
    'gpufleet_gpu_remapped_rows_failure': 'Row remapping failed: no spare row left (1) or not (0).',
    'gpufleet_gpu_sram_ecc_threshold_exceeded': "SRAM ECC errors exceeded NVIDIA's threshold (1) or not (0).",
    'gpufleet_gpu_recovery_action': 'NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: 0 none, 1 GPU reset, 2 node reboot, '
                                    '3 drain P2P, 4 drain and reset, 5 recover IMEX, 6 bus reset, 7 system reboot.',
    'gpufleet_gpu_clocks_event_reasons': 'The clocks event reasons bit mask NVML reports.',
    'gpufleet_gpu_temperature_celsius': 'The GPU temperature.',
    'gpufleet_gpu_slowdown_temperature_celsius': 'The temperature at which the GPU slows itself down.',
    'gpufleet_gpu_shutdown_temperature_celsius': 'The temperature at which the GPU shuts down.',
    'gpufleet_gpu_pcie_link_generation': 'The PCIe link generation, current and maximum.',
    'gpufleet_gpu_pcie_link_width': 'The PCIe link width in lanes, current and maximum.',
    'gpufleet_gpu_nvlink_links': 'NVLink links by state.',
    'gpufleet_gpu_fabric_state': 'The NVLink fabric registration state: 0 not supported, 1 not started, '
                                 '2 in progress, 3 completed.',
    'gpufleet_gpu_persistence_mode': 'Persistence mode: 1 enabled, 0 disabled.',
    'gpufleet_gpu_mig_mode': 'MIG mode: 1 enabled, 0 disabled.',
    'gpufleet_gpu_xid_events': 'NVRM Xid events in the kernel log since boot, by PCI address and code.',
}


def escape(value):
    return ('%s' % value).replace('\\', '\\\\').replace('\n', '\\n').replace('"', '\\"')


def labels(pairs):
    return '{%s}' % ','.join('%s="%s"' % (key, escape(value)) for key, value in pairs) if pairs else ''


def number(value):
    if isinstance(value, bool):
        return '1' if value else '0'
    return '%d' % value if isinstance(value, int) else repr(float(value))


class Families(object):
    """Samples by metric name, in the order first added; ``help_texts``: the HELP text of each name (``HELP``)."""

    def __init__(self, help_texts=None):
        self.order, self.samples = [], {}
        self.help = HELP if help_texts is None else help_texts

    def add(self, name, pairs, value):
        if value is None or isinstance(value, Unread):
            return
        if name not in self.samples:
            self.order.append(name)
            self.samples[name] = []
        self.samples[name].append((pairs, value))

    def text(self):
        out = []
        for name in self.order:
            out.append('# HELP %s %s\n# TYPE %s gauge\n' % (name, self.help[name], name))
            out.extend('%s%s %s\n' % (name, labels(pairs), number(value)) for pairs, value in self.samples[name])
        return ''.join(out)


def render(health, checks, raw=None, xid_counts=None):
    """The text of ``health`` (the gpu_health result: ``verdict``, ``action``, ``gpus``), ``checks`` (every check),
    ``raw`` (each GPU's values as read, by index) and ``xid_counts`` (``{(bus, code): count}``)."""
    fam = Families()
    fam.add('gpufleet_health_status', (), STATUS[health['verdict']])
    for verdict in VERDICTS:
        fam.add('gpufleet_health_verdict', (('verdict', verdict),), verdict == health['verdict'])
    for action in ACTIONS:
        fam.add('gpufleet_health_action', (('action', action),), action == health['action'])
    gpus = dict((gpu['index'], gpu) for gpu in health['gpus'])
    for result in checks:
        pairs = (('check', result['check']),)
        if result['gpu'] is not None:
            pairs += gpu_labels(gpus.get(result['gpu'], {'index': result['gpu']}))
        fam.add('gpufleet_health_check_status', pairs, STATUS[result['verdict']])
    for gpu in health['gpus']:
        gpu_values(fam, gpu, (raw or {}).get(gpu['index'], {}))
    for (bus, code), count in sorted((xid_counts or {}).items()):
        fam.add('gpufleet_gpu_xid_events', (('pci_bus_id', bus), ('code', '%d' % code)), count)
    return fam.text()


def gpu_labels(gpu):
    return (('gpu', '%s' % gpu['index']), ('uuid', gpu.get('uuid') or ''))


def gpu_values(fam, gpu, raw):
    base = gpu_labels(gpu)
    values = dict((key, value) for key, value in raw.items() if not isinstance(value, Unread))
    fam.add('gpufleet_gpu_info', base + (('pci_bus_id', gpu.get('pci_bus_id') or ''), ('name', gpu.get('name') or '')),
            1)
    ecc = values.get('ecc')
    if isinstance(ecc, dict):
        for counter in ('volatile', 'aggregate'):
            for kind in ('corrected', 'uncorrected'):
                fam.add('gpufleet_gpu_ecc_errors', base + (('counter', counter), ('type', kind)),
                        ecc['%s_%s' % (counter, kind)])
    pages = values.get('retired_pages')
    if isinstance(pages, dict):
        for cause in ('single_bit', 'double_bit'):
            fam.add('gpufleet_gpu_retired_pages', base + (('cause', cause),), pages[cause])
        fam.add('gpufleet_gpu_retired_pages_pending', base, pages['pending'])
    rows = values.get('remapped_rows')
    if isinstance(rows, dict):
        for kind in ('correctable', 'uncorrectable'):
            fam.add('gpufleet_gpu_remapped_rows', base + (('kind', kind),), rows[kind])
        fam.add('gpufleet_gpu_remapped_rows_pending', base, rows['pending'])
        fam.add('gpufleet_gpu_remapped_rows_failure', base, rows['failure'])
    sram = values.get('sram_ecc')
    if isinstance(sram, dict):
        fam.add('gpufleet_gpu_sram_ecc_threshold_exceeded', base, sram['threshold_exceeded'])
    fam.add('gpufleet_gpu_recovery_action', base, values.get('recovery_action'))
    fam.add('gpufleet_gpu_clocks_event_reasons', base, values.get('clocks'))
    temperature = values.get('temperature')
    if isinstance(temperature, dict):
        fam.add('gpufleet_gpu_temperature_celsius', base, temperature['current'])
        fam.add('gpufleet_gpu_slowdown_temperature_celsius', base, temperature.get('slowdown'))
        fam.add('gpufleet_gpu_shutdown_temperature_celsius', base, temperature.get('shutdown'))
    link = values.get('pcie')
    if isinstance(link, dict):
        for which, prefix in (('current', ''), ('max', 'max_')):
            fam.add('gpufleet_gpu_pcie_link_generation', base + (('which', which),), link[prefix + 'generation'])
            fam.add('gpufleet_gpu_pcie_link_width', base + (('which', which),), link[prefix + 'width'])
    links = values.get('nvlink')
    if isinstance(links, list):
        fam.add('gpufleet_gpu_nvlink_links', base + (('state', 'active'),), sum(1 for up in links if up))
        fam.add('gpufleet_gpu_nvlink_links', base + (('state', 'inactive'),), sum(1 for up in links if not up))
    fabric = values.get('fabric')
    if isinstance(fabric, dict):
        fam.add('gpufleet_gpu_fabric_state', base, fabric['state'])
    persistence = values.get('persistence')
    if persistence is not None:
        fam.add('gpufleet_gpu_persistence_mode', base, 1 if persistence else 0)
    mig = values.get('mig')
    if isinstance(mig, (list, tuple)):
        fam.add('gpufleet_gpu_mig_mode', base, 1 if mig[0] else 0)


class MetricsError(Exception):
    """The textfile could not be written; the message names the directory and what to do."""


def open_directory(path, create):
    """A descriptor of the directory ``path``, every component opened without following a link; missing components
    are made (root's, 0755) when ``create``, else None is returned."""
    if not os.path.isabs(path):
        raise MetricsError('%s: the textfile directory must be an absolute path' % path)
    dfd = os.open('/', os.O_RDONLY | files.DIRECTORY | files.NOFOLLOW | files.CLOEXEC)
    try:
        for part in [p for p in path.split('/') if p]:
            if part == '..':
                raise MetricsError('%s: the textfile directory must not contain ".."' % path)
            try:
                fd = os.open(part, os.O_RDONLY | files.DIRECTORY | files.NOFOLLOW | files.CLOEXEC, dir_fd=dfd)
            except OSError as exc:
                if exc.errno == errno.ENOENT and create:
                    os.mkdir(part, 0o755, dir_fd=dfd)
                    fd = os.open(part, os.O_RDONLY | files.DIRECTORY | files.NOFOLLOW | files.CLOEXEC, dir_fd=dfd)
                elif exc.errno == errno.ENOENT:
                    os.close(dfd)
                    return None
                elif exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise MetricsError('%s: %s is a symbolic link or not a directory; give the textfile directory\'s '
                                       'real path (root never follows a link there)' % (path, part))
                else:
                    raise
            os.close(dfd)
            dfd = fd
    except BaseException:
        os.close(dfd)
        raise
    return dfd


def write(directory, text, create=False, name=FILE_NAME):
    """Write ``text`` as ``directory/name`` (``gpufleet_health.prom``): its path, or None when the directory does not
    exist (and ``create`` is off). Raises MetricsError naming the file."""
    path = os.path.join(directory, name)
    try:
        dfd = open_directory(directory, create)
    except OSError as exc:
        raise MetricsError('%s: cannot open the textfile directory: %s' % (directory, exc.strerror))
    if dfd is None:
        return None
    try:
        files.write_at(dfd, name, text.encode('utf-8'), 0o644)
    except OSError as exc:
        raise MetricsError('%s: cannot write the metrics: %s; the file was left as it was' % (path, exc.strerror))
    finally:
        os.close(dfd)
    return path
