"""Generate through the router's proxy mode from asyncio, with httpx.

The router carries the generate traffic itself: POST SGLang's native
/generate and OpenAI's /v1/chat/completions to the router, and it picks
the policy (the same decision as /select), holds the policy's slot exactly
as long as the request, and streams the answer through. The session id in
X-Session-ID keeps an episode's turns on one policy, whose prefix cache
holds the conversation; X-Sticky-Wait-MS lets a turn wait for that policy
when it is busy rather than go elsewhere.

    python3 proxy_stream.py http://127.0.0.1:8080 [--episodes 8] [--turns 3]

against, e.g., `policyrouter demo` (its simulated policies serve both
endpoints). It prints, per episode, the policies its turns landed on.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from typing import Dict, List

import httpx


async def events(http: httpx.AsyncClient, path: str, body: Dict, session: str, env: str):
    """POST body to path through the router and yield the policy's index,
    then each server-sent event's JSON until "data: [DONE]". An error
    event (a policy that failed mid-stream) raises."""
    headers = {"X-Session-ID": session, "X-Env-ID": env, "X-Sticky-Wait-MS": "5000"}
    async with http.stream("POST", path, json=body, headers=headers) as res:
        res.raise_for_status()
        policy = res.headers["X-Policy-Index"]
        yield policy
        async for line in res.aiter_lines():
            line = line.strip()  # httpx 0.23 keeps the line ending
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: "):])
            if "error" in event:
                raise RuntimeError(f"policy {policy} failed mid-stream: {event['error']['message']}")
            yield event


async def stream_generate(http: httpx.AsyncClient, session: str, env: str, prompt: str) -> Dict:
    """One turn on SGLang's native /generate, streamed: each event's
    "text" is the whole text so far."""
    body = {"text": prompt, "stream": True, "sampling_params": {"max_new_tokens": 8}}
    stream = events(http, "/generate", body, session, env)
    policy, text = await stream.__anext__(), ""
    async for event in stream:
        text = event["text"]
    return {"policy": policy, "text": text}


async def stream_chat(http: httpx.AsyncClient, session: str, env: str, messages: List[Dict]) -> Dict:
    """One turn on OpenAI's /v1/chat/completions, streamed: each chunk
    carries the next piece of the answer."""
    body = {"model": "policy", "stream": True, "max_tokens": 8, "messages": messages}
    stream = events(http, "/v1/chat/completions", body, session, env)
    policy, pieces = await stream.__anext__(), []
    async for chunk in stream:
        pieces.append(chunk["choices"][0]["delta"].get("content") or "")
    return {"policy": policy, "text": "".join(pieces)}


async def episode(http: httpx.AsyncClient, i: int, turns: int) -> List[str]:
    session, env = f"episode-{i}", f"env-{i % 4}"
    messages: List[Dict] = [{"role": "user", "content": "start"}]
    landed = []
    for t in range(turns):
        if t % 2 == 0:
            out = await stream_generate(http, session, env, f"turn {t}")
        else:
            out = await stream_chat(http, session, env, messages)
            messages += [{"role": "assistant", "content": out["text"]}, {"role": "user", "content": "go on"}]
        landed.append(out["policy"])
    return landed


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("url", nargs="?", default=os.environ.get("POLICYROUTER_URL", "http://127.0.0.1:8080"))
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--token", default=os.environ.get("POLICYROUTER_TOKEN"), help="a token with scope route")
    args = ap.parse_args()
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    async with httpx.AsyncClient(base_url=args.url, headers=headers, timeout=60) as http:
        results = await asyncio.gather(*(episode(http, i, args.turns) for i in range(args.episodes)))
    for i, landed in enumerate(results):
        print(f"episode-{i}: turns on policies {landed}")
    sticky = sum(len(set(landed)) == 1 for landed in results)
    print(f"{sticky} of {len(results)} episodes kept one policy for all their turns")


if __name__ == "__main__":
    asyncio.run(main())
