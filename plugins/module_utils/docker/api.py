# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A tiny Docker Engine API client: HTTP over a unix socket, stdlib only.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. It exists so that managed hosts need neither the Docker SDK nor
``requests``; the only call we need is ``GET /info``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import socket

DEFAULT_SOCKET = '/var/run/docker.sock'
# /info is a few KiB; a larger or deeper answer is refused rather than read (it cannot come from dockerd).
MAX_BODY_BYTES = 16 * 1024 * 1024


class DockerAPIError(Exception):
    """The engine API could not be reached or answered with an error."""

    def __init__(self, msg, unreachable=False):
        super(DockerAPIError, self).__init__(msg)
        self.unreachable = unreachable


# http.client is imported on the first request, not with this file: with ssl and email it costs about 17 ms of CPU,
# which a node whose evaluation never asks dockerd (node_state on a host without dockerd) does not pay.
_CONNECTION = []


def _http_client():
    import http.client  # pylint: disable=import-outside-toplevel
    return http.client


def _unix_connection(socket_path, timeout):
    """An HTTP connection to ``socket_path``, a unix socket."""
    if not _CONNECTION:
        http_client = _http_client()

        class UnixHTTPConnection(http_client.HTTPConnection):
            def __init__(self, path, connect_timeout):
                http_client.HTTPConnection.__init__(self, 'localhost', timeout=connect_timeout)
                self._socket_path = path

            def connect(self):
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(self.timeout)
                try:
                    sock.connect(self._socket_path)
                except Exception:
                    sock.close()
                    raise
                self.sock = sock

        _CONNECTION.append(UnixHTTPConnection)
    return _CONNECTION[0](socket_path, timeout)


def socket_path_from_host(host):
    """``unix:///var/run/docker.sock`` or a plain path -> the socket path."""
    if host.startswith('unix://'):
        return host[len('unix://'):]
    return host


class DockerAPI(object):
    """Engine API client bound to one unix socket."""

    def __init__(self, socket_path=DEFAULT_SOCKET, timeout=10.0):
        self.socket_path = socket_path_from_host(socket_path)
        self.timeout = timeout

    def get(self, url):
        conn = _unix_connection(self.socket_path, self.timeout)
        try:
            try:
                conn.request('GET', url, headers={'Host': 'docker', 'Accept': 'application/json'})
                response = conn.getresponse()
                body = response.read(MAX_BODY_BYTES + 1)
            except (socket.error, OSError, _http_client().HTTPException) as exc:
                raise DockerAPIError('cannot query dockerd at unix://%s (GET %s): %s'
                                     % (self.socket_path, url, exc), unreachable=True)
        finally:
            conn.close()
        if response.status != 200:
            raise DockerAPIError('dockerd at unix://%s answered GET %s with HTTP %s: %s'
                                 % (self.socket_path, url, response.status,
                                    body[:500].decode('utf-8', 'replace').strip()))
        if len(body) > MAX_BODY_BYTES:
            raise DockerAPIError('dockerd at unix://%s answered GET %s with more than %d bytes'
                                 % (self.socket_path, url, MAX_BODY_BYTES))
        try:
            return json.loads(body.decode('utf-8'))
        except (ValueError, RecursionError, MemoryError) as exc:
            raise DockerAPIError('dockerd at unix://%s answered GET %s with invalid JSON: %s'
                                 % (self.socket_path, url, type(exc).__name__ if not str(exc) else exc))

    def info(self):
        """``GET /info`` as a dict (``Runtimes``, ``DefaultRuntime``, ``ServerVersion``...)."""
        return self.get('/info')
