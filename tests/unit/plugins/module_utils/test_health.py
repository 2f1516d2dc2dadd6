# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU health's pure parts: the checks against the contract, the XID catalogue and lines, the node's verdict, the
contract's validation, the metrics text and the textfile's safe write. (Real pynvml on the driver kit's fake library:
tests/kit/test_mod_gpu_health.py.)"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.gpufleet.nvidia.plugins.module_utils.health import contract, kernel_log, metrics, rules, xid
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health.apply import HealthRun, persistence_wishes
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health.verdicts import check, node_verdict

HEALTHY = {
    'ecc': {'mode': 1, 'volatile_corrected': 0, 'volatile_uncorrected': 0, 'aggregate_corrected': 3,
            'aggregate_uncorrected': 0},
    'retired_pages': {'single_bit': 0, 'double_bit': 0, 'pending': False},
    'remapped_rows': {'correctable': 0, 'uncorrectable': 0, 'pending': False, 'failure': False},
    'sram_ecc': {'aggregate_uncorrectable_parity': 0, 'aggregate_uncorrectable_secded': 0, 'aggregate_correctable': 0,
                 'volatile_uncorrectable_parity': 0, 'volatile_uncorrectable_secded': 0, 'volatile_correctable': 0,
                 'threshold_exceeded': False},
    'recovery_action': 0,
    'clocks': 0x1,
    'temperature': {'current': 35, 'slowdown': 89, 'shutdown': 92},
    'pcie': {'generation': 5, 'width': 16, 'max_generation': 5, 'max_width': 16},
    'nvlink': [True] * 18,
    'fabric': rules.Unread('NotSupported', 'Not Supported'),
    'mig': [0, 0],
    'persistence': 1,
}


def sample(index=0, **changed):
    values = dict(HEALTHY)
    for key, value in changed.items():
        values[key] = dict(values[key], **value) if isinstance(value, dict) and isinstance(values[key], dict) else value
    return {'index': index, 'uuid': 'GPU-%d' % index, 'name': 'NVIDIA H100 80GB HBM3',
            'pci_bus_id': '00000000:%02X:00.0' % (0x18 + index), 'values': values}


def verdicts(found):
    return dict((c['check'], (c['verdict'], c['action'])) for c in found)


def test_a_healthy_gpu_passes_every_check():
    found = rules.gpu_checks(sample(), contract.Contract())
    assert set(verdicts(found).values()) == {('PASS', 'none')}
    assert sorted(verdicts(found)) == sorted(['model', 'persistence'] + [name for name, unused in rules.GPU_RULES])


@pytest.mark.parametrize('changed, name, wanted', [
    ({'ecc': {'volatile_uncorrected': 1}}, 'ecc', ('FAIL', 'reset_gpu')),
    ({'ecc': {'mode': 0}}, 'ecc', ('WARN', 'service')),
    ({'retired_pages': {'single_bit': 40, 'double_bit': 23}}, 'retired_pages', ('FAIL', 'replace_gpu')),
    ({'retired_pages': {'pending': True}}, 'retired_pages', ('WARN', 'reset_gpu')),
    ({'remapped_rows': {'failure': True}}, 'remapped_rows', ('FAIL', 'replace_gpu')),
    ({'remapped_rows': {'pending': True}}, 'remapped_rows', ('WARN', 'reset_gpu')),
    ({'remapped_rows': {'uncorrectable': 512}}, 'remapped_rows', ('WARN', 'service')),
    ({'sram_ecc': {'threshold_exceeded': True}}, 'sram_ecc', ('FAIL', 'replace_gpu')),
    ({'sram_ecc': {'volatile_uncorrectable_parity': 2}}, 'sram_ecc', ('WARN', 'reset_gpu')),
    ({'recovery_action': 1}, 'recovery_action', ('FAIL', 'reset_gpu')),
    ({'recovery_action': 2}, 'recovery_action', ('FAIL', 'reboot_node')),
    ({'recovery_action': 3}, 'recovery_action', ('WARN', 'drain')),
    ({'recovery_action': 4}, 'recovery_action', ('FAIL', 'reset_gpu')),
    ({'recovery_action': 99}, 'recovery_action', ('WARN', 'service')),
    ({'clocks': 0x40}, 'clocks', ('WARN', 'service')),
    ({'clocks': 0x4}, 'clocks', ('PASS', 'none')),  # a power cap is normal
    ({'temperature': {'current': 89}}, 'temperature', ('WARN', 'service')),
    ({'temperature': {'current': 92}}, 'temperature', ('FAIL', 'service')),
    ({'pcie': {'width': 8}}, 'pcie', ('WARN', 'service')),
    ({'pcie': {'generation': 1}}, 'pcie', ('PASS', 'none')),  # idle GPUs lower the generation
    ({'nvlink': [True] * 17 + [False]}, 'nvlink', ('WARN', 'reset_gpu')),
    ({'nvlink': [False] * 18}, 'nvlink', ('PASS', 'none')),  # no NVLink bridge at all
    ({'fabric': {'state': 3, 'status': 0, 'clique_id': 1, 'health_mask': 0}}, 'fabric', ('PASS', 'none')),
    ({'fabric': {'state': 1, 'status': 0, 'clique_id': 0, 'health_mask': 0}}, 'fabric', ('FAIL', 'service')),
    ({'fabric': {'state': 2, 'status': 0, 'clique_id': 0, 'health_mask': 0}}, 'fabric', ('WARN', 'drain')),
    ({'fabric': {'state': 3, 'status': 9, 'clique_id': 0, 'health_mask': 0}}, 'fabric', ('FAIL', 'service')),
    ({'mig': [0, 1]}, 'mig', ('WARN', 'reset_gpu')),
    ({'remapped_rows': rules.Unread('FunctionNotFound', 'Function Not Found')}, 'remapped_rows', ('UNKNOWN', 'none')),
    ({'ecc': rules.Unread('NotSupported', 'Not Supported')}, 'ecc', ('PASS', 'none')),
    ({'ecc': rules.Unread('GpuIsLost', 'GPU is lost')}, 'ecc', ('FAIL', 'reboot_node')),
    ({'ecc': rules.Unread('Unknown', 'Unknown Error')}, 'ecc', ('UNKNOWN', 'none')),
])
def test_each_fault_gives_its_verdict_and_action(changed, name, wanted):
    found = verdicts(rules.gpu_checks(sample(**changed), contract.Contract()))
    assert found[name] == wanted
    assert [other for other, seen in found.items() if other != name and seen != ('PASS', 'none')] == []


def test_the_contract_sets_expectations_and_thresholds():
    given = contract.Contract({'gpu_model': 'NVIDIA A100*', 'mig_mode': 'enabled', 'nvlink_links': 18,
                               'fabric': True, 'persistence_mode': 'enabled', 'pcie_min_generation': 4,
                               'thresholds': {'ecc_volatile_uncorrected': 5, 'retired_pages': None}})
    found = dict((c['check'], c) for c in rules.gpu_checks(
        sample(ecc={'volatile_uncorrected': 4}, nvlink=[True] * 12 + [False] * 6, persistence=0,
               pcie={'generation': 3}), given))
    assert found['model']['verdict'] == 'FAIL' and found['model']['source'] == 'contract.gpu_model'
    assert found['mig']['verdict'] == 'FAIL' and found['mig']['threshold'] == 'enabled'
    assert found['nvlink']['verdict'] == 'FAIL' and found['nvlink']['threshold'] == 18
    assert found['fabric']['verdict'] == 'FAIL'  # the contract wants a fabric, NVML has none
    assert found['persistence']['verdict'] == 'WARN'
    assert found['pcie']['verdict'] == 'WARN' and found['pcie']['threshold'] == 4
    assert found['ecc']['verdict'] == 'PASS' and found['ecc']['threshold'] == 5
    assert found['ecc']['source'] == 'contract.ecc_volatile_uncorrected'
    assert given.thresholds['retired_pages'] == 63  # null keeps the default


def test_node_checks_count_bus_ids_and_driver():
    node = {'driver_version': '550.163.01', 'nvml_version': '12.550.163.01', 'count': 2,
            'gpus': [sample(0), sample(1)]}
    ok = verdicts(rules.node_checks(node, contract.Contract({'gpu_count': 2, 'driver_branch': '550',
                                                             'pci_bus_ids': ['0000:18:00.0', '19:00.0']})))
    assert set(ok.values()) == {('PASS', 'none')}
    bad = verdicts(rules.node_checks(node, contract.Contract({'gpu_count': 3, 'driver_version': '550.163.02',
                                                              'pci_bus_ids': ['0000:1a:00.0']})))
    assert bad['gpu_count'] == ('FAIL', 'reboot_node') and bad['driver'] == ('FAIL', 'service')
    assert bad['pci_bus_ids'] == ('FAIL', 'reboot_node')
    assert verdicts(rules.node_checks(node, contract.Contract({'gpu_count': 1})))['gpu_count'] == ('WARN', 'service')
    assert verdicts(rules.node_checks(node, contract.Contract({'driver_branch': '535'})))['driver'] == ('FAIL', 'service')


LOG = [
    'NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.163.01',
    'NVRM: Xid (PCI:0000:18:00): 13, pid=4242, name=python3, Graphics Exception: ESR 0x404600=0x80000002',
    'NVRM: Xid (PCI:0000:19:00): 48, pid=\'<unknown>\', name=<unknown>, An uncorrectable double bit error',
    'NVRM: Xid (PCI:0000:19:00): 48, pid=\'<unknown>\', name=<unknown>, An uncorrectable double bit error',
    'NVRM: Xid (PCI:00000000:3b:00): 79, pid=\'<unknown>\', name=<unknown>, GPU has fallen off the bus.',
    'NVRM: Xid (PCI:0000:18:00): 31, pid=1, name=x, Ch 00000008, intr 10000000. MMU Fault',
]


def test_xid_lines_are_parsed_counted_and_classified():
    events, counts = xid.events(LOG)
    assert [(e['bus'], e['code']) for e in events] == [('0000:18:00', 13), ('0000:19:00', 48), ('0000:19:00', 48),
                                                       ('0000:3b:00', 79), ('0000:18:00', 31)]
    assert counts == {('0000:18:00', 13): 1, ('0000:19:00', 48): 2, ('0000:3b:00', 79): 1, ('0000:18:00', 31): 1}
    assert xid.classify(48)[1:] == ('FAIL', 'reset_gpu') and xid.classify(13)[1:] == ('PASS', 'none')
    assert xid.classify(79)[1:] == ('FAIL', 'reboot_node') and xid.classify(94)[1:] == ('WARN', 'reset_gpu')
    assert xid.classify(4242)[1] == 'WARN'  # an unknown code is seen, never hidden


def test_xid_checks_per_gpu_and_for_a_gpu_that_fell_off():
    checks = rules.xid_checks({'source': 'test', 'lines': LOG, 'complete': True}, [sample(0), sample(1)],
                              contract.Contract())
    by_gpu = dict((c['gpu'], c) for c in checks)
    assert (by_gpu[0]['verdict'], by_gpu[0]['value']) == ('PASS', {'13': 1, '31': 1})  # application faults
    assert (by_gpu[1]['verdict'], by_gpu[1]['action'], by_gpu[1]['value']) == ('FAIL', 'reset_gpu', {'48': 2})
    assert len(by_gpu[1]['evidence']) == 2 and 'double bit' in by_gpu[1]['evidence'][0]
    assert (by_gpu[None]['verdict'], by_gpu[None]['action']) == ('FAIL', 'reboot_node')  # no GPU at 3b: fell off
    ignored = rules.xid_checks({'source': 'test', 'lines': LOG, 'complete': True}, [sample(0), sample(1)],
                               contract.Contract({'xid_ignore': [48, 79]}))
    assert set(c['verdict'] for c in ignored) == {'PASS'}
    unreadable = rules.xid_checks({'error': 'no kernel log could be read'}, [sample(0)], contract.Contract())
    assert [(c['gpu'], c['verdict']) for c in unreadable] == [(None, 'UNKNOWN')]


def test_the_node_verdict_is_the_worst_and_its_strongest_action():
    checks = [check('a', 'PASS'), check('b', 'WARN', 'drain'), check('c', 'FAIL', 'reset_gpu', gpu=1, reason='r1'),
              check('d', 'FAIL', 'replace_gpu', gpu=2, reason='r2'), check('e', 'UNKNOWN')]
    verdict, action, reasons = node_verdict(checks)
    assert (verdict, action) == ('FAIL', 'replace_gpu')
    assert reasons == ['GPU 1 c: FAIL (reset_gpu): r1', 'GPU 2 d: FAIL (replace_gpu): r2']
    assert node_verdict([check('a', 'PASS'), check('e', 'UNKNOWN', 'service')])[:2] == ('UNKNOWN', 'service')
    assert node_verdict([])[:2] == ('PASS', 'none')
    with pytest.raises(ValueError):
        check('a', 'OK')
    with pytest.raises(ValueError):
        check('a', 'FAIL', 'panic')


@pytest.mark.parametrize('given, words', [
    ({'gpu_count': 'eight'}, ['gpu_count', 'int']),
    ({'gpu_cuont': 8}, ['gpu_cuont']),
    ({'mig_mode': 'on'}, ['mig_mode', 'enabled, disabled']),
    ({'thresholds': {'retired_pages': 'many'}}, ['retired_pages', 'int']),
    ({'thresholds': {'retried_pages': 1}}, ['retried_pages']),
    ({'ignore': ['ecc', 'ecc2']}, ['ignore', 'ecc2']),
])
def test_a_bad_contract_is_refused_naming_the_key(given, words):
    validated = ArgumentSpecValidator({'contract': dict(type='dict', options=contract.SPEC)}).validate(
        {'contract': given})
    message = ' '.join(validated.error_messages)
    assert message and all(word in message for word in words), message


def test_without_pynvml_the_node_is_unknown_and_says_what_is_missing():
    def missing():
        raise ImportError('No module named pynvml')

    run = HealthRun({'contract': None, 'kernel_log': None}, missing,
                    read_log=lambda run, path: {'source': 'x', 'lines': [], 'complete': True})
    result = run.evaluate()
    assert (result['verdict'], result['action'], result['missing_library']) == ('UNKNOWN', 'service', 'nvidia-ml-py')
    assert 'nvidia-ml-py' in result['msg'] and run.counts == {} and run.raw == {}


def test_node_states_verdicts_add_the_configuration_and_persistence_wishes():
    verdicts_seen = {'gpu_persistence': {'converged': False, 'result': {'gpus': [
        {'index': 0, 'before': 'disabled', 'after': 'enabled', 'changed': True}]}}, 'docker': {'converged': True}}
    assert persistence_wishes(verdicts_seen) == {0: ('enabled', 'gpu_persistence')}
    found = verdicts(rules.gpu_checks(sample(persistence=0), contract.Contract(), ('enabled', 'gpu_persistence')))
    assert found['persistence'] == ('WARN', 'service')


METRICS_RESULT = {
    'verdict': 'FAIL', 'action': 'reset_gpu',
    'checks': [check('nvml', 'PASS'), check('ecc', 'FAIL', 'reset_gpu', gpu=0)],
    'gpus': [{'index': 0, 'uuid': 'GPU-"x"\\1', 'name': 'NVIDIA H100\n', 'pci_bus_id': '00000000:18:00.0'}],
}
METRICS_RAW = {0: dict(HEALTHY, ecc=dict(HEALTHY['ecc'], volatile_uncorrected=2))}
METRICS_XIDS = {('0000:18:00', 48): 2}


def test_metrics_text_has_help_type_escaped_labels_and_no_timestamps():
    text = metrics.render(METRICS_RESULT, METRICS_RESULT['checks'], METRICS_RAW, METRICS_XIDS)
    lines = text.splitlines()
    assert 'gpufleet_health_status 3' in lines
    assert 'gpufleet_health_verdict{verdict="FAIL"} 1' in lines and 'gpufleet_health_verdict{verdict="PASS"} 0' in lines
    assert 'gpufleet_health_action{action="reset_gpu"} 1' in lines
    assert 'gpufleet_health_check_status{check="ecc",gpu="0",uuid="GPU-\\"x\\"\\\\1"} 3' in lines
    assert 'gpufleet_gpu_ecc_errors{gpu="0",uuid="GPU-\\"x\\"\\\\1",counter="volatile",type="uncorrected"} 2' in lines
    assert 'name="NVIDIA H100\\n"' in text
    assert 'gpufleet_gpu_xid_events{pci_bus_id="0000:18:00",code="48"} 2' in lines
    for name in set(line.split('{')[0].split(' ')[0] for line in lines if not line.startswith('#')):
        assert '# HELP %s ' % name in text and '# TYPE %s gauge' % name in text
    samples = [line for line in lines if not line.startswith('#')]
    assert all(len((line.rsplit('}', 1)[-1] if '{' in line else line.split(' ', 1)[1]).split()) == 1
               for line in samples)  # a value, no timestamp
    assert 'gpufleet_gpu_fabric_state' not in text  # NotSupported: no sample


def test_the_textfile_is_written_atomically_and_never_through_a_link(tmp_path):
    directory = tmp_path / 'node-exporter'
    assert metrics.write(str(directory), 'a 1\n') is None  # no directory: nothing written
    path = metrics.write(str(directory), 'a 1\n', create=True)
    assert path == str(directory / metrics.FILE_NAME) and open(path).read() == 'a 1\n'
    assert oct(os.stat(path).st_mode & 0o777) == '0o644' and os.listdir(str(directory)) == [metrics.FILE_NAME]
    metrics.write(str(directory), 'a 2\n')
    assert open(path).read() == 'a 2\n'
    target = tmp_path / 'elsewhere'
    target.mkdir()
    os.symlink(str(target), str(tmp_path / 'link'))
    with pytest.raises(metrics.MetricsError, match='symbolic link'):
        metrics.write(str(tmp_path / 'link'), 'a 3\n')
    with pytest.raises(metrics.MetricsError, match='symbolic link'):
        metrics.write(str(tmp_path / 'link' / 'sub'), 'a 3\n', create=True)
    assert os.listdir(str(target)) == []


def test_a_kernel_log_file_of_kmsg_records_or_dmesg_lines(tmp_path):
    log = tmp_path / 'kern.log'
    log.write_text('6,1,100,-;NVRM: Xid (PCI:0000:18:00): 48, pid=1, name=x, double bit\n'
                   ' SUBSYSTEM=pci\n'
                   '[  12.5] NVRM: Xid (PCI:0000:19:00): 79, pid=1, name=x, fell off\n'
                   '6,2,101,-;usb 1-1: new device\n')
    found = kernel_log.read(path=str(log))
    assert found['lines'] == ['NVRM: Xid (PCI:0000:18:00): 48, pid=1, name=x, double bit',
                              '[  12.5] NVRM: Xid (PCI:0000:19:00): 79, pid=1, name=x, fell off']
    assert 'error' in kernel_log.read(path=str(tmp_path / 'missing'))
    os.symlink(str(log), str(tmp_path / 'link'))
    assert 'error' in kernel_log.read(path=str(tmp_path / 'link'))  # never through a link
    # not the kernel's device (a container's FIFO or a plain file at /dev/kmsg): the ring buffer through syslog(2)
    ring = b'<6>[    0.000000] Linux version 6.1\n<4>[   12.5] NVRM: Xid (PCI:0000:18:00): 79, pid=1, fell off\n'
    found = kernel_log.read(kmsg=str(log), klogctl=Klogctl(ring))
    assert found == {'source': 'syslog(2)', 'lines': ['<4>[   12.5] NVRM: Xid (PCI:0000:18:00): 79, pid=1, fell off'],
                     'complete': True}
    assert kernel_log.read(kmsg=str(log), klogctl=Klogctl(ring[ring.index(b'<4>'):]))['complete'] is False
    # syslog(2) refused (a container without CAP_SYSLOG): the journal
    answers = {'journalctl': (0, 'NVRM: Xid (PCI:0000:18:00): 13, pid=1\nother\n', '')}
    found = kernel_log.read(lambda argv: answers.get(argv[0], (1, '', 'no')), kmsg=str(log), klogctl=Klogctl(None))
    assert (found['source'], found['lines']) == ('journal', ['NVRM: Xid (PCI:0000:18:00): 13, pid=1'])
    found = kernel_log.read(lambda argv: (1, '', 'denied'), kmsg=str(log), klogctl=Klogctl(None))
    assert 'no kernel log could be read' in found['error'] and 'denied' in found['error']
    assert 'syslog(2) refused' in found['error']


class Klogctl(object):
    """syslog(2) as libc's klogctl answers it: the ring buffer ``ring``, or EPERM (-1) when None."""

    def __init__(self, ring):
        self.ring = ring

    def __call__(self, action, buffer, size):
        if self.ring is None:
            return -1
        if action == kernel_log.SYSLOG_ACTION_SIZE_BUFFER:
            return 1 << 17
        buffer.raw = self.ring + b'\0' * (size - len(self.ring))
        return len(self.ring)


def test_metrics_leave_out_what_nvml_did_not_give():
    raw = dict(HEALTHY, fabric=rules.Unread('NotSupported', 'Not Supported'),
               ecc=rules.Unread('FunctionNotFound', 'Function Not Found'))
    text = metrics.render(METRICS_RESULT, [], {0: raw})
    assert 'gpufleet_gpu_fabric_state' not in text and 'gpufleet_gpu_ecc_errors' not in text
    assert 'gpufleet_gpu_remapped_rows{' in text


def test_gpu_nodes_argument_spec_validates_the_contract_key_by_key():
    # the role's spec (written by scripts/sync-roles from the module's documentation) holds every key of the contract,
    # so a bad contract is refused before anything runs, as the module itself would refuse it
    import yaml
    root = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..')
    with open(os.path.join(root, 'roles', 'gpu_node', 'meta', 'argument_specs.yml')) as handle:
        entry = yaml.safe_load(handle)['argument_specs']['main']['options']['gpu_node_contract']
    assert sorted(entry['options']) == sorted(contract.SPEC)
    assert sorted(entry['options']['thresholds']['options']) == sorted(contract.THRESHOLDS)
    spec = {'gpu_node_contract': entry}
    for given, words in (({'gpu_cuont': 8}, ['gpu_cuont']), ({'mig_mode': 'on'}, ['mig_mode']),
                         ({'thresholds': {'retired_pages': 'x'}}, ['retired_pages', 'thresholds'])):
        message = ' '.join(ArgumentSpecValidator(spec).validate({'gpu_node_contract': given}).error_messages)
        assert all(word in message for word in words), message
    assert not ArgumentSpecValidator(spec).validate({'gpu_node_contract': {'gpu_count': '8'}}).error_messages


def test_xids_count_when_nvml_cannot_start_and_a_gpu_without_a_name_is_not_a_crash():
    def no_driver():
        raise ImportError('No module named pynvml')

    log = {'source': 'test', 'lines': LOG, 'complete': True}
    result = HealthRun({'contract': None, 'kernel_log': None}, no_driver, read_log=lambda run, path: log).evaluate()
    xids = [c for c in result['checks'] if c['check'] == 'xid']
    assert [(c['gpu'], c['verdict'], c['action']) for c in xids] == [(None, 'FAIL', 'reboot_node')]
    assert result['verdict'] == 'FAIL'  # the XIDs say more than the missing library does
    nameless = dict(sample(), name=None)
    found = verdicts(rules.gpu_checks(nameless, contract.Contract({'gpu_model': 'NVIDIA H100*'})))
    assert found['model'] == ('UNKNOWN', 'none')


def test_an_xid_storm_on_one_gpu_hides_no_other_gpus_xid():
    storm = ['NVRM: Xid (PCI:0000:18:00): 13, pid=%d, name=x, Graphics Exception' % n for n in range(5000)]
    late = 'NVRM: Xid (PCI:0000:19:00): 79, pid=1, name=x, GPU has fallen off the bus.'
    events, counts = xid.events(storm + [late])
    assert counts == {('0000:18:00', 13): 5000, ('0000:19:00', 79): 1}
    assert len(events) == xid.EVENTS_PER_KEY + 1 and events[-1]['line'] == late
    log = {'source': 'test', 'lines': storm + [late], 'complete': True}
    checks = dict((c['gpu'], c) for c in rules.xid_checks(log, [sample(0), sample(1)], contract.Contract()))
    assert (checks[1]['verdict'], checks[1]['action'], checks[1]['value'], checks[1]['evidence']) == (
        'FAIL', 'reboot_node', {'79': 1}, [late])
    assert (checks[0]['verdict'], checks[0]['value'], len(checks[0]['evidence'])) == ('PASS', {'13': 5000}, 3)
    # the node's own check counts the addresses no GPU has, and those alone
    stray = 'NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=x, Graphics Exception'
    node = [c for c in rules.xid_checks({'source': 'test', 'lines': storm + [stray], 'complete': True},
                                        [sample(0)], contract.Contract()) if c['gpu'] is None][0]
    assert node['value'] == {'13': 1}
