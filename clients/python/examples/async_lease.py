import asyncio
import collections
import os

import httpx
from policyrouter import AsyncClient

router = os.environ.get("POLICYROUTER_URL", "http://127.0.0.1:8080")
landed = collections.Counter()


async def rollout(client, http, episode, turns):
    for turn in range(turns):
        # select; release on exit, on an error, and on cancellation
        async with client.lease(env_id="env-3", session_id=episode) as sel:
            landed[sel.get("sticky")] += 1  # "home", "moved" or "spilled"
            r = await http.post(sel["url"] + "/generate",
                                json={"text": f"{episode}, turn {turn}", "sampling_params": {"max_new_tokens": 8}})
            r.raise_for_status()


async def main():
    async with AsyncClient(router, pool_maxsize=64) as client, httpx.AsyncClient(timeout=60) as http:
        await asyncio.gather(*(rollout(client, http, f"ep-{i}", 4) for i in range(64)))
        print(f"{sum(landed.values())} turns: {dict(landed)}")


asyncio.run(main())
