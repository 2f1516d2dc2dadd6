# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The health checks: what NVML and the kernel log said, against the node contract, as verdicts.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change at any time. Pure: no host access;
``health.nvml`` reads, this decides. A value NVML could not give is an ``Unread``: NotSupported (this GPU has no such
thing) passes, a symbol the driver's library lacks (FunctionNotFound) or any other error makes that one check
UNKNOWN with the reason, a lost GPU fails.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch

from ansible_collections.gpufleet.nvidia.plugins.module_utils.health import xid as xids
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health.verdicts import ACTIONS, STATUS, check

DCGM = "DCGM's health watch threshold"
NVML = 'NVML'
# NVML_FI_DEV_GET_GPU_RECOVERY_ACTION's values: (meaning, verdict, action)
RECOVERY_ACTIONS = {
    0: ('none', 'PASS', 'none'),
    1: ('GPU reset', 'FAIL', 'reset_gpu'),
    2: ('node reboot', 'FAIL', 'reboot_node'),
    3: ('drain peer-to-peer traffic', 'WARN', 'drain'),
    4: ('drain and reset', 'FAIL', 'reset_gpu'),
    5: ('recover IMEX', 'WARN', 'service'),
    6: ('bus reset', 'FAIL', 'reset_gpu'),
    7: ('system reboot', 'FAIL', 'reboot_node'),
}
# nvmlClocksEventReasons bits that mean cooling or power is wrong (a power cap or an idle GPU is normal).
CLOCK_REASONS = ((0x8, 'hardware slowdown'), (0x20, 'software thermal slowdown'), (0x40, 'hardware thermal slowdown'),
                 (0x80, 'power brake'))
FABRIC_STATES = {0: 'not supported', 1: 'not started', 2: 'in progress', 3: 'completed'}


class Unread(object):
    """A value NVML did not give: ``name`` is pynvml's error class suffix (``NotSupported``, ``FunctionNotFound``,
    ...), ``message`` what it said."""

    def __init__(self, name, message):
        self.name = name
        self.message = message


def unread_check(name, gpu, value):
    """The check ``name`` of a value NVML did not give."""
    if value.name == 'NotSupported':
        return check(name, 'PASS', gpu=gpu, source=NVML, reason='not supported by this GPU (NVML: Not Supported)')
    if value.name == 'GpuIsLost':
        return check(name, 'FAIL', 'reboot_node', gpu=gpu, source=NVML, evidence=value.message,
                     reason='the GPU is lost (it fell off the bus); drain and reboot the node')
    if value.name == 'ResetRequired':
        return check(name, 'FAIL', 'reset_gpu', gpu=gpu, source=NVML, evidence=value.message,
                     reason='the GPU needs a reset (NVML: %s)' % value.message)
    if value.name == 'FunctionNotFound':
        return check(name, 'UNKNOWN', gpu=gpu, source=NVML, evidence=value.message,
                     reason="this driver's NVML library lacks the call (older driver): not checked")
    return check(name, 'UNKNOWN', gpu=gpu, source=NVML, evidence=value.message,
                 reason='NVML could not read it: %s' % value.message)


def _threshold(contract, key):
    return contract.thresholds[key], contract.source(key) or DCGM


def ecc(gpu, value, contract):
    limit, source = _threshold(contract, 'ecc_volatile_uncorrected')
    bad = value['volatile_uncorrected']
    if value.get('mode') == 0:
        return check('ecc', 'WARN', 'service', gpu, value, source=NVML, reason='ECC is disabled on this GPU')
    if bad >= limit:
        return check('ecc', 'FAIL', 'reset_gpu', gpu, value, limit, source,
                     reason='%d volatile uncorrected (double-bit) ECC errors, at least %d' % (bad, limit))
    return check('ecc', 'PASS', gpu=gpu, value=value, threshold=limit, source=source)


def retired_pages(gpu, value, contract):
    limit, source = _threshold(contract, 'retired_pages')
    total = value['single_bit'] + value['double_bit']
    if total >= limit:
        return check('retired_pages', 'FAIL', 'replace_gpu', gpu, value, limit, source,
                     reason='%d retired pages, at least %d' % (total, limit))
    if value['pending']:
        return check('retired_pages', 'WARN', 'reset_gpu', gpu, value, limit, source,
                     reason='a page retirement is pending: it takes effect at the next GPU reset')
    return check('retired_pages', 'PASS', gpu=gpu, value=value, threshold=limit, source=source)


def remapped_rows(gpu, value, contract):
    limit, source = _threshold(contract, 'remapped_rows_uncorrectable')
    if value['failure']:
        return check('remapped_rows', 'FAIL', 'replace_gpu', gpu, value, limit, source,
                     reason='row remapping failed: the memory has no spare row left')
    if value['pending']:
        return check('remapped_rows', 'WARN', 'reset_gpu', gpu, value, limit, source,
                     reason='a row remapping is pending: it takes effect at the next GPU reset')
    if value['uncorrectable'] >= limit:
        return check('remapped_rows', 'WARN', 'service', gpu, value, limit, source,
                     reason='%d rows remapped for uncorrectable errors, at least %d' % (value['uncorrectable'], limit))
    return check('remapped_rows', 'PASS', gpu=gpu, value=value, threshold=limit, source=source)


def sram_ecc(gpu, value, contract):
    if value['threshold_exceeded']:
        return check('sram_ecc', 'FAIL', 'replace_gpu', gpu, value, source=NVML,
                     reason='SRAM ECC errors exceeded the threshold NVIDIA sets for this GPU')
    volatile = value['volatile_uncorrectable_parity'] + value['volatile_uncorrectable_secded']
    if volatile:
        return check('sram_ecc', 'WARN', 'reset_gpu', gpu, value, source=NVML,
                     reason='%d volatile uncorrectable SRAM errors since the last reset' % volatile)
    return check('sram_ecc', 'PASS', gpu=gpu, value=value, source=NVML)


def recovery_action(gpu, value, contract):
    meaning, verdict, action = RECOVERY_ACTIONS.get(value, ('unknown value %s' % value, 'WARN', 'service'))
    return check('recovery_action', verdict, action, gpu, value, 0, 'NVML_FI_DEV_GET_GPU_RECOVERY_ACTION',
                 reason=None if verdict == 'PASS' else 'NVIDIA recommends: %s' % meaning)


def clocks(gpu, value, contract):
    reasons = [name for bit, name in CLOCK_REASONS if value & bit]
    if reasons:
        return check('clocks', 'WARN', 'service', gpu, value, source=NVML,
                     reason='clocks are held down: %s (cooling or power)' % ', '.join(reasons))
    return check('clocks', 'PASS', gpu=gpu, value=value, source=NVML)


def temperature(gpu, value, contract):
    margin, source = contract.thresholds['temperature_margin'], contract.source('temperature_margin')
    now, slowdown, shutdown = value['current'], value.get('slowdown'), value.get('shutdown')
    if shutdown is not None and now >= shutdown:
        return check('temperature', 'FAIL', 'service', gpu, value, shutdown, 'the GPU\'s shutdown threshold (NVML)',
                     reason='%d C, at the GPU\'s shutdown threshold %d C' % (now, shutdown))
    if slowdown is not None and now >= slowdown - margin:
        return check('temperature', 'WARN', 'service', gpu, value, slowdown - margin,
                     source or 'the GPU\'s slowdown threshold (NVML)',
                     reason='%d C, at or above %d C (slowdown %d C)' % (now, slowdown - margin, slowdown))
    return check('temperature', 'PASS', gpu=gpu, value=value, threshold=slowdown, source=NVML)


def pcie(gpu, value, contract):
    width = contract.get('pcie_min_width') or value['max_width']
    generation = contract.get('pcie_min_generation')
    source = contract.source('pcie_min_width') or 'the GPU\'s maximum link width (NVML)'
    if value['width'] < width:
        return check('pcie', 'WARN', 'service', gpu, value, width, source,
                     reason='PCIe link x%d, below x%d (reseat or service the GPU)' % (value['width'], width))
    if generation and value['generation'] < generation:
        return check('pcie', 'WARN', 'service', gpu, value, generation, contract.source('pcie_min_generation'),
                     reason='PCIe generation %d, below %d' % (value['generation'], generation))
    return check('pcie', 'PASS', gpu=gpu, value=value, threshold=width, source=source)


def nvlink(gpu, value, contract):
    active, links = sum(1 for up in value if up), len(value)
    wanted = contract.get('nvlink_links')
    if wanted is not None and active < wanted:
        return check('nvlink', 'FAIL', 'reset_gpu', gpu, value, wanted, contract.source('nvlink_links'),
                     reason='%d of %d NVLink links active, %d expected' % (active, links, wanted))
    if wanted is None and 0 < active < links:
        return check('nvlink', 'WARN', 'reset_gpu', gpu, value, links, NVML,
                     reason='%d of %d NVLink links active' % (active, links))
    return check('nvlink', 'PASS', gpu=gpu, value=value, threshold=wanted, source=contract.source('nvlink_links'))


def fabric(gpu, value, contract):
    state = FABRIC_STATES.get(value['state'], 'state %s' % value['state'])
    if value['state'] == 2:
        return check('fabric', 'WARN', 'drain', gpu, value, 'completed', NVML,
                     reason='the NVLink fabric registration is in progress')
    if value['state'] != 3 or value['status'] != 0:
        return check('fabric', 'FAIL', 'service', gpu, value, 'completed', NVML,
                     reason='the NVLink fabric is %s (status %s): check the fabric manager' % (state, value['status']))
    if value.get('health_mask'):
        return check('fabric', 'WARN', 'service', gpu, value, 0, NVML,
                     reason='the fabric reports a degraded health mask 0x%x' % value['health_mask'])
    return check('fabric', 'PASS', gpu=gpu, value=value, source=NVML)


def fabric_missing(gpu, value, contract):
    """fabric when NVML has none: fine unless the contract wants one."""
    if contract.get('fabric'):
        return check('fabric', 'FAIL', 'service', gpu, None, 'completed', contract.source('fabric'),
                     reason='the contract expects an NVLink fabric; NVML says %s' % value.message)
    return unread_check('fabric', gpu, value)


def mig(gpu, value, contract):
    current, pending = value
    wanted = contract.get('mig_mode')
    mode = 'enabled' if current else 'disabled'
    if wanted and mode != wanted:
        return check('mig', 'FAIL', 'service', gpu, mode, wanted, contract.source('mig_mode'),
                     reason='MIG is %s, the contract wants it %s' % (mode, wanted))
    if pending != current:
        return check('mig', 'WARN', 'reset_gpu', gpu, mode, wanted, NVML,
                     reason='a MIG mode change is pending: it takes effect at the next GPU reset')
    return check('mig', 'PASS', gpu=gpu, value=mode, threshold=wanted, source=contract.source('mig_mode'))


def persistence(gpu, value, wanted, source):
    mode = 'enabled' if value else 'disabled'
    if wanted and mode != wanted:
        return check('persistence', 'WARN', 'service', gpu, mode, wanted, source,
                     reason='persistence mode is %s, %s wants it %s' % (mode, source, wanted))
    return check('persistence', 'PASS', gpu=gpu, value=mode, threshold=wanted, source=source)


# check name: (the sample's key, the rule); each reads one value of one GPU.
GPU_RULES = (('ecc', ecc), ('retired_pages', retired_pages), ('remapped_rows', remapped_rows),
             ('sram_ecc', sram_ecc), ('recovery_action', recovery_action), ('clocks', clocks),
             ('temperature', temperature), ('pcie', pcie), ('nvlink', nvlink), ('fabric', fabric), ('mig', mig))


def gpu_checks(sample, contract, wanted_persistence=None):
    """Every check of one GPU's ``sample`` (``health.nvml.read_gpu``); ``wanted_persistence``: ``(mode, source)``
    another concern wants for this GPU, else the contract's ``persistence_mode``."""
    index, values, found = sample['index'], sample['values'], []
    model = contract.get('gpu_model')
    if model and sample['name'] is None:
        found.append(check('model', 'UNKNOWN', gpu=index, threshold=model, source=contract.source('gpu_model'),
                           reason='NVML gave no name for this GPU'))
    elif model and not fnmatch.fnmatchcase(sample['name'], model):
        found.append(check('model', 'FAIL', 'service', index, sample['name'], model, contract.source('gpu_model'),
                           reason='%s, the contract wants %s' % (sample['name'], model)))
    else:
        found.append(check('model', 'PASS', gpu=index, value=sample['name'], threshold=model,
                           source=contract.source('gpu_model')))
    for name, rule in GPU_RULES:
        value = values.get(name)
        if isinstance(value, Unread):
            found.append(fabric_missing(index, value, contract) if name == 'fabric' else
                         unread_check(name, index, value))
        elif value is not None:
            found.append(rule(index, value, contract))
    mode = values.get('persistence')
    wanted, source = wanted_persistence or (contract.get('persistence_mode'), contract.source('persistence_mode'))
    if isinstance(mode, Unread):
        found.append(unread_check('persistence', index, mode))
    elif mode is not None:
        found.append(persistence(index, mode, wanted, source))
    return found


def node_checks(node, contract):
    """The node's own checks: NVML itself, the GPU count and bus ids, the driver (``node``: ``health.nvml.read``)."""
    found = []
    if node.get('error'):
        verdict, action, reason = node['error']
        return [check('nvml', verdict, action, reason=reason, source=NVML)]
    found.append(check('nvml', 'PASS', value=node.get('nvml_version'), source=NVML))
    count, wanted = node['count'], contract.get('gpu_count')
    if wanted is not None and count < wanted:
        found.append(check('gpu_count', 'FAIL', 'reboot_node', value=count, threshold=wanted,
                           source=contract.source('gpu_count'),
                           reason='%d GPUs, the contract wants %d: a GPU is missing (fallen off the bus?); reboot, '
                                  'then service if it stays missing' % (count, wanted)))
    elif wanted is not None and count != wanted:
        found.append(check('gpu_count', 'WARN', 'service', value=count, threshold=wanted,
                           source=contract.source('gpu_count'),
                           reason='%d GPUs, the contract wants %d' % (count, wanted)))
    else:
        found.append(check('gpu_count', 'PASS', value=count, threshold=wanted, source=contract.source('gpu_count')))
    found.append(_bus_ids(node, contract))
    found.append(_driver(node, contract))
    return found


def _bus_ids(node, contract):
    wanted = contract.get('pci_bus_ids')
    have = set(xids.gpu_bus_key(gpu['pci_bus_id']) for gpu in node['gpus'])
    missing = [bus for bus in wanted or () if xids.gpu_bus_key(bus) not in have]
    if missing:
        return check('pci_bus_ids', 'FAIL', 'reboot_node', value=sorted(gpu['pci_bus_id'] for gpu in node['gpus']),
                     threshold=wanted, source=contract.source('pci_bus_ids'),
                     reason='no GPU at %s; reboot, then service if it stays missing' % ', '.join(missing))
    return check('pci_bus_ids', 'PASS', value=sorted(gpu['pci_bus_id'] for gpu in node['gpus']), threshold=wanted,
                 source=contract.source('pci_bus_ids'))


def _driver(node, contract):
    version = node.get('driver_version')
    if isinstance(version, Unread):
        return unread_check('driver', None, version)
    exact, branch = contract.get('driver_version'), contract.get('driver_branch')
    if exact and version != exact:
        return check('driver', 'FAIL', 'service', value=version, threshold=exact, source=contract.source(
            'driver_version'), reason='driver %s, the contract wants %s' % (version, exact))
    if branch and (version or '').split('.')[0] != str(branch):
        return check('driver', 'FAIL', 'service', value=version, threshold=branch, source=contract.source(
            'driver_branch'), reason='driver %s is not of branch %s' % (version, branch))
    return check('driver', 'PASS', value=version, threshold=exact or branch,
                 source=contract.source('driver_version') or contract.source('driver_branch'))


def xid_checks(log, gpus, contract):
    """One xid check per GPU and one for the node (XIDs of a bus no GPU has: a GPU that fell off is no longer
    listed), from ``log``: ``health.kernel_log.read``'s answer. The verdicts come from every XID line counted, the
    evidence from the lines kept (``xid.events``)."""
    if log.get('error'):
        return [check('xid', 'UNKNOWN', reason=log['error'], source='kernel log')]
    events, counts = xids.events(log['lines'])
    counts = dict((key, number) for key, number in counts.items() if key[1] not in contract.xid_ignored)
    source = 'kernel log (%s); NVIDIA XID catalogue' % log['source']
    found, listed = [], set()
    for gpu in gpus:
        bus = xids.gpu_bus_key(gpu['pci_bus_id'])
        listed.add(bus)
        found.append(_xid_check(gpu['index'], set([bus]), events, counts, source))
    stray = set(bus for bus, unused in counts if bus not in listed)
    found.append(_xid_check(None, stray, events, counts, source))
    return found


def _xid_check(index, buses, events, counts, source):
    value = {}
    for (bus, code), number in sorted(counts.items()):
        if bus in buses:
            value['%d' % code] = value.get('%d' % code, 0) + number
    if not value:
        return check('xid', 'PASS', gpu=index, value={}, source=source)
    classes = [(code,) + xids.classify(code) for code in sorted(int(code) for code in value)]
    worst = max(classes, key=lambda item: (STATUS[item[2]], ACTIONS.index(item[3])))
    reason = 'XID %s' % ', '.join('%d (%s)' % (code, name) for code, name, unused, unused2 in classes)
    evidence = [event['line'] for event in events if event['bus'] in buses and '%d' % event['code'] in value]
    return check('xid', worst[2], worst[3], index, value, source=source, evidence=evidence[:5], reason=reason)
