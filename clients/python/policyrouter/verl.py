"""verl's pluggable rollout load balancer, backed by policyrouter.

verl (PR #7115, "pluggable router with FQN/YAML plugins") lets a job name
its rollout load balancer by a fully-qualified class name. The interface,
as this module implements it, is read from verl's source as stored for
the fork ``wwj-git-rgb/verl`` at commit
``c2429f29a25d573f63d9bcc29e7ceb690817dce9`` (the PR's final form; the
snapshot of ``verl-project/verl`` available here, main at ``1dda039b9``,
predates the merge):

* ``verl/workers/rollout/router.py``: the ``RequestLoadBalancer``
  Protocol, and ``_create_plugin_extension``, which reads the YAML file
  named by ``rollout.router_config_path``, imports its ``router_class``
  (an FQN) and builds the actor as ``ray.remote(cls).remote(servers,
  yaml_config)``: ``servers`` maps each rollout server's address
  (``host:port``) to its Ray actor handle, ``yaml_config`` is the whole
  YAML as a dict.
* ``verl/workers/rollout/llm_server.py``: ``LLMServerClient``, the caller.
  Once, it asks ``require_acquire_fields()`` and
  ``require_release_fields()``; per request it awaits
  ``acquire_server.remote(request_id=..., **declared_fields)`` for a
  ``(server_id, handle)`` pair, runs ``handle.generate.remote(...)``, and in
  a ``finally`` calls ``release_server.remote(server_id=...,
  **declared_fields)`` without awaiting it. ``request_id`` is the
  trajectory's id, the same for every turn (sticky sessions).
  ``FullyAsyncLLMServerClient`` retries an acquire whose ``RuntimeError``
  says "No available servers in load balancer".

The balancer is a Ray actor, so every method runs in the actor. Those that
talk to the router are ``async def``: Ray then runs the actor as an asyncio
actor, so an acquire that waits for a free policy does not hold up the
releases that free one. The caller awaits ``.remote()`` either way.

A router YAML::

    router_class: policyrouter.verl.PolicyRouterLoadBalancer
    router_url: http://router:8080      # or $POLICYROUTER_URL
    token: ...                          # or $POLICYROUTER_TOKEN (route and admin scopes)
    engine: vllm                        # the engine of verl's servers (register: true)
    capacity: 64                        # requests each server takes at once (default: the engine's)
    sticky_wait_ms: 2000                # a trajectory waits this long for its busy home server

Each acquire is a ``POST /select`` with the trajectory's ``request_id`` as
``session_id`` (its turns go to the same server, whose KV cache holds the
prefix), and each release a ``POST /release`` of that lease. The servers
are registered as policies (``http://{server_id}``) when the balancer
starts and when verl adds servers, and deleted when verl removes them
(``register: false`` leaves registration to the operator and only maps
the router's policies to verl's servers by URL). The router should hold
only this job's servers: a policy that is not one of them is released
and the acquire raises ``RuntimeError``.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
from typing import Any, Deque, Dict, List, Mapping, Optional, Tuple

from .async_client import AsyncClient
from .errors import ConflictError, NotFoundError, UnavailableError

__all__ = ["PolicyRouterLoadBalancer", "NO_SERVERS"]

log = logging.getLogger("policyrouter")

#: The message of verl's ``RuntimeError`` when no server is registered
#: (``GlobalRequestLoadBalancer.acquire_server``); verl's
#: ``FullyAsyncLLMServerClient`` retries on it.
NO_SERVERS = "No available servers in load balancer"

# 503 codes after which waiting can help: retried after Retry-After.
_WAIT_CODES = frozenset({"no_idle_policy", "overloaded", "all_unavailable", "no_fresh_policy", "not_ready"})


def _norm(url: str) -> str:
    return url.rstrip("/").lower()


class PolicyRouterLoadBalancer:
    """verl's ``RequestLoadBalancer`` on a policyrouter.

    Args:
        servers: verl's ``{server_id: actor_handle}``; a ``server_id`` is
            the server's ``host:port``.
        config: the router YAML as a dict (``router_class`` included). Keys:
            ``router_url`` (else ``$POLICYROUTER_URL``), ``token`` (else
            ``$POLICYROUTER_TOKEN``), ``scheme`` (``http``), ``register``
            (``True``), ``engine``, ``capacity``, ``api_key``, ``router``
            (the ``/select`` router), ``timeout_ms`` (one select's wait,
            30000), ``sticky_wait_ms``, ``load_factor``, ``lease_ttl_ms``,
            ``max_wait_s`` (longest an acquire waits for a free server;
            default no bound, like verl's own balancer, which never
            refuses while a server exists), ``client_timeout`` (seconds).
    """

    def __init__(self, servers: Mapping[str, Any], config: Optional[Mapping[str, Any]] = None) -> None:
        cfg = dict(config or {})
        self._cfg = cfg
        url = cfg.get("router_url") or os.environ.get("POLICYROUTER_URL")
        if not url:
            raise ValueError("policyrouter.verl: set router_url in the router YAML, or POLICYROUTER_URL")
        self._url = url
        self._token = cfg.get("token") or os.environ.get("POLICYROUTER_TOKEN")
        self._scheme = cfg.get("scheme", "http")
        self._register = bool(cfg.get("register", True))
        self._max_wait_s = cfg.get("max_wait_s")
        # Built on first use, on the actor's event loop.
        self._client: Optional[AsyncClient] = None
        self._servers: Dict[str, Any] = {}
        self._by_url: Dict[str, str] = {}  # normalised URL -> server_id
        self._policy_ids: Dict[str, str] = {}  # server_id -> policy id
        self._inflight: Dict[str, int] = {}
        self._leases: Dict[Tuple[str, Optional[str]], Deque[str]] = collections.defaultdict(collections.deque)
        # Registered on first use (the constructor cannot await), once.
        self._pending = dict(servers)
        self._registration: Optional[Tuple["asyncio.Future[None]", Dict[str, Any]]] = None
        for sid in servers:
            self._track(sid, servers[sid])

    # -- the Protocol ------------------------------------------------------------

    async def acquire_server(self, request_id: str, prompt_ids: Optional[List[int]] = None,
                             **extra: Any) -> Tuple[str, Any]:
        """A ``(server_id, actor_handle)`` for one request of the
        trajectory ``request_id``: the policy ``POST /select`` hands out
        with ``session_id=request_id``, waiting while none is free. Raises
        ``RuntimeError`` with verl's message when no server is registered."""
        client = await self._ready()
        if not self._servers:
            raise RuntimeError(NO_SERVERS)
        loop = asyncio.get_running_loop()
        deadline = None if self._max_wait_s is None else loop.time() + float(self._max_wait_s)
        while True:
            try:
                sel = await client.select(router=self._cfg.get("router"), timeout_ms=self._cfg.get("timeout_ms", 30000),
                                          lease_ttl_ms=self._cfg.get("lease_ttl_ms"), session_id=str(request_id),
                                          sticky_wait_ms=self._cfg.get("sticky_wait_ms"),
                                          load_factor=self._cfg.get("load_factor"), release="explicit")
                break
            except UnavailableError as e:
                if e.code == "no_policies":
                    raise RuntimeError(NO_SERVERS) from e
                if e.code not in _WAIT_CODES:
                    raise
                pause = min(e.retry_after or 0.0, 1.0)
                if deadline is not None and loop.time() + pause >= deadline:
                    raise RuntimeError(f"policyrouter: no server free within {self._max_wait_s}s ({e.code})") from e
                if pause:
                    await asyncio.sleep(pause)
        server_id = self._by_url.get(_norm(sel["url"]))
        if server_id is None or server_id not in self._servers:
            if sel.get("lease_id"):
                await client.release(lease_id=sel["lease_id"])
            raise RuntimeError(f"policyrouter chose {sel['url']} (policy {sel.get('index')}), "
                               f"which is not one of this balancer's servers")
        if sel.get("lease_id"):
            self._leases[(server_id, str(request_id))].append(sel["lease_id"])
        self._inflight[server_id] += 1
        return server_id, self._servers[server_id]

    def require_acquire_fields(self) -> List[str]:
        """Routing keys on ``request_id`` alone (the session)."""
        return []

    def require_release_fields(self) -> List[str]:
        """``request_id``, to end the lease of that request and not another
        one on the same server."""
        return ["request_id"]

    async def release_server(self, server_id: str, request_id: Optional[str] = None) -> None:
        """End the lease of the request ``request_id`` on ``server_id``
        (without ``request_id``, the oldest lease on that server)."""
        lease_id = self._pop_lease(server_id, None if request_id is None else str(request_id))
        if server_id in self._inflight and self._inflight[server_id] > 0:
            self._inflight[server_id] -= 1
        if lease_id is None:
            return
        try:
            await (await self._ready()).release(lease_id=lease_id)
        except Exception as e:  # noqa: BLE001 - verl does not await this call: log (the lease's TTL ends it)
            log.warning("policyrouter.verl: release of lease %s on %s failed: %s", lease_id, server_id, e)

    async def add_servers(self, servers: Mapping[str, Any]) -> None:
        """Add verl's servers (and register them as policies)."""
        client = await self._ready()
        for sid, handle in servers.items():
            self._track(sid, handle)
        await self._register_all(client, dict(servers))

    async def remove_servers(self, server_ids: List[str]) -> None:
        """Remove servers: they get no further request (their policies are
        deleted, or, with ``register: false``, no longer mapped)."""
        client = await self._ready()
        for sid in server_ids:
            self._servers.pop(sid, None)
            self._inflight.pop(sid, None)
            self._by_url.pop(_norm(self._server_url(sid)), None)
            self._pending.pop(sid, None)
            for key in [k for k in self._leases if k[0] == sid]:
                del self._leases[key]
            pid = self._policy_ids.pop(sid, None)
            if self._register and pid is not None:
                try:
                    await client.delete_policy(pid)
                except NotFoundError:
                    pass

    def get_all_servers(self) -> List[str]:
        return list(self._servers)

    def get_status(self) -> Dict[str, Any]:
        return {
            "servers": dict(self._inflight),
            "total_inflight": sum(self._inflight.values()),
            "active_servers": len(self._servers),
            "router_url": self._url,
        }

    def clear_sticky_cache(self) -> Dict[str, Any]:
        """policyrouter keeps no session table to clear: a session's home
        follows from its key and the registered policies (consistent
        hashing), and moves when the policies change."""
        return {"cleared_entries": 0, "server_loads": dict(self._inflight)}

    def get_total_inflight(self) -> int:
        return sum(self._inflight.values())

    async def close(self) -> None:
        """Close the HTTP client (not part of verl's Protocol)."""
        if self._client is not None:
            await self._client.aclose()

    # -- helpers -----------------------------------------------------------------

    def _server_url(self, server_id: str) -> str:
        return f"{self._scheme}://{server_id}"

    def _track(self, server_id: str, handle: Any) -> None:
        self._servers[server_id] = handle
        self._inflight.setdefault(server_id, 0)
        self._by_url[_norm(self._server_url(server_id))] = server_id

    def _pop_lease(self, server_id: str, request_id: Optional[str]) -> Optional[str]:
        keys = [(server_id, request_id)] if request_id is not None else [k for k in self._leases if k[0] == server_id]
        for key in keys:
            q = self._leases.get(key)
            if q:
                lease = q.popleft()
                if not q:
                    del self._leases[key]
                return lease
        return None

    async def _ready(self) -> AsyncClient:
        """The client, once the servers given to the constructor are
        registered: every call that arrives meanwhile waits for the one
        registration (so no acquire finds the router empty)."""
        if self._client is None:
            self._client = AsyncClient(self._url, token=self._token, timeout=self._cfg.get("client_timeout", 10.0))
        if self._pending and self._registration is None:
            pending, self._pending = self._pending, {}
            self._registration = (asyncio.ensure_future(self._register_all(self._client, pending)), pending)
        if self._registration is not None:
            task, pending = self._registration
            try:
                await asyncio.shield(task)
            except BaseException:
                if task.done() and self._registration is not None and self._registration[0] is task:
                    # Failed: the next call tries again.
                    self._registration = None
                    self._pending.update(pending)
                raise
            if self._registration is not None and self._registration[0] is task:
                self._registration = None
        return self._client

    async def _register_all(self, client: AsyncClient, servers: Mapping[str, Any]) -> None:
        if not self._register:
            for p in await client.list_policies():
                sid = self._by_url.get(_norm(p["url"]))
                if sid is not None:
                    self._policy_ids[sid] = p["id"]
            return
        for sid in servers:
            url = self._server_url(sid)
            try:
                p = await client.register_policy(url, capacity=self._cfg.get("capacity"),
                                                 engine=self._cfg.get("engine"), api_key=self._cfg.get("api_key"),
                                                 labels={"verl_server": sid})
            except ConflictError:
                # Registered before (a restarted balancer): adopt it.
                p = next((q for q in await client.list_policies() if _norm(q["url"]) == _norm(url)), None)
                if p is None:
                    raise
            self._policy_ids[sid] = p["id"]
