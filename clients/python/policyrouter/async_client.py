"""The asyncio client of the policyrouter API, on ``httpx.AsyncClient``.

:class:`AsyncClient` has every method of :class:`~policyrouter.Client`, with
the same names, arguments and returned JSON, as coroutines. Both are thin
shells around the sans-I/O core (:mod:`policyrouter._core`), which builds
every request, decodes every answer and decides every retry and fail-over;
this module only sends and sleeps, on the event loop, without threads.

Cancelling a call (``task.cancel()``, ``asyncio.wait_for``,
``asyncio.timeout``) closes its HTTP connection: a ``select`` waiting on the
router leaves the router's waiters at once and takes no policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import warnings
from typing import (Any, AsyncIterator, Awaitable, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set,
                    Tuple, Union)

import httpx

from . import _core
from ._core import (DEFAULT_FAILOVER_TIMEOUT, DEFAULT_MAX_RETRY_AFTER, NOT_GIVEN, Answer, Call, RegisteredPolicy, T,
                    Timeout)
from ._transport import async_session
from .client import Client
from .errors import LeaseEndedWarning, NotFoundError
from .types import (AssignResult, CompleteResult, Health, Policy, Registration, ReleaseResult, SelectResult, Stats,
                    Update, Weights)

__all__ = ["AsyncClient"]


class AsyncClient(_core.ClientCore):
    """The asyncio form of :class:`~policyrouter.Client`: the same
    constructor, attributes and methods, each a coroutine, on an
    ``httpx.AsyncClient`` (``session``, when given, must be one).

    One client serves any number of tasks of one event loop: each call
    opens a connection of its own while others are under way (a waiting
    ``select`` holds one), and ``pool_maxsize`` of them are kept alive
    between calls; raise it to the number of calls usually in flight.
    Close it with ``await client.aclose()`` or ``async with``.
    """

    def __init__(
        self,
        base_url: Union[str, Sequence[str]],
        token: Optional[str] = None,
        timeout: Timeout = 10.0,
        session: Optional[httpx.AsyncClient] = None,
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
                         f"httpx/{httpx.__version__} asyncio", max_retry_after)
        # The pause between attempts; tests replace it.
        self._sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep
        self._owns_session = session is None
        if session is None:
            session = async_session(self._retry_url, self.retries, True if verify is None else verify, cert,
                                    pool_maxsize)
        else:
            _core.check_session_settings(session, httpx.AsyncClient, verify, cert)
        self.session = session
        # Releases that outlive a cancelled lease() block (see there).
        self._releases: Set["asyncio.Task[Any]"] = set()

    # -- lifecycle -------------------------------------------------------

    @property
    def is_closed(self) -> bool:
        """Whether the client is closed (:meth:`aclose`, or its ``session``
        closed by its owner): a call then raises
        :class:`~policyrouter.errors.ClientClosedError`."""
        return self._closed or self.session.is_closed

    async def aclose(self) -> None:
        """Close the client, after the releases still under way, and its
        session if the client made it. Calls made afterwards raise
        :class:`~policyrouter.errors.ClientClosedError`; closing twice is
        harmless."""
        if self._releases:
            await asyncio.gather(*self._releases, return_exceptions=True)
        self._closed = True
        if self._owns_session:
            await self.session.aclose()

    close = aclose

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # -- registration ----------------------------------------------------

    async def register_policy(
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
        return await self._send(_core.register_policy(url, node_id, index, id, capacity, labels, allow_shared_url,
                                                      version, engine, api_key, admin_api_key, models), timeout)

    async def replace_policies(
        self,
        policies: Iterable[Mapping[str, Any]],
        *,
        timeout: Timeout = NOT_GIVEN,
    ) -> List[Policy]:
        return await self._send(_core.replace_policies(policies), timeout)

    async def replace_registration(self, policies: Iterable[Mapping[str, Any]],
                                   topology: Mapping[str, Any], *, timeout: Timeout = NOT_GIVEN) -> Registration:
        return await self._send(_core.replace_registration(policies, topology), timeout)

    async def get_registration(self, *, timeout: Timeout = NOT_GIVEN) -> Registration:
        return await self._send(_core.get_registration(), timeout)

    async def fleet_sleep(
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
        return await self._send(_core.fleet_sleep(selector or {}, level, drain, resume_within_ms), timeout)

    async def fleet_wake(
        self,
        selector: Optional[Mapping[str, Any]] = None,
        tags: Optional[Iterable[str]] = None,
        *,
        timeout: Timeout = NOT_GIVEN,
    ) -> Any:
        """``POST /fleet/wake``: wake the selected engines (``tags``, when
        given, name the parts to restore first); they are routed again
        within one probe."""
        return await self._send(_core.fleet_wake(selector or {}, tags), timeout)

    async def fleet_engine(
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
        return await self._send(_core.fleet_engine(path, selector or {}, method, query, body,
                                                exclusive), timeout)

    async def set_weights(
        self,
        version: int,
        max_staleness: Optional[int] = None,
        force: bool = False,
        *,
        timeout: Timeout = NOT_GIVEN,
    ) -> Weights:
        return await self._send(_core.set_weights(version, max_staleness, force), timeout)

    async def get_weights(self, *, timeout: Timeout = NOT_GIVEN) -> Weights:
        return await self._send(_core.get_weights(), timeout)

    async def rolling_update(
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
        return await self._send(_core.rolling_update(version, action, max_unavailable, min_available_per_node,
                                                     drain_timeout_ms, max_failures, model_path, pause_mode,
                                                     set_floor, phase_timeout_ms, selector=selector), timeout)

    async def get_update(self, update_id: str, *, timeout: Timeout = NOT_GIVEN) -> Update:
        return await self._send(_core.get_update(update_id), timeout)

    async def list_updates(self, *, timeout: Timeout = NOT_GIVEN) -> List[Update]:
        return await self._send(_core.list_updates(), timeout)

    async def update_done(self, update_id: str, policies: Iterable[str], *, timeout: Timeout = NOT_GIVEN) -> Update:
        return await self._send(_core.update_done(update_id, policies), timeout)

    async def abort_update(self, update_id: str, *, timeout: Timeout = NOT_GIVEN) -> Update:
        return await self._send(_core.abort_update(update_id), timeout)

    async def wait_update(
        self,
        update_id: str,
        timeout: Optional[float] = None,
        on_progress: Optional[Callable[[Update], Any]] = None,
        poll_s: float = 0.2,
    ) -> Update:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            update = await self.get_update(update_id)
            if on_progress is not None:
                got = on_progress(update)
                if inspect.isawaitable(got):  # an async callback may await update_done
                    await got
            if _core.update_ended(update):
                return update
            if deadline is not None and loop.time() >= deadline:
                raise TimeoutError(f"update {update_id} still running after {timeout}s")
            await asyncio.sleep(poll_s)

    async def list_policies(self, *, timeout: Timeout = NOT_GIVEN) -> List[Policy]:
        return await self._send(_core.list_policies(), timeout)

    async def get_policy(self, id: Union[str, int], *, timeout: Timeout = NOT_GIVEN) -> Policy:  # noqa: A002
        return await self._send(_core.get_policy(id), timeout)

    async def delete_policy(self, id: Union[str, int], *, timeout: Timeout = NOT_GIVEN) -> None:  # noqa: A002
        return await self._send(_core.delete_policy(id), timeout)

    async def drain(self, id: Union[str, int], *, timeout: Timeout = NOT_GIVEN) -> Policy:  # noqa: A002
        return await self._send(_core.drain(id), timeout)

    async def resume(self, id: Union[str, int], *, timeout: Timeout = NOT_GIVEN) -> Policy:  # noqa: A002
        return await self._send(_core.resume(id), timeout)

    async def set_topology(
        self,
        component_distribution: Mapping[str, Any],
        *,
        timeout: Timeout = NOT_GIVEN,
    ) -> Dict[str, Any]:
        return await self._send(_core.set_topology(component_distribution), timeout)

    async def get_topology(self, *, timeout: Timeout = NOT_GIVEN) -> Dict[str, Any]:
        return await self._send(_core.get_topology(), timeout)

    # -- routing ---------------------------------------------------------

    async def assign(
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
        return await self._send(_core.assign(num_tasks, current_loads, env_ids, router, min_version, session_ids,
                                             load_factor, assign_ttl_ms, prefix_hashes), timeout)

    async def select(
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
        return await self._send(_core.select(env_id, router, timeout_ms, lease_ttl_ms, min_version, session_id,
                                             sticky_wait_ms, load_factor, release, prefix_hashes), timeout)

    @contextlib.asynccontextmanager
    async def lease(
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
    ) -> AsyncIterator[SelectResult]:
        """:meth:`select` a policy for the ``async with`` block, and release
        it when the block ends, also on an error or a cancellation::

            async with client.lease(env_id="env-3", session_id=traj) as sel:
                await send_rollout_request(sel["url"])

        Yields the :meth:`select` answer. The release runs in a task of its
        own, shielded: a block cancelled twice (say by ``asyncio.timeout``
        and then its task group) still frees the policy; :meth:`aclose`
        waits for such releases. Cancelling the ``select`` itself, while it
        waits, closes its request: the router takes no policy for it. A
        lease the router had already ended raises nothing, but warns (a
        :class:`~policyrouter.errors.LeaseEndedWarning`) and counts in
        :attr:`leases_ended_before_release`, as :meth:`Client.lease`
        does."""
        sel = await self.select(env_id, router, timeout_ms, lease_ttl_ms, min_version, session_id, sticky_wait_ms,
                                load_factor, release, prefix_hashes, timeout=timeout)
        try:
            yield sel
        finally:
            if sel.get("lease_id"):
                task = asyncio.ensure_future(self._release_quietly(sel["lease_id"], timeout))
                self._releases.add(task)
                task.add_done_callback(self._releases.discard)
                await asyncio.shield(task)

    async def _release_quietly(self, lease_id: str, timeout: Timeout) -> None:
        try:
            answer = await self.release(lease_id=lease_id, timeout=timeout)
        except NotFoundError:
            return  # issued by an earlier server process
        warning = self._lease_released(answer)
        if warning is not None:
            warnings.warn(warning, LeaseEndedWarning, stacklevel=2)

    async def release(
        self,
        lease_id: Optional[str] = None,
        index: Optional[int] = None,
        prefix_hashes: Optional[Sequence[str]] = None,
        *,
        timeout: Timeout = NOT_GIVEN,
    ) -> ReleaseResult:
        return await self._send(_core.release(lease_id, index, prefix_hashes), timeout)

    async def complete(self, index: int, count: int = 1, *, timeout: Timeout = NOT_GIVEN) -> CompleteResult:
        return await self._send(_core.complete(index, count), timeout)

    # -- reading ---------------------------------------------------------

    async def stats(self, *, timeout: Timeout = NOT_GIVEN) -> Stats:
        return await self._send(_core.stats(), timeout)

    async def healthz(self, *, timeout: Timeout = NOT_GIVEN) -> Health:
        return await self._send(_core.healthz(), timeout)

    async def readyz(self, *, timeout: Timeout = NOT_GIVEN) -> Health:
        return await self._send(_core.readyz(), timeout)

    # -- plumbing --------------------------------------------------------

    async def _send(self, call: Call[T], timeout: Timeout = NOT_GIVEN) -> T:
        """Send one call, attempt after attempt, as the core says."""
        ex = self._exchange(call, timeout)
        while True:
            req = ex.request
            try:
                resp = await self.session.request(req.method, req.url, content=req.content, headers=req.headers,
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
                await self._sleep(step.delay)


def _share_docs() -> None:
    """The sync client's docstrings describe both: each coroutine takes its
    twin's, so that help() shows the same text."""
    for name, member in vars(AsyncClient).items():
        twin = getattr(Client, name, None)
        if name.startswith("_") or twin is None or not callable(member) or member.__doc__:
            continue
        member.__doc__ = twin.__doc__


_share_docs()
