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
later take ``socket_options``, the public way. httpx 0.23 (httpcore 0.16,
what Debian 12 ships) has no public way, so on that version alone, and only
while the transport has the private attribute it had there, its connection
pool gets a network backend that sets the option
(:func:`_nodelay_on_httpx_0_23`, the one place that touches httpx's
internals). Any other httpx without ``socket_options`` gets a plain
transport. The asyncio transport needs none of this: anyio sets
``TCP_NODELAY`` itself.
"""

from __future__ import annotations

import inspect
import socket
from typing import Any, Dict, List, Optional

import httpx

_NODELAY = (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

try:  # httpcore 0.16, under httpx 0.23
    from httpcore.backends.sync import SyncBackend as _SyncBackend
except ImportError:  # newer httpcore: socket_options instead
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
    verify = _ssl_context(verify, cert)

    def make(n: int) -> httpx.HTTPTransport:
        return sync_transport(verify, cert, limits, n)

    return httpx.Client(transport=make(0), mounts=_mounts(make, retry_url, retries))


def async_session(retry_url: Optional[str], retries: int, verify: Any, cert: Any,
                  pool_maxsize: int) -> httpx.AsyncClient:
    """The asyncio client's session: connect retries for ``retry_url``."""
    limits = transport_limits(pool_maxsize)
    verify = _ssl_context(verify, cert)

    def make(n: int) -> "_Shards":
        return _Shards(lambda: httpx.AsyncHTTPTransport(verify=verify, cert=cert, limits=limits, retries=n))

    return httpx.AsyncClient(transport=make(0), mounts=_mounts(make, retry_url, retries))


# Calls in flight per connection pool of the asyncio client.
CALLS_PER_POOL = 32


class _Shards(httpx.AsyncBaseTransport):
    """Connection pools of at most :data:`CALLS_PER_POOL` calls in flight
    each, made as needed; a call goes to the least busy one.

    httpcore 0.16 (under httpx 0.23) scans every connection of its pool,
    under a lock, twice per request; with hundreds of coroutines each
    holding a connection (a waiting ``/select`` does), one pool spent
    most of the client's time in that scan. Small pools keep a call's
    cost flat in the number of calls in flight."""

    def __init__(self, make: Any) -> None:
        self._make = make
        self._pools: List[List[Any]] = []  # [transport, calls in flight]

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        pool = min(self._pools, key=lambda p: p[1], default=None)
        if pool is None or pool[1] >= CALLS_PER_POOL:
            pool = [self._make(), 0]
            self._pools.append(pool)
        pool[1] += 1
        try:
            resp = await pool[0].handle_async_request(request)
        except BaseException:
            pool[1] -= 1
            raise
        return httpx.Response(resp.status_code, headers=resp.headers, stream=_Counted(resp.stream, pool),
                              extensions=resp.extensions)

    async def aclose(self) -> None:
        for transport, _ in self._pools:
            await transport.aclose()


class _Counted(httpx.AsyncByteStream):
    """A response body that counts its call out of its pool once closed."""

    def __init__(self, stream: Any, pool: List[Any]) -> None:
        self._stream = stream
        self._pool: Optional[List[Any]] = pool

    async def __aiter__(self) -> Any:
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        if self._pool is not None:
            self._pool[1] -= 1
            self._pool = None
        await self._stream.aclose()


def _ssl_context(verify: Any, cert: Any) -> Any:
    """One TLS context for a session's transports (loading the CA roots
    takes a while)."""
    return httpx.create_ssl_context(verify=verify, cert=cert)


def transport_limits(pool_maxsize: int) -> httpx.Limits:
    """As many connections at once as calls (a ``/select`` holds one while
    it waits), ``pool_maxsize`` of them kept alive between calls."""
    if pool_maxsize < 1:
        raise ValueError("pool_maxsize must be >= 1")
    return httpx.Limits(max_connections=None, max_keepalive_connections=int(pool_maxsize))


def sync_transport(verify: Any, cert: Any, limits: httpx.Limits, retries: int) -> httpx.HTTPTransport:
    """The blocking client's own transport, with ``TCP_NODELAY`` on its
    connections where httpx allows it (see the module docs)."""
    kw = dict(verify=verify, cert=cert, limits=limits, retries=retries)
    if "socket_options" in inspect.signature(httpx.HTTPTransport).parameters:  # httpx >= 0.24
        return httpx.HTTPTransport(socket_options=[_NODELAY], **kw)
    transport = httpx.HTTPTransport(**kw)
    if httpx.__version__.startswith("0.23."):
        _nodelay_on_httpx_0_23(transport)
    return transport


def _nodelay_on_httpx_0_23(transport: httpx.HTTPTransport) -> bool:
    """Give an httpx 0.23 transport's connection pool a network backend
    that sets ``TCP_NODELAY``. httpx 0.23 has no public way to set a socket
    option and Debian 12 ships it; this reaches into two private attributes
    (``transport._pool._network_backend``), so it runs on that version only
    and does nothing unless they are what httpx 0.23 has. Returns whether
    the backend was replaced."""
    pool = getattr(transport, "_pool", None)
    if _SyncBackend is None or type(getattr(pool, "_network_backend", None)) is not _SyncBackend:
        return False
    pool._network_backend = _NoDelayBackend()  # type: ignore[union-attr]
    return True
