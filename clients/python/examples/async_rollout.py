#!/usr/bin/env python3
"""An AReaL-style asyncio rollout loop on policyrouter, on one event loop.

    policyrouter serve &                                 # in another terminal
    python3 async_rollout.py [BASE_URL] [--coroutines 64] [--episodes 256] [--turns 4]

- 64 rollout coroutines share one AsyncClient. Each runs multi-turn
  episodes: every turn takes a policy with ``async with client.lease(...)``
  naming the episode as ``session_id``, so the turns of an episode go back
  to the policy that holds its prefix in its KV cache (``sticky`` says
  where each landed), sends its generation request there with
  ``httpx.AsyncClient``, and releases the policy on the way out, also when
  the turn fails or is cancelled.
- Meanwhile a trainer coroutine publishes a new weight version every
  ``--step-s`` seconds: the policies load it (here: the stand-ins report it
  in their ``/idle`` answers) and ``PUT /weights`` moves the floor
  (``max_staleness=1``), so no turn is dispatched to a policy more than one
  version behind.

The policies are stand-ins served on this event loop (``GET /idle`` with
their weight version, ``POST /generate`` answering after a few ms). The
router needs its poller on (``serve``'s default) to hear their versions.
The script registers them with ``PUT /registration`` only on a router that
has no registration (``--replace`` to take one over), and at the end
removes what it registered, unless someone changed the registration since.
"""

import argparse
import asyncio
import collections
import json
import os
import sys

import httpx

try:
    import policyrouter  # noqa: F401
except ImportError:  # running from a checkout: use the package next door
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from policyrouter import AsyncClient


class StandIns:
    """Stand-in policy servers on this event loop: each answers
    ``GET /idle`` with ``{"idle": true, "version": v}`` and any POST with a
    short generated text."""

    def __init__(self):
        self.version = 0
        self.servers = []

    async def start(self, n):
        for _ in range(n):
            self.servers.append(await asyncio.start_server(self._serve, "127.0.0.1", 0))
        return ["http://127.0.0.1:%d" % s.sockets[0].getsockname()[1] for s in self.servers]

    async def _serve(self, reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                method = head.split(b" ", 1)[0]
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                if length:
                    await reader.readexactly(length)
                if method == b"GET":
                    body = {"idle": True, "version": self.version}
                else:
                    await asyncio.sleep(0.005)  # "generating"
                    body = {"text": "...", "version": self.version}
                payload = json.dumps(body).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(payload), payload))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stop(self):
        for s in self.servers:
            s.close()
            await s.wait_closed()


async def register(client, urls, replace):
    """Register the stand-ins on two nodes; refuse to replace someone
    else's registration unless asked to."""
    current = await client.get_registration()
    if (current["policies"] or current["topology"]) and not replace:
        sys.exit("the router already has a registration (%d policies); this example replaces the whole "
                 "registration: run it against a router of your own, or pass --replace" % len(current["policies"]))
    half = len(urls) // 2
    topology = {
        "node-a": {"env": {"ids": [0, 1]}, "eval": {"ids": list(range(half))}},
        "node-b": {"env": {"ids": [2, 3]}, "eval": {"ids": list(range(half, len(urls)))}},
    }
    reg = await client.replace_registration([{"url": u, "index": i} for i, u in enumerate(urls)], topology)
    return {p["id"] for p in reg["policies"]}


async def unregister(client, ours):
    """Remove the stand-ins, unless the registration changed meanwhile."""
    current = await client.get_registration()
    if {p["id"] for p in current["policies"]} == ours:
        await client.replace_registration([], {})
    else:
        print("the registration changed during the run: left as it is")


async def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base_url", nargs="?", default=os.environ.get("POLICYROUTER_URL", "http://127.0.0.1:8080"))
    ap.add_argument("--coroutines", type=int, default=64)
    ap.add_argument("--episodes", type=int, default=256)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--policies", type=int, default=8)
    ap.add_argument("--step-s", type=float, default=0.3, help="seconds between weight versions")
    ap.add_argument("--replace", action="store_true", help="replace an existing registration")
    args = ap.parse_args(argv[1:])

    stand_ins = StandIns()
    urls = await stand_ins.start(args.policies)
    async with AsyncClient(args.base_url, token=os.environ.get("POLICYROUTER_TOKEN"),
                           pool_maxsize=args.coroutines) as client, httpx.AsyncClient() as http:
        ours = await register(client, urls, args.replace)
        try:
            await run(client, http, stand_ins, args)
        finally:
            await unregister(client, ours)
            await stand_ins.stop()


async def run(client, http, stand_ins, args):
    # A just-registered policy gets work once the router has heard from it.
    while (await client.stats())["totals"]["unknown"]:
        await asyncio.sleep(0.05)
    await client.set_weights(0, max_staleness=1)

    episodes = asyncio.Queue()
    for n in range(args.episodes):
        episodes.put_nowait(n)
    sticky = collections.Counter()
    versions = collections.Counter()
    below_floor = []
    floor = {"min_version": 0}

    async def rollout():
        while True:
            try:
                n = episodes.get_nowait()
            except asyncio.QueueEmpty:
                return
            episode, env_id = "ep-%d" % n, "env-%d" % (n % 4)
            for turn in range(args.turns):
                asked_floor = floor["min_version"]
                async with client.lease(env_id=env_id, session_id=episode, sticky_wait_ms=50,
                                        timeout_ms=30000) as sel:
                    sticky[sel.get("sticky")] += 1
                    versions[sel.get("version")] += 1
                    if sel.get("version", 0) < asked_floor:
                        below_floor.append((episode, turn, sel))
                    r = await http.post(sel["url"] + "/generate", json={"session": episode, "turn": turn})
                    r.raise_for_status()

    async def trainer():
        version = 0
        while True:
            await asyncio.sleep(args.step_s)
            version += 1
            stand_ins.version = version  # the policies load the new weights
            floor.update(await client.set_weights(version, max_staleness=1))

    train = asyncio.create_task(trainer())
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    try:
        await asyncio.gather(*(rollout() for _ in range(args.coroutines)))
    finally:
        train.cancel()
    took = loop.time() - t0
    turns = args.episodes * args.turns
    st = await client.stats()
    print("%d episodes done: %d turns by %d coroutines in %.1fs (%.0f turns/s)"
          % (args.episodes, turns, args.coroutines, took, turns / took))
    print("sticky: %s; router hit rate %.2f" % (dict(sticky), st["sticky"]["hit_rate"]))
    print("versions dispatched: %s; floor at the end: %d" % (dict(sorted(versions.items())), floor["min_version"]))
    print("turns dispatched below the floor: %d" % len(below_floor))
    print("router: %d waiters, %d leases out" % (st["waiters"], st["leases"]))
    if below_floor:
        sys.exit(1)


if __name__ == "__main__":
    asyncio.run(main(sys.argv))
