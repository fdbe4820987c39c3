"""Typed errors for the policyrouter API: one hierarchy, under
:class:`PolicyRouterError`, for everything a call can fail with once its
arguments are accepted.

Every error answer of the server carries one envelope::

    {"error": {"code": "validation_failed", "message": "...",
               "fields": {"num_tasks": "must be >= 1"}, "request_id": "..."}}

:func:`error_from_response` turns such an answer (or any non-2xx answer,
including non-JSON bodies from a proxy) into an instance of
:class:`PolicyRouterError` or one of its subclasses, chosen by HTTP status.

A call that got no answer raises a :class:`TransportError` subclass, with
the httpx exception as its ``__cause__`` (:func:`transport_error` builds
it): :class:`ConnectionFailedError` (nothing was sent),
:class:`ConnectionLostError` (the connection broke before the answer) or
:class:`TimedOutError` (no answer in time). A client used after it was
closed raises :class:`ClientClosedError`.

The names end in ``Error``; the older ``NotFound``, ``Conflict``,
``Unavailable`` and ``NotLeader`` are the same classes.
"""

from __future__ import annotations

import email.utils
import json
import time
from typing import Any, Dict, Mapping, Optional

import httpx

__all__ = [
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
    # The names before they ended in Error: the same classes.
    "NotFound",
    "Conflict",
    "Unavailable",
    "NotLeader",
    "error_from_response",
    "transport_error",
    "parse_retry_after",
]

# Longest body text kept in an error built from a non-JSON answer.
_MAX_TEXT = 2000


class PolicyRouterError(Exception):
    """An error answer of the policyrouter server, and the base of every
    error of this package.

    Attributes:
        status: the HTTP status code; ``None`` when there was no answer
            (a :class:`TransportError`).
        code: the envelope's ``code`` (for example ``"validation_failed"``),
            or ``None`` when the body was not the server's envelope.
        message: the envelope's ``message``, or the body text.
        fields: bad input fields (JSON paths) and what is wrong with each;
            empty when the server named none.
        request_id: the request id of the envelope (else of the
            ``X-Request-ID`` header), to find the request in server logs.
    """

    def __init__(
        self,
        status: int,
        code: Optional[str],
        message: str,
        fields: Optional[Mapping[str, str]] = None,
        request_id: Optional[str] = None,
    ) -> None:
        # All arguments go to Exception.__init__ so that errors pickle (for
        # example across multiprocessing or Ray) and copy faithfully.
        super().__init__(status, code, message, dict(fields or {}), request_id)
        self.status = status
        self.code = code
        self.message = message
        self.fields: Dict[str, str] = dict(fields or {})
        self.request_id = request_id

    def __str__(self) -> str:
        head = f"{self.status}"
        if self.code:
            head += f" {self.code}"
        text = f"{head}: {self.message}"
        if self.fields:
            text += " [" + "; ".join(f"{k}: {v}" for k, v in sorted(self.fields.items())) + "]"
        if self.request_id:
            text += f" (request_id {self.request_id})"
        return text

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(status={self.status!r}, code={self.code!r}, "
            f"message={self.message!r}, fields={self.fields!r}, request_id={self.request_id!r})"
        )


class ValidationError(PolicyRouterError, ValueError):
    """400 (malformed JSON) or 422 (well-formed but invalid input).

    ``fields`` names each bad field. It is also a ``ValueError``, which is
    what the seed's routers raise for bad input.
    """


class AuthError(PolicyRouterError):
    """401 or 403; the subclasses tell them apart."""


class UnauthorizedError(AuthError):
    """401: no token, or one the router does not accept (expired, signed
    with another key): get a new token."""


class ForbiddenError(AuthError):
    """403: a valid token without the scope the route needs (``admin``,
    ``route`` or ``read``)."""


class NotFoundError(PolicyRouterError):
    """404: unknown policy id, unknown or already released lease, or route."""


class ConflictError(PolicyRouterError):
    """409: for example a different body registered for a taken index."""


class UnavailableError(PolicyRouterError):
    """503: no policy to route to (none registered, all unhealthy or
    draining, no idle policy within ``timeout_ms``), the server is shutting
    down, or it is not ready.

    ``retry_after`` is the server's ``Retry-After`` in seconds, or ``None``.
    """

    def __init__(
        self,
        status: int,
        code: Optional[str],
        message: str,
        fields: Optional[Mapping[str, str]] = None,
        request_id: Optional[str] = None,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(status, code, message, fields, request_id)
        self.args = self.args + (retry_after,)
        self.retry_after = retry_after

    def __str__(self) -> str:
        text = super().__str__()
        if self.retry_after is not None:
            text += f" (retry after {self.retry_after:g}s)"
        return text


class NotLeaderError(UnavailableError):
    """503 ``not_leader``: the router answering is a follower of a
    replicated (HA) deployment and serves only admin calls and reads; the
    leader-only endpoints (``/select``, ``/assign``, ``/release``,
    ``/complete``, ``/updates``, ``/readyz``) must go to the elected leader.
    The follower made no lease and no change, so the request may be sent
    again anywhere.

    ``leader`` is the leader's URL as the follower knows it (the
    ``X-Policyrouter-Leader`` header, else the envelope's ``leader``), or
    ``None`` while no leader is known (during an election). The client
    follows it by itself; this error reaches the caller only once the
    client's ``failover_timeout`` is spent.
    """

    def __init__(
        self,
        status: int,
        code: Optional[str],
        message: str,
        fields: Optional[Mapping[str, str]] = None,
        request_id: Optional[str] = None,
        retry_after: Optional[float] = None,
        leader: Optional[str] = None,
    ) -> None:
        super().__init__(status, code, message, fields, request_id, retry_after)
        self.args = self.args + (leader,)
        self.leader = leader

    def __str__(self) -> str:
        text = super().__str__()
        text += f" (leader {self.leader})" if self.leader else " (no leader known)"
        return text


NotFound = NotFoundError
Conflict = ConflictError
Unavailable = UnavailableError
NotLeader = NotLeaderError


class TransportError(PolicyRouterError):
    """No answer: the call failed in the transport. Its ``__cause__`` is the
    httpx exception (not pickled: pickling keeps the message and fields).

    Attributes:
        status, code: ``None``.
        message: what failed, naming the method, URL and httpx exception.
        request_id: the call's ``X-Request-ID``, to look for it in the
            router's logs (it may have arrived).
        request_sent: ``False`` when the request certainly never reached
            the router (the connection could not be opened), so that any
            call may be sent again; ``True`` when it may have.
    """

    def __init__(self, message: str, request_id: Optional[str] = None, request_sent: bool = True) -> None:
        Exception.__init__(self, message, request_id, request_sent)
        self.status = None  # type: ignore[assignment]
        self.code = None
        self.message = message
        self.fields = {}
        self.request_id = request_id
        self.request_sent = request_sent

    def __str__(self) -> str:
        text = self.message
        if self.request_id:
            text += f" (request_id {self.request_id})"
        return text

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(message={self.message!r}, request_id={self.request_id!r}, "
                f"request_sent={self.request_sent!r})")


class ConnectionFailedError(TransportError):
    """The connection could not be opened (refused, DNS failure, connect
    timeout, TLS handshake refused, e.g. an untrusted certificate): nothing
    was sent (``request_sent`` is ``False``)."""


class ConnectionLostError(TransportError):
    """The connection broke (reset, closed) before the whole answer came:
    the router may have handled the request."""


class TimedOutError(TransportError):
    """The request was sent (or waited for a connection of the pool) and no
    answer came within the timeout: the router may have handled it."""


class ClientClosedError(PolicyRouterError, RuntimeError):
    """A call on a client after its ``close()``/``aclose()``. Also a
    ``RuntimeError``, which is what httpx raised before."""

    def __init__(self, message: str = "the policyrouter client is closed") -> None:
        Exception.__init__(self, message)
        self.status = None  # type: ignore[assignment]
        self.code = None
        self.message = message
        self.fields = {}
        self.request_id = None

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class LeaseEndedWarning(UserWarning):
    """Warned by ``lease()`` when its lease had already ended at the end of
    the block (the release answered ``released: false``): the router ended
    it (a TTL, an abort by a rolling update, the policy's removal, or, for
    ``on_idle`` leases, a probe) while its holder still counted on it."""


def transport_error(exc: BaseException, method: str, url: str, request_id: Optional[str],
                    request_sent: bool) -> TransportError:
    """The :class:`TransportError` subclass for an httpx exception raised
    by ``method url``, with ``exc`` as its ``__cause__``. The class is read
    from the exception's class alone: httpx's ``ConnectError`` and
    ``ConnectTimeout`` give :class:`ConnectionFailedError`, its read, write
    and protocol errors :class:`ConnectionLostError`, its other timeouts
    :class:`TimedOutError`, anything else :class:`TransportError`."""
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        cls: type = ConnectionFailedError
    elif isinstance(exc, httpx.TimeoutException):
        cls = TimedOutError
    elif isinstance(exc, (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)):
        cls = ConnectionLostError
    else:
        cls = TransportError
    detail = str(exc) or "(no message)"
    err = cls(f"{method} {url}: {type(exc).__name__}: {detail}", request_id, request_sent)
    err.__cause__ = exc
    return err


# The header a follower names the leader in (absent while none is known).
LEADER_HEADER = "X-Policyrouter-Leader"

_BY_STATUS = {
    400: ValidationError,
    422: ValidationError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    503: UnavailableError,
}


def parse_retry_after(value: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """Return a ``Retry-After`` header value in seconds (never negative).

    Both forms of RFC 9110 are accepted: delay seconds (``"1"``) and an
    HTTP date. Anything else gives ``None``.
    """
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if seconds != seconds or seconds in (float("inf"), float("-inf")):
            return None
        return max(0.0, seconds)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def error_from_response(response: Any) -> PolicyRouterError:
    """Build the error for a non-2xx answer: an ``httpx.Response``, or
    anything with its ``status_code``, ``headers`` and ``text``.

    The class is chosen by status; statuses without a subclass (405, 413,
    415, 500, 502, 504, ...) give a plain :class:`PolicyRouterError`. A body
    that is not the error envelope still gives an error, whose ``message``
    is the body text (or the HTTP reason when the body is empty).
    """
    status = int(response.status_code)
    code: Optional[str] = None
    fields: Dict[str, str] = {}
    request_id = response.headers.get("X-Request-ID") or None
    text = response.text or ""
    message = text.strip()[:_MAX_TEXT]
    try:
        body = json.loads(text) if text else None
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        env = body["error"]
        code = env.get("code") if isinstance(env.get("code"), str) else None
        if isinstance(env.get("message"), str):
            message = env["message"]
        if isinstance(env.get("fields"), dict):
            fields = {str(k): str(v) for k, v in env["fields"].items()}
        if isinstance(env.get("request_id"), str) and env["request_id"]:
            request_id = env["request_id"]
    elif isinstance(body, dict) and isinstance(body.get("status"), str):
        # /readyz answers 503 {"status": "not ready"}, outside the envelope.
        message = body["status"]
    if not message:
        message = getattr(response, "reason_phrase", None) or getattr(response, "reason", None) or f"HTTP {status}"
    cls = _BY_STATUS.get(status, PolicyRouterError)
    if cls is UnavailableError and code == "not_leader":
        leader = (response.headers.get(LEADER_HEADER) or "").strip()
        if not leader and isinstance(body, dict) and isinstance(body.get("error"), dict):
            named = body["error"].get("leader")
            leader = named.strip() if isinstance(named, str) else ""
        return NotLeaderError(
            status, code, message, fields, request_id,
            retry_after=parse_retry_after(response.headers.get("Retry-After")),
            leader=leader or None,
        )
    if cls is UnavailableError:
        return UnavailableError(
            status, code, message, fields, request_id,
            retry_after=parse_retry_after(response.headers.get("Retry-After")),
        )
    return cls(status, code, message, fields, request_id)
