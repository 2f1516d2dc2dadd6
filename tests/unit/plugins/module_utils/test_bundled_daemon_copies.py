# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The bundled daemon's copies of module_utils' logic give module_utils' answers.

files/gpufleet-persistenced is shipped alone (one file, standard library only), so it
cannot import module_utils and carries its own copy of: the state file's format, its
reading and its locked writing (gpu.state); PCI bus id parsing and the GPU list
from /proc/driver/nvidia/gpus (gpu.rpc, gpu.backends); the version 1 Set call of the RPC
client (gpu.rpc); the paths and numbers they share; and it parses the command
line the persistenced module writes for it (persistenced.rules). Each test runs both copies on
the same inputs, malformed ones included, and wants the same answers. Where the copies
answer differently, a table here names each difference, so that a change to either copy
fails a test until the other copy (or the table) follows.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import socket
import stat
import struct
import tempfile
import threading
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import backends as gpu_utils
from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import state
from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import state_dir
from ansible_collections.gpufleet.nvidia.plugins.module_utils.persistenced import rules as pd
from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu.pci import parse_pci_bus_id
from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import rpc

# GPUFLEET_DAEMON_UNDER_TEST: hold another copy of the daemon to module_utils (as tests/daemon does).
DAEMON_PATH = (os.environ.get('GPUFLEET_DAEMON_UNDER_TEST')
               or os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', 'files', 'gpufleet-persistenced'))
UUID_A = 'GPU-0000a100-1111-2222-3333-000000000000'
UUID_B = 'GPU-0000a101-1111-2222-3333-000000000001'
REFUSED = 'refused'  # an outcome: the copy raised its error


def load_daemon():
    loader = SourceFileLoader('gpufleet_persistenced', DAEMON_PATH)
    module = module_from_spec(spec_from_loader('gpufleet_persistenced', loader))
    loader.exec_module(module)
    return module


DAEMON = load_daemon()


# --------------------------------------------------------------------------
# Shared paths and numbers
# --------------------------------------------------------------------------

@pytest.mark.parametrize('daemon_value,module_value', [
    (DAEMON.PROGRAM, rpc.PROGRAM),
    (DAEMON.LAST_FRAGMENT, rpc._LAST_FRAGMENT),
    (DAEMON.RUN_DIR, pd.RUN_DIR),
    (DAEMON.RUN_DIR, state_dir.RUN_DIR),
    (DAEMON.RUN_DIR, gpu_utils.RUN_DIR),
    (os.path.join(DAEMON.RUN_DIR, DAEMON.SOCKET_NAME), rpc.DEFAULT_SOCKET_PATH),
    (os.path.join(DAEMON.RUN_DIR, DAEMON.SOCKET_NAME), pd.SOCKET),
    (os.path.join(DAEMON.RUN_DIR, DAEMON.PID_NAME), pd.PID_FILE),
    (DAEMON.PROC_GPUS, gpu_utils.PROC_GPUS),
    (DAEMON.DEFAULT_STATE_FILE, state_dir.DEFAULT_PATH),
    (DAEMON.DEFAULT_STATE_FILE, pd.STATE_FILE),
    (DAEMON.STATE_FORMAT_VERSION, state.FORMAT_VERSION),
    (DAEMON.STATE_MODES, state.MODES),
    (DAEMON.MAX_STATE_BYTES, state.MAX_BYTES),
    (DAEMON.MODES.index('disabled'), rpc.MODE_DISABLED),
    (DAEMON.MODES.index('enabled'), rpc.MODE_ENABLED),
    # the statuses the daemon answers, as the client reads them
    ((DAEMON.ST_NOT_PRESENT, DAEMON.ST_DEVICE_NOT_FOUND, DAEMON.ST_DRIVER_ERROR, DAEMON.ST_INSUFFICIENT_RESOURCES,
      DAEMON.ST_INVALID_ARGUMENT, DAEMON.ST_IO_ERROR, DAEMON.ST_PERMISSIONS, DAEMON.ST_RPC_ERROR,
      DAEMON.ST_USER_NOT_FOUND, DAEMON.ST_NUMA_FAILURE, DAEMON.ST_UNKNOWN),
     (rpc.DaemonNotPresentError.status, rpc.DeviceNotFoundError.status, rpc.DriverError.status,
      rpc.InsufficientResourcesError.status, rpc.InvalidArgumentError.status, rpc.DaemonIOError.status,
      rpc.PermissionDeniedError.status, rpc.DaemonRpcError.status, rpc.UserNotFoundError.status,
      rpc.NumaError.status, rpc.UnknownStatusError.status)),
], ids=['program', 'last fragment', 'run dir (persistenced)', 'run dir (state)', 'run dir (gpu)', 'socket (rpc)',
        'socket (persistenced)', 'pid file', 'proc gpus', 'state file (state)', 'state file (persistenced)',
        'state format', 'state modes', 'state size', 'wire disabled', 'wire enabled', 'statuses'])
def test_shared_paths_and_numbers(daemon_value, module_value):
    assert daemon_value == module_value


# --------------------------------------------------------------------------
# The state file: format, reading, locked writing
# --------------------------------------------------------------------------

STATE_TEXTS = [  # text, what module_utils' message says (None: parsed)
    ('', None),
    ('   \n', None),
    ('{"format_version": 1, "gpus": {}}', None),
    ('{"format_version": 1, "default_mode": "enabled", "gpus": {"%s": {"mode": "disabled", "pci_bus_id": "00000000:01:00.0"}}}'
     % UUID_A, None),
    ('{"format_version": 1, "gpus": {"%s": {"mode": "enabled"}}}' % UUID_B, None),
    ('{"format_version": 1.0, "gpus": {}}', None),  # 1.0 == 1 in JSON's number model: accepted
    ('{"format_version": 1, "comment": "kept by no one", "gpus": {"%s": {"mode": "enabled", "x": 1}}}' % UUID_A, None),
    ('{not json', 'is not valid JSON'),
    ('[1, 2]', 'must hold a JSON object'),
    ('"just a string"', 'must hold a JSON object, not str'),
    ('null', 'must hold a JSON object, not NoneType'),
    ('[' * 100000 + ']' * 100000, 'nested too deeply'),
    ('{"format_version": 2, "gpus": {}}', 'format_version 2'),
    ('{"gpus": {}}', 'format_version None'),
    ('{"format_version": true, "gpus": {}}', 'format_version True'),
    ('{"format_version": "1", "gpus": {}}', "format_version '1'"),
    ('{"format_version": 1, "default_mode": "on"}', 'default_mode must be'),
    ('{"format_version": 1, "gpus": []}', '"gpus" must be an object'),
    ('{"format_version": 1, "gpus": {"%s": {"mode": 1}}}' % UUID_A, 'needs "mode"'),
    ('{"format_version": 1, "gpus": {"%s": "enabled"}}' % UUID_A, 'needs "mode"'),
    ('{"format_version": 1, "gpus": {"%s": {"mode": "enabled", "pci_bus_id": [[[]]]}}}' % UUID_A,
     '"pci_bus_id" that is not a string'),
]


def outcome(error, call, *args):
    """``('state', what call returns)`` or ``(REFUSED, the message of its error)``."""
    try:
        return 'state', call(*args)
    except error as exc:
        return REFUSED, str(exc)


def parsed_by_both(text, path='/x/persistence.json'):
    return outcome(DAEMON.StateError, DAEMON.parse_state, text, path), outcome(state_dir.StateError, state.parse, text, path)


@pytest.mark.parametrize('text,error', STATE_TEXTS, ids=[text[:40] for text, _error in STATE_TEXTS])
def test_state_texts_parse_alike(text, error):
    theirs, ours = parsed_by_both(text)
    assert theirs == ours
    if error is None:
        assert ours[0] == 'state' and ours[1]['format_version'] == 1
    else:
        assert ours[0] == REFUSED and '/x/persistence.json' in ours[1] and error in ours[1], ours


STATE_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-2, 3) | st.sampled_from(
    ['enabled', 'disabled', 'on', '', UUID_A, '00000000:01:00.0']), lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(['format_version', 'default_mode', 'gpus', 'mode', 'pci_bus_id', UUID_A, UUID_B]), inner,
        max_size=4), max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(st.fixed_dictionaries({}, optional={'format_version': st.sampled_from([1, 1.0, 2, True, '1', None]),
                                           'default_mode': STATE_VALUES, 'gpus': STATE_VALUES}))
def test_generated_state_documents_parse_alike(document):
    theirs, ours = parsed_by_both(json.dumps(document))
    assert theirs == ours


def make_state_path(directory, case):
    """The path to read for ``case``, laid out in ``directory``."""
    path = os.path.join(directory, 'persistence.json')
    contents = {'empty': b'', 'valid': b'{"format_version": 1, "gpus": {"%s": {"mode": "enabled"}}}' % UUID_A.encode(),
                'not JSON': b'{"format_version": 1,', 'not UTF-8': b'{"format_version": 1, "gpus": {"GPU-\xe9": {}}}'}
    if case == 'missing directory':
        return os.path.join(directory, 'gone', 'persistence.json')
    if case in contents:
        with open(path, 'wb') as handle:
            handle.write(contents[case])
    elif case == 'too big':
        with open(path, 'wb') as handle:
            handle.truncate(state.MAX_BYTES + 1)
    elif case == 'symbolic link':
        with open(os.path.join(directory, 'elsewhere'), 'w') as handle:
            handle.write('{"format_version": 1, "gpus": {}}')
        os.symlink(os.path.join(directory, 'elsewhere'), path)
    elif case == 'hard link':
        with open(os.path.join(directory, 'elsewhere'), 'w') as handle:
            handle.write('{"format_version": 1, "gpus": {}}')
        os.link(os.path.join(directory, 'elsewhere'), path)
    elif case == 'FIFO':
        os.mkfifo(path)
    elif case == 'directory':
        os.mkdir(path)
    return path


# Refusals whose wording differs between the copies: (module_utils' words, the daemon's words).
READ_WORDING_DIFFERS = {
    'not UTF-8': ('is not UTF-8 text (', 'is not valid UTF-8 ('),
    'hard link': ('has 2 hard links; a state file has one: remove it', 'is not a regular file with a single link'),
    'FIFO': ('is not a regular file; remove it (the state file is recreated)', 'is not a regular file with a single link'),
    'directory': ('is not a regular file; remove it (the state file is recreated)',
                  'is not a regular file with a single link'),
}
READ_CASES = ['missing', 'missing directory', 'empty', 'valid', 'not JSON', 'too big', 'symbolic link'] + sorted(
    READ_WORDING_DIFFERS)


@pytest.mark.parametrize('case', READ_CASES)
def test_state_files_read_alike(tmp_path, case):
    """module_utils' load() and the daemon's read_state() (which also refuses a file of another owner
    than root or the directory's: not tried here, it needs root)."""
    path = make_state_path(str(tmp_path), case)
    ours = outcome(state_dir.StateError, state.load, path)
    theirs = outcome(DAEMON.StateError, DAEMON.read_state, path)
    if case not in READ_WORDING_DIFFERS:
        assert theirs == ours
        return
    module_words, daemon_words = READ_WORDING_DIFFERS[case]
    assert ours[0] == theirs[0] == REFUSED, (ours, theirs)
    assert ours[1].startswith(path + ' ') and module_words in ours[1], ours
    assert theirs[1].startswith(path + ' ') and daemon_words in theirs[1], theirs


@pytest.fixture
def umask_022():
    """The umask a service starts under (the daemon's file modes follow it)."""
    old = os.umask(0o022)
    yield
    os.umask(old)


INITIAL_STATES = {
    'no file': None,
    'canonical, with a default': state.serialize({'format_version': 1, 'default_mode': 'enabled',
                                                  'gpus': {UUID_B: {'mode': 'disabled', 'pci_bus_id': 'b'}}}),
    'compact': '{"format_version":1,"gpus":{"%s":{"mode":"enabled","pci_bus_id":"a"}}}' % UUID_A,
    'unknown keys': '{"format_version": 1, "x": 1, "gpus": {"%s": {"mode": "enabled", "pci_bus_id": "a", "y": 2}}}' % UUID_A,
}
RECORDS = [(UUID_A, 'a', 'enabled'), (UUID_A, 'a', 'enabled'), (UUID_B, 'b', 'disabled'), (UUID_A, 'a', 'disabled'),
           (UUID_A, 'a2', 'disabled')]


@pytest.mark.parametrize('initial', sorted(INITIAL_STATES))
def test_recording_a_mode_writes_what_the_module_writes(tmp_path, umask_022, initial):
    """The daemon's record_state() and module_utils' update(with_modes()), one GPU at a time:
    the same changed/unchanged answer, the same bytes, modes and names in the directory."""
    written = {}
    for side in ('module', 'daemon'):
        os.mkdir(str(tmp_path / side))
        path = str(tmp_path / side / 'persistence.json')
        if INITIAL_STATES[initial] is not None:
            with open(path, 'w') as handle:
                handle.write(INITIAL_STATES[initial])
        steps = []
        for uuid, bus_id, mode in RECORDS:
            if side == 'module':
                before, after = state.update(path, lambda st, u=uuid, b=bus_id, m=mode: state.with_modes(st, {u: (b, m)}))
                changed = before != after
            else:
                changed = DAEMON.record_state(path, uuid, bus_id, mode)
            with open(path, 'rb') as handle:
                content = handle.read()
            names = sorted((name, stat.S_IMODE(os.lstat(os.path.join(str(tmp_path / side), name)).st_mode))
                           for name in os.listdir(str(tmp_path / side)))
            steps.append((changed, content, names))
        written[side] = steps
    assert written['daemon'] == written['module']
    assert set(changed for changed, _content, _names in written['module']) == set([True, False])


def test_daemon_record_and_module_update_share_the_lock(tmp_path):
    """Concurrent writers (module and daemon) lose no entry."""
    path = str(tmp_path / 'persistence.json')
    uuids = ['GPU-%04d' % i for i in range(40)]

    def module_writer():
        for uuid in uuids[:20]:
            state.update(path, lambda st, u=uuid: state.with_modes(st, {u: ('bus', 'enabled')}))

    def daemon_writer():
        for uuid in uuids[20:]:
            DAEMON.record_state(path, uuid, 'bus', 'disabled')

    threads = [threading.Thread(target=module_writer), threading.Thread(target=daemon_writer)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    final = state.load(path)
    assert sorted(final['gpus']) == sorted(uuids)
    assert all(final['gpus'][u]['mode'] == 'enabled' for u in uuids[:20])
    assert all(final['gpus'][u]['mode'] == 'disabled' for u in uuids[20:])


# --------------------------------------------------------------------------
# PCI bus ids
# --------------------------------------------------------------------------

BUS_IDS = [  # text, (domain, bus, device, function) both read from it (None: both refuse it)
    ('0000:01:00.0', (0, 1, 0, 0)),
    ('00000000:01:00.0', (0, 1, 0, 0)),
    ('01:00.0', (0, 1, 0, 0)),
    ('0000:3B:00.0', (0, 0x3b, 0, 0)),
    ('0000:3b:00.1', (0, 0x3b, 0, 1)),
    ('3b:1f.7', (0, 0x3b, 0x1f, 7)),
    ('ffffffff:ff:1f.7', (0xffffffff, 0xff, 0x1f, 7)),
    ('1:2:3.4', (1, 2, 3, 4)),
    (' 0000:01:00.0 ', (0, 1, 0, 0)),
    ('0000:01:00.0\n', (0, 1, 0, 0)),
    ('', None),
    ('garbage', None),
    ('0000:01:00', None),
    ('0000:01:00.', None),
    ('01.00.0', None),
    (':01:00.0', None),
    ('0000::00.0', None),
    ('0000:01:00.0.0', None),
    ('a:b:c:d.0', None),
    ('0000:01:00.0 x', None),
    ('g:01:00.0', None),
]

# Malformed bus ids that the daemon's parse_bdf (int(field, 16) per field) reads and module_utils'
# parse_pci_bus_id (a strict pattern) refuses. The driver writes canonical ids, so only a broken
# /proc/driver/nvidia reaches the daemon with these; a change that closes the gap drops the row.
DAEMON_ALSO_READS = {
    '0000:01:20.0': (0, 1, 0x20, 0),      # device above 0x1f
    '0000:01:00.8': (0, 1, 0, 8),         # function above 7
    '0000:01:00.f': (0, 1, 0, 15),
    '0000:01:00.00': (0, 1, 0, 0),        # field wider than PCI's
    '000000000:01:00.0': (0, 1, 0, 0),
    '0000:001:00.0': (0, 1, 0, 0),
    '0000:01:000.0': (0, 1, 0, 0),
    '0x0:01:00.0': (0, 1, 0, 0),          # what int() takes: 0x, signs, _, inner blanks, other digits
    '0000:+1:00.0': (0, 1, 0, 0),
    '0000:-1:00.0': (0, -1, 0, 0),
    '0000:0_1:00.0': (0, 1, 0, 0),
    '0000: 01:00.0': (0, 1, 0, 0),
    '0000:01:00. 0': (0, 1, 0, 0),
    u'\u0661:01:00.0': (1, 1, 0, 0),      # ARABIC-INDIC DIGIT ONE
}


def bus_id_of(parse, text):
    try:
        return tuple(parse(text))
    except ValueError:
        return None


@pytest.mark.parametrize('text,expected', BUS_IDS + sorted(DAEMON_ALSO_READS.items()),
                         ids=[repr(text) for text, _expected in BUS_IDS + sorted(DAEMON_ALSO_READS.items())])
def test_bus_ids_read_alike(text, expected):
    daemon_reads = bus_id_of(DAEMON.parse_bdf, text)
    assert daemon_reads == expected
    assert bus_id_of(parse_pci_bus_id, text) == (None if text in DAEMON_ALSO_READS else expected)
    if expected is not None and text not in DAEMON_ALSO_READS:
        # and both write it back alike (NVML's form, which the daemon logs and records in the state file)
        assert DAEMON.Gpu(*daemon_reads, minor=0, uuid=None).bus_id == parse_pci_bus_id(text).nvml


FIELD = st.text(alphabet='0123456789abcdefABCDEFgx+-_ ', max_size=10)


@settings(max_examples=500, deadline=None)
@given(st.one_of(
    st.tuples(st.one_of(st.just(''), FIELD.map(lambda f: f + ':')), FIELD, FIELD, st.sampled_from(['.', ':', '']), FIELD)
    .map(''.join),
    st.text(max_size=24)))
def test_the_daemon_reads_every_bus_id_module_utils_reads_and_alike(text):
    """Whatever a module can name, the daemon finds; the converse is DAEMON_ALSO_READS' business."""
    ours = bus_id_of(parse_pci_bus_id, text)
    if ours is not None:
        assert bus_id_of(DAEMON.parse_bdf, text) == ours


# --------------------------------------------------------------------------
# The GPU list from /proc/driver/nvidia/gpus
# --------------------------------------------------------------------------

def information(bus_id, minor, uuid='GPU-%s', bus_location=True):
    """An ``information`` file as the driver writes it (tabs and all)."""
    lines = ['Model: \t\t NVIDIA A100-SXM4-80GB', 'IRQ:   \t\t 0', 'GPU UUID: \t %s' % (uuid % bus_id) if uuid else None,
             'Bus Type: \t PCIe', 'Bus Location: \t %s' % bus_id if bus_location else None,
             'Device Minor: \t %s' % minor, 'GPU Excluded:\t No']
    return ''.join(line + '\n' for line in lines if line is not None)


def lay_out_gpus(root, entries):
    """``entries``: dir name -> the text of its ``information`` (bytes or str; None: no such file)."""
    os.makedirs(root, exist_ok=True)
    for name, text in entries.items():
        os.mkdir(os.path.join(root, name))
        if text is not None:
            with open(os.path.join(root, name, 'information'), 'wb') as handle:
                handle.write(text if isinstance(text, bytes) else text.encode())


def canonical(index):
    return '0000:%02x:00.0' % index


GOOD_HOSTS = {
    'no GPUs': {},
    'one GPU': {canonical(1): information(canonical(1), 0)},
    'eight GPUs, minors not in bus order': dict(
        (name, information(name, minor)) for minor, name in enumerate(
            ['0000:b1:00.0', '0000:01:00.0', '0000:3b:00.0', '0000:0a:00.0', '0001:00:00.0', '0000:1c:00.0',
             '0000:81:00.0', '0000:0b:00.0'])),
    "NVML's form in Bus Location": {canonical(0x3b): information('00000000:3B:00.0', 3)},
    'no Bus Location: the directory name': {canonical(2): information(canonical(2), 1, bus_location=False)},
    'no GPU UUID': {canonical(2): information(canonical(2), 1, uuid=None)},
    'a second function': {'0000:01:00.1': information('0000:01:00.1', 4), canonical(1): information(canonical(1), 0)},
}

# An unusable entry: module_utils refuses the whole list (naming the entry), the daemon leaves the entry out
# (as NVIDIA's daemon does) and holds every other GPU.
BAD_ENTRIES = {
    'no information file': None,
    'no Device Minor': 'Bus Location: \t 0000:09:00.0\nGPU UUID: \t GPU-9\n',
    'Device Minor not a number': information('0000:09:00.0', 'x'),
    'Bus Location neither reads': information('garbage', 9),
    'not UTF-8': information('0000:09:00.0', 9).encode() + b'Model: \xff\n',
}


def listed(root):
    """(the daemon's list, module_utils' list or its GpuError), both as (bus id, minor, uuid)."""
    theirs = [(gpu.bus_id, gpu.minor, gpu.uuid) for gpu in DAEMON.enumerate_gpus(root)]
    try:
        ours = [(gpu['pci_bus_id'], gpu['minor'], gpu['uuid']) for gpu in gpu_utils.read_proc_gpus(root)]
    except gpu_utils.GpuError as exc:
        ours = exc
    return theirs, ours


@pytest.mark.parametrize('host', sorted(GOOD_HOSTS))
def test_gpu_lists_alike(tmp_path, host):
    root = str(tmp_path / 'gpus')
    lay_out_gpus(root, GOOD_HOSTS[host])
    theirs, ours = listed(root)
    assert theirs == ours  # same GPUs, bus ids, minors, UUIDs, in the same (PCI bus) order
    assert len(ours) == len(GOOD_HOSTS[host])


@pytest.mark.parametrize('bad', sorted(BAD_ENTRIES) + ['a file, not a directory', 'information is a directory'])
def test_an_unusable_entry_is_left_out_by_the_daemon_and_refused_by_modules(tmp_path, bad):
    root = str(tmp_path / 'gpus')
    lay_out_gpus(root, GOOD_HOSTS['eight GPUs, minors not in bus order'])
    expected = listed(root)[1]
    entry = os.path.join(root, '0000:09:00.0')
    if bad == 'a file, not a directory':
        open(entry, 'w').close()
    elif bad == 'information is a directory':
        os.makedirs(os.path.join(entry, 'information'))
    else:
        lay_out_gpus(root, {'0000:09:00.0': BAD_ENTRIES[bad]})
    theirs, ours = listed(root)
    assert theirs == expected
    assert isinstance(ours, gpu_utils.GpuError) and os.path.join(entry, 'information') in str(ours), ours


def test_a_bus_id_only_the_daemon_reads_reaches_the_gpu_lists(tmp_path):
    """DAEMON_ALSO_READS in a list: the daemon holds the GPU, module_utils refuses the host."""
    root = str(tmp_path / 'gpus')
    lay_out_gpus(root, {canonical(1): information(canonical(1), 0), '0000:01:20.0': information('0000:01:20.0', 1)})
    theirs, ours = listed(root)
    assert theirs == [('00000000:01:00.0', 0, 'GPU-0000:01:00.0'), ('00000000:01:20.0', 1, 'GPU-0000:01:20.0')]
    assert isinstance(ours, gpu_utils.GpuError) and 'device number 0x20 is above 0x1f' in str(ours)


def test_no_driver_is_refused_by_both(tmp_path):
    root = str(tmp_path / 'gpus')
    with pytest.raises(OSError):
        DAEMON.enumerate_gpus(root)  # start() and --apply-saved-modes say the driver is not loaded
    with pytest.raises(gpu_utils.GpuError, match='the NVIDIA kernel driver is not loaded'):
        gpu_utils.read_proc_gpus(root)


# --------------------------------------------------------------------------
# The version 1 Set call (--apply-saved-modes' client; PersistencedClient.set_persistence_mode)
# --------------------------------------------------------------------------

def words(*values):
    return struct.pack('>%dI' % len(values), *values)


def record(body):
    return struct.pack('>I', 0x80000000 | len(body)) + body


def accepted(status):
    return lambda xid: record(words(xid, 1, 0, 0, 0, 0, status))


REPLIES = {  # name -> (the reply record to a call with ``xid`` (None: close without one), what both read)
    'status 0': (accepted(0), ('status', 0)),
    'status 2': (accepted(2), ('status', 2)),
    'status 3': (accepted(3), ('status', 3)),
    'status 5': (accepted(5), ('status', 5)),
    'status 7': (accepted(7), ('status', 7)),
    'status 11': (accepted(11), ('status', 11)),
    'PROG_UNAVAIL': (lambda xid: record(words(xid, 1, 0, 0, 0, 1)), REFUSED),
    'PROC_UNAVAIL': (lambda xid: record(words(xid, 1, 0, 0, 0, 3)), REFUSED),
    'GARBAGE_ARGS': (lambda xid: record(words(xid, 1, 0, 0, 0, 4)), REFUSED),
    'MSG_DENIED RPC_MISMATCH': (lambda xid: record(words(xid, 1, 1, 0, 2, 2)), REFUSED),
    'MSG_DENIED AUTH_ERROR': (lambda xid: record(words(xid, 1, 1, 1, 1)), REFUSED),
    'another xid': (lambda xid: record(words(xid ^ 1, 1, 0, 0, 0, 0, 0)), REFUSED),
    'no status word': (lambda xid: record(words(xid, 1, 0, 0, 0, 0)), REFUSED),
    'closed without a reply': (lambda xid: None, REFUSED),
    # Read otherwise by the daemon's one-shot client, which checks neither the message type nor
    # the verifier's length (NVIDIA's daemon always sends AUTH_NONE with no body): here each
    # reading is (the daemon's, module_utils').
    'a CALL, not a REPLY': (lambda xid: record(words(xid, 0, 0, 0, 0, 0, 3)), (('status', 3), REFUSED)),
    'a verifier with a body': (lambda xid: record(words(xid, 1, 0, 0, 4, 0, 0, 3)), (('status', 0), ('status', 3))),
}
DAEMON_READS_OTHERWISE = ('a CALL, not a REPLY', 'a verifier with a body')


class OneCallServer(object):
    """A unix socket that takes one connection, keeps its call and answers ``reply(xid)``."""

    def __init__(self, path, reply):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(1)
        self.sock.settimeout(5)
        self.reply = reply
        self.call = None
        self.thread = threading.Thread(target=self.serve)
        self.thread.start()

    def serve(self):
        conn, _addr = self.sock.accept()
        with conn:
            data = b''
            while len(data) < 4 or len(data) < 4 + (struct.unpack('>I', data[:4])[0] & 0x7fffffff):
                chunk = conn.recv(4096)
                if not chunk:
                    return
                data += chunk
            self.call = data
            answer = self.reply(struct.unpack('>I', data[4:8])[0])
            if answer is not None:
                conn.sendall(answer)

    def close(self):
        self.thread.join(10)
        self.sock.close()


@pytest.fixture
def short_dir():
    """A directory whose socket paths fit in sun_path."""
    path = tempfile.mkdtemp(prefix='gfu', dir='/tmp')
    yield path
    shutil.rmtree(path)


def daemon_set(path, bus_id, mode):
    gpu = DAEMON.Gpu(*DAEMON.parse_bdf(bus_id), minor=0, uuid=None)
    try:
        return 'status', DAEMON.rpc_set(path, gpu, mode, timeout=2.0)
    except (IOError, OSError) as exc:
        return REFUSED, str(exc)


def module_set(path, bus_id, mode):
    try:
        with rpc.PersistencedClient(path, timeout=2.0) as client:
            client.set_persistence_mode(bus_id, rpc.MODE_ENABLED if mode == 'enabled' else rpc.MODE_DISABLED)
    except rpc.DaemonStatusError as exc:
        return 'status', exc.status
    except rpc.PersistencedError as exc:
        return REFUSED, str(exc)
    return 'status', 0


def set_through_both(directory, reply, bus_id='0000:3b:00.0', mode='enabled'):
    """{'daemon': (outcome, call record), 'module': ...} for one Set answered by ``reply``."""
    results = {}
    for side, set_mode in (('daemon', daemon_set), ('module', module_set)):
        path = os.path.join(directory, side)
        server = OneCallServer(path, reply)
        try:
            outcome = set_mode(path, bus_id, mode)
        finally:
            server.close()
        results[side] = (REFUSED if outcome[0] == REFUSED else outcome, server.call)
    return results


@pytest.mark.parametrize('reply', sorted(REPLIES))
def test_set_replies_read_alike(short_dir, reply):
    answer, expected = REPLIES[reply]
    results = set_through_both(short_dir, answer)
    read = (results['daemon'][0], results['module'][0])
    assert read == (expected if reply in DAEMON_READS_OTHERWISE else (expected, expected))


@pytest.mark.parametrize('bus_id,mode', [('0000:3b:00.0', 'enabled'), ('0001:ff:1f.7', 'disabled'),
                                         ('00000000:01:00.1', 'enabled')])
def test_set_calls_are_the_same_bytes(short_dir, bus_id, mode):
    results = set_through_both(short_dir, accepted(0), bus_id, mode)
    theirs, ours = results['daemon'][1], results['module'][1]
    assert theirs[:4] + theirs[8:] == ours[:4] + ours[8:]  # all but the xid
    domain, bus, device, function = parse_pci_bus_id(bus_id)
    assert ours[8:] == words(0, 2, rpc.PROGRAM, 1, rpc.V1_SET_PERSISTENCE_MODE, 0, 0, 0, 0, domain, bus, device,
                             function, DAEMON.MODES.index(mode))


@pytest.mark.parametrize('case', ['symbolic link to the socket', 'regular file', 'missing'])
def test_set_refuses_a_socket_path_that_is_not_a_socket(short_dir, case):
    real = os.path.join(short_dir, 'real')
    server = OneCallServer(real, accepted(0))
    path = os.path.join(short_dir, 'socket')
    if case == 'symbolic link to the socket':
        os.symlink(real, path)
    elif case == 'regular file':
        open(path, 'w').close()
    try:
        assert daemon_set(path, '0000:01:00.0', 'enabled')[0] == REFUSED
        assert module_set(path, '0000:01:00.0', 'enabled')[0] == REFUSED
    finally:
        with socket.socket(socket.AF_UNIX) as poke:  # let the server's accept return
            poke.connect(real)
        server.close()
    assert server.call is None


# --------------------------------------------------------------------------
# The command line the persistenced module writes, as the daemon reads it
# --------------------------------------------------------------------------

@pytest.mark.parametrize('overrides,expected', [
    ({}, dict(user='nvidia-persistenced', group=None, persistence_mode=True, verbose=False)),
    ({'user': 'root', 'persistence_mode': False, 'verbose': True, 'uvm_persistence_mode': True,
      'nvidia_cfg_path': '/usr/lib/nvidia', 'state_file': '/srv/gpufleet/state.json'},
     dict(user=None, group=None, persistence_mode=False, verbose=True, state_file='/srv/gpufleet/state.json')),
    ({'group': 'video', 'uvm_persistence_mode': False, 'extra_args': ['--client-timeout=2.5']},
     dict(user='nvidia-persistenced', group='video', client_timeout=2.5)),
])
def test_the_daemon_reads_the_command_line_the_module_writes(overrides, expected):
    params = dict(dict(user='nvidia-persistenced', group='nvidia-persistenced', persistence_mode=True,
                       state_file=pd.STATE_FILE, bundled_path=pd.BUNDLED_PATH), **overrides)
    opts = DAEMON.parse_args(pd.daemon_argv(params, pd.BUNDLED_PATH, 'bundled')[1:])
    assert dict((key, opts[key]) for key in expected) == expected
    assert opts['state_file'] == params['state_file'] and not opts['apply_saved_modes']
    apply = DAEMON.parse_args(pd.apply_argv(params)[1:])
    assert apply['apply_saved_modes'] and apply['state_file'] == params['state_file']
