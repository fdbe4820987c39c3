"""The sans-I/O core of the policyrouter client.

Everything :class:`~policyrouter.Client` and
:class:`~policyrouter.AsyncClient` decide is decided here, once: the
request of each API call (method, path, JSON body, headers, timeouts), how
its answer is decoded, which error an answer raises, and what happens after
a failure (retry on the same router, fail over to another, or give up).
The core performs no I/O and never sleeps: the shells send the request it
describes, hand back the answer or the transport exception, and wait the
delay it returns. So the two shells cannot disagree.

Retries are limited to what is safe to repeat:

* A connection that could not be opened (refused, DNS failure, connect
  timeout: ``httpx.ConnectError``, ``httpx.ConnectTimeout``) guarantees the
  request was never sent. httpx's transport retries those connects itself
  (``retries`` times, for a client on one router); with several routers
  the call goes to the next router at once instead.
* GET, the idempotent PUTs, DELETE, drain and resume (which set a state)
  are repeated up to ``retries`` times when the request may have been sent
  (connection reset or closed before the answer) and on 502/503/504
  answers, after a short exponential backoff (``backoff`` doubled per
  attempt, with jitter, at most ``max_backoff``) or the answer's
  ``Retry-After`` when that is longer, up to ``max_retry_after``.
  Read timeouts are never repeated. Each retry and fail-over is logged at
  DEBUG on the ``policyrouter`` logger, with the call's request id.
* ``POST /assign``, ``/select``, ``/release``, ``/complete``,
  ``POST /policies`` and ``POST /updates`` change routing state each time
  they run: once they may have reached the server, the error is raised to
  the caller. ``register_policy`` with an explicit ``index`` or ``id`` is
  the exception (an identical re-registration is a no-op), and so is
  ``update_done``.

With several routers (replicas sharing one etcd, one of them the elected
leader), a call also fails over, whatever its method, in the two cases
where the router it went to certainly did nothing: a ``503 not_leader``
answer (sent on to the leader the follower names, or, when it names none or
one that already failed, to the next router after ``Retry-After``), and a
connection that could not be opened (the next router at once; a short
backoff once every router failed). This lasts at most ``failover_timeout``
seconds and a few passes over the routers.
"""

from __future__ import annotations

import json
import logging
import numbers
import random
import ssl
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import (Any, Callable, Dict, Generic, Iterable, List, Mapping, Optional, Sequence, Set, Tuple,
                    TypeVar, Union)
from urllib.parse import quote

import httpx

from ._version import __version__
from .errors import (ClientClosedError, NotLeaderError, TransportError, UnavailableError, error_from_response,
                     transport_error)

__all__ = [
    "Answer",
    "Call",
    "ClientCore",
    "Exchange",
    "Request",
    "Step",
    "RegisteredPolicy",
    "request_was_not_sent",
]

T = TypeVar("T")

# Statuses after which a safe (idempotent) request is repeated.
RETRY_STATUSES = frozenset({502, 503, 504})

# Default bound, in seconds, on following not_leader answers and refused
# connections across routers: an election takes the leader TTL (2 s by
# default) plus one probe round, with room for a slow one.
DEFAULT_FAILOVER_TIMEOUT = 15.0

# Passes over the routers one call makes at most while failing over (each
# pass may also follow one named leader per router).
FAILOVER_PASSES = 4

# Default ceiling, in seconds, on a Retry-After the client honours: a
# router that asks for longer is asked again after this long.
DEFAULT_MAX_RETRY_AFTER = 30.0

log = logging.getLogger("policyrouter")

# The server's wait of a /select without timeout_ms (its default).
DEFAULT_SELECT_WAIT_MS = 30000

#: A timeout as the clients take it: seconds (connect, read and write),
#: a ``(connect, read)`` pair, an ``httpx.Timeout``, or ``None`` (no
#: timeout). Any of the seconds may be ``None`` (no bound on that phase).
Timeout = Union[float, Tuple[Optional[float], Optional[float]], httpx.Timeout, None]


class _NotGiven:
    """The default of a call's ``timeout``: the client's own."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_GIVEN"

    def __reduce__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN: Any = _NotGiven()


def _seconds(v: Any, what: str) -> Optional[float]:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{what} must be a number of seconds or None, not {type(v).__name__}")
    v = float(v)
    if not v >= 0:  # NaN too
        raise ValueError(f"{what} must be >= 0, not {v}")
    return v


def as_timeout(timeout: Timeout) -> httpx.Timeout:
    """Check a timeout as the clients take it (see :data:`Timeout`) and
    return it as an ``httpx.Timeout``. A ``(connect, read)`` pair bounds
    writes like reads and the wait for a pooled connection like connects.
    Raises ``TypeError`` or ``ValueError`` for anything else."""
    if isinstance(timeout, httpx.Timeout):
        for phase in ("connect", "read", "write", "pool"):
            _seconds(getattr(timeout, phase), f"timeout.{phase}")
        return timeout
    if isinstance(timeout, tuple):
        if len(timeout) != 2:
            raise TypeError(f"a timeout pair is (connect, read), not {timeout!r}")
        connect, read = _seconds(timeout[0], "connect timeout"), _seconds(timeout[1], "read timeout")
        return httpx.Timeout(connect=connect, read=read, write=read, pool=connect)
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, numbers.Real)):
        raise TypeError("timeout must be seconds, a (connect, read) pair, an httpx.Timeout or None, "
                        f"not {type(timeout).__name__}")
    return httpx.Timeout(_seconds(timeout, "timeout"))


class RegisteredPolicy(dict):
    """A registered policy as the server returned it (a plain ``dict`` of
    the wire fields, :class:`~policyrouter.types.Policy`), plus ``created``:
    ``True`` when the call registered it (201), ``False`` when an identical
    registration already existed (200)."""

    created: bool

    def __init__(self, body: Mapping[str, Any], created: bool) -> None:
        super().__init__(body)
        self.created = created

    def __repr__(self) -> str:
        return f"RegisteredPolicy({dict.__repr__(self)}, created={self.created!r})"

    def __reduce__(self):
        return (RegisteredPolicy, (dict(self), self.created))


# -- transport failures --------------------------------------------------------

# Failures after which the request may have reached the server, but an
# idempotent one may be repeated: the connection broke before the answer.
_BROKEN = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)


def request_was_not_sent(exc: BaseException) -> bool:
    """Report whether an exception guarantees that the request never
    reached the server: the connection could not be opened (refused,
    unreachable, DNS failure, TLS handshake failure, connect timeout). Any
    other failure (reset or closed connection, read timeout) may come
    after the server got the request. ``exc`` is the client's
    :class:`~policyrouter.errors.TransportError` or an httpx exception."""
    if isinstance(exc, TransportError):
        return not exc.request_sent
    return isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout))


def _tls_failure(exc: BaseException) -> bool:
    """A connect error caused by TLS (an untrusted certificate, a rejected
    client certificate): the router is up, so neither a retry nor another
    router will do better."""
    seen = 0
    e: Optional[BaseException] = exc
    while e is not None and seen < 8:
        if isinstance(e, ssl.SSLError):
            return True
        e = e.__cause__ or e.__context__
        seen += 1
    return False


# -- requests and answers ------------------------------------------------------


@dataclass(frozen=True)
class Call(Generic[T]):
    """One API call: what to send, how to read the answer, and the retry
    rules that apply (see the module docs)."""

    method: str
    path: str
    body: Any = None
    decode: Callable[["Answer"], T] = field(default=lambda a: a.json())  # type: ignore[assignment]
    #: None: idempotent when the method is GET.
    idempotent: Optional[bool] = None
    #: seconds added to the read timeout (the wait of a /select).
    extra_read_s: float = 0.0
    #: a 404 after an attempt that may have gone through is success (DELETE).
    missing_ok_on_retry: bool = False
    #: follow a follower's not_leader answer to the leader.
    follow_leader: bool = True


@dataclass(frozen=True)
class Request:
    """What a shell sends: ``method`` to ``url`` with ``headers``, the body
    bytes ``content`` (or None), under ``timeout``. Redirects are not
    followed."""

    method: str
    url: str
    headers: Mapping[str, str]
    content: Optional[bytes]
    timeout: httpx.Timeout


class Answer:
    """An HTTP answer as the core reads it: status, headers (a
    case-insensitive mapping, such as ``httpx.Headers``) and the body."""

    __slots__ = ("status_code", "headers", "content", "reason_phrase")

    def __init__(self, status_code: int, headers: Mapping[str, str], content: bytes, reason_phrase: str = "") -> None:
        self.status_code = int(status_code)
        self.headers = headers
        self.content = content
        self.reason_phrase = reason_phrase

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


class Step:
    """The core's word after one attempt: the call's value (``done``), an
    error to raise (``error``), or another attempt after ``delay`` seconds."""

    __slots__ = ("done", "value", "error", "delay")

    def __init__(self, done: bool = False, value: Any = None, error: Optional[BaseException] = None,
                 delay: float = 0.0) -> None:
        self.done, self.value, self.error, self.delay = done, value, error, delay

    def __repr__(self) -> str:
        if self.done:
            return f"Step(done, {self.value!r})"
        if self.error is not None:
            return f"Step(raise {self.error!r})"
        return f"Step(again after {self.delay:.3f}s)"


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


def _opt_int(v: Any) -> Optional[int]:
    return None if v is None else int(v)


def _opt_float(v: Any) -> Optional[float]:
    return None if v is None else float(v)


def _quote_segment(s: str) -> str:
    # Escape exactly as Go does for a path (RFC 3986 sub-delims, ':' and
    # '@' stay literal). Any other escaping makes Go keep the raw path,
    # which the server's router matches undecoded, and the id is not found.
    return quote(s, safe="$&+,:;=@")


def policy_path(id: Union[str, int]) -> str:  # noqa: A002 - the wire field's name
    """The path of one policy: ``/policies/by-index/{index}`` for an
    ``int``, ``/policies/{id}`` for a ``str``."""
    if isinstance(id, numbers.Integral) and not isinstance(id, bool) and int(id) >= 0:
        return "/policies/by-index/" + str(int(id))
    if not isinstance(id, str) or not id:
        raise ValueError(f"policy must be an id (a non-empty string) or an index (an int >= 0), not {id!r}")
    return "/policies/" + _quote_segment(id)


def _update_path(update_id: str) -> str:
    return "/updates/" + quote(update_id, safe="")


def _policies(a: Answer) -> Any:
    return a.json()["policies"]


def _nothing(a: Answer) -> None:
    return None


# -- the calls -----------------------------------------------------------------
# One function per API method, with the method's arguments; both shells'
# methods are one line that sends what these return.


def register_policy(url: str, node_id: Optional[str], index: Optional[int], id: Optional[str],  # noqa: A002
                    capacity: Optional[int], labels: Optional[Mapping[str, str]], allow_shared_url: bool,
                    version: Optional[int], engine: Optional[str] = None, api_key: Optional[str] = None,
                    admin_api_key: Optional[str] = None,
                    models: Optional[Iterable[str]] = None) -> Call[RegisteredPolicy]:
    body = _omit_none(
        url=url, node_id=node_id, index=_opt_int(index), id=id, capacity=_opt_int(capacity),
        labels=None if labels is None else dict(labels),
        allow_shared_url=True if allow_shared_url else None, version=_opt_int(version),
        engine=engine, api_key=api_key, admin_api_key=admin_api_key,
        models=None if models is None else list(models),
    )
    # With an index or id the call is idempotent (same body -> 200), so it
    # may be repeated; without either a repeat would register a second
    # policy.
    return Call("POST", "/policies", body, idempotent=index is not None or id is not None,
                decode=lambda a: RegisteredPolicy(a.json(), created=a.status_code == 201))


def replace_policies(policies: Iterable[Mapping[str, Any]]) -> Call[List[Any]]:
    return Call("PUT", "/policies", {"policies": [dict(p) for p in policies]}, idempotent=True, decode=_policies)


def replace_registration(policies: Iterable[Mapping[str, Any]], topology: Mapping[str, Any]) -> Call[Any]:
    body = {"policies": [dict(p) for p in policies], "topology": dict(topology)}
    return Call("PUT", "/registration", body, idempotent=True)


def get_registration() -> Call[Any]:
    return Call("GET", "/registration")


def fleet_sleep(selector: Mapping[str, Any], level: Optional[int], drain: Optional[bool] = None,
                resume_within_ms: Optional[int] = None) -> Call[Any]:
    # Not idempotent: a second sleep is a second engine call.
    return Call("POST", "/fleet/sleep", _omit_none(selector=dict(selector), level=_opt_int(level),
                                                   drain=None if drain is None else bool(drain),
                                                   resume_within_ms=_opt_int(resume_within_ms)))


def fleet_wake(selector: Mapping[str, Any], tags: Optional[Iterable[str]]) -> Call[Any]:
    return Call("POST", "/fleet/wake", _omit_none(selector=dict(selector), tags=None if tags is None else list(tags)))


def fleet_engine(path: str, selector: Mapping[str, Any], method: Optional[str], query: Optional[str], body: Any,
                 exclusive: bool) -> Call[Any]:
    return Call("POST", "/fleet/engine/" + quote(path.lstrip("/"), safe="/"),
                _omit_none(selector=dict(selector), method=method, query=query, body=body,
                           exclusive=True if exclusive else None))


def set_weights(version: int, max_staleness: Optional[int], force: bool = False) -> Call[Any]:
    return Call("PUT", "/weights", _omit_none(version=int(version), max_staleness=_opt_int(max_staleness),
                                              force=True if force else None),
                idempotent=True)


def get_weights() -> Call[Any]:
    return Call("GET", "/weights")


def rolling_update(version: int, action: Optional[Mapping[str, Any]], max_unavailable: Union[int, str, None],
                   min_available_per_node: Optional[int], drain_timeout_ms: Optional[int],
                   max_failures: Optional[int], model_path: Optional[str] = None, pause_mode: Optional[str] = None,
                   set_floor: bool = False, phase_timeout_ms: Optional[int] = None,
                   selector: Optional[Mapping[str, Any]] = None) -> Call[Any]:
    body = _omit_none(version=int(version), action=None if action is None else dict(action),
                      max_unavailable=max_unavailable, min_available_per_node=_opt_int(min_available_per_node),
                      drain_timeout_ms=_opt_int(drain_timeout_ms), max_failures=_opt_int(max_failures),
                      model_path=model_path, pause_mode=pause_mode, set_floor=True if set_floor else None,
                      phase_timeout_ms=_opt_int(phase_timeout_ms),
                      selector=None if selector is None else dict(selector))
    return Call("POST", "/updates", body)


def get_update(update_id: str) -> Call[Any]:
    return Call("GET", _update_path(update_id))


def list_updates() -> Call[List[Any]]:
    return Call("GET", "/updates", decode=lambda a: a.json()["updates"])


def update_done(update_id: str, policies: Iterable[str]) -> Call[Any]:
    return Call("POST", _update_path(update_id) + "/done", {"policies": list(policies)}, idempotent=True)


def abort_update(update_id: str) -> Call[Any]:
    return Call("POST", _update_path(update_id) + "/abort")


def update_ended(update: Mapping[str, Any]) -> bool:
    """Whether a rolling update has ended (succeeded, failed or aborted)."""
    return update["state"] != "running"


def list_policies() -> Call[List[Any]]:
    return Call("GET", "/policies", decode=_policies)


def get_policy(id: Union[str, int]) -> Call[Any]:  # noqa: A002
    return Call("GET", policy_path(id))


def delete_policy(id: Union[str, int]) -> Call[None]:  # noqa: A002
    return Call("DELETE", policy_path(id), idempotent=True, missing_ok_on_retry=True, decode=_nothing)


def drain(id: Union[str, int]) -> Call[Any]:  # noqa: A002
    return Call("POST", policy_path(id) + "/drain", idempotent=True)


def resume(id: Union[str, int]) -> Call[Any]:  # noqa: A002
    return Call("POST", policy_path(id) + "/resume", idempotent=True)


def set_topology(component_distribution: Mapping[str, Any]) -> Call[Any]:
    return Call("PUT", "/topology", dict(component_distribution), idempotent=True)


def get_topology() -> Call[Any]:
    return Call("GET", "/topology")


def assign(num_tasks: int, current_loads: Optional[Sequence[int]], env_ids: Optional[Sequence[str]],
           router: Optional[str], min_version: Optional[int], session_ids: Optional[Sequence[Optional[str]]],
           load_factor: Optional[float], assign_ttl_ms: Optional[int] = None,
           prefix_hashes: Optional[Sequence[str]] = None) -> Call[Any]:
    body = _omit_none(
        num_tasks=int(num_tasks),
        current_loads=None if current_loads is None else [int(x) for x in current_loads],
        env_ids=None if env_ids is None else list(env_ids),
        router=router,
        min_version=_opt_int(min_version),
        session_ids=None if session_ids is None else [None if s is None else str(s) for s in session_ids],
        load_factor=_opt_float(load_factor),
        assign_ttl_ms=_opt_int(assign_ttl_ms),
        prefix_hashes=_opt_hashes(prefix_hashes),
    )
    return Call("POST", "/assign", body)


def select(env_id: Optional[str], router: Optional[str], timeout_ms: Optional[int], lease_ttl_ms: Optional[int],
           min_version: Optional[int], session_id: Optional[str], sticky_wait_ms: Optional[int],
           load_factor: Optional[float], release: Optional[str] = None,
           prefix_hashes: Optional[Sequence[str]] = None) -> Call[Any]:
    body = _omit_none(env_id=env_id, router=router, timeout_ms=_opt_int(timeout_ms),
                      lease_ttl_ms=_opt_int(lease_ttl_ms), min_version=_opt_int(min_version),
                      session_id=session_id, sticky_wait_ms=_opt_int(sticky_wait_ms),
                      load_factor=_opt_float(load_factor), release=release,
                      prefix_hashes=_opt_hashes(prefix_hashes))
    # The HTTP read timeout is the server's wait plus the client's timeout.
    wait_s = (DEFAULT_SELECT_WAIT_MS if timeout_ms is None else max(0, int(timeout_ms))) / 1000.0
    return Call("POST", "/select", body, extra_read_s=wait_s)


def release(lease_id: Optional[str], index: Optional[int], prefix_hashes: Optional[Sequence[str]] = None) -> Call[Any]:
    return Call("POST", "/release", _omit_none(lease_id=lease_id, index=_opt_int(index),
                                               prefix_hashes=_opt_hashes(prefix_hashes)))


def _opt_hashes(hashes: Optional[Sequence[str]]) -> Optional[List[str]]:
    """Block hashes as the router takes them: hex strings (those
    :func:`policyrouter.prefix_hashes` computes)."""
    return None if hashes is None else [str(h) for h in hashes]


def complete(index: int, count: int) -> Call[Any]:
    return Call("POST", "/complete", {"index": int(index), "count": int(count)})


def stats() -> Call[Any]:
    return Call("GET", "/stats")


def healthz() -> Call[Any]:
    return Call("GET", "/healthz")


def readyz() -> Call[Any]:
    # No following: only the leader is ready, and following would report
    # another router's readiness.
    return Call("GET", "/readyz", follow_leader=False)


# -- the client's state and one call's progress -----------------------------------


class ClientCore:
    """The state both shells share: the routers and the one in use, the
    token, timeouts and retry settings. It builds an :class:`Exchange` per
    call. Shared by threads (the sync client) or tasks (the async one): the
    switch of ``base_url`` is locked, and nothing here blocks or awaits."""

    def __init__(
        self,
        base_url: Union[str, Sequence[str]],
        token: Optional[str],
        timeout: Timeout,
        retries: int,
        backoff: float,
        max_backoff: float,
        failover_timeout: float,
        transport_name: str,
        max_retry_after: float = DEFAULT_MAX_RETRY_AFTER,
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
        if not (backoff >= 0 and max_backoff >= 0 and max_retry_after >= 0):
            raise ValueError("backoff, max_backoff and max_retry_after must be >= 0")
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
        #: The timeout as given; ``_timeout_`` is its checked form.
        self.timeout = timeout
        self._timeout_ = as_timeout(timeout)
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.max_retry_after = float(max_retry_after)
        # The clock of the fail-over bound; tests replace it (and the
        # shells' _sleep) so that no test waits for real.
        self._clock: Callable[[], float] = time.monotonic
        # Set by close(); is_closed also reads the session's state.
        self._closed = False
        #: How many lease() blocks found their lease already ended when
        #: they released it (``released: false``).
        self.leases_ended_before_release = 0
        self._headers = {
            "Accept": "application/json",
            "Content-Type": "application/json",
            "User-Agent": f"policyrouter-python/{__version__} {transport_name}",
        }
        if token:
            self._headers["Authorization"] = f"Bearer {token}"

    @property
    def _retry_url(self) -> Optional[str]:
        """The router whose connects the transport retries: the one router
        of a client given one; none for several, where a refused
        connection goes to the next router at once."""
        return self.base_urls[0] if len(self.base_urls) == 1 else None

    def __repr__(self) -> str:
        name = type(self).__name__
        if len(self.base_urls) > 1:
            return f"{name}({self.base_urls!r}, base_url={self.base_url!r})"
        return f"{name}({self.base_url!r})"

    def _lease_released(self, answer: Mapping[str, Any]) -> Optional[str]:
        """Read the release at the end of a lease() block: ``None`` when it
        ended the lease, else the warning to give (and the count of such
        leases goes up): the lease ended before its holder was done with
        it, which its holder should hear of (say, resubmit an aborted
        rollout)."""
        if answer.get("released", True):
            return None
        with self._lock:
            self.leases_ended_before_release += 1
        how = answer.get("how") or answer.get("reason")
        what = f"lease {answer.get('lease_id')}"
        if answer.get("index") is not None:
            what += f" of policy {answer['index']}"
        return (f"policyrouter: {what} had already ended when lease() released it"
                + (f" (how: {how})" if how else " (the router did not say how)"))

    @property
    def is_closed(self) -> bool:
        """Whether the client was closed: no call can be made any more."""
        return self._closed

    def _exchange(self, call: Call[T], timeout: Timeout = NOT_GIVEN) -> "Exchange[T]":
        """Start one call; ``timeout``, when given, replaces the client's
        for this call. Raises ClientClosedError on a closed client."""
        if self.is_closed:
            raise ClientClosedError(f"{self!r} is closed: {call.method} {call.path} was not sent")
        return Exchange(self, call, self._timeout_ if timeout is NOT_GIVEN else as_timeout(timeout))

    @staticmethod
    def _timeout(base: httpx.Timeout, extra_read_s: float) -> httpx.Timeout:
        """``base`` with the read timeout raised by ``extra_read_s`` (the
        server's wait of a /select); no bound stays no bound."""
        read = None if base.read is None else base.read + extra_read_s
        return httpx.Timeout(connect=base.connect, read=read, write=base.write, pool=base.pool)

    def _delay(self, attempt: int, retry_after: Optional[float]) -> float:
        """The pause before another attempt: the backoff (doubled per
        attempt, jittered, at most ``max_backoff``), or the router's
        ``Retry-After`` when longer, at most ``max_retry_after``."""
        delay = min(self.backoff * (2 ** attempt) * (0.5 + random.random() / 2), self.max_backoff)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_retry_after))
        return delay

    def _settle(self, started_on: str, base: str, pos: int) -> None:
        """Make ``base``, a router that answered, the one in use, unless
        another thread or task switched while this call was failing over
        (its news is as fresh)."""
        if base == started_on:
            return
        with self._lock:
            if self.base_url == started_on:
                self.base_url, self._pos = base, pos


class Exchange(Generic[T]):
    """One call in progress: the request to send now (:attr:`request`), and
    what to do with its outcome (:meth:`answered`, :meth:`failed`)."""

    def __init__(self, core: ClientCore, call: Call[T], timeout: Optional[httpx.Timeout] = None) -> None:
        self._core = core
        self.call = call
        idempotent = call.idempotent
        if idempotent is None:
            idempotent = call.method in ("GET", "HEAD", "OPTIONS")
        self._idempotent = idempotent
        self._content = None if call.body is None else json.dumps(call.body, default=_to_json_value).encode()
        headers = dict(core._headers)
        # One id for every attempt of this call, so server logs tie them up.
        headers["X-Request-ID"] = uuid.uuid4().hex
        self._headers = headers
        self._timeout = core._timeout(core._timeout_ if timeout is None else timeout, call.extra_read_s)
        with core._lock:
            self._started_on, self._pos = core.base_url, core._pos
        self._base = self._started_on
        self._attempt = 0  # retries on one router
        self._maybe_done = False  # an earlier attempt may have reached the server
        # Fail-over: hops to another router (or resends after not_leader),
        # pauses taken, routers that failed since the last pause, and the
        # time bound (set at the first hop).
        self._hops = self._pauses = 0
        self._max_hops = FAILOVER_PASSES * 2 * (len(core.base_urls) + 1)
        self._failed: Set[str] = set()
        self._deadline: Optional[float] = None

    @property
    def request(self) -> Request:
        """The request to send for the next attempt."""
        return Request(self.call.method, self._base + self.call.path, self._headers, self._content, self._timeout)

    def failed(self, exc: BaseException) -> Step:
        """The attempt raised ``exc`` (an ``httpx.RequestError``). A
        :class:`Step` with an error carries a
        :class:`~policyrouter.errors.TransportError` whose ``__cause__`` is
        ``exc``."""
        core = self._core
        not_sent = request_was_not_sent(exc) and not _tls_failure(exc)
        if not_sent and (len(core.base_urls) > 1 or self._base not in core.base_urls):
            # Nothing reached this router: any request may go to the next
            # one. Pause only once every router failed.
            self._failed.add(self._base)
            nxt, nxt_pos = self._next_listed()
            pause = nxt in self._failed
            delay = core._delay(self._pauses, None) if pause else 0.0
            if not self._may_hop(delay):
                return Step(error=self._transport_error(exc))
            if pause:
                self._pauses += 1
                self._failed.clear()
            self._log_hop(type(exc).__name__, nxt, delay)
            self._base, self._pos = nxt, nxt_pos
            return Step(delay=delay)
        # A connect failure on the one router has had the transport's
        # retries. A connection broken before the answer may be repeated
        # for an idempotent call.
        if self._idempotent and isinstance(exc, _BROKEN) and self._attempt < core.retries:
            self._maybe_done = True
            delay = core._delay(self._attempt, None)
            self._attempt += 1
            self._log_retry(type(exc).__name__, delay)
            return Step(delay=delay)
        return Step(error=self._transport_error(exc))

    def _transport_error(self, exc: BaseException) -> TransportError:
        return transport_error(exc, self.call.method, self._base + self.call.path, self._headers["X-Request-ID"],
                               request_sent=not request_was_not_sent(exc))

    def answered(self, answer: Answer) -> Step:
        """The attempt got an HTTP answer."""
        core = self._core
        if answer.status_code < 300:
            core._settle(self._started_on, self._base, self._pos)
            return Step(done=True, value=self.call.decode(answer))
        err = error_from_response(answer)
        if isinstance(err, NotLeaderError) and self.call.follow_leader:
            # A follower made no lease and no change: resend anywhere.
            self._failed.add(self._base)
            leader = _leader_url(err.leader)
            pause = leader is None or leader == self._base or leader in self._failed
            if not pause:
                nxt = leader
                nxt_pos = core.base_urls.index(leader) if leader in core.base_urls else self._pos
            else:
                # No leader known (an election), or a stale one: the next
                # router, after the follower's Retry-After.
                nxt, nxt_pos = self._next_listed()
            delay = core._delay(self._pauses, err.retry_after) if pause else 0.0
            if not self._may_hop(delay):
                return Step(error=err)
            if pause:
                self._pauses += 1
                self._failed.clear()  # after a pause, what followers say is news
            self._log_hop("503 not_leader", nxt, delay)  # type: ignore[arg-type]
            self._base, self._pos = nxt, nxt_pos  # type: ignore[assignment]
            return Step(delay=delay)
        core._settle(self._started_on, self._base, self._pos)
        if self.call.missing_ok_on_retry and self._maybe_done and answer.status_code == 404:
            return Step(done=True, value=self.call.decode(answer))
        if self._idempotent and answer.status_code in RETRY_STATUSES and self._attempt < core.retries:
            retry_after = err.retry_after if isinstance(err, UnavailableError) else None
            self._maybe_done = True
            delay = core._delay(self._attempt, retry_after)
            self._attempt += 1
            why = f"{answer.status_code} {err.code}" if err.code else str(answer.status_code)
            if retry_after is not None:
                why += f", Retry-After {retry_after:g}s"
            self._log_retry(why, delay)
            return Step(delay=delay)
        return Step(error=err)

    def _log_retry(self, why: str, delay: float) -> None:
        log.debug("policyrouter: %s %s: %s; retry %d of %d in %.3fs (request_id %s)", self.call.method,
                  self._base + self.call.path, why, self._attempt, self._core.retries, delay,
                  self._headers["X-Request-ID"])

    def _log_hop(self, why: str, to: str, delay: float) -> None:
        log.debug("policyrouter: %s %s: %s; sending it to %s in %.3fs (request_id %s)", self.call.method,
                  self._base + self.call.path, why, to, delay, self._headers["X-Request-ID"])

    def _next_listed(self) -> Tuple[str, int]:
        urls = self._core.base_urls
        p = urls.index(self._base) if self._base in urls else self._pos
        p = (p + 1) % len(urls)
        return urls[p], p

    def _may_hop(self, delay: float) -> bool:
        now = self._core._clock()
        if self._deadline is None:
            self._deadline = now + self._core.failover_timeout
        if self._hops >= self._max_hops or now + delay >= self._deadline:
            return False
        self._hops += 1
        return True


def _leader_url(named: Optional[str]) -> Optional[str]:
    """The leader URL a not_leader answer named, normalised like base URLs;
    ``None`` when none (or not an http(s) URL) was named."""
    if not named:
        return None
    named = named.strip().rstrip("/")
    if not named.lower().startswith(("http://", "https://")) or len(named.split("://", 1)[1]) == 0:
        return None
    return named


def check_session_settings(session: Any, expected: type, verify: Any, cert: Any) -> None:
    """A given session must be the shell's httpx client, and carries its
    own TLS settings (httpx sets them per client, not per request)."""
    if not isinstance(session, expected):
        raise TypeError(f"session must be an {expected.__module__}.{expected.__qualname__}, "
                        f"not {type(session).__name__}")
    if verify is not None or cert is not None:
        raise ValueError("verify and cert apply to the client's own session: configure them on the given session")

