"""The blocking client of the policyrouter API, on ``httpx.Client``.

It is a thin shell around the sans-I/O core (:mod:`policyrouter._core`),
which builds every request, decodes every answer and decides every retry
and fail-over; this module only sends and sleeps. :class:`AsyncClient`
(:mod:`policyrouter.async_client`) is the same on ``httpx.AsyncClient``.
The core's module docs state the retry and fail-over rules.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import httpx

from . import _core
from ._core import (DEFAULT_FAILOVER_TIMEOUT, DEFAULT_MAX_RETRY_AFTER, NOT_GIVEN, Answer, Call, RegisteredPolicy, T,
                    Timeout, request_was_not_sent)
from ._transport import sync_session
from .errors import LeaseEndedWarning, NotFoundError
from .types import (AssignResult, CompleteResult, Health, Policy, Registration, ReleaseResult, SelectResult, Stats,
                    Update, Weights)

__all__ = ["Client", "RegisteredPolicy", "request_was_not_sent"]


class Client(_core.ClientCore):
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
            ``(connect, read)`` tuple sets them apart; an ``httpx.Timeout``
            sets each phase; ``None`` waits as long as it takes (also
            ``None`` within the pair). ``select`` waits ``timeout_ms``
            longer. Checked here: anything else raises ``TypeError`` or
            ``ValueError``. Every method that sends a request takes a
            keyword ``timeout=`` of the same forms, for that call alone
            (``wait_update``'s ``timeout`` is its whole wait).
        session: an ``httpx.Client`` to use (its transport, proxies,
            certificates and connect retries are kept). By default the
            client makes its own, with ``retries`` connect retries, and
            closes it in :meth:`close`.
        retries: how many times a safe request is repeated, and how many
            times the client's own transport retries a connection that
            could not be opened (see the module docs); 0 disables both.
        backoff: first retry delay in seconds, doubled per attempt, with
            jitter, at most ``max_backoff``.
        max_retry_after: the longest ``Retry-After`` honoured, in seconds
            (default 30): a retry waits the router's ``Retry-After`` when
            it is longer than the backoff, but never longer than this.
        pool_maxsize: connections kept alive between calls (the client
            opens as many as there are calls at once).
        verify: for an ``https://`` server, what its certificate is
            verified with: ``True`` (the default: the system's or
            certifi's roots), the path of a PEM file of CA certificates
            (a private CA, e.g. the router's self-signed certificate), or
            ``False`` (no verification; for experiments only).
        cert: a client certificate, for a server that requires one
            (``--tls-client-ca``): the path of a PEM file holding the
            certificate and its key, or a ``(cert_file, key_file)`` tuple.
            Bearer tokens still apply on top of it. ``verify`` and
            ``cert`` configure the client's own session; with a given
            ``session``, configure them there.
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

    One client can be shared by threads (the switch of ``base_url`` is
    locked); every method is one HTTP request, plus retries and fail-over.
    Methods return the server's JSON as plain dicts and lists (typed in
    :mod:`policyrouter.types`), and raise
    :class:`~policyrouter.errors.PolicyRouterError` subclasses for error
    answers, :class:`~policyrouter.errors.TransportError` subclasses
    (the httpx exception as their ``__cause__``) for transport failures.
    """

    def __init__(
        self,
        base_url: Union[str, Sequence[str]],
        token: Optional[str] = None,
        timeout: Timeout = 10.0,
        session: Optional[httpx.Client] = None,
        retries: int = 2,
        *,
        backoff: float = 0.1,
        max_backoff: float = 2.0,
        max_retry_after: float = DEFAULT_MAX_RETRY_AFTER,
        pool_maxsize: int = 32,
        verify: Union[bool, str, None] = None,
        cert: Union[str, Tuple[str, str], None] = None,
        failover_timeout: float = DEFAULT_FAILOVER_TIMEOUT,
    ) -> None:
        super().__init__(base_url, token, timeout, retries, backoff, max_backoff, failover_timeout,
                         f"httpx/{httpx.__version__}", max_retry_after)
        # The pause between attempts; tests replace it.
        self._sleep: Callable[[float], Any] = time.sleep
        self._owns_session = session is None
        if session is None:
            session = sync_session(self._retry_url, self.retries, True if verify is None else verify, cert,
                                   pool_maxsize)
        else:
            _core.check_session_settings(session, httpx.Client, verify, cert)
        self.session = session

    # -- lifecycle -------------------------------------------------------

    @property
    def is_closed(self) -> bool:
        """Whether the client is closed (:meth:`close`, or its ``session``
        closed by its owner): a call then raises
        :class:`~policyrouter.errors.ClientClosedError`."""
        return self._closed or self.session.is_closed

    def close(self) -> None:
        """Close the client, and its session if the client made it. Calls
        made afterwards raise :class:`~policyrouter.errors.ClientClosedError`;
        closing twice is harmless."""
        self._closed = True
        if self._owns_session:
            self.session.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

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
        engine: Optional[str] = None,
        api_key: Optional[str] = None,
        admin_api_key: Optional[str] = None,
        models: Optional[Iterable[str]] = None,
        *,
        timeout: Timeout = NOT_GIVEN,
    ) -> RegisteredPolicy:
        """``POST /policies``: register one policy.

        ``index`` defaults to the lowest free one and ``id`` to a UUID.
        Registering the same index with the same body again is a no-op: the
        answer's ``created`` is then ``False``. A different body for a
        taken index or id raises :class:`~policyrouter.errors.Conflict`
        naming the field that differs, and so does a ``url`` another index
        already has, unless ``allow_shared_url`` is set. Retried like a PUT
        when ``index`` or ``id`` is given, else only when the request was
        never sent.

        ``engine`` is the kind of server, one of ``types.Engine``:
        ``"policyrouter"`` (the ``GET /idle`` contract) or an inference
        engine's name (default: the router's ``--default-engine``). ``api_key`` and ``admin_api_key``
        are sent by the router to the engine as ``Authorization: Bearer``
        (probes, and update calls); they are write-only, never returned.
        """
        return self._send(_core.register_policy(url, node_id, index, id, capacity, labels, allow_shared_url, version,
                                                engine, api_key, admin_api_key, models), timeout)

    def replace_policies(self, policies: Iterable[Mapping[str, Any]], *, timeout: Timeout = NOT_GIVEN) -> List[Policy]:
        """``PUT /policies``: replace the whole set at once (what a trainer
        does at start-up); each entry has the fields of
        :meth:`register_policy`. Returns the stored policies in index order."""
        return self._send(_core.replace_policies(policies), timeout)

    def replace_registration(
        self,
        policies: Iterable[Mapping[str, Any]],
        topology: Mapping[str, Any],
        *,
        timeout: Timeout = NOT_GIVEN,
    ) -> Registration:
        """``PUT /registration``: replace every policy and the topology (the
        seed's ``component_distribution``) in one atomic call, checked as a
        whole: what a trainer does at start-up, and how to shrink or
        reshape a fleet. Returns ``{"policies": [...], "topology": {...}}``."""
        return self._send(_core.replace_registration(policies, topology), timeout)

    def get_registration(self, *, timeout: Timeout = NOT_GIVEN) -> Registration:
        """``GET /registration``: every policy and the topology."""
        return self._send(_core.get_registration(), timeout)

    def fleet_sleep(
        self,
        selector: Optional[Mapping[str, Any]] = None,
        level: Optional[int] = None,
        drain: Optional[bool] = None,
        resume_within_ms: Optional[int] = None,
        *,
        timeout: Timeout = NOT_GIVEN,
    ) -> Any:
        """``POST /fleet/sleep``: put the selected engines to sleep (release
        their accelerator memory, e.g. for a colocated training step); they
        leave routing first and read ``asleep`` until woken. ``selector``
        (``{"ids": [...], "indices": [...], "labels": {...}, "engine": ...}``,
        all given ones must match) names the policies; none is every policy. Returns ``{"results", "failed"}``;
        a partial failure is a 207 answer, not an error. ``drain`` (the
        server's default: true) waits for the generations in flight first;
        ``resume_within_ms`` is how long a generation the sleep aborted waits
        for a wake to go on (default: the server's select timeout)."""
        return self._send(_core.fleet_sleep(selector or {}, level, drain, resume_within_ms), timeout)

    def fleet_wake(
        self,
        selector: Optional[Mapping[str, Any]] = None,
        tags: Optional[Iterable[str]] = None,
        *,
        timeout: Timeout = NOT_GIVEN,
    ) -> Any:
        """``POST /fleet/wake``: wake the selected engines (``tags``, when
        given, name the parts to restore first); they are routed again
        within one probe."""
        return self._send(_core.fleet_wake(selector or {}, tags), timeout)

    def fleet_engine(
        self,
        path: str,
        selector: Optional[Mapping[str, Any]] = None,
        method: Optional[str] = None,
        query: Optional[str] = None,
        body: Any = None,
        exclusive: bool = False,
        *,
        timeout: Timeout = NOT_GIVEN,
    ) -> Any:
        """``POST /fleet/engine/{path}``: send one engine-native call (e.g.
        ``update_weights_from_distributed``) to every selected policy with
        its admin key. ``exclusive`` holds the refit lock: another exclusive
        call, sleep, wake or update on those policies is refused (409)
        meanwhile."""
        return self._send(_core.fleet_engine(path, selector or {}, method, query, body,
                                                exclusive), timeout)

    def set_weights(
        self,
        version: int,
        max_staleness: Optional[int] = None,
        force: bool = False,
        *,
        timeout: Timeout = NOT_GIVEN,
    ) -> Weights:
        """``PUT /weights``: record the trainer's current weight version; with
        ``max_staleness``, no router hands work to a policy whose version
        (reported in its ``/idle`` answer) is below ``version -
        max_staleness``. A floor that no policy meets raises Conflict (the
        message says how many policies meet it) unless ``force``. Returns
        ``{"version", "max_staleness", "min_version"}``."""
        return self._send(_core.set_weights(version, max_staleness, force), timeout)

    def get_weights(self, *, timeout: Timeout = NOT_GIVEN) -> Weights:
        """``GET /weights``."""
        return self._send(_core.get_weights(), timeout)

    def rolling_update(
        self,
        version: int,
        action: Optional[Mapping[str, Any]] = None,
        max_unavailable: Union[int, str, None] = None,
        min_available_per_node: Optional[int] = None,
        drain_timeout_ms: Optional[int] = None,
        max_failures: Optional[int] = None,
        model_path: Optional[str] = None,
        pause_mode: Optional[str] = None,
        set_floor: bool = False,
        phase_timeout_ms: Optional[int] = None,
        selector: Optional[Mapping[str, Any]] = None,
        *,
        timeout: Timeout = NOT_GIVEN,
    ) -> Update:
        """``POST /updates``: roll weight ``version`` through the fleet in
        waves of at most ``max_unavailable`` policies (a count, or a
        percentage string such as ``"25%"``; ``"100%"`` pauses everything).
        ``action`` (``{"method", "path", "body", "timeout_ms"}``) is sent to
        each policy of a wave; without it the trainer updates the policies
        listed in the update's ``ready`` and confirms with
        :meth:`update_done`. With SGLang or vLLM policies, ``model_path``
        (a checkpoint the engines load) replaces ``action``; ``pause_mode``
        says what happens to the work in flight (``wait``, the default,
        ``abort``, ``retract``, ``in_place`` or ``keep``, as the engine
        has them); ``set_floor`` moves the ``/weights`` floor to
        ``version`` once every policy is there; ``phase_timeout_ms`` bounds
        each policy's phase; ``selector`` (``{"ids", "indices", "labels",
        "engine"}``, as the fleet verbs take it) aims the update at part of
        the fleet, the others keeping their version. Returns the update (``state`` ``running``).
        Not retried once sent: a repeat would be a second update (409)."""
        return self._send(_core.rolling_update(version, action, max_unavailable, min_available_per_node,
                                               drain_timeout_ms, max_failures, model_path, pause_mode, set_floor,
                                               phase_timeout_ms, selector=selector), timeout)

    def get_update(self, update_id: str, *, timeout: Timeout = NOT_GIVEN) -> Update:
        """``GET /updates/{id}``: the update's state, waves and policies."""
        return self._send(_core.get_update(update_id), timeout)

    def list_updates(self, *, timeout: Timeout = NOT_GIVEN) -> List[Update]:
        """``GET /updates``: every update, newest first."""
        return self._send(_core.list_updates(), timeout)

    def update_done(self, update_id: str, policies: Iterable[str], *, timeout: Timeout = NOT_GIVEN) -> Update:
        """``POST /updates/{id}/done``: the trainer has updated these
        policies of the running wave (external mode)."""
        return self._send(_core.update_done(update_id, policies), timeout)

    def abort_update(self, update_id: str, *, timeout: Timeout = NOT_GIVEN) -> Update:
        """``POST /updates/{id}/abort``: end the update and resume every
        policy it drained."""
        return self._send(_core.abort_update(update_id), timeout)

    def wait_update(
        self,
        update_id: str,
        timeout: Optional[float] = None,
        on_progress: Optional[Callable[[Update], Any]] = None,
        poll_s: float = 0.2,
    ) -> Update:
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
            if _core.update_ended(update):
                return update
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"update {update_id} still running after {timeout}s")
            time.sleep(poll_s)

    def list_policies(self, *, timeout: Timeout = NOT_GIVEN) -> List[Policy]:
        """``GET /policies``: every policy, in index order."""
        return self._send(_core.list_policies(), timeout)

    def get_policy(self, id: Union[str, int], *, timeout: Timeout = NOT_GIVEN) -> Policy:  # noqa: A002
        """``GET /policies/{id}``, with the policy's live ``state`` and
        health (``last_error``, ``unhealthy_since``, ``last_ok``). An
        ``int`` names the policy by its index (``/policies/by-index/3``), a
        ``str`` by its id. Raises NotFoundError for an unknown one."""
        return self._send(_core.get_policy(id), timeout)

    def delete_policy(self, id: Union[str, int], *, timeout: Timeout = NOT_GIVEN) -> None:  # noqa: A002
        """``DELETE /policies/{id}``; raises NotFoundError for an unknown id,
        except when an earlier attempt of this same call may have deleted
        it (then the 404 of the retry is the expected answer)."""
        return self._send(_core.delete_policy(id), timeout)

    def drain(self, id: Union[str, int], *, timeout: Timeout = NOT_GIVEN) -> Policy:  # noqa: A002
        """``POST /policies/{id}/drain``: stop new work to the policy without
        deleting it. Returns the policy (``draining`` true). An ``int``
        names the policy by its index, a ``str`` by its id."""
        return self._send(_core.drain(id), timeout)

    def resume(self, id: Union[str, int], *, timeout: Timeout = NOT_GIVEN) -> Policy:  # noqa: A002
        """``POST /policies/{id}/resume``: undo :meth:`drain`."""
        return self._send(_core.resume(id), timeout)

    def set_topology(
        self,
        component_distribution: Mapping[str, Any],
        *,
        timeout: Timeout = NOT_GIVEN,
    ) -> Dict[str, Any]:
        """``PUT /topology`` with the seed's ``component_distribution`` as is:
        ``{"node-a": {"env": {"ids": [0, 1]}, "eval": {"ids": [0]}}, ...}``.
        Returns the stored topology."""
        return self._send(_core.set_topology(component_distribution), timeout)

    def get_topology(self, *, timeout: Timeout = NOT_GIVEN) -> Dict[str, Any]:
        """``GET /topology``."""
        return self._send(_core.get_topology(), timeout)

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
        assign_ttl_ms: Optional[int] = None,
        prefix_hashes: Optional[Sequence[str]] = None,
        *,
        timeout: Timeout = NOT_GIVEN,
    ) -> AssignResult:
        """``POST /assign``: spread ``num_tasks`` tasks over the policies.

        ``current_loads`` (one load per policy index) is the seed's
        stateless mode; without it the server's tracked loads are used and
        raised. ``env_ids`` must have ``num_tasks`` entries. ``router`` is
        an ``/assign`` router of the server, such as ``"simple"`` or
        ``"node_affinity"`` (its ``openapi.yaml`` lists them; default: the
        server's). ``session_ids`` (``num_tasks`` entries, ``None`` or
        ``""`` for no key) sends the tasks of a session (a trajectory, or a
        GRPO group id for group stickiness) to the session's home on the
        server's consistent-hashing ring, as a unit, under the load bound
        whose factor ``load_factor`` sets (default: the server's
        ``--sticky-load-factor``). Returns ``{"assignments": [...],
        "policies": {"<index>": {...}}}``, and ``sticky`` per task when
        ``session_ids`` were given. ``assign_ttl_ms``: with tracked loads,
        how long these tasks count in their policies' loads unless
        :meth:`complete` reports them first (default: the server's
        ``--assign-ttl``). ``prefix_hashes`` (:func:`policyrouter.prefix_hashes`
        of the prompt the tasks share, e.g. a GRPO group's): with tracked
        loads the tasks gather where the prompt is cached, on as few
        policies as the router's load bound allows, instead of one on each.
        Not retried once sent (tracked loads would be raised twice).
        """
        return self._send(_core.assign(num_tasks, current_loads, env_ids, router, min_version, session_ids,
                                       load_factor, assign_ttl_ms, prefix_hashes), timeout)

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
        release: Optional[str] = None,
        prefix_hashes: Optional[Sequence[str]] = None,
        *,
        timeout: Timeout = NOT_GIVEN,
    ) -> SelectResult:
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

        ``release`` says what ends the lease: ``"explicit"`` (the router's
        default: :meth:`release`, its TTL, or the policy's removal) or
        ``"on_idle"`` (the seed's contract, for callers that never
        release: also a probe that finds the policy idle after it worked).
        A router that predates the field answers 422 naming it.

        ``prefix_hashes`` (:func:`policyrouter.prefix_hashes` of the prompt's
        token ids) asks for the policy expected to hold the longest prefix of
        them in its KV cache, within the router's load bound; the answer then
        says ``prefix_match`` (blocks of 16 tokens, a multiple of 4: the
        router indexes steps of 4 blocks) and ``prefix_outcome``.
        Pass the hashes of prompt + output to :meth:`release`, so that the
        next turn of the conversation matches.

        Returns ``{"index", "id", "url", "node_id", "lease_id", "version"}``
        (and ``sticky``, where a session landed, when one was named); the
        ``node_affinity`` (round-robin) router issues no ``lease_id``.
        Raises :class:`~policyrouter.errors.UnavailableError` (with
        ``retry_after``) when no policy became idle in time. The HTTP read
        timeout is the wait plus the client's timeout. Not retried once
        sent: a lost answer may have taken a policy.
        """
        return self._send(_core.select(env_id, router, timeout_ms, lease_ttl_ms, min_version, session_id,
                                       sticky_wait_ms, load_factor, release, prefix_hashes), timeout)

    @contextlib.contextmanager
    def lease(
        self,
        env_id: Optional[str] = None,
        router: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        lease_ttl_ms: Optional[int] = None,
        min_version: Optional[int] = None,
        session_id: Optional[str] = None,
        sticky_wait_ms: Optional[int] = None,
        load_factor: Optional[float] = None,
        release: Optional[str] = None,
        prefix_hashes: Optional[Sequence[str]] = None,
        *,
        timeout: Timeout = NOT_GIVEN,
    ) -> Iterator[SelectResult]:
        """:meth:`select` a policy for the ``with`` block, and release it when
        the block ends, also on an error::

            with client.lease(env_id="env-3", session_id=traj) as sel:
                send_rollout_request(sel["url"])

        Yields the :meth:`select` answer. A lease the router had already
        ended when the block ends (its TTL, an abort by a rolling update,
        the policy's removal, a probe for an ``on_idle`` lease) raises
        nothing, but the holder counted on it: ``lease()`` warns (a
        :class:`~policyrouter.errors.LeaseEndedWarning`, naming how it
        ended when the router says) and counts it in
        :attr:`leases_ended_before_release`. A lease issued by a router
        that has since restarted (404) is dropped silently."""
        sel = self.select(env_id, router, timeout_ms, lease_ttl_ms, min_version, session_id, sticky_wait_ms,
                          load_factor, release, prefix_hashes, timeout=timeout)
        try:
            yield sel
        finally:
            if sel.get("lease_id"):
                try:
                    answer = self.release(lease_id=sel["lease_id"], timeout=timeout)
                except NotFoundError:
                    pass  # issued by an earlier server process
                else:
                    warning = self._lease_released(answer)
                    if warning is not None:
                        # Frames: this generator, contextlib's __exit__, the with.
                        warnings.warn(warning, LeaseEndedWarning, stacklevel=3)

    def release(
        self,
        lease_id: Optional[str] = None,
        index: Optional[int] = None,
        prefix_hashes: Optional[Sequence[str]] = None,
        *,
        timeout: Timeout = NOT_GIVEN,
    ) -> ReleaseResult:
        """``POST /release``: return a selected policy to idle at once, by
        ``lease_id`` or (releasing that policy's oldest lease) by ``index``.
        Idempotent: a lease that already ended (released before, or freed
        when the server saw the policy idle) answers ``{"released": False}``.
        Raises NotFoundError for a lease the server never issued, or an index
        with no lease out."""
        return self._send(_core.release(lease_id, index, prefix_hashes), timeout)

    def complete(self, index: int, count: int = 1, *, timeout: Timeout = NOT_GIVEN) -> CompleteResult:
        """``POST /complete``: ``count`` tasks of policy ``index`` finished;
        lowers its tracked load. Returns ``{"index", "load"}``."""
        return self._send(_core.complete(index, count), timeout)

    # -- reading ---------------------------------------------------------

    def stats(self, *, timeout: Timeout = NOT_GIVEN) -> Stats:
        """``GET /stats``: per policy, per node and total figures, the
        ``/select`` calls waiting (``waiters``) and the leases out."""
        return self._send(_core.stats(), timeout)

    def healthz(self, *, timeout: Timeout = NOT_GIVEN) -> Health:
        """``GET /healthz``: ``{"status": "ok"}`` while the process serves."""
        return self._send(_core.healthz(), timeout)

    def readyz(self, *, timeout: Timeout = NOT_GIVEN) -> Health:
        """``GET /readyz``: ``{"status": "ok"}``; raises UnavailableError when the
        server is not ready (after the usual retries), and NotLeaderError at once
        from a follower replica: only the leader is ready, and following it
        would report another router's readiness."""
        return self._send(_core.readyz(), timeout)

    # -- plumbing --------------------------------------------------------

    def _send(self, call: Call[T], timeout: Timeout = NOT_GIVEN) -> T:
        """Send one call, attempt after attempt, as the core says."""
        ex = self._exchange(call, timeout)
        while True:
            req = ex.request
            try:
                resp = self.session.request(req.method, req.url, content=req.content, headers=req.headers,
                                            timeout=req.timeout)
            except httpx.RequestError as exc:
                step = ex.failed(exc)
                if step.error is not None:
                    raise step.error from exc
            else:
                step = ex.answered(Answer(resp.status_code, resp.headers, resp.content, resp.reason_phrase))
            if step.error is not None:
                raise step.error
            if step.done:
                return step.value
            if step.delay > 0:
                self._sleep(step.delay)
