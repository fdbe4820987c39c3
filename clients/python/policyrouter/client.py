"""HTTP client of the policyrouter API, on ``requests``.

Retries are limited to what is safe to repeat:

* GET, the idempotent PUTs (``PUT /policies``, ``PUT /topology``), DELETE,
  drain and resume (which set a state) are retried up to ``retries`` times
  on connection errors and on 502/503/504 answers, with a short
  exponential backoff (honouring a short ``Retry-After``). Read timeouts
  are not retried: a slow server would only be asked again.
* ``POST /assign``, ``/select``, ``/release``, ``/complete`` and
  ``POST /policies`` change routing state each time they run, so they are
  retried only when ``requests`` failed to *open the connection* (refused,
  DNS failure, connect timeout): the request was then never sent. Once a
  request may have reached the server (connection reset mid-request, read
  timeout, any HTTP answer) the error is raised to the caller.
  ``register_policy`` with an explicit ``index`` or ``id`` is the
  exception: the server treats an identical re-registration of an index or
  id as a no-op (200), so it is retried like a PUT.

With several routers (replicas sharing one etcd, one of them the elected
leader), a call also fails over, whatever its method, in the two cases
where the router it went to certainly did nothing:

* a ``503 not_leader`` answer (a follower got a leader-only call: no lease
  was issued, no load counted). The call is sent to the leader the
  follower names (``X-Policyrouter-Leader``, or the envelope's
  ``leader``), or, when it names none (an election is on) or one that
  already failed this call, to the next router after ``Retry-After``;
* a connection that could not be opened (refused: a dead router): the
  call goes to the next router at once, and after a short backoff once
  every router failed.

This lasts at most ``failover_timeout`` seconds and a few passes over the
routers; then the last error is raised (:class:`~policyrouter.errors.NotLeader`
or the ``requests`` exception). Errors after a request may have reached a
router (reset, read timeout) follow the rules above: a ``/select`` whose
answer was lost is never sent again, since a lease may have been issued.
"""

from __future__ import annotations

import json
import numbers
import random
import threading
import time
import uuid
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import requests
from requests.adapters import HTTPAdapter

from . import __version__
from .errors import NotLeader, Unavailable, error_from_response

__all__ = ["Client", "RegisteredPolicy", "request_was_not_sent"]

# Statuses after which a safe (idempotent) request is repeated.
RETRY_STATUSES = frozenset({502, 503, 504})

# Default bound, in seconds, on following not_leader answers and refused
# connections across routers: an election takes the leader TTL (2 s by
# default) plus one probe round, with room for a slow one.
DEFAULT_FAILOVER_TIMEOUT = 15.0

# Passes over the routers one call makes at most while failing over (each
# pass may also follow one named leader per router).
FAILOVER_PASSES = 4

# The server's wait of a /select without timeout_ms (its default).
DEFAULT_SELECT_WAIT_MS = 30000

Timeout = Union[float, Tuple[float, float]]


class RegisteredPolicy(dict):
    """A registered policy as the server returned it (a plain ``dict`` of
    the wire fields), plus ``created``: ``True`` when the call registered it
    (201), ``False`` when an identical registration already existed (200)."""

    created: bool

    def __init__(self, body: Mapping[str, Any], created: bool) -> None:
        super().__init__(body)
        self.created = created

    def __repr__(self) -> str:
        return f"RegisteredPolicy({dict.__repr__(self)}, created={self.created!r})"

    def __reduce__(self):
        return (RegisteredPolicy, (dict(self), self.created))


def request_was_not_sent(exc: BaseException) -> bool:
    """Report whether a ``requests`` exception guarantees that the request
    never reached the server: the connection could not be opened (refused,
    unreachable, DNS failure, connect timeout). Any other failure (reset or
    closed connection, read timeout) may come after the server got the
    request."""
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return True
    if not isinstance(exc, requests.exceptions.ConnectionError):
        return False
    if isinstance(exc, (requests.exceptions.ProxyError, requests.exceptions.SSLError)):
        return False
    # requests wraps urllib3's MaxRetryError, whose reason is the cause.
    # NewConnectionError (refused, unreachable; NameResolutionError is a
    # subclass) and ConnectTimeoutError are raised before anything is sent.
    from urllib3.exceptions import ConnectTimeoutError, MaxRetryError, NewConnectionError

    cause = exc.args[0] if exc.args else None
    if isinstance(cause, MaxRetryError):
        cause = cause.reason
    return isinstance(cause, (NewConnectionError, ConnectTimeoutError))


def _to_json_value(obj: Any) -> Any:
    """json.dumps fallback: numpy scalars and arrays, other int-likes, sets."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "__index__"):
        return obj.__index__()
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def _omit_none(**kw: Any) -> Dict[str, Any]:
    return {k: v for k, v in kw.items() if v is not None}


class Client:
    """A client of one policyrouter server, or of several replicas of it.

    Args:
        base_url: the server, e.g. ``"http://127.0.0.1:8080"`` (a path
            prefix, for a server behind a proxy, is kept); or a list of
            the replicas of a highly available router, e.g.
            ``["http://a:8080", "http://b:8080", "http://c:8080"]``, which
            the client fails over between (see the module docs).
        token: a bearer token (``policyrouter token`` mints one); sent as
            ``Authorization: Bearer <token>`` when given.
        timeout: seconds to connect and to wait for an answer; a
            ``(connect, read)`` tuple sets them apart. ``select`` waits
            ``timeout_ms`` longer.
        session: a ``requests.Session`` to use (its adapters, proxies and
            certificates are kept). By default the client makes its own and
            closes it in :meth:`close`.
        retries: how many times a safe request is repeated (see the module
            docs); 0 disables retries.
        backoff: first retry delay in seconds, doubled per attempt, with
            jitter, at most ``max_backoff``.
        pool_maxsize: connections kept open per host by the client's own
            session; raise it when many threads share one client.
        verify: for an ``https://`` server, what ``requests`` verifies its
            certificate with: ``True`` (the default: the system's or
            certifi's roots), the path of a PEM file of CA certificates
            (a private CA, e.g. the router's self-signed certificate), or
            ``False`` (no verification; for experiments only).
        cert: a client certificate, for a server that requires one
            (``--tls-client-ca``): the path of a PEM file holding the
            certificate and its key, or a ``(cert_file, key_file)`` tuple.
            Bearer tokens still apply on top of it.
        failover_timeout: the most seconds one call spends following
            ``not_leader`` answers and refused connections from router to
            router (default 15: an election takes the leader TTL, 2 s by
            default, and a probe round). A request under way is not cut
            short, so an unreachable (not refusing) router can add the
            connect timeout. 0 turns fail-over off.

    Attributes:
        base_urls: the routers given, as a list (normalised, without
            duplicates).
        base_url: the router in use: the first one at the start, then the
            one that last answered (after a fail-over, the leader found;
            it may be outside ``base_urls`` when a follower named it).

    ``verify`` and ``cert``, when given, are passed to every ``requests``
    call, so they win over a given ``session``'s settings (and a CA file or
    ``False`` over the ``REQUESTS_CA_BUNDLE`` environment variable).

    One client can be shared by threads (``requests`` sessions are used that
    way in practice; the switch of ``base_url`` is locked); every method is
    one HTTP request, plus retries and fail-over.
    Methods return the server's JSON as plain dicts and lists, and raise
    :class:`~policyrouter.errors.PolicyRouterError` subclasses for error
    answers and ``requests`` exceptions for transport failures.
    """

    def __init__(
        self,
        base_url: Union[str, Sequence[str]],
        token: Optional[str] = None,
        timeout: Timeout = 10.0,
        session: Optional[requests.Session] = None,
        retries: int = 2,
        *,
        backoff: float = 0.1,
        max_backoff: float = 2.0,
        pool_maxsize: int = 32,
        verify: Union[bool, str, None] = None,
        cert: Union[str, Tuple[str, str], None] = None,
        failover_timeout: float = DEFAULT_FAILOVER_TIMEOUT,
    ) -> None:
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        if not urls:
            raise ValueError("base_url must be a URL or a non-empty list of URLs")
        base_urls: List[str] = []
        for u in urls:
            if not isinstance(u, str) or not u or "://" not in u:
                raise ValueError(f"base_url must be an absolute URL like http://127.0.0.1:8080, not {u!r}")
            u = u.rstrip("/")
            if u not in base_urls:
                base_urls.append(u)
        if retries < 0:
            raise ValueError("retries must be >= 0")
        if not failover_timeout >= 0:
            raise ValueError("failover_timeout must be >= 0")
        self.base_urls = base_urls
        # The URL in use: the first one, then the one that last answered.
        # Read without the lock (one attribute read), switched under it.
        self.base_url = base_urls[0]
        # Position in base_urls of the last listed URL used; rotation on
        # fail-over goes on from there (also while base_url is a leader
        # named by a follower that is not in the list).
        self._pos = 0
        self._lock = threading.Lock()
        self.failover_timeout = float(failover_timeout)
        self.token = token
        self.timeout = timeout
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        # Only what was given: requests' defaults (and a given session's)
        # hold otherwise.
        self._tls: Dict[str, Any] = _omit_none(verify=verify, cert=cert)
        self._owns_session = session is None
        if session is None:
            session = requests.Session()
            adapter = HTTPAdapter(pool_connections=4, pool_maxsize=pool_maxsize)
            session.mount("http://", adapter)
            session.mount("https://", adapter)
        self.session = session
        self._headers = {
            "Accept": "application/json",
            "Content-Type": "application/json",
            "User-Agent": f"policyrouter-python/{__version__} requests/{requests.__version__}",
        }
        if token:
            self._headers["Authorization"] = f"Bearer {token}"

    # -- lifecycle -------------------------------------------------------

    def close(self) -> None:
        """Close the session if the client made it."""
        if self._owns_session:
            self.session.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        if len(self.base_urls) > 1:
            return f"Client({self.base_urls!r}, base_url={self.base_url!r})"
        return f"Client({self.base_url!r})"

    # -- registration ----------------------------------------------------

    def register_policy(
        self,
        url: str,
        node_id: Optional[str] = None,
        index: Optional[int] = None,
        id: Optional[str] = None,  # noqa: A002 - the wire field's name
        capacity: Optional[int] = None,
        labels: Optional[Mapping[str, str]] = None,
        allow_shared_url: bool = False,
        version: Optional[int] = None,
    ) -> RegisteredPolicy:
        """``POST /policies``: register one policy.

        ``index`` defaults to the lowest free one and ``id`` to a UUID.
        Registering the same index with the same body again is a no-op: the
        answer's ``created`` is then ``False``. A different body for a
        taken index or id raises :class:`~policyrouter.errors.Conflict`
        naming the field that differs, and so does a ``url`` another index
        already has, unless ``allow_shared_url`` is set. Retried like a PUT when ``index`` or ``id`` is given, else only
        when the request was never sent.
        """
        body = _omit_none(
            url=url, node_id=node_id, index=None if index is None else int(index), id=id,
            capacity=None if capacity is None else int(capacity),
            labels=None if labels is None else dict(labels),
            allow_shared_url=True if allow_shared_url else None,
            version=None if version is None else int(version),
        )
        # With an index or id the call is idempotent (same body -> 200), so
        # it may be repeated; without either a repeat would register a
        # second policy.
        resp = self._request("POST", "/policies", body, idempotent=index is not None or id is not None)
        return RegisteredPolicy(resp.json(), created=resp.status_code == 201)

    def replace_policies(self, policies: Iterable[Mapping[str, Any]]) -> List[Dict[str, Any]]:
        """``PUT /policies``: replace the whole set at once (what a trainer
        does at start-up); each entry has the fields of
        :meth:`register_policy`. Returns the stored policies in index order."""
        body = {"policies": [dict(p) for p in policies]}
        return self._request("PUT", "/policies", body, idempotent=True).json()["policies"]

    def replace_registration(
        self, policies: Iterable[Mapping[str, Any]], topology: Mapping[str, Any]
    ) -> Dict[str, Any]:
        """``PUT /registration``: replace every policy and the topology (the
        seed's ``component_distribution``) in one atomic call, checked as a
        whole: what a trainer does at start-up, and how to shrink or
        reshape a fleet. Returns ``{"policies": [...], "topology": {...}}``."""
        body = {"policies": [dict(p) for p in policies], "topology": dict(topology)}
        return self._request("PUT", "/registration", body, idempotent=True).json()

    def get_registration(self) -> Dict[str, Any]:
        """``GET /registration``: every policy and the topology."""
        return self._request("GET", "/registration").json()

    def set_weights(self, version: int, max_staleness: Optional[int] = None) -> Dict[str, Any]:
        """``PUT /weights``: record the trainer's current weight version; with
        ``max_staleness``, no router hands work to a policy whose version
        (reported in its ``/idle`` answer) is below ``version -
        max_staleness``. Returns ``{"version", "max_staleness",
        "min_version"}``."""
        body = _omit_none(version=int(version), max_staleness=None if max_staleness is None else int(max_staleness))
        return self._request("PUT", "/weights", body, idempotent=True).json()

    def get_weights(self) -> Dict[str, Any]:
        """``GET /weights``."""
        return self._request("GET", "/weights").json()

    def rolling_update(
        self,
        version: int,
        action: Optional[Mapping[str, Any]] = None,
        max_unavailable: Union[int, str, None] = None,
        min_available_per_node: Optional[int] = None,
        drain_timeout_ms: Optional[int] = None,
        max_failures: Optional[int] = None,
    ) -> Dict[str, Any]:
        """``POST /updates``: roll weight ``version`` through the fleet in
        waves of at most ``max_unavailable`` policies (a count, or a
        percentage string such as ``"25%"``; ``"100%"`` pauses everything).
        ``action`` (``{"method", "path", "body", "timeout_ms"}``) is sent to
        each policy of a wave; without it the trainer updates the policies
        listed in the update's ``ready`` and confirms with
        :meth:`update_done`. Returns the update (``state`` ``running``).
        Not retried once sent: a repeat would be a second update (409)."""
        body = _omit_none(version=int(version), action=None if action is None else dict(action),
                          max_unavailable=max_unavailable, min_available_per_node=min_available_per_node,
                          drain_timeout_ms=drain_timeout_ms, max_failures=max_failures)
        return self._request("POST", "/updates", body).json()

    def get_update(self, update_id: str) -> Dict[str, Any]:
        """``GET /updates/{id}``: the update's state, waves and policies."""
        return self._request("GET", "/updates/" + requests.utils.quote(update_id, safe="")).json()

    def list_updates(self) -> List[Dict[str, Any]]:
        """``GET /updates``: every update, newest first."""
        return self._request("GET", "/updates").json()["updates"]

    def update_done(self, update_id: str, policies: Iterable[str]) -> Dict[str, Any]:
        """``POST /updates/{id}/done``: the trainer has updated these
        policies of the running wave (external mode)."""
        path = "/updates/" + requests.utils.quote(update_id, safe="") + "/done"
        return self._request("POST", path, {"policies": list(policies)}, idempotent=True).json()

    def abort_update(self, update_id: str) -> Dict[str, Any]:
        """``POST /updates/{id}/abort``: end the update and resume every
        policy it drained."""
        return self._request("POST", "/updates/" + requests.utils.quote(update_id, safe="") + "/abort").json()

    def wait_update(
        self,
        update_id: str,
        timeout: Optional[float] = None,
        on_progress: Optional[Callable[[Dict[str, Any]], None]] = None,
        poll_s: float = 0.2,
    ) -> Dict[str, Any]:
        """Poll the update until it ends (``succeeded``, ``failed`` or
        ``aborted``) and return it; ``on_progress`` gets each state seen
        (for external mode, it may update the ``ready`` policies and call
        :meth:`update_done`). Raises ``TimeoutError`` after ``timeout``
        seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            update = self.get_update(update_id)
            if on_progress is not None:
                on_progress(update)
            if update["state"] != "running":
                return update
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"update {update_id} still running after {timeout}s")
            time.sleep(poll_s)

    def list_policies(self) -> List[Dict[str, Any]]:
        """``GET /policies``: every policy, in index order."""
        return self._request("GET", "/policies").json()["policies"]

    def get_policy(self, id: Union[str, int]) -> Dict[str, Any]:  # noqa: A002
        """``GET /policies/{id}``, with the policy's live ``state`` and
        health (``last_error``, ``unhealthy_since``, ``last_ok``). An
        ``int`` names the policy by its index (``/policies/by-index/3``), a
        ``str`` by its id. Raises NotFound for an unknown one."""
        return self._request("GET", self._policy_path(id)).json()

    def delete_policy(self, id: Union[str, int]) -> None:  # noqa: A002
        """``DELETE /policies/{id}``; raises NotFound for an unknown id,
        except when an earlier attempt of this same call may have deleted
        it (then the 404 of the retry is the expected answer)."""
        self._request("DELETE", self._policy_path(id), idempotent=True, missing_ok_on_retry=True)

    def drain(self, id: Union[str, int]) -> Dict[str, Any]:  # noqa: A002
        """``POST /policies/{id}/drain``: stop new work to the policy without
        deleting it. Returns the policy (``draining`` true). An ``int``
        names the policy by its index, a ``str`` by its id."""
        return self._request("POST", self._policy_path(id) + "/drain", idempotent=True).json()

    def resume(self, id: Union[str, int]) -> Dict[str, Any]:  # noqa: A002
        """``POST /policies/{id}/resume``: undo :meth:`drain`."""
        return self._request("POST", self._policy_path(id) + "/resume", idempotent=True).json()

    def set_topology(self, component_distribution: Mapping[str, Any]) -> Dict[str, Any]:
        """``PUT /topology`` with the seed's ``component_distribution`` as is:
        ``{"node-a": {"env": {"ids": [0, 1]}, "eval": {"ids": [0]}}, ...}``.
        Returns the stored topology."""
        return self._request("PUT", "/topology", dict(component_distribution), idempotent=True).json()

    def get_topology(self) -> Dict[str, Any]:
        """``GET /topology``."""
        return self._request("GET", "/topology").json()

    # -- routing ---------------------------------------------------------

    def assign(
        self,
        num_tasks: int,
        current_loads: Optional[Sequence[int]] = None,
        env_ids: Optional[Sequence[str]] = None,
        router: Optional[str] = None,
        min_version: Optional[int] = None,
        session_ids: Optional[Sequence[Optional[str]]] = None,
        load_factor: Optional[float] = None,
    ) -> Dict[str, Any]:
        """``POST /assign``: spread ``num_tasks`` tasks over the policies.

        ``current_loads`` (one load per policy index) is the seed's
        stateless mode; without it the server's tracked loads are used and
        raised. ``env_ids`` must have ``num_tasks`` entries. ``router`` is
        an ``/assign`` router of the server, such as ``"simple"`` or
        ``"node_affinity"`` (its ``openapi.yaml`` lists them; default: the
        server's). ``session_ids`` (``num_tasks`` entries, ``None`` or
        ``""`` for no key) sends each task of a session (a trajectory, or a
        GRPO group id for group stickiness) to the session's home on the
        server's consistent-hashing ring, under the load bound whose factor
        ``load_factor`` sets (default: the server's ``--sticky-load-factor``).
        Returns ``{"assignments": [...], "policies": {"<index>": {...}}}``.
        Not retried once sent (tracked loads would be raised twice).
        """
        body = _omit_none(
            num_tasks=int(num_tasks),
            current_loads=None if current_loads is None else [int(x) for x in current_loads],
            env_ids=None if env_ids is None else list(env_ids),
            router=router,
            min_version=None if min_version is None else int(min_version),
            session_ids=None if session_ids is None else [None if s is None else str(s) for s in session_ids],
            load_factor=None if load_factor is None else float(load_factor),
        )
        return self._request("POST", "/assign", body).json()

    def select(
        self,
        env_id: Optional[str] = None,
        router: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        lease_ttl_ms: Optional[int] = None,
        min_version: Optional[int] = None,
        session_id: Optional[str] = None,
        sticky_wait_ms: Optional[int] = None,
        load_factor: Optional[float] = None,
    ) -> Dict[str, Any]:
        """``POST /select``: take one idle policy for a sync request,
        waiting up to ``timeout_ms`` (server default 30000, capped by the
        server's ``--max-select-wait``) for one to become idle.

        ``router`` is a ``/select`` router of the server (its
        ``openapi.yaml`` lists them; default: the server's). ``lease_ttl_ms``
        ends the lease that long after the hand-out unless it is released
        first (default: the server's ``--lease-ttl``), so that a worker that
        crashes cannot hold a policy forever. ``min_version`` is this
        request's weight-version floor instead of the one
        :meth:`set_weights` set.

        ``session_id`` (at most 256 bytes: a trajectory id, or a GRPO group
        id for group stickiness) asks for the session's home, the policy
        that likely holds its prefix in its KV cache; when the home is busy
        the request waits for it up to ``sticky_wait_ms`` (default 0), then
        takes what the router would pick. ``load_factor`` is the factor of
        the home's load bound (default: the server's ``--sticky-load-factor``).

        Returns ``{"index", "id", "url", "node_id", "lease_id"}``; the
        ``node_affinity`` (round-robin) router issues no ``lease_id``.
        Raises :class:`~policyrouter.errors.Unavailable` (with
        ``retry_after``) when no policy became idle in time. The HTTP read
        timeout is the wait plus the client's timeout. Not retried once
        sent: a lost answer may have taken a policy.
        """
        body = _omit_none(env_id=env_id, router=router,
                          timeout_ms=None if timeout_ms is None else int(timeout_ms),
                          lease_ttl_ms=None if lease_ttl_ms is None else int(lease_ttl_ms),
                          min_version=None if min_version is None else int(min_version),
                          session_id=session_id,
                          sticky_wait_ms=None if sticky_wait_ms is None else int(sticky_wait_ms),
                          load_factor=None if load_factor is None else float(load_factor))
        wait_s = (DEFAULT_SELECT_WAIT_MS if timeout_ms is None else max(0, int(timeout_ms))) / 1000.0
        return self._request("POST", "/select", body, extra_read_s=wait_s).json()

    def release(self, lease_id: Optional[str] = None, index: Optional[int] = None) -> Dict[str, Any]:
        """``POST /release``: return a selected policy to idle at once, by
        ``lease_id`` or (releasing that policy's oldest lease) by ``index``.
        Idempotent: a lease that already ended (released before, or freed
        when the server saw the policy idle) answers ``{"released": False}``.
        Raises NotFound for a lease the server never issued, or an index
        with no lease out."""
        body = _omit_none(lease_id=lease_id, index=None if index is None else int(index))
        return self._request("POST", "/release", body).json()

    def complete(self, index: int, count: int = 1) -> Dict[str, Any]:
        """``POST /complete``: ``count`` tasks of policy ``index`` finished;
        lowers its tracked load. Returns ``{"index", "load"}``."""
        return self._request("POST", "/complete", {"index": int(index), "count": int(count)}).json()

    # -- reading ---------------------------------------------------------

    def stats(self) -> Dict[str, Any]:
        """``GET /stats``: per policy, per node and total figures."""
        return self._request("GET", "/stats").json()

    def healthz(self) -> Dict[str, Any]:
        """``GET /healthz``: ``{"status": "ok"}`` while the process serves."""
        return self._request("GET", "/healthz").json()

    def readyz(self) -> Dict[str, Any]:
        """``GET /readyz``: ``{"status": "ok"}``; raises Unavailable when the
        server is not ready (after the usual retries), and NotLeader at once
        from a follower replica: only the leader is ready, and following it
        would report another router's readiness."""
        return self._request("GET", "/readyz", follow_leader=False).json()

    # -- plumbing --------------------------------------------------------

    @staticmethod
    def _policy_path(id: Union[str, int]) -> str:  # noqa: A002
        if isinstance(id, numbers.Integral) and not isinstance(id, bool) and int(id) >= 0:
            return "/policies/by-index/" + str(int(id))
        if not isinstance(id, str) or not id:
            raise ValueError(f"policy must be an id (a non-empty string) or an index (an int >= 0), not {id!r}")
        # Escape exactly as Go does for a path (RFC 3986 sub-delims, ':' and
        # '@' stay literal). Any other escaping makes Go keep the raw path,
        # which the server's router matches undecoded, and the id is not found.
        return "/policies/" + requests.utils.quote(id, safe="$&+,:;=@")

    def _timeouts(self, extra_read_s: float) -> Tuple[float, float]:
        if isinstance(self.timeout, tuple):
            connect, read = self.timeout
        else:
            connect = read = float(self.timeout)
        return connect, read + extra_read_s

    def _delay(self, attempt: int, retry_after: Optional[float]) -> float:
        delay = self.backoff * (2 ** attempt) * (0.5 + random.random() / 2)
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, self.max_backoff)

    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        idempotent: Optional[bool] = None,
        extra_read_s: float = 0.0,
        missing_ok_on_retry: bool = False,
        follow_leader: bool = True,
    ) -> requests.Response:
        """Send one API call, with the retries and fail-over the module docs
        describe; return the 2xx response or raise."""
        if idempotent is None:
            idempotent = method in ("GET", "HEAD", "OPTIONS")
        data = None if body is None else json.dumps(body, default=_to_json_value).encode()
        headers = dict(self._headers)
        # One id for every attempt of this call, so server logs tie them up.
        headers["X-Request-ID"] = uuid.uuid4().hex
        timeout = self._timeouts(extra_read_s)
        with self._lock:
            started_on, pos = self.base_url, self._pos
        base = started_on
        attempt = 0  # retries on one router (the module docs' rules)
        maybe_done = False  # an earlier attempt may have reached the server
        # Fail-over state: hops to another router (or resends after
        # not_leader), pauses taken, routers that failed since the last
        # pause, and the time bound (set at the first hop).
        hops = pauses = 0
        max_hops = FAILOVER_PASSES * 2 * (len(self.base_urls) + 1)
        failed: set = set()
        deadline: Optional[float] = None

        def next_listed() -> Tuple[str, int]:
            p = self.base_urls.index(base) if base in self.base_urls else pos
            p = (p + 1) % len(self.base_urls)
            return self.base_urls[p], p

        def may_hop(delay: float) -> bool:
            nonlocal deadline, hops
            now = time.monotonic()
            if deadline is None:
                deadline = now + self.failover_timeout
            if hops >= max_hops or now + delay >= deadline:
                return False
            hops += 1
            if delay > 0:
                time.sleep(delay)
            return True

        while True:
            try:
                resp = self.session.request(method, base + path, data=data, headers=headers,
                                            timeout=timeout, allow_redirects=False, **self._tls)
            except requests.exceptions.RequestException as exc:
                not_sent = request_was_not_sent(exc)
                if not_sent and (len(self.base_urls) > 1 or base not in self.base_urls):
                    # Nothing reached this router: any request may go to
                    # the next one. Pause only once every router failed.
                    failed.add(base)
                    nxt, nxt_pos = next_listed()
                    pause = nxt in failed
                    if not may_hop(self._delay(pauses, None) if pause else 0.0):
                        raise
                    if pause:
                        pauses += 1
                        failed.clear()
                    base, pos = nxt, nxt_pos
                    continue
                retryable = not_sent or (
                    idempotent
                    and isinstance(exc, requests.exceptions.ConnectionError)
                    and not isinstance(exc, requests.exceptions.SSLError)
                )
                if attempt >= self.retries or not retryable:
                    raise
                maybe_done = maybe_done or not not_sent
                time.sleep(self._delay(attempt, None))
                attempt += 1
                continue
            if resp.status_code < 300:
                self._settle(started_on, base, pos)
                return resp
            err = error_from_response(resp)
            if isinstance(err, NotLeader) and follow_leader:
                # A follower made no lease and no change: resend anywhere.
                resp.close()
                failed.add(base)
                leader = _leader_url(err.leader)
                pause = leader is None or leader == base or leader in failed
                if not pause:
                    nxt = leader
                    nxt_pos = self.base_urls.index(leader) if leader in self.base_urls else pos
                else:
                    # No leader known (an election), or a stale one: the
                    # next router, after the follower's Retry-After.
                    nxt, nxt_pos = next_listed()
                if not may_hop(self._delay(pauses, err.retry_after) if pause else 0.0):
                    raise err
                if pause:
                    pauses += 1
                    failed.clear()  # after a pause, what followers say is news
                base, pos = nxt, nxt_pos
                continue
            self._settle(started_on, base, pos)
            if missing_ok_on_retry and maybe_done and resp.status_code == 404:
                return resp
            if idempotent and resp.status_code in RETRY_STATUSES and attempt < self.retries:
                retry_after = err.retry_after if isinstance(err, Unavailable) else None
                maybe_done = True
                resp.close()
                time.sleep(self._delay(attempt, retry_after))
                attempt += 1
                continue
            raise err

    def _settle(self, started_on: str, base: str, pos: int) -> None:
        """Make ``base``, a router that answered, the one in use, unless
        another thread switched while this call was failing over (its news
        is as fresh)."""
        if base == started_on:
            return
        with self._lock:
            if self.base_url == started_on:
                self.base_url, self._pos = base, pos


def _leader_url(named: Optional[str]) -> Optional[str]:
    """The leader URL a not_leader answer named, normalised like base URLs;
    ``None`` when none (or not an http(s) URL) was named."""
    if not named:
        return None
    named = named.strip().rstrip("/")
    if not named.lower().startswith(("http://", "https://")) or len(named.split("://", 1)[1]) == 0:
        return None
    return named
