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
in-process routers. Errors are :class:`PolicyRouterError` subclasses; the
result types are in :mod:`policyrouter.types`.
"""

from ._version import __version__
from .errors import (
    AuthError,
    Conflict,
    NotFound,
    NotLeader,
    PolicyRouterError,
    Unavailable,
    ValidationError,
)
from .client import Client, RegisteredPolicy
from .async_client import AsyncClient
from .adapter import AsyncRemoteSyncRouter, RemoteRouter, RemoteSyncRouter

__all__ = [
    "Client",
    "AsyncClient",
    "RegisteredPolicy",
    "RemoteRouter",
    "RemoteSyncRouter",
    "AsyncRemoteSyncRouter",
    "PolicyRouterError",
    "ValidationError",
    "AuthError",
    "NotFound",
    "Conflict",
    "Unavailable",
    "NotLeader",
    "__version__",
]
