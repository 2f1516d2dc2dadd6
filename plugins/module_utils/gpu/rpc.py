# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.nvidia collection
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# PRIVATE to the gpufleet.nvidia collection: this module is not a public API
# and may change or disappear in any release without notice. Do not import it
# from outside the collection.

"""Client for nvidia-persistenced's local RPC, and PCI bus id parsing.

nvidia-persistenced answers ONC RPC (RFC 5531) calls with standard record
marking over the AF_UNIX stream socket ``/var/run/nvidia-persistenced/socket``,
program 35006, AUTH_NONE:

* version 1: 0 NULL, 1 SetPersistenceMode (domain, bus, slot, function, mode;
  also onlines/offlines the GPU's NUMA memory), 2 GetPersistenceMode
  (domain, bus, slot, function) -> status [, mode when status is 0];
* version 2: 1 SetPersistenceModeOnly (no NUMA step), 2 SetNumaStatus.

Every call returns a daemon status (0 success, 1-11 errors); each non-zero
status and each RPC-level rejection raises a typed ``PersistencedError``
subclass whose message names the socket and, where there is one, the GPU.
Standard library only (and ``gpu.pci``, which is too); runs on Python 3.8+ on the managed host.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import socket
import stat
import struct
import time

from ansible_collections.gpufleet.nvidia.plugins.module_utils.gpu.pci import parse_pci_bus_id

DEFAULT_SOCKET_PATH = "/var/run/nvidia-persistenced/socket"
DEFAULT_TIMEOUT = 5.0
PROGRAM = 35006

PROC_NULL = 0
V1_SET_PERSISTENCE_MODE = 1
V1_GET_PERSISTENCE_MODE = 2
V2_SET_PERSISTENCE_MODE_ONLY = 1
V2_SET_NUMA_STATUS = 2

MODE_DISABLED = 0
MODE_ENABLED = 1
NUMA_OFFLINE = 0
NUMA_ONLINE = 1

MAX_REPLY_BYTES = 65536

_CALL = 0
_REPLY = 1
_MSG_ACCEPTED = 0
_MSG_DENIED = 1
_LAST_FRAGMENT = 0x80000000
_MSG_NOSIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)  # EPIPE, not SIGPIPE, if the daemon hung up

# ---- errors ---------------------------------------------------------------------


class PersistencedError(Exception):
    """Any failure talking to nvidia-persistenced."""

    def __init__(self, message, socket_path=None, bus_id=None, operation=None):
        self.socket_path = socket_path
        self.bus_id = bus_id
        self.operation = operation
        where = "nvidia-persistenced at %s" % (socket_path or DEFAULT_SOCKET_PATH)
        what = operation or "call"
        if bus_id is not None:
            what += " for GPU %s" % (bus_id,)
        super(PersistencedError, self).__init__("%s: %s failed: %s" % (where, what, message))
        self.reason = message


class PersistencedUnavailableError(PersistencedError):
    """Nothing answers at the socket (missing, refused, or not allowed)."""


class PersistencedTimeoutError(PersistencedError):
    """The daemon did not answer in time (it serves one client at a time)."""


class PersistencedProtocolError(PersistencedError):
    """The daemon's reply is malformed, truncated or for another call."""


class RpcError(PersistencedError):
    """The RPC layer rejected the call (``accept_stat`` or MSG_DENIED)."""

    code = None


class RpcProgramUnavailableError(RpcError):
    code = 1  # PROG_UNAVAIL


class RpcProgramMismatchError(RpcError):
    code = 2  # PROG_MISMATCH

    def __init__(self, message, low=None, high=None, **kwargs):
        self.low = low
        self.high = high
        super(RpcProgramMismatchError, self).__init__(message, **kwargs)


class RpcProcedureUnavailableError(RpcError):
    code = 3  # PROC_UNAVAIL


class RpcGarbageArgsError(RpcError):
    code = 4  # GARBAGE_ARGS


class RpcSystemError(RpcError):
    code = 5  # SYSTEM_ERR


class RpcDeniedError(RpcError):
    """MSG_DENIED: RPC_MISMATCH (``low``/``high`` set) or AUTH_ERROR (``auth_stat``)."""

    def __init__(self, message, low=None, high=None, auth_stat=None, **kwargs):
        self.low = low
        self.high = high
        self.auth_stat = auth_stat
        super(RpcDeniedError, self).__init__(message, **kwargs)


class DaemonStatusError(PersistencedError):
    """The daemon answered with a non-zero status (``status``)."""

    status = None


def _status_class(name, status, doc):
    return type(name, (DaemonStatusError,), {"status": status, "__doc__": doc})


DaemonNotPresentError = _status_class("DaemonNotPresentError", 1, "status 1")
DeviceNotFoundError = _status_class("DeviceNotFoundError", 2, "status 2")
DriverError = _status_class("DriverError", 3, "status 3")
InsufficientResourcesError = _status_class("InsufficientResourcesError", 4, "status 4")
InvalidArgumentError = _status_class("InvalidArgumentError", 5, "status 5")
DaemonIOError = _status_class("DaemonIOError", 6, "status 6")
PermissionDeniedError = _status_class("PermissionDeniedError", 7, "status 7")
DaemonRpcError = _status_class("DaemonRpcError", 8, "status 8")
UserNotFoundError = _status_class("UserNotFoundError", 9, "status 9")
NumaError = _status_class("NumaError", 10, "status 10")
UnknownStatusError = _status_class("UnknownStatusError", 11, "status 11 or unrecognised")

# status -> (exception class, meaning, what to do)
STATUS = {
    0: (None, "success", ""),
    1: (DaemonNotPresentError, "daemon not present",
        "start nvidia-persistenced"),
    2: (DeviceNotFoundError, "device not found",
        "the daemon does not manage a GPU at this bus id; list GPUs with nvidia-smi -q"),
    3: (DriverError, "driver error",
        "the NVIDIA driver refused the change; see the daemon's syslog and dmesg"),
    4: (InsufficientResourcesError, "insufficient resources",
        "the daemon ran out of memory or file descriptors"),
    5: (InvalidArgumentError, "invalid argument",
        "mode must be 0 (disabled) or 1 (enabled)"),
    6: (DaemonIOError, "I/O error",
        "the daemon could not read or write driver files; see its syslog"),
    7: (PermissionDeniedError, "insufficient permissions",
        "only root may change persistence mode (drivers 555 and newer check the caller)"),
    8: (DaemonRpcError, "RPC error in the daemon", "see the daemon's syslog"),
    9: (UserNotFoundError, "user not found",
        "the daemon's --user does not exist"),
    10: (NumaError, "NUMA memory online/offline failed",
         "the change was rolled back; on coherent-NVLink systems run the daemon as root"),
    11: (UnknownStatusError, "unknown error", "see the daemon's syslog"),
}

_ACCEPT = {
    1: (RpcProgramUnavailableError, "PROG_UNAVAIL: the socket does not serve program 35006"),
    2: (RpcProgramMismatchError, "PROG_MISMATCH: the daemon does not support this version"),
    3: (RpcProcedureUnavailableError, "PROC_UNAVAIL: the daemon does not know this procedure"),
    4: (RpcGarbageArgsError, "GARBAGE_ARGS: the daemon could not decode the arguments"),
    5: (RpcSystemError, "SYSTEM_ERR: the daemon hit an internal error (out of memory?)"),
}

_AUTH_STAT = {
    1: "AUTH_BADCRED", 2: "AUTH_REJECTEDCRED", 3: "AUTH_BADVERF", 4: "AUTH_REJECTEDVERF",
    5: "AUTH_TOOWEAK", 6: "AUTH_INVALIDRESP", 7: "AUTH_FAILED",
}


def status_error(status, socket_path=None, bus_id=None, operation=None):
    """The exception for a non-zero daemon status."""
    cls, meaning, hint = STATUS.get(status, (UnknownStatusError, "unrecognised status", ""))
    message = "%s (status %d)" % (meaning, status)
    if hint:
        message += "; %s" % hint
    return cls(message, socket_path=socket_path, bus_id=bus_id, operation=operation)


# ---- the client -------------------------------------------------------------------


class _NotASocket(OSError):
    """The socket path names something other than a socket."""


def _xdr_ints(values):
    for value in values:
        if not -0x80000000 <= value <= 0xFFFFFFFF:
            raise ValueError("%r does not fit in an XDR int" % (value,))
    return b"".join(struct.pack(">i" if v < 0x80000000 else ">I", v) for v in values)


class PersistencedClient:
    """One connection to nvidia-persistenced, reusable for several calls.

    The daemon (NVIDIA's 535) serves one request at a time, so keep a
    connection only as long as needed; ``with PersistencedClient() as c:``
    closes it. ``timeout`` bounds each call (connect, send and reply).
    """

    def __init__(self, socket_path=DEFAULT_SOCKET_PATH, timeout=DEFAULT_TIMEOUT):
        self.socket_path = socket_path
        self.timeout = timeout
        self._sock = None
        self._xid = int.from_bytes(os.urandom(4), "big") & 0x7FFFFFFF

    # connection -----------------------------------------------------------
    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def close(self):
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    @property
    def connected(self):
        return self._sock is not None

    def connect(self, operation="connect", bus_id=None):
        if self._sock is not None:
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            self._connect_no_follow(sock)
        except socket.timeout:
            sock.close()
            raise PersistencedTimeoutError(
                "connecting timed out after %.1f s" % self.timeout,
                socket_path=self.socket_path, bus_id=bus_id, operation=operation)
        except (OSError, ValueError) as exc:
            sock.close()
            raise PersistencedUnavailableError(
                self._connect_reason(exc), socket_path=self.socket_path,
                bus_id=bus_id, operation=operation)
        self._sock = sock

    def _connect_no_follow(self, sock):
        """Connect to the socket named by the path itself, never through a link.

        The run directory belongs to the daemon's service user, who could put a
        symbolic link there in place of the socket and make a root client talk
        to any other socket on the host. So the name is opened with
        O_PATH|O_NOFOLLOW, checked to be a socket, and connected through the
        descriptor's /proc/self/fd entry, which can no longer be redirected.
        """
        path_fd = os.open(self.socket_path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            kind = os.fstat(path_fd).st_mode
            if not stat.S_ISSOCK(kind):
                raise _NotASocket("%s, not a socket; refusing to follow or use it (remove it "
                                  "and restart the persistence daemon)" % (
                                      "a symbolic link" if stat.S_ISLNK(kind) else "another kind of file"))
            # A full listen backlog answers EAGAIN at once on a socket with a timeout,
            # where a blocking client (NVML's) would wait: wait too, within the timeout.
            give_up = time.time() + self.timeout
            while True:
                try:
                    sock.connect("/proc/self/fd/%d" % path_fd)
                    return
                except OSError as exc:
                    if exc.errno != errno.EAGAIN or time.time() >= give_up:
                        raise
                time.sleep(0.002)
        finally:
            os.close(path_fd)

    @staticmethod
    def _connect_reason(exc):
        if isinstance(exc, _NotASocket):
            return "the socket path is %s" % (exc,)
        code = getattr(exc, "errno", None)
        if code == errno.ENOENT:
            return "the socket does not exist; is nvidia-persistenced running?"
        if code == errno.ECONNREFUSED:
            return "connection refused; the socket is stale (daemon not running)"
        if code in (errno.EACCES, errno.EPERM):
            return "permission denied opening the socket"
        return "cannot connect: %s" % (exc,)

    # low level -------------------------------------------------------------------
    def call(self, version, procedure, args=b"", bus_id=None, operation=None):
        """Make one call; return the reply's result bytes (after accept_stat).

        Reconnects once when a reused connection turns out to be closed.
        """
        operation = operation or "procedure %d (version %d)" % (procedure, version)
        reused = self._sock is not None
        self.connect(operation, bus_id)
        self._xid = (self._xid + 1) & 0xFFFFFFFF
        xid = self._xid
        message = struct.pack(">10I", xid, _CALL, 2, PROGRAM, version, procedure,
                              0, 0, 0, 0) + args
        record = struct.pack(">I", _LAST_FRAGMENT | len(message)) + message
        context = dict(socket_path=self.socket_path, bus_id=bus_id, operation=operation)
        try:
            self._sock.sendall(record, _MSG_NOSIGNAL)
            reply = self._read_record(context)
        except _ConnectionClosed as exc:
            self.close()
            if reused and exc.before_reply:
                return self.call(version, procedure, args, bus_id, operation)
            raise PersistencedProtocolError(
                "the daemon closed the connection %s" % (
                    "without replying" if exc.before_reply else "in the middle of its reply"),
                **context)
        except socket.timeout:
            self.close()
            raise PersistencedTimeoutError(
                "no reply within %.1f s (the daemon serves one client at a time; "
                "another client may be holding it)" % self.timeout, **context)
        except (OSError, ValueError) as exc:
            self.close()
            if reused and isinstance(exc, (BrokenPipeError, ConnectionResetError)):
                return self.call(version, procedure, args, bus_id, operation)
            raise PersistencedUnavailableError("connection failed: %s" % (exc,), **context)
        return self._check_reply(reply, xid, context)

    def _recv_exact(self, count, started):
        chunks = []
        while count:
            data = self._sock.recv(min(count, 65536))
            if not data:
                raise _ConnectionClosed(before_reply=not started and not chunks)
            chunks.append(data)
            count -= len(data)
        return b"".join(chunks)

    def _read_record(self, context):
        fragments = []
        size = 0
        while True:
            header = struct.unpack(">I", self._recv_exact(4, bool(fragments)))[0]
            length = header & 0x7FFFFFFF
            size += length
            if size > MAX_REPLY_BYTES:
                self.close()
                raise PersistencedProtocolError(
                    "reply larger than %d bytes" % MAX_REPLY_BYTES, **context)
            fragments.append(self._recv_exact(length, True))
            if header & _LAST_FRAGMENT:
                return b"".join(fragments)

    def _check_reply(self, reply, xid, context):
        def bad(why):
            self.close()
            return PersistencedProtocolError("malformed reply: %s" % why, **context)

        if len(reply) < 12:
            raise bad("only %d bytes" % len(reply))
        got_xid, mtype, reply_stat = struct.unpack(">3I", reply[:12])
        if got_xid != xid:
            raise bad("xid %#x does not match the call's %#x" % (got_xid, xid))
        if mtype != _REPLY:
            raise bad("message type %d is not REPLY" % mtype)
        if reply_stat == _MSG_DENIED:
            if len(reply) < 16:
                raise bad("MSG_DENIED without a reason")
            reject_stat = struct.unpack(">I", reply[12:16])[0]
            if reject_stat == 0 and len(reply) >= 24:
                low, high = struct.unpack(">2I", reply[16:24])
                raise RpcDeniedError(
                    "MSG_DENIED (RPC_MISMATCH): the daemon speaks ONC RPC versions %d-%d"
                    % (low, high), low=low, high=high, **context)
            if reject_stat == 1 and len(reply) >= 20:
                auth = struct.unpack(">I", reply[16:20])[0]
                raise RpcDeniedError(
                    "MSG_DENIED (AUTH_ERROR %s)" % _AUTH_STAT.get(auth, auth),
                    auth_stat=auth, **context)
            raise RpcDeniedError("MSG_DENIED (reject_stat %d)" % reject_stat, **context)
        if reply_stat != _MSG_ACCEPTED:
            raise bad("reply_stat %d" % reply_stat)
        if len(reply) < 20:
            raise bad("accepted reply without a verifier")
        verf_len = struct.unpack(">I", reply[16:20])[0]
        offset = 20 + ((verf_len + 3) & ~3)
        if len(reply) < offset + 4:
            raise bad("accepted reply without accept_stat")
        accept_stat = struct.unpack(">I", reply[offset:offset + 4])[0]
        body = reply[offset + 4:]
        if accept_stat == 0:
            return body
        cls, text = _ACCEPT.get(accept_stat, (RpcError, "accept_stat %d" % accept_stat))
        if accept_stat == 2 and len(body) >= 8:
            low, high = struct.unpack(">2I", body[:8])
            raise RpcProgramMismatchError("%s (it supports versions %d-%d)" % (text, low, high),
                                          low=low, high=high, **context)
        raise cls(text, **context)

    def _status(self, body, context, need=4):
        if len(body) < need:
            self.close()
            raise PersistencedProtocolError(
                "malformed reply: %d result bytes, expected %d" % (len(body), need), **context)
        return struct.unpack(">i", body[:4])[0]

    def _device_call(self, version, procedure, operation, bus_id, extra=()):
        pci = parse_pci_bus_id(bus_id)
        context = dict(socket_path=self.socket_path, bus_id=str(pci), operation=operation)
        body = self.call(version, procedure, _xdr_ints(list(pci) + list(extra)),
                         bus_id=str(pci), operation=operation)
        status = self._status(body, context)
        if status != 0:
            raise status_error(status, **context)
        return body[4:], context

    # procedures ----------------------------------------------------------------
    def null(self, version=1):
        """The NULL procedure: a liveness check."""
        self.call(version, PROC_NULL, operation="NULL")

    def get_persistence_mode(self, bus_id):
        """Return 0 (disabled) or 1 (enabled) for the GPU at ``bus_id``."""
        rest, context = self._device_call(1, V1_GET_PERSISTENCE_MODE,
                                          "GetPersistenceMode", bus_id)
        return self._status(rest, context)

    def set_persistence_mode(self, bus_id, mode):
        """Version 1 set: also onlines/offlines the GPU's NUMA memory."""
        self._device_call(1, V1_SET_PERSISTENCE_MODE, "SetPersistenceMode",
                          bus_id, [int(mode)])

    def set_persistence_mode_only(self, bus_id, mode):
        """Version 2 set: persistence only, no NUMA step."""
        self._device_call(2, V2_SET_PERSISTENCE_MODE_ONLY, "SetPersistenceModeOnly",
                          bus_id, [int(mode)])

    def set_numa_status(self, bus_id, status):
        """Version 2: online (1) or offline (0) the GPU's NUMA memory."""
        self._device_call(2, V2_SET_NUMA_STATUS, "SetNumaStatus", bus_id, [int(status)])


class _ConnectionClosed(Exception):
    def __init__(self, before_reply):
        super(_ConnectionClosed, self).__init__()
        self.before_reply = before_reply


def wait_for_socket(socket_path=DEFAULT_SOCKET_PATH, timeout=10.0, interval=0.05):
    """Wait until the daemon answers NULL at ``socket_path``; raise the last error."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with PersistencedClient(socket_path, timeout=min(1.0, timeout)) as client:
                client.null()
            return
        except PersistencedError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(interval)
