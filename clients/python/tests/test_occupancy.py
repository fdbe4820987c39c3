"""Occupancy truth through the recommended asyncio loop.

200 episodes x 3 turns on one event loop, each turn ``async with
client.lease(...)``, an env step, then the generation request sent to the
policy, against the real router and simulated SGLang engines that report
their load (``GET /v1/loads``): 4 policies x capacity 4. No engine may ever
hold more than its capacity, nor any policy more lease holders; with
session ids and the default settings most turns find their episode's
policy, at about the wall time of the same run without sessions (the
fastest of five runs of each, alternating).
"""

from __future__ import annotations

import asyncio
import collections
import random
import subprocess
import time

import httpx

from tests._server import AsyncServerTestCase, binary

POLICIES = 4
CAPACITY = 4
EPISODES = 200
TURNS = 3


class OccupancyTest(AsyncServerTestCase):
    # The poller on, fast, so that the engines' loads are read.
    server_args = ("--poll-interval", "20ms")

    def setUp(self) -> None:
        super().setUp()
        # Work items of 20-60 ms; the SGLang stand-in queues beyond
        # --max-running, reporting running + waiting as its load.
        self.fake = subprocess.Popen(
            [binary(), "fake-policy", "--engine", "sglang", "--n", str(POLICIES), "--max-running", str(CAPACITY),
             "--min-work", "20ms", "--max-work", "60ms"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.urls = [self.fake.stdout.readline().strip() for _ in range(POLICIES)]
        self.addCleanup(self._stop_fake)

    def _stop_fake(self) -> None:
        self.fake.terminate()
        self.fake.wait(timeout=10)
        self.fake.stdout.close()

    async def _run(self, http: httpx.AsyncClient, sessions: bool, seed: int) -> dict:
        """One run of EPISODES concurrent episodes; returns its figures."""
        rng = random.Random(seed)
        holders = collections.Counter()  # lease holders per policy, now
        peak_holders = collections.Counter()
        outcomes = collections.Counter()
        episodes_on_one = 0

        async def episode(e: int) -> None:
            nonlocal episodes_on_one
            used = set()
            for turn in range(TURNS):
                kw = {"session_id": f"run{seed}-ep{e}"} if sessions else {}
                async with self.client.lease(env_id=f"env-{e}", timeout_ms=60000, **kw) as sel:
                    i = sel["index"]
                    used.add(i)
                    outcomes[sel.get("sticky", "none")] += 1
                    holders[i] += 1
                    peak_holders[i] = max(peak_holders[i], holders[i])
                    try:
                        await asyncio.sleep(rng.uniform(0, 0.02))  # the env steps first
                        r = await http.post(sel["url"] + "/generate",
                                            json={"text": "turn %d" % turn, "sampling_params": {"max_new_tokens": 8}})
                        r.raise_for_status()
                    finally:
                        holders[i] -= 1
            episodes_on_one += len(used) == 1

        start = time.monotonic()
        await asyncio.gather(*(episode(e) for e in range(EPISODES)))
        wall = time.monotonic() - start
        return {"wall": wall, "peak_holders": max(peak_holders.values()), "outcomes": outcomes,
                "episodes_on_one": episodes_on_one}

    async def _peak_engine_load(self, http: httpx.AsyncClient) -> int:
        peaks = [(await http.get(u + "/peak")).json()["peak_load"] for u in self.urls]
        return max(peaks)

    async def test_lease_loop_never_exceeds_capacity_and_sessions_stick(self):
        await self.client.replace_policies(
            [{"url": u, "index": i, "capacity": CAPACITY, "engine": "sglang"} for i, u in enumerate(self.urls)])
        await self.wait_stats(lambda st: all(p["state"] == "idle" for p in st["policies"]))
        async with httpx.AsyncClient(timeout=30.0, limits=httpx.Limits(max_connections=EPISODES)) as http:
            # Alternate the two kinds of run, so that a burst of load on a
            # shared machine falls on both, and report the fastest of
            # each: the run least disturbed by whatever else the machine
            # does.
            walls = {True: [], False: []}
            for seed in range(5):
                for sessions in (True, False):
                    got = await self._run(http, sessions, seed)
                    walls[sessions].append(got["wall"])
                    with self.subTest(seed=seed, sessions=sessions):
                        self.assertLessEqual(got["peak_holders"], CAPACITY, got)
                    if sessions:
                        turns = EPISODES * TURNS
                        hit_rate = got["outcomes"]["home"] / turns
                        print(f"\n  [measured] run {seed} with sessions: sticky home {hit_rate:.2f} of {turns} turns, "
                              f"{got['episodes_on_one']} of {EPISODES} episodes on one policy, {got['wall']:.2f} s",
                              end="")
                        self.assertGreaterEqual(hit_rate, 0.8, got["outcomes"])
                    # Nothing is out once every block has ended.
                    st = await self.wait_stats(lambda st: st["leases"] == 0)
                    self.assertEqual(st["leases_ended"]["probe"], 0, "an explicit lease was ended by a probe")
            peak_load = await self._peak_engine_load(http)
        with_s, without = min(walls[True]), min(walls[False])
        print(f"\n  [measured] fastest of 5: {with_s:.2f} s with sessions, {without:.2f} s without "
              f"({with_s / without:.2f}x); peak engine load {peak_load} of {CAPACITY}")
        self.assertLessEqual(peak_load, CAPACITY)
        # The two walls are printed, not compared: a timed assertion fails
        # on a loaded machine, and what sessions cost in time is a
        # benchmark's figure, not a property of the lease loop.


if __name__ == "__main__":
    import unittest

    unittest.main()
