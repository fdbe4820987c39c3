"""Drop-in replacements for the seed framework's in-process routers.

A trainer that built its router with the seed's ``create_router`` switches
to the service by changing one constructor::

    router = SimpleRouter()                       # async, in process
    router = RemoteRouter(client)                 # async, policyrouter

    router = SyncSimpleRouter(eval_policies)      # sync, in process
    router = RemoteSyncRouter(client, eval_policies=eval_policies)

:class:`RemoteRouter` has the seed's ``assign(current_loads, num_tasks,
env_ids=None) -> List[int]`` and :class:`RemoteSyncRouter` its
``select_policy(env_id=None)``; :class:`AsyncRemoteSyncRouter` is the
latter for asyncio frameworks (``await router.select_policy(env_id)``). The policies and, for node affinity, the
``component_distribution`` must be registered with the server first
(:meth:`Client.replace_registration`, in one call); policy
``index`` values are positions in the seed's ``eval_policies`` list.

Leases and the seed's ``check_idle``
------------------------------------
The seed's ``SyncSimpleRouter`` pops an idle policy and counts it busy
until a later ``select_policy`` finds ``policy.check_idle()`` true. The
service does the same with its poller: it asks each policy's ``GET /idle``
and frees a selected policy once its work is provably over: it answered
busy after the selection and idle since, or, for work no probe saw, idle
more than the server's ``--grace`` (5 s) after the selection. So a caller
that never releases anything gets the seed's behaviour, and one that steps
its environment before sending its request never loses its policy. In addition, every ``/select`` answer carries a *lease*, and
releasing it frees the policy at once, without waiting for a poll:

* :meth:`RemoteSyncRouter.release` frees the oldest lease this adapter holds
  for a policy (call it when the rollout request to that policy finished);
* with ``release_previous=True`` the next ``select_policy`` *of the same
  thread* first frees that thread's previous lease, which is right when each
  thread sends one request at a time and selects again only when the
  previous request is done;
* a lease the server already freed (the policy was seen idle) is simply
  dropped: releasing it is not an error.

The ``node_affinity`` sync router is the seed's round robin, which never
tracks busy policies: its answers carry no lease and there is nothing to
release.

The sync adapters ask for ``"release": "on_idle"`` leases, the seed's
contract: a probe that finds the policy idle after it worked ends the lease
(the router's default, ``explicit``, waits for a release or the TTL). A
router older than the ``release`` field answers 422 naming it; the adapter
then asks again without it, and from then on, since such a router's
leases already end that way.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import numbers
import threading
import time
import weakref
from typing import Any, Deque, Dict, List, Mapping, Optional, Sequence, Tuple

from .async_client import AsyncClient
from .client import Client
from .errors import NotFoundError, UnavailableError, ValidationError
from .types import SelectResult

__all__ = ["RemoteRouter", "RemoteSyncRouter", "AsyncRemoteSyncRouter"]

log = logging.getLogger("policyrouter")

#: The release mode the sync adapters ask for: the seed's contract.
RELEASE_ON_IDLE = "on_idle"


class RemoteRouter:
    """The seed's async routers (``SimpleRouter``, ``NodeAffinityRouter``)
    answered by the service's ``POST /assign``.

    Args:
        client: a :class:`~policyrouter.Client`.
        router: an ``/assign`` router of the server, such as ``"simple"``
            or ``"node_affinity"`` (the server's ``openapi.yaml`` lists
            them); ``None`` uses the server's default (``--router``).
        update_loads: add one to ``current_loads[i]`` for each task assigned
            to ``i``, in place, as the seed's ``NodeAffinityRouter`` does
            (its ``SimpleRouter`` leaves the list alone, the default here).
    """

    def __init__(self, client: Client, router: Optional[str] = None, *, update_loads: bool = False) -> None:
        self.client = client
        self.router = router
        self.update_loads = update_loads

    def assign(self, current_loads: Optional[Sequence[int]], num_tasks: int,
               env_ids: Optional[Sequence[str]] = None) -> List[int]:
        """Return one policy index per task, exactly as the seed would.

        ``current_loads`` is sent as is (the seed's stateless mode); pass
        ``None`` to use the loads the server tracks (then report finished
        tasks with :meth:`Client.complete`). Bad input raises
        :class:`~policyrouter.errors.ValidationError`, a ``ValueError``
        like the seed's; where the seed would crash or silently ignore
        input (``env_ids`` of another length than ``num_tasks``) the server
        answers 422 instead.
        """
        if current_loads is not None and len(current_loads) == 0:
            raise ValueError("No policies available for routing")
        if num_tasks == 0 and (env_ids is None or len(env_ids) == 0):
            return []  # the seed returns [] too; the server wants num_tasks >= 1
        answer = self.client.assign(num_tasks, current_loads=current_loads, env_ids=env_ids, router=self.router)
        assignments = [int(i) for i in answer["assignments"]]
        if self.update_loads and current_loads is not None:
            for i in assignments:
                current_loads[i] += 1  # type: ignore[index]
        return assignments

    def __repr__(self) -> str:
        return f"RemoteRouter({self.client!r}, router={self.router!r})"


class _SelectWait:
    """The waiting rules of ``select_policy``, without I/O: how long the
    next ``/select`` may wait, and what to do after an ``UnavailableError``
    answer (ask again at once, pause, or give up). One per
    ``select_policy`` call; both adapters follow it."""

    def __init__(self, timeout_ms: int, max_wait_s: Optional[float], unavailable_after_s: Optional[float]) -> None:
        self.timeout_ms = timeout_ms
        self.unavailable_after_s = unavailable_after_s
        self.start = time.monotonic()
        self.deadline = None if max_wait_s is None else self.start + max_wait_s
        self.nothing_since: Optional[float] = None  # first of a run of no_policies / all_unavailable
        self.wait_ms = timeout_ms
        self.asked = self.start

    def next_wait_ms(self) -> int:
        """The ``timeout_ms`` of the next ``/select``, sent now."""
        self.wait_ms = self.timeout_ms
        if self.deadline is not None:
            self.wait_ms = max(0, min(self.wait_ms, int((self.deadline - time.monotonic()) * 1000)))
        self.asked = time.monotonic()
        return self.wait_ms

    def after(self, exc: UnavailableError) -> Optional[float]:
        """The pause before asking again (0: at once), or None: give up and
        raise ``exc``."""
        now = time.monotonic()
        if self.deadline is not None and now >= self.deadline:
            return None
        if exc.code in ("no_policies", "all_unavailable"):
            if self.nothing_since is None:
                self.nothing_since = self.asked
            if self.unavailable_after_s is not None and now - self.nothing_since >= self.unavailable_after_s:
                return None
        else:
            self.nothing_since = None
        log.warning("policyrouter: %s; waited %.1fs, still waiting", exc.message, now - self.start)
        # An answer well before the wait ended means there was nothing to
        # wait for (no policies, shutting down), and with timeout_ms=0 the
        # server does not wait at all: pause.
        if self.wait_ms == 0 or now - self.asked < self.wait_ms / 2000.0:
            pause = exc.retry_after if exc.retry_after is not None else 1.0
            if self.deadline is not None:
                pause = min(pause, max(0.0, self.deadline - now))
            return pause
        return 0.0


class _SyncRouterBase:
    """What the blocking and the asyncio seed sync routers share: their
    settings, the leases they hold per policy, and the mapping of
    ``eval_policies`` objects to indices. No I/O."""

    def __init__(
        self,
        client: Any,
        router: Optional[str] = None,
        timeout_ms: int = 30000,
        *,
        eval_policies: Optional[Sequence[Any]] = None,
        max_wait_s: Optional[float] = None,
        release_previous: bool = False,
        keep_leases: int = 64,
        lease_ttl_ms: Optional[int] = None,
        unavailable_after_s: Optional[float] = 30.0,
        sticky_wait_ms: Optional[int] = None,
    ) -> None:
        self.client = client
        self.router = router
        self.timeout_ms = int(timeout_ms)
        self.eval_policies = None if eval_policies is None else list(eval_policies)
        self.max_wait_s = max_wait_s
        self.release_previous = release_previous
        self._keep = max(1, int(keep_leases))
        self.lease_ttl_ms = lease_ttl_ms
        self.unavailable_after_s = unavailable_after_s
        self.sticky_wait_ms = sticky_wait_ms
        self._lock = threading.Lock()
        # Whether /select is sent "release": "on_idle"; cleared when the
        # router predates the field.
        self._send_release = True
        self._held: Dict[int, Deque[str]] = {}
        # release_previous: the last lease of each thread (blocking) or
        # task (asyncio).
        self._local = threading.local()
        self._last: "weakref.WeakKeyDictionary[asyncio.Task[Any], Tuple[int, str]]" = weakref.WeakKeyDictionary()

    def held_leases(self) -> Dict[int, List[str]]:
        """The leases this adapter holds, oldest first, by policy index."""
        with self._lock:
            return {i: list(h) for i, h in self._held.items() if h}

    def _wait(self) -> _SelectWait:
        return _SelectWait(self.timeout_ms, self.max_wait_s, self.unavailable_after_s)

    def _select_args(self, env_id: Optional[str], session_id: Optional[str], wait_ms: int) -> Dict[str, Any]:
        return dict(env_id=env_id, router=self.router, timeout_ms=wait_ms, lease_ttl_ms=self.lease_ttl_ms,
                    session_id=session_id, sticky_wait_ms=self.sticky_wait_ms if session_id else None,
                    release=RELEASE_ON_IDLE if self._send_release else None)

    def _release_unknown(self, exc: ValidationError) -> bool:
        """Whether a /select was refused for its ``release`` field (a router
        older than it): then stop sending it, and ask again (a 422 took
        no policy)."""
        if self._send_release and "release" in exc.fields:
            self._send_release = False
            log.debug("policyrouter: the router does not know /select's release field (%s); "
                      "its leases end on idle anyway: not sending it", exc.fields["release"])
            return True
        return False

    def _policy(self, sel: Mapping[str, Any]) -> Any:
        index = sel["index"]
        return index if self.eval_policies is None else self.eval_policies[index]

    def _hold(self, sel: Mapping[str, Any]) -> Optional[Tuple[int, str]]:
        """Keep the answer's lease; return (index, lease), or None when the
        router issued none."""
        lease = sel.get("lease_id")
        if not lease:
            return None
        index = int(sel["index"])
        with self._lock:
            held = self._held.get(index)
            if held is None:
                held = self._held[index] = collections.deque(maxlen=self._keep)
            held.append(lease)
        return index, lease

    def _take_oldest(self, index: int) -> Optional[str]:
        with self._lock:
            held = self._held.get(index)
            return held.popleft() if held else None

    def _take(self, index: int, lease: str) -> bool:
        """Stop holding one lease; False if it was released meanwhile."""
        with self._lock:
            held = self._held.get(index)
            if held is None or lease not in held:
                return False
            held.remove(lease)
            return True

    def _take_all(self) -> List[str]:
        with self._lock:
            leases = [lease for held in self._held.values() for lease in held]
            self._held.clear()
        return leases

    def _index_of(self, policy: Any) -> int:
        if self.eval_policies is not None and not isinstance(policy, numbers.Integral):
            for i, p in enumerate(self.eval_policies):
                if p is policy:
                    return i
            for i, p in enumerate(self.eval_policies):
                if p == policy:
                    return i
            raise ValueError(f"{policy!r} is not one of eval_policies")
        return int(policy)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.client!r}, router={self.router!r}, timeout_ms={self.timeout_ms})"


class RemoteSyncRouter(_SyncRouterBase):
    """The seed's sync routers (``SyncSimpleRouter``,
    ``SyncNodeAffinityRouter``) answered by the service's ``POST /select``.

    Args:
        client: a :class:`~policyrouter.Client`.
        router: a ``/select`` router of the server, such as ``"simple"``
            (idle FIFO) or ``"idle_affinity"`` (an idle policy on the env's
            node, else any idle one); the server's ``openapi.yaml`` lists
            them. ``None`` uses the server's default.
        timeout_ms: how long one ``/select`` waits for an idle policy.
        eval_policies: the seed's ``eval_policies``; when given,
            ``select_policy`` returns ``eval_policies[index]`` (the object
            the seed returned) instead of the index.
        max_wait_s: give up (raise :class:`~policyrouter.errors.UnavailableError`)
            after waiting this long in all; ``None`` waits as long as it
            takes, as the seed's ``select_policy`` does, asking again every
            ``timeout_ms``.
        release_previous: free this thread's previous lease at its next
            ``select_policy`` (see the module docs).
        keep_leases: leases kept per policy for :meth:`release`; older ones
            are forgotten (the server frees those when it sees the policy
            idle).
        lease_ttl_ms: ask the server to end each lease this long after the
            hand-out unless released first; ``None`` uses the server's
            ``--lease-ttl``.
        unavailable_after_s: when the server keeps answering that there is
            no policy to wait for at all (``no_policies``, or
            ``all_unavailable``: every policy unhealthy, drained or not yet
            heard from) for this long, raise
            :class:`~policyrouter.errors.UnavailableError` instead of waiting on;
            busy policies (``no_idle_policy``) are still waited for as
            ``max_wait_s`` says. ``None`` waits on.
        sticky_wait_ms: how long a ``select_policy`` that names a
            ``session_id`` waits for the session's busy home before taking
            another policy; ``None`` is the server's default, 0.
    """

    client: Client

    # -- the seed's interface ---------------------------------------------

    def select_policy(self, env_id: Optional[str] = None, session_id: Optional[str] = None) -> Any:
        """Return the index of an idle policy (or ``eval_policies[index]``),
        waiting for one to become idle; keep its lease for :meth:`release`.
        ``session_id`` (a trajectory or GRPO group id) asks for the
        session's home policy, waiting for it up to the router's
        ``sticky_wait_ms``."""
        return self._policy(self.select(env_id, session_id=session_id))

    # -- beyond the seed ----------------------------------------------------

    def select(self, env_id: Optional[str] = None, session_id: Optional[str] = None) -> SelectResult:
        """Like :meth:`select_policy`, returning the server's whole answer
        (``index``, ``id``, ``url``, ``node_id``, ``lease_id``, ...)."""
        if self.release_previous:
            prev = getattr(self._local, "last", None)
            self._local.last = None
            if prev is not None and self._take(*prev):
                self._release_remote(prev[1])
        wait = self._wait()
        while True:
            try:
                sel = self.client.select(**self._select_args(env_id, session_id, wait.next_wait_ms()))
                break
            except UnavailableError as exc:
                pause = wait.after(exc)
                if pause is None:
                    raise
            except ValidationError as exc:
                if not self._release_unknown(exc):
                    raise
                pause = 0.0
            if pause:
                time.sleep(pause)
        held = self._hold(sel)
        if held is not None and self.release_previous:
            self._local.last = held
        return sel

    def release(self, policy: Any) -> bool:
        """Free the oldest lease this adapter holds for ``policy`` (an index,
        or what :meth:`select_policy` returned). Returns ``True`` if a lease
        was released, ``False`` if none was out (never selected here, the
        round-robin router, or already freed by the server's poller)."""
        index = self._index_of(policy)
        while True:
            lease = self._take_oldest(index)
            if lease is None:
                return False
            if self._release_remote(lease):
                return True

    def release_all(self) -> int:
        """Free every lease this adapter holds; return how many were out."""
        return sum(1 for lease in self._take_all() if self._release_remote(lease))

    def _release_remote(self, lease: str) -> bool:
        try:
            # released is False when the server already saw the policy idle.
            return bool(self.client.release(lease_id=lease).get("released"))
        except NotFoundError:
            return False  # issued by an earlier server process


class AsyncRemoteSyncRouter(_SyncRouterBase):
    """:class:`RemoteSyncRouter` for asyncio frameworks: the same
    constructor (on an :class:`~policyrouter.AsyncClient`) and rules, with
    ``async select_policy(env_id)``; while a ``select_policy`` waits for an
    idle policy, the event loop runs on. ``release_previous`` frees the
    previous lease of the same *task* (not thread) at its next
    ``select_policy``: right when each task sends one request at a time.
    Cancelling a waiting ``select_policy`` takes no policy (the router drops
    its request)."""

    client: AsyncClient

    async def select_policy(self, env_id: Optional[str] = None, session_id: Optional[str] = None) -> Any:
        """Return the index of an idle policy (or ``eval_policies[index]``),
        waiting for one to become idle; keep its lease for :meth:`release`."""
        return self._policy(await self.select(env_id, session_id=session_id))

    async def select(self, env_id: Optional[str] = None, session_id: Optional[str] = None) -> SelectResult:
        """Like :meth:`select_policy`, returning the server's whole answer."""
        task = asyncio.current_task()
        if self.release_previous and task is not None:
            prev = self._last.pop(task, None)
            if prev is not None and self._take(*prev):
                await self._release_remote(prev[1])
        wait = self._wait()
        while True:
            try:
                sel = await self.client.select(**self._select_args(env_id, session_id, wait.next_wait_ms()))
                break
            except UnavailableError as exc:
                pause = wait.after(exc)
                if pause is None:
                    raise
            except ValidationError as exc:
                if not self._release_unknown(exc):
                    raise
                pause = 0.0
            if pause:
                await asyncio.sleep(pause)
        held = self._hold(sel)
        if held is not None and self.release_previous and task is not None:
            self._last[task] = held
        return sel

    async def release(self, policy: Any) -> bool:
        """Free the oldest lease this adapter holds for ``policy``; see
        :meth:`RemoteSyncRouter.release`."""
        index = self._index_of(policy)
        while True:
            lease = self._take_oldest(index)
            if lease is None:
                return False
            if await self._release_remote(lease):
                return True

    async def release_all(self) -> int:
        """Free every lease this adapter holds; return how many were out."""
        leases = self._take_all()
        done = await asyncio.gather(*(self._release_remote(lease) for lease in leases))
        return sum(1 for ok in done if ok)

    async def _release_remote(self, lease: str) -> bool:
        try:
            return bool((await self.client.release(lease_id=lease)).get("released"))
        except NotFoundError:
            return False
