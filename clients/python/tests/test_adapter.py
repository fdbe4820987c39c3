"""Adapter tests against the real binary: RemoteRouter and RemoteSyncRouter
must answer like the seed's routers (tests/seed_reference.py)."""

import asyncio
import json
import random
import threading
import time
import unittest

import httpx

from policyrouter import (AsyncClient, AsyncRemoteSyncRouter, Client, RemoteRouter, RemoteSyncRouter, Unavailable,
                          ValidationError)

from tests import seed_reference as seed
from tests._server import AsyncServerTestCase, ServerTestCase
from tests._stub import LoopbackServer, reply

CD = {
    "n0": {"env": {"ids": [0, 1]}, "eval": {"ids": [0, 1]}},
    "n1": {"env": {"ids": [2]}, "eval": {"ids": [2]}},
}
NODES = ["n0", "n0", "n1"]


class RemoteRouterTest(ServerTestCase):
    def test_simple_matches_seed(self):
        router = RemoteRouter(self.client, router="simple")
        rng = random.Random(3)
        for _ in range(60):
            loads = [rng.randint(0, 9) for _ in range(rng.randint(1, 8))]
            n = rng.randint(1, 20)
            before = list(loads)
            self.assertEqual(router.assign(loads, n), seed.SimpleRouter().assign(list(loads), n))
            self.assertEqual(loads, before, "SimpleRouter leaves current_loads alone")

    def test_node_affinity_matches_seed_including_load_updates(self):
        self.register_n(3, nodes=NODES)
        self.client.set_topology(CD)
        router = RemoteRouter(self.client, router="node_affinity", update_loads=True)
        oracle = seed.NodeAffinityRouter(CD, NODES)
        rng = random.Random(4)
        for _ in range(40):
            loads = [rng.randint(0, 5) for _ in range(3)]
            env_ids = [rng.choice(["env-0", "env-1", "env-2", "env-9", "env-x", "x"]) for _ in range(rng.randint(1, 9))]
            mine, theirs = list(loads), list(loads)
            self.assertEqual(router.assign(mine, len(env_ids), env_ids), oracle.assign(theirs, len(env_ids), env_ids))
            self.assertEqual(mine, theirs)
        # the seed's own example
        self.assertEqual(router.assign([0, 0, 0], 3, ["env-0", "env-2", "env-x"]),
                         seed.NodeAffinityRouter(CD, NODES).assign([0, 0, 0], 3, ["env-0", "env-2", "env-x"]))

    def test_edge_cases(self):
        router = RemoteRouter(self.client)
        self.assertEqual(router.assign([1, 2], 0), [])
        with self.assertRaises(ValueError):
            router.assign([], 3)
        with self.assertRaises(ValidationError):  # a ValueError too
            router.assign([0, 1], 2, env_ids=["env-0"])
        self.assertIn("RemoteRouter", repr(router))

    def test_tracked_loads(self):
        self.register_n(2)
        router = RemoteRouter(self.client)
        self.assertEqual(router.assign(None, 3), [0, 1, 0])
        self.client.complete(0, count=2)
        self.assertEqual(router.assign(None, 2), [0, 0])  # loads [0, 1] -> 0, then a tie -> 0


class RemoteSyncRouterTest(ServerTestCase):
    def test_select_release(self):
        self.register_n(3)
        router = RemoteSyncRouter(self.client, router="simple", max_wait_s=0.1)
        self.assertEqual([router.select_policy() for _ in range(3)], [0, 1, 2])
        with self.assertRaises(Unavailable) as cm:
            router.select_policy()
        self.assertEqual(cm.exception.retry_after, 1.0)
        self.assertEqual(set(router.held_leases()), {0, 1, 2})
        self.assertTrue(router.release(1))
        self.assertFalse(router.release(1))  # nothing held any more
        self.assertEqual(router.select_policy("env-5"), 1)
        self.assertEqual(self.client.stats()["leases"], 3)
        self.assertEqual(router.release_all(), 3)
        self.assertEqual(self.client.stats()["leases"], 0)
        self.assertEqual(router.held_leases(), {})

    def test_select_policy_with_session_id(self):
        self.register_n(6)
        router = RemoteSyncRouter(self.client, router="simple", max_wait_s=5, sticky_wait_ms=0)
        home = router.select_policy("env-0", session_id="traj-9")
        for _ in range(3):
            self.assertTrue(router.release(home))
            self.assertEqual(router.select_policy("env-0", session_id="traj-9"), home)
        self.assertEqual(self.client.stats()["sticky"]["hits"], 4)

    def test_lease_freed_by_the_server_is_dropped(self):
        # Stands in for the poller seeing the policy idle (the seed's
        # check_idle): the server frees the lease, the adapter still holds it.
        self.register_n(2)
        router = RemoteSyncRouter(self.client)
        sel = router.select()
        self.assertEqual(sel["index"], 0)
        self.client.release(lease_id=sel["lease_id"])
        self.assertFalse(router.release(0))
        self.assertEqual(router.held_leases(), {})

    def test_release_previous_per_thread(self):
        self.register_n(2)
        router = RemoteSyncRouter(self.client, release_previous=True, max_wait_s=0.2)
        # one thread, one request at a time: never runs out of policies
        got = [router.select_policy("env-0") for _ in range(6)]
        self.assertEqual(got, [0, 1, 0, 1, 0, 1])
        self.assertEqual(self.client.stats()["leases"], 1)
        # another thread's lease is not freed by this thread's selects
        other = []
        t = threading.Thread(target=lambda: other.append(router.select_policy()))
        t.start()
        t.join()
        self.assertEqual(other, [0])
        # this thread frees its policy 1 before asking, and gets it back
        self.assertEqual(router.select_policy(), 1)
        self.assertEqual(self.client.stats()["leases"], 2)
        self.assertEqual(router.held_leases(), {0: [router.held_leases()[0][0]], 1: [router.held_leases()[1][0]]})

    def test_eval_policies_objects(self):
        self.register_n(2)
        actors = [object(), object()]
        router = RemoteSyncRouter(self.client, eval_policies=actors, max_wait_s=0.1)
        a = router.select_policy()
        self.assertIs(a, actors[0])
        self.assertIs(router.select_policy(), actors[1])
        self.assertTrue(router.release(a))
        self.assertIs(router.select_policy(), actors[0])
        with self.assertRaises(ValueError):
            router.release(object())

    def test_node_affinity_round_robin_matches_seed(self):
        self.register_n(3, nodes=NODES)
        self.client.set_topology(CD)
        router = RemoteSyncRouter(self.client, router="node_affinity")
        oracle = seed.SyncNodeAffinityRouter([0, 1, 2], CD)
        rng = random.Random(5)
        env_ids = [rng.choice(["env-0", "env-1", "env-2", "env-9", "env-x"]) for _ in range(40)]
        self.assertEqual([router.select_policy(e) for e in env_ids], [oracle.select_policy(e) for e in env_ids])
        self.assertEqual(router.held_leases(), {})  # round robin issues no leases

    def test_idle_affinity_prefers_the_env_node(self):
        self.register_n(3, nodes=NODES)
        self.client.set_topology(CD)
        router = RemoteSyncRouter(self.client, router="idle_affinity", max_wait_s=0.1)
        self.assertEqual(router.select_policy("env-2"), 2)
        self.assertEqual(router.select_policy("env-2"), 0)  # n1 busy: oldest idle anywhere
        self.assertEqual(router.select_policy("env-0"), 1)

    def test_waits_like_the_seed_until_a_policy_is_free(self):
        self.register_n(1)
        holder = RemoteSyncRouter(self.client)
        self.assertEqual(holder.select_policy(), 0)
        router = RemoteSyncRouter(self.client, timeout_ms=100)  # no max_wait_s: wait as long as it takes
        timer = threading.Timer(0.35, holder.release, args=(0,))
        timer.start()
        self.addCleanup(timer.join)  # before the client closes
        start = time.monotonic()
        with self.assertLogs("policyrouter", "WARNING") as logs:
            self.assertEqual(router.select_policy(), 0)
        self.assertGreaterEqual(time.monotonic() - start, 0.3)
        self.assertGreaterEqual(len(logs.records), 2)  # asked again every 100ms

    def test_all_unavailable_fails_fast(self):
        (p,) = self.register_n(1)
        self.client.drain(p["id"])
        router = RemoteSyncRouter(self.client, timeout_ms=1000, max_wait_s=60, unavailable_after_s=0.3)
        start = time.monotonic()
        with self.assertLogs("policyrouter", "WARNING"), self.assertRaises(Unavailable) as cm:
            router.select_policy()
        self.assertEqual(cm.exception.code, "all_unavailable")
        # Raised for unavailable_after_s, long before max_wait_s.
        self.assertLess(time.monotonic() - start, 30)

    def test_no_policies_is_not_a_busy_loop(self):
        calls = []

        counting = httpx.Client(event_hooks={"request": [lambda req: calls.append(req.url)]})
        client = Client(self.server.url, session=counting)
        self.addCleanup(client.session.close)
        for timeout_ms in (0, 1000):
            calls.clear()
            router = RemoteSyncRouter(client, timeout_ms=timeout_ms, max_wait_s=0.3)
            start = time.monotonic()
            with self.assertLogs("policyrouter", "WARNING"), self.assertRaises(Unavailable):
                router.select_policy()
            self.assertGreaterEqual(time.monotonic() - start, 0.25)
            self.assertLessEqual(len(calls), 3, "re-asks pause for Retry-After when the server answers at once")


class AsyncRemoteSyncRouterTest(AsyncServerTestCase):
    async def test_node_affinity_round_robin_matches_seed(self):
        await self.register_n(3, nodes=NODES)
        await self.client.set_topology(CD)
        router = AsyncRemoteSyncRouter(self.client, router="node_affinity")
        oracle = seed.SyncNodeAffinityRouter([0, 1, 2], CD)
        rng = random.Random(5)
        env_ids = [rng.choice(["env-0", "env-1", "env-2", "env-9", "env-x"]) for _ in range(40)]
        self.assertEqual([await router.select_policy(e) for e in env_ids], [oracle.select_policy(e) for e in env_ids])
        self.assertEqual(router.held_leases(), {})

    async def test_simple_matches_seed_fifo(self):
        # The seed's SyncSimpleRouter: FIFO of idle policies in index order,
        # a freed policy joins the back.
        await self.register_n(3)
        router = AsyncRemoteSyncRouter(self.client, router="simple", max_wait_s=0.1)
        oracle = seed.SyncSimpleRouter([0, 1, 2], idle=lambda p: p in freed)
        freed = set()
        got, want = [], []
        for step in range(3):
            got.append(await router.select_policy())
            want.append(oracle.select_policy())
        self.assertEqual(got, want)
        self.assertTrue(await router.release(1))
        freed.add(1)
        self.assertEqual(await router.select_policy(), oracle.select_policy())
        with self.assertRaises(Unavailable):
            await router.select_policy()
        self.assertEqual(await router.release_all(), 3)
        self.assertEqual((await self.client.stats())["leases"], 0)

    async def test_release_previous_is_per_task(self):
        await self.register_n(2)
        router = AsyncRemoteSyncRouter(self.client, release_previous=True, max_wait_s=0.2)
        self.assertEqual([await router.select_policy("env-0") for _ in range(4)], [0, 1, 0, 1])
        self.assertEqual((await self.client.stats())["leases"], 1)
        # another task's select does not free this task's lease
        self.assertEqual(await asyncio.create_task(router.select_policy()), 0)
        self.assertEqual((await self.client.stats())["leases"], 2)

    async def test_waits_like_the_seed_and_a_cancelled_wait_takes_nothing(self):
        await self.register_n(1)
        holder = AsyncRemoteSyncRouter(self.client)
        self.assertEqual(await holder.select_policy(), 0)
        router = AsyncRemoteSyncRouter(self.client, timeout_ms=100)  # no max_wait_s: wait as long as it takes

        async def free_later():
            await asyncio.sleep(0.35)
            await holder.release(0)

        with self.assertLogs("policyrouter", "WARNING") as logs:
            freeing = asyncio.create_task(free_later())
            self.assertEqual(await router.select_policy(), 0)
            await freeing
        self.assertGreaterEqual(len(logs.records), 2)  # asked again every 100ms

        waiting = asyncio.create_task(holder.select_policy())
        await self.wait_stats(lambda s: s["waiters"] == 1)
        waiting.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await waiting
        await self.wait_stats(lambda s: s["waiters"] == 0)
        self.assertTrue(await router.release(0))
        st = await self.client.stats()
        self.assertEqual((st["leases"], st["totals"]["idle"]), (0, 1))
        self.assertEqual(holder.held_leases(), {})


class ReleaseModeTest(unittest.TestCase):
    """The seed adapters ask for on_idle leases (the seed's contract), and
    drop the field, once, for a router that does not know it. Played
    against a stub: the router learns the field in parallel."""

    def stub(self, knows_release):
        bodies = []

        def handle(h, body):
            doc = json.loads(body) if body else {}
            bodies.append(doc)
            if h.path == "/select" and "release" in doc and not knows_release:
                reply(h, 422, {}, {"error": {"code": "validation_failed", "request_id": "r",
                                             "message": "invalid request: release is not a known field",
                                             "fields": {"release": "is not a known field"}}})
            elif h.path == "/select":
                reply(h, 200, {}, {"index": 1, "id": "p1", "url": "http://p1", "node_id": "", "lease_id": "l"})
            else:
                reply(h, 200, {}, {"released": True, "lease_id": "l"})

        server = LoopbackServer(handle)
        self.addCleanup(server.close)
        return server, bodies

    def selects(self, bodies):
        return [b.get("release") for b in bodies if "timeout_ms" in b]

    def test_sync(self):
        for knows, want in [(True, ["on_idle", "on_idle"]), (False, ["on_idle", None, None])]:
            with self.subTest(router_knows_release=knows):
                server, bodies = self.stub(knows)
                with Client(server.url) as c:
                    router = RemoteSyncRouter(c)
                    self.assertEqual(router.select_policy("env-0"), 1)
                    self.assertEqual(router.select_policy("env-0"), 1)
                self.assertEqual(self.selects(bodies), want)

    def test_async(self):
        for knows, want in [(True, ["on_idle", "on_idle"]), (False, ["on_idle", None, None])]:
            with self.subTest(router_knows_release=knows):
                server, bodies = self.stub(knows)

                async def run():
                    async with AsyncClient(server.url) as c:
                        router = AsyncRemoteSyncRouter(c)
                        return [await router.select_policy("env-0"), await router.select_policy("env-0")]

                self.assertEqual(asyncio.run(run()), [1, 1])
                self.assertEqual(self.selects(bodies), want)

    def test_other_validation_errors_are_raised(self):
        def handle(h, body):
            reply(h, 422, {}, {"error": {"code": "validation_failed", "message": "bad", "request_id": "r",
                                         "fields": {"env_id": "too long"}}})

        server = LoopbackServer(handle)
        self.addCleanup(server.close)
        with Client(server.url) as c, self.assertRaises(ValidationError) as cm:
            RemoteSyncRouter(c).select_policy("env-0")
        self.assertEqual(cm.exception.fields, {"env_id": "too long"})
