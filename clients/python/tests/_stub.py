"""Test fixture: a scripted HTTP server on a loopback port, standing in for
a policyrouter server (or one of several replicas) where the real binary
cannot be made to misbehave."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Mapping


class LoopbackServer:
    """Serves every request with ``handle(request_handler, body)`` in a
    thread. ``protocol`` "HTTP/1.0" makes one connection per request, so that
    :meth:`close` leaves no kept-alive connection answering."""

    def __init__(self, handle: Callable[[BaseHTTPRequestHandler, bytes], None], protocol: str = "HTTP/1.1") -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = protocol

            def _serve(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                handle(self, self.rfile.read(n) if n else b"")

            do_GET = do_POST = do_PUT = do_DELETE = _serve

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        """Stop listening: connecting is refused from now on."""
        self.httpd.shutdown()
        self.httpd.server_close()


def drop(h: BaseHTTPRequestHandler) -> None:
    """Close the connection without answering the request read."""
    h.close_connection = True
    h.connection.shutdown(socket.SHUT_RDWR)


def reply(h: BaseHTTPRequestHandler, status: int, headers: Mapping[str, str], payload: Any) -> None:
    """Answer with status, headers (Content-Type JSON unless given) and
    payload: bytes as they are, anything else as JSON."""
    if not isinstance(payload, (bytes, bytearray)):
        payload = json.dumps(payload).encode()
    headers = dict(headers)
    headers.setdefault("Content-Type", "application/json")
    h.send_response(status)
    for k, v in headers.items():
        h.send_header(k, v)
    h.send_header("Content-Length", str(len(payload)))
    h.end_headers()
    h.wfile.write(payload)
