"""policyrouter.verl.PolicyRouterLoadBalancer, driven as verl drives it.

The caller below is a stand-in of verl's, written from its source (fork
wwj-git-rgb/verl, commit c2429f29a25d573f63d9bcc29e7ceb690817dce9, the form
of verl-project/verl PR #7115):

* ``load_router`` is ``verl/workers/rollout/router.py``'s
  ``_create_plugin_extension``: read the router YAML, import its
  ``router_class`` by FQN, ``ray.remote(cls).remote(servers, yaml_config)``;
* ``LLMServerClient`` is ``verl/workers/rollout/llm_server.py``'s: ask
  the two field declarations once, ``await acquire_server.remote(request_id=...,
  **fields)``, ``await server.generate.remote(...)``, and in ``finally`` a
  ``release_server.remote(server_id=..., **fields)`` that is not awaited.

Ray is not installed here: ``FakeRay`` gives what verl uses of it. An
actor runs on a thread of its own with its own event loop, as a Ray
asyncio actor does (an actor with an ``async def`` method), and
``.remote()`` returns an awaitable. The router is the real binary.
"""

import asyncio
import concurrent.futures
import importlib
import os
import tempfile
import threading
import types
import unittest

from policyrouter import Client
from policyrouter.verl import NO_SERVERS, PolicyRouterLoadBalancer

from tests._server import Server

try:
    import yaml
except ImportError:  # test_types and test_openapi_params report it
    yaml = None


# -- what verl uses of Ray ---------------------------------------------------------


class _Ref:
    """An ObjectRef: awaitable from any event loop; ``get`` blocks."""

    def __init__(self, fut: concurrent.futures.Future) -> None:
        self.future = fut

    awaited = False

    def __await__(self):
        self.awaited = True
        return asyncio.wrap_future(self.future).__await__()


class _ActorHandle:
    def __init__(self, cls, args, kwargs, refs) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._refs = refs
        self._obj = self._run(lambda: cls(*args, **kwargs)).future.result(timeout=30)

    def _run(self, fn) -> _Ref:
        async def call():
            r = fn()
            if asyncio.iscoroutine(r):
                r = await r
            return r

        ref = _Ref(asyncio.run_coroutine_threadsafe(call(), self._loop))
        self._refs.append(ref)
        return ref

    def __getattr__(self, name):
        actor = self

        class _Method:
            def remote(self, *args, **kwargs):
                return actor._run(lambda: getattr(actor._obj, name)(*args, **kwargs))

        return _Method()

    def kill(self):
        if hasattr(self._obj, "close"):  # the adapter's HTTP client
            self._run(lambda: self._obj.close()).future.result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


class FakeRay:
    def __init__(self) -> None:
        self.refs = []
        self.actors = []

    def remote(self, cls):
        ray = self

        class _ActorClass:
            def remote(self, *args, **kwargs):
                handle = _ActorHandle(cls, args, kwargs, ray.refs)
                ray.actors.append(handle)
                return handle

        return _ActorClass()

    def wait_all(self):
        """Every call made, awaited or not (verl does not await releases),
        has run; one that nobody awaited must not have failed."""
        refs = list(self.refs)
        done, pending = concurrent.futures.wait([r.future for r in refs], timeout=30)
        assert not pending, f"{len(pending)} actor calls still running"
        for r in refs:
            if not r.awaited:
                r.future.result(timeout=0)

    def shutdown(self):
        for a in self.actors:
            a.kill()


# -- verl's caller -------------------------------------------------------------------


def load_class_from_fqn(fqn):
    module, _, name = fqn.rpartition(".")
    return getattr(importlib.import_module(module), name)


def load_router(ray, servers, router_config_path):
    """router.py's _create_plugin_extension."""
    with open(router_config_path) as f:
        yaml_config = yaml.safe_load(f)
    cls = load_class_from_fqn(yaml_config["router_class"])
    return ray.remote(cls).remote(servers, yaml_config)


class LLMServerClient:
    """llm_server.py's LLMServerClient: _acquire_server, _release_server, generate."""

    def __init__(self, load_balancer_handle):
        self._load_balancer = load_balancer_handle
        self._lb_require_acquire_fields = None
        self._lb_require_release_fields = None

    async def _acquire_server(self, request_id, **extra):
        if self._lb_require_acquire_fields is None:
            acquire_fields, release_fields = await asyncio.gather(
                self._load_balancer.require_acquire_fields.remote(),
                self._load_balancer.require_release_fields.remote(),
            )
            self._lb_require_acquire_fields = list(acquire_fields)
            self._lb_require_release_fields = list(release_fields)
        fields = {name: extra[name] for name in self._lb_require_acquire_fields if name in extra}
        return await self._load_balancer.acquire_server.remote(request_id=request_id, **fields)

    def _release_server(self, server_id, request_id=None):
        pool = {"request_id": request_id}
        fields = {name: pool[name] for name in self._lb_require_release_fields if name in pool}
        self._load_balancer.release_server.remote(server_id=server_id, **fields)

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        server_id, server = await self._acquire_server(request_id, prompt_ids=prompt_ids,
                                                       sampling_params=sampling_params, **kwargs)
        try:
            return await server.generate.remote(request_id=request_id, prompt_ids=prompt_ids,
                                                sampling_params=sampling_params)
        finally:
            self._release_server(server_id, request_id=request_id)


class FakeEngine:
    """A rollout server's actor handle: counts the requests it runs at once."""

    def __init__(self, server_id):
        self.server_id = server_id
        self.running = 0
        self.max_running = 0
        self.served = []

    @property
    def generate(self):
        engine = self

        class _Generate:
            @staticmethod
            def remote(request_id, prompt_ids, sampling_params):
                return engine._generate(request_id)

        return _Generate()

    async def _generate(self, request_id):
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        self.served.append(request_id)
        try:
            # Simulated work, so that requests overlap; nothing is timed.
            await asyncio.sleep(0.002)
            return types.SimpleNamespace(token_ids=[1, 2], extra_fields={"server": self.server_id})
        finally:
            self.running -= 1


# -- the tests -------------------------------------------------------------------------


@unittest.skipIf(yaml is None, "python3-yaml is not installed")
class VerlLoadBalancerTest(unittest.TestCase):
    def setUp(self):
        self.server = Server()
        self.addCleanup(lambda: self.assertEqual(self.server.stop(), 0))
        self.ray = FakeRay()
        self.addCleanup(self.ray.shutdown)
        self.admin = Client(self.server.url)
        self.addCleanup(self.admin.close)
        # verl's servers: host:port of each replica (nothing listens: the
        # router runs without a poller and trusts them idle).
        self.engines = {f"127.0.0.1:{18000 + i}": FakeEngine(f"127.0.0.1:{18000 + i}") for i in range(4)}

    def router_yaml(self, **extra):
        cfg = {"router_class": "policyrouter.verl.PolicyRouterLoadBalancer", "router_url": self.server.url,
               "capacity": 2, "timeout_ms": 2000, **extra}
        fd, path = tempfile.mkstemp(suffix=".yaml")
        with os.fdopen(fd, "w") as f:
            yaml.safe_dump(cfg, f)
        self.addCleanup(os.unlink, path)
        return path

    def start(self, servers=None, **extra):
        lb = load_router(self.ray, dict(self.engines if servers is None else servers), self.router_yaml(**extra))
        self.addCleanup(lambda: self.ray.wait_all())
        return lb, LLMServerClient(lb)

    def test_loaded_by_its_name_and_a_trajectory_keeps_its_server(self):
        lb, client = self.start(sticky_wait_ms=5000)

        async def rollouts():
            homes = {}
            for t in range(8):
                rid = f"traj-{t}"
                for turn in range(3):
                    out = await client.generate(rid, prompt_ids=[1, 2, 3], sampling_params={"max_tokens": 4})
                    homes.setdefault(rid, set()).add(out.extra_fields["server"])
            return homes

        homes = asyncio.run(rollouts())
        self.ray.wait_all()
        self.assertEqual({rid: len(s) for rid, s in homes.items()}, {f"traj-{t}": 1 for t in range(8)})
        # The servers became policies of the router, and every lease ended.
        self.assertEqual(sorted(p["url"] for p in self.admin.list_policies()),
                         sorted("http://" + sid for sid in self.engines))
        self.assertEqual(self.admin.stats()["leases"], 0)
        self.assertEqual(asyncio.run(self._await(lb.get_total_inflight.remote())), 0)
        self.assertEqual(asyncio.run(self._await(lb.get_all_servers.remote())), list(self.engines))

    def test_no_engine_gets_more_than_its_capacity(self):
        lb, client = self.start(sticky_wait_ms=0)

        async def rollouts():
            async def trajectory(t):
                for turn in range(3):
                    await client.generate(f"traj-{t}", prompt_ids=[t], sampling_params={})

            await asyncio.gather(*(trajectory(t) for t in range(48)))

        asyncio.run(rollouts())
        self.ray.wait_all()
        served = {sid: len(e.served) for sid, e in self.engines.items()}
        self.assertEqual(sum(served.values()), 48 * 3)
        self.assertTrue(all(n > 0 for n in served.values()), served)
        self.assertEqual({sid: e.max_running <= 2 for sid, e in self.engines.items()},
                         {sid: True for sid in self.engines}, {sid: e.max_running for sid, e in self.engines.items()})
        self.assertEqual(self.admin.stats()["leases"], 0)

    def test_a_removed_server_gets_no_further_request(self):
        lb, client = self.start()
        gone = "127.0.0.1:18001"

        async def run():
            await client.generate("warm-up", prompt_ids=[1], sampling_params={})
            await lb.remove_servers.remote([gone])
            for t in range(24):
                await client.generate(f"after-{t}", prompt_ids=[1], sampling_params={})

        asyncio.run(run())
        self.ray.wait_all()
        before = len(self.engines[gone].served)
        self.assertLessEqual(before, 1)
        self.assertNotIn(gone, {p["url"].split("://")[1] for p in self.admin.list_policies()})
        self.assertEqual(sum(len(e.served) for e in self.engines.values()), 25)
        # Added back, it is a policy again.
        asyncio.run(self._await(lb.add_servers.remote({gone: self.engines[gone]})))
        self.assertIn("http://" + gone, [p["url"] for p in self.admin.list_policies()])

    def test_no_servers_is_verls_runtime_error(self):
        lb, client = self.start(servers={})

        async def run():
            with self.assertRaises(RuntimeError) as cm:
                await client.generate("t", prompt_ids=[1], sampling_params={})
            return str(cm.exception)

        # FullyAsyncLLMServerClient retries on exactly this message.
        self.assertIn(NO_SERVERS, asyncio.run(run()))

    def test_the_protocol_methods(self):
        # verl's RequestLoadBalancer Protocol, method by method.
        for name in ("acquire_server", "require_acquire_fields", "require_release_fields", "release_server",
                     "add_servers", "remove_servers", "get_all_servers", "get_status", "clear_sticky_cache",
                     "get_total_inflight"):
            self.assertTrue(callable(getattr(PolicyRouterLoadBalancer, name, None)), name)
        lb, _ = self.start()
        status = asyncio.run(self._await(lb.get_status.remote()))
        self.assertEqual((status["total_inflight"], status["active_servers"]), (0, 4))
        self.assertEqual(asyncio.run(self._await(lb.clear_sticky_cache.remote()))["cleared_entries"], 0)

    @staticmethod
    async def _await(ref):
        return await ref


if __name__ == "__main__":
    unittest.main()
