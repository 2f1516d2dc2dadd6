# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One NVML pass over a node's GPUs, for the health checks: every value, or why NVML did not give it.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change at any time. Reads through pynvml
(PyPI nvidia-ml-py), handed in by the caller; never sets anything. Each call is guarded on its own: a call the
driver's library lacks (pynvml raises FunctionNotFound), a GPU without the feature (NotSupported) or any other
NVML error becomes an ``Unread`` for that one value, and the pass goes on.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes

from ansible_collections.gpufleet.nvidia.plugins.module_utils.health.rules import Unread

RECOVERY_ACTION_FIELD = 230  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
# NVIDIA's nvlink link count ceiling (NVML_NVLINK_MAX_LINKS in nvidia-ml-py 13); the loop stops at the first link the
# GPU does not have.
MAX_NVLINKS = 36
# nvmlInit's errors: (verdict, action, what it means and what to do)
INIT_ERRORS = {
    'DriverNotLoaded': ('FAIL', 'service', 'the NVIDIA kernel driver is not loaded (NVML: Driver Not Loaded): load '
                                           'it (modprobe nvidia) or reinstall the driver'),
    'LibraryNotFound': ('FAIL', 'service', "libnvidia-ml.so.1 is not installed: the driver's user-space libraries "
                                           'are missing'),
    'LibRmVersionMismatch': ('FAIL', 'reboot_node', 'the NVML library and the kernel module are of different '
                                                    'driver versions (upgraded without a reboot): drain and reboot'),
    'NoPermission': ('UNKNOWN', 'service', 'NVML refused this user (NVML: Insufficient Permissions): run as root'),
}


def error_name(exc):
    """pynvml's error class suffix (``NVMLError_NotSupported`` -> ``NotSupported``), ``Unknown`` otherwise."""
    name = type(exc).__name__
    return name[len('NVMLError_'):] if name.startswith('NVMLError_') else 'Unknown'


def text(value):
    return value.decode('utf-8', 'replace') if isinstance(value, bytes) else value


class Pass(object):
    """One read-only NVML pass through ``pynvml`` (the module)."""

    def __init__(self, pynvml):
        self.nv = pynvml

    def call(self, fn, *args):
        """``fn(*args)``, or an ``Unread`` when NVML raises."""
        try:
            return fn(*args)
        except self.nv.NVMLError as exc:
            return Unread(error_name(exc), str(exc))

    def read(self):
        """``{'error': (verdict, action, reason)}`` when NVML cannot start, else ``{'driver_version', 'nvml_version',
        'count', 'gpus': [sample, ...]}``."""
        nv = self.nv
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            name = error_name(exc)
            verdict, action, reason = INIT_ERRORS.get(name, ('UNKNOWN', 'service', 'NVML could not start: %s' % exc))
            return {'error': (verdict, action, reason), 'gpus': []}
        try:
            node = {'driver_version': self.call(lambda: text(nv.nvmlSystemGetDriverVersion())),
                    'nvml_version': self.call(lambda: text(nv.nvmlSystemGetNVMLVersion()))}
            count = self.call(nv.nvmlDeviceGetCount)
            if isinstance(count, Unread):
                return {'error': ('UNKNOWN', 'service', 'NVML could not count the GPUs: %s' % count.message),
                        'gpus': []}
            node['count'] = count
            node['gpus'] = [self.gpu(index) for index in range(count)]
            return node
        finally:
            try:
                nv.nvmlShutdown()
            except nv.NVMLError:
                pass

    def gpu(self, index):
        """One GPU's sample: ``{'index', 'uuid', 'name', 'pci_bus_id', 'values': {check: value or Unread}}``, or with
        ``lost`` (an Unread) when NVML has no handle for it."""
        nv = self.nv
        handle = self.call(nv.nvmlDeviceGetHandleByIndex, index)
        if isinstance(handle, Unread):
            return {'index': index, 'uuid': None, 'name': None, 'pci_bus_id': None, 'lost': handle, 'values': {}}
        pci = self.call(nv.nvmlDeviceGetPciInfo, handle)
        sample = {'index': index, 'uuid': self._text(nv.nvmlDeviceGetUUID, handle),
                  'name': self._text(nv.nvmlDeviceGetName, handle),
                  'pci_bus_id': None if isinstance(pci, Unread) else text(pci.busId)}
        sample['values'] = dict((name, self.call(read, handle)) for name, read in self.readers())
        return sample

    def _text(self, fn, handle):
        value = self.call(fn, handle)
        return None if isinstance(value, Unread) else text(value)

    def readers(self):
        return (('ecc', self.ecc), ('retired_pages', self.retired_pages), ('remapped_rows', self.remapped_rows),
                ('sram_ecc', self.sram_ecc), ('recovery_action', self.recovery_action), ('clocks', self.clocks),
                ('temperature', self.temperature), ('pcie', self.pcie), ('nvlink', self.nvlink),
                ('fabric', self.fabric), ('mig', self.nv.nvmlDeviceGetMigMode),
                ('persistence', self.nv.nvmlDeviceGetPersistenceMode))

    # Each reader raises pynvml's NVMLError for the whole value, as its first failing call says.
    def ecc(self, handle):
        nv = self.nv
        mode = nv.nvmlDeviceGetEccMode(handle)[0]
        counts = {'mode': mode}
        for kind, error_type in (('corrected', 0), ('uncorrected', 1)):
            for counter, counter_type in (('volatile', 0), ('aggregate', 1)):
                counts['%s_%s' % (counter, kind)] = nv.nvmlDeviceGetTotalEccErrors(handle, error_type, counter_type)
        return counts

    def retired_pages(self, handle):
        nv = self.nv
        return {'single_bit': len(nv.nvmlDeviceGetRetiredPages(handle, 0)),
                'double_bit': len(nv.nvmlDeviceGetRetiredPages(handle, 1)),
                'pending': bool(nv.nvmlDeviceGetRetiredPagesPendingStatus(handle))}

    def remapped_rows(self, handle):
        correctable, uncorrectable, pending, failure = self.nv.nvmlDeviceGetRemappedRows(handle)
        return {'correctable': correctable, 'uncorrectable': uncorrectable, 'pending': bool(pending),
                'failure': bool(failure)}

    def sram_ecc(self, handle):
        status = self.nv.c_nvmlEccSramErrorStatus_v1_t()
        self.nv.nvmlDeviceGetSramEccErrorStatus(handle, ctypes.byref(status))
        return {'aggregate_uncorrectable_parity': status.aggregateUncParity,
                'aggregate_uncorrectable_secded': status.aggregateUncSecDed,
                'aggregate_correctable': status.aggregateCor,
                'volatile_uncorrectable_parity': status.volatileUncParity,
                'volatile_uncorrectable_secded': status.volatileUncSecDed,
                'volatile_correctable': status.volatileCor,
                'threshold_exceeded': bool(status.bThresholdExceeded)}

    def recovery_action(self, handle):
        field = self.nv.nvmlDeviceGetFieldValues(handle, [RECOVERY_ACTION_FIELD])[0]
        if field.nvmlReturn != 0:
            raise self.nv.NVMLError(field.nvmlReturn)
        return field.value.uiVal

    def clocks(self, handle):
        return self.nv.nvmlDeviceGetCurrentClocksEventReasons(handle)

    def temperature(self, handle):
        nv = self.nv
        value = {'current': nv.nvmlDeviceGetTemperature(handle, 0)}
        for name, threshold in (('shutdown', 0), ('slowdown', 1)):
            limit = self.call(nv.nvmlDeviceGetTemperatureThreshold, handle, threshold)
            if not isinstance(limit, Unread):
                value[name] = limit
        return value

    def pcie(self, handle):
        nv = self.nv
        return {'generation': nv.nvmlDeviceGetCurrPcieLinkGeneration(handle),
                'width': nv.nvmlDeviceGetCurrPcieLinkWidth(handle),
                'max_generation': nv.nvmlDeviceGetMaxPcieLinkGeneration(handle),
                'max_width': nv.nvmlDeviceGetMaxPcieLinkWidth(handle)}

    def nvlink(self, handle):
        """Each link's state, until the first link the GPU does not have; NotSupported when it has none."""
        nv, links = self.nv, []
        for link in range(MAX_NVLINKS):
            try:
                links.append(bool(nv.nvmlDeviceGetNvLinkState(handle, link)))
            except nv.NVMLError as exc:
                if links and error_name(exc) in ('InvalidArgument', 'NotSupported'):
                    break
                raise
        return links

    def fabric(self, handle):
        info = self.nv.c_nvmlGpuFabricInfoV_t()
        self.nv.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
        return {'state': info.state, 'status': info.status, 'clique_id': info.cliqueId,
                'health_mask': info.healthMask}
