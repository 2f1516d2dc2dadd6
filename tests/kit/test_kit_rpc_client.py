"""Unit tests of the RPC client against a tiny in-test ONC RPC server."""

import os
import shutil
import socket
import struct
import tempfile
import threading
import time

import pytest
from hypothesis import given, strategies as st

from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import rpc
from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu.pci import PciBusId, parse_pci_bus_id


# ---- PCI bus ids ------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("00000000:01:00.0", (0, 1, 0, 0)),
    ("0000:01:00.0", (0, 1, 0, 0)),
    ("01:00.0", (0, 1, 0, 0)),
    ("0001:C1:1f.7", (1, 0xC1, 0x1F, 7)),
    ("  0000:af:00.1\n", (0, 0xAF, 0, 1)),
])
def test_parse_pci_bus_id(text, expected):
    pci = parse_pci_bus_id(text)
    assert tuple(pci) == expected
    assert parse_pci_bus_id(str(pci)) == pci
    assert parse_pci_bus_id(pci.nvml) == pci


@pytest.mark.parametrize("text", ["", "01:00", "0000:01:00.8", "0000:01:20.0", "1:2:3:4.0",
                                  "000000000:01:00.0", "0000:100:00.0", "GPU-1234", None, 1])
def test_parse_pci_bus_id_rejects(text):
    with pytest.raises(ValueError):
        parse_pci_bus_id(text)


def test_pci_bus_id_forms():
    pci = parse_pci_bus_id("01:00.0")
    assert str(pci) == "0000:01:00.0"
    assert pci.nvml == "00000000:01:00.0"
    assert pci.short == "01:00.0"
    assert pci.same_slot(parse_pci_bus_id("0000:01:00.1"))


@given(st.integers(0, 0xFFFF), st.integers(0, 0xFF), st.integers(0, 0x1F), st.integers(0, 7))
def test_pci_bus_id_round_trip(domain, bus, device, function):
    pci = PciBusId(domain, bus, device, function)
    for form in (str(pci), pci.nvml, pci.nvml.lower()):
        assert parse_pci_bus_id(form) == pci


# ---- a scripted server ----------------------------------------------------------

class Server:
    """AF_UNIX ONC RPC server; ``handler(call) -> bytes | None`` per record.

    ``call`` is a dict (xid, prog, vers, proc, args). Returning None closes the
    connection; bytes are sent as they are (tests build records themselves);
    ``(bytes, True)`` sends and then closes.
    """

    def __init__(self, handler):
        self.dir = tempfile.mkdtemp(prefix="gfr", dir="/tmp")
        self.path = os.path.join(self.dir, "socket")
        self.handler = handler
        self.connections = 0
        self.calls = []
        self._sock = socket.socket(socket.AF_UNIX)
        self._sock.bind(self.path)
        self._sock.listen(8)
        self._sock.settimeout(0.1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.connections += 1
            with conn:
                conn.settimeout(5)
                while not self._stop.is_set():
                    try:
                        head = conn.recv(4)
                        if len(head) < 4:
                            break
                        length = struct.unpack(">I", head)[0] & 0x7FFFFFFF
                        data = b""
                        while len(data) < length:
                            data += conn.recv(length - len(data))
                    except OSError:
                        break
                    words = struct.unpack(">10I", data[:40])
                    call = dict(xid=words[0], prog=words[3], vers=words[4], proc=words[5],
                                args=data[40:])
                    self.calls.append(call)
                    reply = self.handler(call)
                    if reply is None:
                        break
                    close_after = isinstance(reply, tuple)
                    try:
                        conn.sendall(reply[0] if close_after else reply)
                    except OSError:
                        break
                    if close_after:
                        break

    def close(self):
        self._stop.set()
        self._sock.close()
        self._thread.join(10)
        shutil.rmtree(self.dir)


@pytest.fixture
def serve():
    servers = []

    def make(handler):
        server = Server(handler)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()


def record(*words, raw=b""):
    body = struct.pack(">%dI" % len(words), *words) + raw
    return struct.pack(">I", 0x80000000 | len(body)) + body


def accepted(xid, *results, accept_stat=0):
    return record(xid, 1, 0, 0, 0, accept_stat, *results)


def daemon_like(modes):
    """A server that behaves like nvidia-persistenced for bus 1 and 2."""
    def handler(call):
        args = struct.unpack(">%dI" % (len(call["args"]) // 4), call["args"])
        if call["proc"] == 0:
            return accepted(call["xid"])
        if call["proc"] == 2 and call["vers"] == 1:
            if args[1] not in modes:
                return accepted(call["xid"], 2)
            return accepted(call["xid"], 0, modes[args[1]])
        if call["proc"] == 1:
            if args[4] not in (0, 1):
                return accepted(call["xid"], 5)
            modes[args[1]] = args[4]
            return accepted(call["xid"], 0)
        return accepted(call["xid"], accept_stat=3)
    return handler


# ---- behaviour -------------------------------------------------------------------

def test_calls_reuse_one_connection(serve):
    modes = {1: 1, 2: 0}
    server = serve(daemon_like(modes))
    with rpc.PersistencedClient(server.path) as client:
        client.null()
        assert client.get_persistence_mode("01:00.0") == 1
        client.set_persistence_mode("0000:01:00.0", 0)
        client.set_persistence_mode_only("00000000:02:00.0", 1)
        assert client.get_persistence_mode("01:00.0") == 0
        assert client.connected
    assert not client.connected
    assert server.connections == 1
    assert modes == {1: 0, 2: 1}
    xids = [c["xid"] for c in server.calls]
    assert len(set(xids)) == len(xids)
    assert [(c["vers"], c["proc"]) for c in server.calls] == [(1, 0), (1, 2), (1, 1), (2, 1), (1, 2)]
    assert all(c["prog"] == 35006 for c in server.calls)
    assert server.calls[2]["args"] == struct.pack(">5I", 0, 1, 0, 0, 0)


def test_reconnects_when_the_daemon_closed_an_idle_connection(serve):
    state = {"n": 0}

    def handler(call):
        state["n"] += 1
        return accepted(call["xid"], 0, 1) if state["n"] != 2 else None

    server = serve(handler)
    with rpc.PersistencedClient(server.path) as client:
        assert client.get_persistence_mode("01:00.0") == 1
        assert client.get_persistence_mode("01:00.0") == 1  # 2nd call: closed, retried
    assert server.connections == 2


def test_fresh_connection_closed_without_reply_is_a_protocol_error(serve):
    server = serve(lambda call: None)
    with pytest.raises(rpc.PersistencedProtocolError, match="without replying"):
        with rpc.PersistencedClient(server.path) as client:
            client.null()


def test_multi_fragment_reply(serve):
    def handler(call):
        body = struct.pack(">8I", call["xid"], 1, 0, 0, 0, 0, 0, 1)
        return (struct.pack(">I", 10) + body[:10] + struct.pack(">I", 0x80000000 | 22)
                + body[10:])
    server = serve(handler)
    with rpc.PersistencedClient(server.path) as client:
        assert client.get_persistence_mode("01:00.0") == 1


def test_verifier_with_body_is_skipped(serve):
    server = serve(lambda call: record(call["xid"], 1, 0, 1, 6, raw=b"abcdef\0\0"
                                       + struct.pack(">3I", 0, 0, 1)))
    with rpc.PersistencedClient(server.path) as client:
        assert client.get_persistence_mode("01:00.0") == 1


@pytest.mark.parametrize("status", range(1, 13))
def test_every_daemon_status_is_a_typed_error(serve, status):
    server = serve(lambda call: accepted(call["xid"], status))
    with rpc.PersistencedClient(server.path) as client:
        for call in (lambda: client.get_persistence_mode("0000:03:00.0"),
                     lambda: client.set_persistence_mode("0000:03:00.0", 1),
                     lambda: client.set_persistence_mode_only("0000:03:00.0", 1)):
            with pytest.raises(rpc.DaemonStatusError) as err:
                call()
            expected = rpc.STATUS.get(status, (rpc.UnknownStatusError,))[0]
            assert type(err.value) is expected
            assert err.value.bus_id == "0000:03:00.0"
            assert "0000:03:00.0" in str(err.value)
            assert server.path in str(err.value)
            assert "status %d" % status in str(err.value)


def test_status_classes_are_distinct():
    classes = [rpc.STATUS[s][0] for s in range(1, 12)]
    assert len(set(classes)) == 11
    assert [c.status for c in classes] == list(range(1, 12))


@pytest.mark.parametrize("accept_stat, cls", [
    (1, rpc.RpcProgramUnavailableError),
    (2, rpc.RpcProgramMismatchError),
    (3, rpc.RpcProcedureUnavailableError),
    (4, rpc.RpcGarbageArgsError),
    (5, rpc.RpcSystemError),
    (9, rpc.RpcError),
])
def test_accept_stats(serve, accept_stat, cls):
    extra = (1, 2) if accept_stat == 2 else ()
    server = serve(lambda call: accepted(call["xid"], *extra, accept_stat=accept_stat))
    with rpc.PersistencedClient(server.path) as client:
        with pytest.raises(cls) as err:
            client.get_persistence_mode("01:00.0")
    assert type(err.value) is cls
    assert "0000:01:00.0" in str(err.value) and server.path in str(err.value)
    if accept_stat == 2:
        assert (err.value.low, err.value.high) == (1, 2)


def test_msg_denied(serve):
    replies = iter([
        lambda xid: record(xid, 1, 1, 0, 2, 2),   # RPC_MISMATCH 2-2
        lambda xid: record(xid, 1, 1, 1, 1),      # AUTH_ERROR AUTH_BADCRED
        lambda xid: record(xid, 1, 1, 7),         # unknown reject_stat
    ])
    server = serve(lambda call: next(replies)(call["xid"]))
    client = rpc.PersistencedClient(server.path)
    with pytest.raises(rpc.RpcDeniedError, match="RPC_MISMATCH") as err:
        client.null()
    assert (err.value.low, err.value.high) == (2, 2)
    with pytest.raises(rpc.RpcDeniedError, match="AUTH_BADCRED") as err:
        client.null()
    assert err.value.auth_stat == 1
    with pytest.raises(rpc.RpcDeniedError, match="reject_stat 7"):
        client.null()
    client.close()


@pytest.mark.parametrize("reply, match", [
    (lambda xid: record(xid + 1, 1, 0, 0, 0, 0, 0, 1), "xid"),
    (lambda xid: record(xid, 0, 0, 0, 0, 0, 0, 1), "not REPLY"),
    (lambda xid: record(xid, 1, 2), "reply_stat 2"),
    (lambda xid: record(xid, 1), "only 8 bytes"),
    (lambda xid: record(xid, 1, 0, 0, 0, 0), "result bytes"),
    (lambda xid: record(xid, 1, 0, 0, 0, 0, 0), "result bytes"),  # status 0 without mode
    (lambda xid: struct.pack(">I", 0x80000000 | 0x10000000), "larger than"),
    (lambda xid: (record(xid, 1, 0, 0, 0, 0)[:14], True), "middle of its reply"),
])
def test_malformed_replies(serve, reply, match):
    server = serve(lambda call: reply(call["xid"]))
    with rpc.PersistencedClient(server.path, timeout=2) as client:
        with pytest.raises(rpc.PersistencedProtocolError, match=match) as err:
            client.get_persistence_mode("01:00.0")
        assert not client.connected
    assert "0000:01:00.0" in str(err.value)


def test_timeout(serve):
    server = serve(lambda call: time.sleep(1.5) or accepted(call["xid"]))
    started = time.monotonic()
    with pytest.raises(rpc.PersistencedTimeoutError, match="no reply within 0.2 s") as err:
        with rpc.PersistencedClient(server.path, timeout=0.2) as client:
            client.get_persistence_mode("01:00.0")
    assert time.monotonic() - started < 1.0
    assert err.value.bus_id == "0000:01:00.0"


def test_missing_socket():
    path = "/tmp/gfk-no-such-dir/socket"
    with pytest.raises(rpc.PersistencedUnavailableError, match="does not exist") as err:
        rpc.PersistencedClient(path).get_persistence_mode("01:00.0")
    assert path in str(err.value) and "0000:01:00.0" in str(err.value)


def test_stale_socket():
    tmp = tempfile.mkdtemp(prefix="gfr", dir="/tmp")
    path = os.path.join(tmp, "socket")
    try:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(path)
        sock.close()  # the file stays, nothing listens
        with pytest.raises(rpc.PersistencedUnavailableError, match="stale"):
            rpc.PersistencedClient(path).null()
    finally:
        shutil.rmtree(tmp)


def test_bad_bus_id_is_value_error_before_any_io():
    with pytest.raises(ValueError, match="not a PCI bus id"):
        rpc.PersistencedClient("/nonexistent").get_persistence_mode("GPU-abc")


def test_default_socket_path():
    assert rpc.DEFAULT_SOCKET_PATH == "/var/run/nvidia-persistenced/socket"
    err = rpc.status_error(2, bus_id="0000:01:00.0")
    assert str(err).startswith("nvidia-persistenced at /var/run/nvidia-persistenced/socket: ")


def test_wait_for_socket(serve):
    server = serve(daemon_like({1: 1}))
    rpc.wait_for_socket(server.path, timeout=2)
    with pytest.raises(rpc.PersistencedUnavailableError):
        rpc.wait_for_socket("/tmp/gfk-no-such-dir/socket", timeout=0.2)


def test_module_is_stdlib_only_and_py38_syntax():
    # rpc and the one module of ours it imports (the PCI address parser it shares with the health checks), each
    # standard library only
    import ast
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu import pci as pci_module
    ours = "ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu.pci"
    for module, allowed in ((rpc, {ours}), (pci_module, set())):
        with open(module.__file__) as handle:
            source = handle.read()
        tree = ast.parse(source, feature_version=(3, 8))
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                name = node.module or ""
                imported.add(name if name in allowed else name.split(".")[0])
        assert imported <= {"__future__", "errno", "os", "re", "socket", "stat", "struct", "time",
                            "collections"} | allowed, module.__file__
        assert "PRIVATE to the gpufleet.nvidia collection" in source
