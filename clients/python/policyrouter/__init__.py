"""Python client of policyrouter, the HTTP control plane that routes RL
rollout requests to policy servers.

    >>> from policyrouter import Client
    >>> c = Client("http://127.0.0.1:8080")
    >>> c.assign(4, current_loads=[3, 1, 2])["assignments"]
    [1, 1, 2, 0]

:class:`Client` speaks the HTTP API; :class:`RemoteRouter` and
:class:`RemoteSyncRouter` have the interface of the seed framework's
in-process routers. Errors are :class:`PolicyRouterError` subclasses.
"""

__version__ = "0.1.0"

from .errors import (  # noqa: E402
    AuthError,
    Conflict,
    NotFound,
    NotLeader,
    PolicyRouterError,
    Unavailable,
    ValidationError,
)
from .client import Client, RegisteredPolicy  # noqa: E402
from .adapter import RemoteRouter, RemoteSyncRouter  # noqa: E402

__all__ = [
    "Client",
    "RegisteredPolicy",
    "RemoteRouter",
    "RemoteSyncRouter",
    "PolicyRouterError",
    "ValidationError",
    "AuthError",
    "NotFound",
    "Conflict",
    "Unavailable",
    "NotLeader",
    "__version__",
]
