"""Python client of policyrouter, the HTTP control plane that routes RL
rollout requests to policy servers.

    >>> from policyrouter import Client
    >>> c = Client("http://127.0.0.1:8080")
    >>> c.assign(4, current_loads=[3, 1, 2])["assignments"]
    [1, 1, 2, 0]

:class:`Client` speaks the HTTP API and :class:`AsyncClient` does the same
for asyncio (``await c.assign(...)``), both on httpx around one sans-I/O
core. :class:`RemoteRouter`, :class:`RemoteSyncRouter` and
:class:`AsyncRemoteSyncRouter` have the interface of the seed framework's
in-process routers. Every error is a :class:`PolicyRouterError` (transport
failures too, with the httpx exception as ``__cause__``); the
result types are in :mod:`policyrouter.types`.
"""

from ._version import __version__
from .errors import (
    AuthError,
    ClientClosedError,
    Conflict,
    ConflictError,
    ConnectionFailedError,
    ConnectionLostError,
    ForbiddenError,
    LeaseEndedWarning,
    NotFound,
    NotFoundError,
    NotLeader,
    NotLeaderError,
    PolicyRouterError,
    TimedOutError,
    TransportError,
    UnauthorizedError,
    Unavailable,
    UnavailableError,
    ValidationError,
)
from .client import Client, RegisteredPolicy
from .async_client import AsyncClient
from .adapter import AsyncRemoteSyncRouter, RemoteRouter, RemoteSyncRouter
from .prefix import prefix_hashes

__all__ = [
    "Client",
    "AsyncClient",
    "RegisteredPolicy",
    "RemoteRouter",
    "RemoteSyncRouter",
    "AsyncRemoteSyncRouter",
    "prefix_hashes",
    "PolicyRouterError",
    "ValidationError",
    "AuthError",
    "UnauthorizedError",
    "ForbiddenError",
    "NotFoundError",
    "ConflictError",
    "UnavailableError",
    "NotLeaderError",
    "TransportError",
    "ConnectionFailedError",
    "ConnectionLostError",
    "TimedOutError",
    "ClientClosedError",
    "LeaseEndedWarning",
    # The same classes, by their names before they ended in Error.
    "NotFound",
    "Conflict",
    "Unavailable",
    "NotLeader",
    "__version__",
]
