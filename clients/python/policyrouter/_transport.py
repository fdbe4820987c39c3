"""The httpx sessions the clients make for themselves.

A client of one router gets httpx's connect retries for that router
(httpx retries a connection that could not be opened, which sent
nothing): a transport with ``retries`` is mounted for its origin. Every
other origin (the routers of a client given several, where a refused
connection goes to the next router at once instead, and a leader a
follower named) uses a transport without them. All have the client's TLS
settings and connection limits.

The blocking transports also set ``TCP_NODELAY``: httpcore writes a
request's headers and body in two writes, and without it the body waits
for the delayed ACK of the headers, some 40 ms per call. httpx 0.24 and
later take ``socket_options``; on httpx 0.23 (httpcore 0.16, Debian 12) the
transport's connection pool is given a network backend that sets it. The
asyncio transport needs neither: anyio sets ``TCP_NODELAY`` itself.
"""

from __future__ import annotations

import inspect
import socket
from typing import Any, Dict, Optional

import httpx

_NODELAY = (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

try:  # httpcore 0.16, under httpx 0.23
    from httpcore.backends.sync import SyncBackend as _SyncBackend
except ImportError:  # pragma: no cover - newer httpcore: socket_options instead
    _SyncBackend = None  # type: ignore[assignment,misc]


if _SyncBackend is not None:

    class _NoDelayBackend(_SyncBackend):  # type: ignore[misc,valid-type]
        """httpcore's blocking network backend, with TCP_NODELAY on every
        connection it opens."""

        def connect_tcp(self, *args: Any, **kwargs: Any) -> Any:
            stream = super().connect_tcp(*args, **kwargs)
            sock = stream.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(*_NODELAY)
            return stream


def _origin(url: str) -> str:
    u = httpx.URL(url)
    return f"{u.scheme}://{u.netloc.decode('ascii')}"


def _mounts(make: Any, retry_url: Optional[str], retries: int) -> Dict[str, Any]:
    if retry_url is None or retries <= 0:
        return {}
    return {_origin(retry_url): make(retries)}


def sync_session(retry_url: Optional[str], retries: int, verify: Any, cert: Any, pool_maxsize: int) -> httpx.Client:
    """The blocking client's session: connect retries for ``retry_url``."""
    limits = transport_limits(pool_maxsize)

    def make(n: int) -> httpx.HTTPTransport:
        return sync_transport(verify, cert, limits, n)

    return httpx.Client(transport=make(0), mounts=_mounts(make, retry_url, retries))


def async_session(retry_url: Optional[str], retries: int, verify: Any, cert: Any,
                  pool_maxsize: int) -> httpx.AsyncClient:
    """The asyncio client's session: connect retries for ``retry_url``."""
    limits = transport_limits(pool_maxsize)

    def make(n: int) -> httpx.AsyncHTTPTransport:
        return httpx.AsyncHTTPTransport(verify=verify, cert=cert, limits=limits, retries=n)

    return httpx.AsyncClient(transport=make(0), mounts=_mounts(make, retry_url, retries))


def transport_limits(pool_maxsize: int) -> httpx.Limits:
    """As many connections at once as calls (a ``/select`` holds one while
    it waits), ``pool_maxsize`` of them kept alive between calls."""
    if pool_maxsize < 1:
        raise ValueError("pool_maxsize must be >= 1")
    return httpx.Limits(max_connections=None, max_keepalive_connections=int(pool_maxsize))


def sync_transport(verify: Any, cert: Any, limits: httpx.Limits, retries: int) -> httpx.HTTPTransport:
    """The blocking client's own transport."""
    kw = dict(verify=verify, cert=cert, limits=limits, retries=retries)
    if "socket_options" in inspect.signature(httpx.HTTPTransport).parameters:
        return httpx.HTTPTransport(socket_options=[_NODELAY], **kw)  # pragma: no cover - httpx >= 0.24
    transport = httpx.HTTPTransport(**kw)
    pool = getattr(transport, "_pool", None)
    if _SyncBackend is not None and isinstance(getattr(pool, "_network_backend", None), _SyncBackend):
        pool._network_backend = _NoDelayBackend()  # type: ignore[union-attr]
    return transport
