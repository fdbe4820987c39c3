"""AsyncClient against the real binary: the calls, lease(), cancellation
(a cancelled waiting select leaves the router's waiters and takes no
policy), many coroutines on one thread, and fail-over with stub routers."""

import asyncio
import concurrent.futures
import statistics
import sys
import threading
import time
import unittest

import httpx

from policyrouter import (AsyncClient, ConnectionFailedError, ConnectionLostError, NotFound, NotLeader, Unavailable,
                          ValidationError)
from policyrouter.client import request_was_not_sent

from tests._server import AsyncServerTestCase
from tests.test_failover import Stub, dead_url


def report(line: str) -> None:
    """A measured figure, for the test log (the README and the report
    quote them)."""
    sys.stderr.write("\n  [measured] " + line + "\n")


class NoThreads(concurrent.futures.ThreadPoolExecutor):
    """A default executor that refuses work: any loop.run_in_executor (a
    DNS lookup, say) fails the test instead of starting a thread."""

    def submit(self, fn, /, *args, **kwargs):
        raise AssertionError(f"the event loop was asked to run {fn!r} in a thread")


class AsyncCallsTest(AsyncServerTestCase):
    async def test_registration_routing_and_errors(self):
        c = self.client
        self.assertEqual(await c.healthz(), {"status": "ok"})
        p = await c.register_policy("http://127.0.0.1:9/a", node_id="n", index=0, capacity=2)
        self.assertTrue(p.created)
        again = await c.register_policy("http://127.0.0.1:9/a", node_id="n", index=0, capacity=2)
        self.assertFalse(again.created)
        await c.register_policy("http://127.0.0.1:9/b", node_id="n", index=1)
        self.assertEqual([q["index"] for q in await c.list_policies()], [0, 1])
        self.assertTrue((await c.drain(1))["draining"])
        self.assertFalse((await c.resume(1))["draining"])
        self.assertEqual((await c.assign(3, current_loads=[2, 0]))["assignments"], [1, 1, 0])
        sel = await c.select(timeout_ms=0)
        self.assertEqual((sel["index"], sel["version"]), (0, 0))
        self.assertEqual((await c.release(lease_id=sel["lease_id"]))["released"], True)
        self.assertEqual(await c.complete(0), {"index": 0, "load": 0})
        with self.assertRaises(ValidationError) as cm:
            await c.assign(-1)
        self.assertIn("num_tasks", cm.exception.fields)
        with self.assertRaises(NotFound):
            await c.get_policy("nope")
        await c.delete_policy(1)
        with self.assertRaises(NotFound):
            await c.get_policy(1)

    async def test_rolling_update_with_an_async_progress_callback(self):
        await self.register_n(2, nodes=["a", "b"])
        update = await self.client.rolling_update(4)

        async def confirm(u):
            if u["ready"]:
                await self.client.update_done(u["id"], u["ready"])

        done = await self.client.wait_update(update["id"], timeout=30, on_progress=confirm, poll_s=0.02)
        self.assertEqual(done["state"], "succeeded")
        self.assertEqual([p["version"] for p in await self.client.list_policies()], [4, 4])

    async def test_select_session_says_where_it_landed(self):
        await self.register_n(4)
        first = await self.client.select(session_id="traj-1")
        self.assertEqual(first["sticky"], "home")
        await self.client.release(lease_id=first["lease_id"])
        again = await self.client.select(session_id="traj-1")
        self.assertEqual((again["index"], again["sticky"]), (first["index"], "home"))


class LeaseTest(AsyncServerTestCase):
    async def test_released_on_exit_error_and_cancellation(self):
        await self.register_n(2)
        async with self.client.lease() as sel:
            self.assertEqual((await self.client.stats())["leases"], 1)
            self.assertEqual(sel["index"], 0)
        self.assertEqual((await self.client.stats())["leases"], 0)

        with self.assertRaises(ZeroDivisionError):
            async with self.client.lease():
                1 / 0
        self.assertEqual((await self.client.stats())["leases"], 0)

        inside = asyncio.Event()

        async def rollout():
            async with self.client.lease(env_id="env-1"):
                inside.set()
                await asyncio.sleep(60)

        task = asyncio.create_task(rollout())
        await inside.wait()
        self.assertEqual((await self.client.stats())["leases"], 1)
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        st = await self.wait_stats(lambda s: s["leases"] == 0)
        self.assertEqual(st["totals"]["idle"], 2)

    async def test_a_lease_the_router_already_ended_warns(self):
        from policyrouter import LeaseEndedWarning

        await self.register_n(1)
        with self.assertWarnsRegex(LeaseEndedWarning, r"lease \S+ had already ended .*how: release"):
            async with self.client.lease() as sel:
                await self.client.release(lease_id=sel["lease_id"])  # ended early
        self.assertEqual(self.client.leases_ended_before_release, 1)
        async with self.client.lease(router="node_affinity") as sel:  # no lease at all
            self.assertNotIn("lease_id", sel)
        async with self.client.lease():
            pass
        self.assertEqual(self.client.leases_ended_before_release, 1)


class CancellationTest(AsyncServerTestCase):
    async def hold_all(self, n=1):
        await self.register_n(n)
        return [await self.client.select(timeout_ms=0) for _ in range(n)]

    async def test_a_cancelled_select_leaves_the_waiters_and_takes_no_policy(self):
        (held,) = await self.hold_all()
        loop = asyncio.get_running_loop()
        figures = []
        for _ in range(10):
            task = asyncio.create_task(self.client.select(timeout_ms=30000))
            await self.wait_stats(lambda s: s["waiters"] == 1)
            t0 = loop.time()
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            await self.wait_stats(lambda s: s["waiters"] == 0, interval=0.001)
            figures.append((loop.time() - t0) * 1000)
        report("cancelled select gone from /stats waiters after %.1f ms median, %.1f ms max (10 runs, "
               "polling /stats)" % (statistics.median(figures), max(figures)))
        # The issue asks for 100 ms; polling /stats adds its own round
        # trips, so the bound asserted is a generous multiple of it.
        self.assertLess(max(figures), 1000)

        # The freed policy is not taken by a leftover request.
        await self.client.release(lease_id=held["lease_id"])
        st = await self.client.stats()
        self.assertEqual((st["leases"], st["waiters"], st["totals"]["idle"]), (0, 0, 1))
        self.assertEqual((await self.client.select(timeout_ms=0))["index"], 0)

    async def test_wait_for_timeout_takes_no_policy(self):
        # The case: asyncio.wait_for around a waiting select.
        (held,) = await self.hold_all()
        with self.assertRaises(asyncio.TimeoutError):
            await asyncio.wait_for(self.client.select(timeout_ms=30000), 0.2)
        await self.wait_stats(lambda s: s["waiters"] == 0)
        await self.client.release(lease_id=held["lease_id"])
        st = await self.client.stats()
        self.assertEqual((st["leases"], st["totals"]["idle"]), (0, 1))

    async def test_many_cancelled_at_once(self):
        await self.hold_all(2)
        tasks = [asyncio.create_task(self.client.select(timeout_ms=30000)) for _ in range(200)]
        await self.wait_stats(lambda s: s["waiters"] == 200)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        st = await self.wait_stats(lambda s: s["waiters"] == 0)
        self.assertEqual(st["leases"], 2)
        # The client still works after 200 closed connections.
        self.assertEqual((await self.client.healthz())["status"], "ok")


class ManyCoroutinesTest(AsyncServerTestCase):
    client_kw = {"pool_maxsize": 1100}

    async def asyncSetUp(self):
        await super().asyncSetUp()
        asyncio.get_running_loop().set_default_executor(NoThreads())
        self.threads = set(threading.enumerate())

    def assert_no_new_threads(self):
        self.assertEqual(set(threading.enumerate()) - self.threads, set())

    async def test_500_coroutines_20_cycles_16_policies_one_thread(self):
        await self.register_n(16)
        holders = {}
        loop_thread = threading.get_ident()
        not_released = []

        async def worker(w):
            for _ in range(20):
                sel = await self.client.select(timeout_ms=120000)
                self.assertEqual(threading.get_ident(), loop_thread)
                i = sel["index"]
                self.assertNotIn(i, holders, f"policy {i} handed to coroutine {w} while {holders.get(i)} holds it")
                holders[i] = w
                await asyncio.sleep(0)  # let the others run while it is held
                del holders[i]  # before the release: the router may hand it out at once
                if not (await self.client.release(lease_id=sel["lease_id"]))["released"]:
                    not_released.append(sel["lease_id"])

        t0 = time.monotonic()
        peak = []

        async def watch():
            while True:
                peak.append(len(threading.enumerate()))
                await asyncio.sleep(0.05)

        watcher = asyncio.create_task(watch())
        await asyncio.gather(*(worker(w) for w in range(500)))
        watcher.cancel()
        took = time.monotonic() - t0
        report("500 coroutines x 20 select/release on 16 policies: %.1f s, %.0f calls/s" % (took, 20000 / took))
        self.assertEqual(not_released, [])
        st = await self.client.stats()
        self.assertEqual((st["waiters"], st["leases"]), (0, 0))
        self.assertEqual(sum(p["selected_total"] for p in st["policies"]), 10000)
        self.assertLessEqual(max(peak), len(self.threads))
        self.assert_no_new_threads()

    async def test_1000_waiting_selects_on_one_event_loop(self):
        await self.register_n(1)
        held = await self.client.select(timeout_ms=0)
        served = []

        async def wait_and_pass_on(w):
            sel = await self.client.select(timeout_ms=120000)
            served.append(w)
            await self.client.release(lease_id=sel["lease_id"])

        tasks = [asyncio.create_task(wait_and_pass_on(w)) for w in range(1000)]
        t0 = time.monotonic()
        await self.wait_stats(lambda s: s["waiters"] == 1000, timeout=60, interval=0.05)
        report("1000 selects waiting on one event loop after %.1f s, %d threads in the process"
               % (time.monotonic() - t0, threading.active_count()))
        self.assert_no_new_threads()
        # One release starts a chain: each waiter gets the policy in turn
        # and passes it on.
        await self.client.release(lease_id=held["lease_id"])
        await asyncio.gather(*tasks)
        self.assertEqual(sorted(served), list(range(1000)))
        st = await self.client.stats()
        self.assertEqual((st["waiters"], st["leases"]), (0, 0))
        self.assert_no_new_threads()


class AsyncFailoverTest(unittest.IsolatedAsyncioTestCase):
    """The fail-over rules are the core's, the same for both shells; these
    are the sync suite's main cases, on AsyncClient."""

    def stub(self, *a, **kw):
        s = Stub(*a, **kw)
        self.addCleanup(s.kill)
        return s

    async def client(self, urls, **kw):
        kw.setdefault("timeout", 5.0)
        kw.setdefault("backoff", 0.01)
        c = AsyncClient(urls, **kw)
        self.addAsyncCleanup(c.aclose)
        return c

    async def test_follows_the_named_leader(self):
        leader = self.stub("l")
        other = self.stub("o", role="follower", leader=leader.url)
        follower = self.stub("f", role="follower", leader=leader.url)
        c = await self.client([follower.url, other.url, leader.url])
        self.assertEqual((await c.select())["replica"], "l")
        self.assertEqual((other.count(), c.base_url), (0, leader.url))

    async def test_refused_connections_rotate(self):
        leader = self.stub("l")
        c = await self.client([dead_url(), dead_url(), leader.url], retries=0)
        self.assertEqual((await c.assign(1))["replica"], "l")
        self.assertEqual(c.base_url, leader.url)

    async def test_a_dropped_select_is_not_resent(self):
        dropper = self.stub("d", role="drop")
        leader = self.stub("l")
        c = await self.client([dropper.url, leader.url])
        with self.assertRaises(ConnectionLostError) as cm:
            await c.select()
        self.assertIsInstance(cm.exception.__cause__, httpx.RemoteProtocolError)
        self.assertFalse(request_was_not_sent(cm.exception))
        self.assertEqual((dropper.count("/select"), leader.count()), (1, 0))

    async def test_no_leader_anywhere_raises_not_leader_within_the_bound(self):
        f1 = self.stub("f1", role="follower", retry_after="1")
        f2 = self.stub("f2", role="follower", retry_after="1")
        c = await self.client([f1.url, f2.url], failover_timeout=0.5)
        t0 = time.monotonic()
        with self.assertRaises(NotLeader):
            await c.select()
        self.assertLess(time.monotonic() - t0, 5.0)

    async def test_all_routers_dead(self):
        c = await self.client([dead_url(), dead_url()], failover_timeout=0.5)
        with self.assertRaises(ConnectionFailedError) as cm:
            await c.select()
        self.assertIsInstance(cm.exception.__cause__, httpx.ConnectError)

    async def test_election_then_success(self):
        a = self.stub("a")
        b = self.stub("b", role="follower", leader=a.url)
        d = self.stub("d", role="follower", leader=a.url)
        c = await self.client([a.url, b.url, d.url], failover_timeout=10.0)
        self.assertEqual((await c.select())["replica"], "a")
        a.kill()
        b.set("follower", None)
        d.set("follower", None)

        async def elect():
            await asyncio.sleep(0.5)
            d.set("leader")
            b.set("follower", d.url)

        election = asyncio.create_task(elect())
        self.assertEqual((await c.select())["replica"], "d")
        await election


class UnavailableTest(AsyncServerTestCase):
    async def test_select_timeout_is_unavailable_with_retry_after(self):
        await self.register_n(1)
        await self.client.select()
        with self.assertRaises(Unavailable) as cm:
            await self.client.select(timeout_ms=50)
        self.assertEqual((cm.exception.code, cm.exception.retry_after), ("no_idle_policy", 1.0))


if __name__ == "__main__":
    unittest.main()
