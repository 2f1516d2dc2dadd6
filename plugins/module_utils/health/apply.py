# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_health run: one NVML pass and the kernel log, the checks against the contract, the node's verdict,
the metrics.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change at any time. Its effects are injected
(``load_pynvml``, ``run_command``, ``read_log``), so that pytest drives it with a real pynvml on the driver kit's
fake library, or without any.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.nvidia.plugins.module_utils.health import kernel_log, metrics, rules, xid
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health.contract import Contract
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health.nvml import Pass
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health.verdicts import check, node_verdict

NVML_LIBRARY = 'nvidia-ml-py'


def configuration_check(verdicts):
    """How the node's configuration concerns stand (node_state's other verdicts), as one check."""
    drifted = sorted(name for name, verdict in verdicts.items() if not verdict.get('converged'))
    if drifted:
        return check('configuration', 'WARN', 'service', value=drifted, source='node_state',
                     reason='the configuration has drifted (%s): run the gpu_node role to converge it'
                            % ', '.join(drifted))
    return check('configuration', 'PASS', value=[], source='node_state')


def persistence_wishes(verdicts):
    """``{gpu index: (mode, source)}``: the modes gpu_persistence wants, from its verdict in this node_state run."""
    verdict = verdicts.get('gpu_persistence') or {}
    wishes = {}
    for gpu in (verdict.get('result') or {}).get('gpus') or ():
        if isinstance(gpu, dict) and gpu.get('after') in ('enabled', 'disabled'):
            wishes[gpu.get('index')] = (gpu['after'], 'gpu_persistence')
    return wishes


def passed(checks):
    """``{check: [GPU index, ...]}`` of the checks that passed (``None`` for the node's own)."""
    found = {}
    for result in checks:
        if result['verdict'] == 'PASS':
            found.setdefault(result['check'], []).append(result['gpu'])
    return found


class HealthRun(object):
    """One node's health: ``params`` (the module's options), ``load_pynvml()`` (the module, or ImportError),
    ``run_command(argv)`` for the kernel log's fallbacks, ``verdicts``: node_state's other concerns (or None)."""

    def __init__(self, params, load_pynvml, run_command=None, verdicts=None, read_log=kernel_log.read):
        self.params = params
        self.contract = Contract(params.get('contract'))
        self.load_pynvml = load_pynvml
        self.run_command = run_command
        self.verdicts = verdicts
        self.read_log = read_log
        self.missing_library = None
        # what the metrics hold besides the result: every check, each GPU's values as read, the XID counts
        self.checks = []
        self.raw = {}
        self.counts = {}

    def sample(self):
        try:
            pynvml = self.load_pynvml()
        except ImportError:
            self.missing_library = NVML_LIBRARY
            return {'error': ('UNKNOWN', 'service', 'the Python library nvidia-ml-py (import pynvml) is missing on '
                                                    'this host: install it to read the GPUs'), 'gpus': []}
        return Pass(pynvml).read()

    def evaluate(self):
        """The module's result (no metrics written: ``write_metrics``): every check that did not pass in full, the
        others by name (``passed``; in full with ``report_passed``), so that a healthy node's result, which
        node_state's round trip carries on every run, stays small; the metrics have every check and value."""
        node = self.sample()
        log = self.read_log(self.run_command, self.params.get('kernel_log') or None)
        checks = rules.node_checks(node, self.contract)
        wishes = persistence_wishes(self.verdicts) if self.verdicts else {}
        for sample in node['gpus']:
            if sample.get('lost'):
                checks.append(rules.unread_check('nvml', sample['index'], sample['lost']))
                continue
            checks.extend(rules.gpu_checks(sample, self.contract, wishes.get(sample['index'])))
        # without NVML every XID is the node's (a GPU that fell off the bus may be why NVML cannot start)
        checks.extend(rules.xid_checks(log, node['gpus'], self.contract))
        if self.verdicts is not None:
            checks.append(configuration_check(self.verdicts))
        checks = self.checks = [c for c in checks if c['check'] not in self.contract.ignored]
        verdict, action, reasons = node_verdict(checks)
        gpus = []
        for sample in node['gpus']:
            own = [c for c in checks if c['gpu'] == sample['index']]
            gpu_verdict, gpu_action, unused = node_verdict(own)
            gpus.append({'index': sample['index'], 'uuid': sample['uuid'], 'name': sample['name'],
                         'pci_bus_id': sample['pci_bus_id'], 'verdict': gpu_verdict, 'action': gpu_action})
            self.raw[sample['index']] = sample['values']
        counts = self.counts = {} if log.get('error') else xid.events(log['lines'])[1]
        driver = node.get('driver_version')
        result = {'changed': False, 'verdict': verdict, 'action': action, 'reasons': reasons,
                  'checks': [c for c in checks if self.params.get('report_passed') or c['verdict'] != 'PASS'],
                  'passed': passed(checks), 'gpus': gpus,
                  'driver_version': None if isinstance(driver, rules.Unread) else driver,
                  'xid': {'source': log.get('source'), 'complete': log.get('complete'), 'error': log.get('error'),
                          'events': sum(counts.values())},
                  'msg': '%s%s' % (verdict, ': ' + '; '.join(reasons) if reasons else '')}
        if self.missing_library:
            result['missing_library'] = self.missing_library
        return result

    def write_metrics(self, result):
        """Write the textfile (``textfile_directory``): its path, or None (no such directory)."""
        directory = self.params['textfile_directory']
        text = metrics.render(result, self.checks, self.raw, self.counts)
        return metrics.write(directory, text, create=self.params.get('textfile_create'))
