"""Client and AsyncClient answer the same calls identically: the same
methods and arguments, the same JSON and errors from the real binary, and
the same requests, retries and outcomes against a scripted server."""

import asyncio
import inspect
import json
import re
import unittest

import httpx

from policyrouter import AsyncClient, AsyncRemoteSyncRouter, Client, PolicyRouterError, RemoteSyncRouter, TransportError

from tests._server import Server
from tests.test_client import UNAVAILABLE, FakeServer, envelope

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")
# Durations measured by the server (time in an update's phase or step, an
# engine call's duration) differ from run to run.
DURATION = re.compile(r'"(in_phase_ms|in_step_ms|duration_ms)": [0-9.e+-]+')


def normalise(value):
    """JSON with the per-run parts (UUIDs, timestamps, durations) blanked."""
    text = json.dumps(value, sort_keys=True)
    text = DURATION.sub(r'"\1": "<duration>"', TIME.sub("<time>", UUID.sub("<uuid>", text)))
    return json.loads(text)


def public(cls):
    return {n for n in dir(cls) if not n.startswith("_")}


class SignatureTest(unittest.TestCase):
    def test_every_method_with_the_same_arguments(self):
        self.assertLessEqual(public(Client), public(AsyncClient))
        for name in sorted(public(Client)):
            sync, aio = getattr(Client, name), getattr(AsyncClient, name)
            if not callable(sync):
                continue
            with self.subTest(name):
                self.assertEqual(list(inspect.signature(sync).parameters.values()),
                                 list(inspect.signature(aio).parameters.values()))
                if name == "lease":
                    self.assertTrue(inspect.isasyncgenfunction(inspect.unwrap(aio)))
                else:
                    self.assertTrue(inspect.iscoroutinefunction(aio), name)
                self.assertEqual(inspect.getdoc(aio) is None, False, f"{name} has no docs")
        self.assertEqual(list(inspect.signature(Client).parameters), list(inspect.signature(AsyncClient).parameters))

    def test_the_sync_routers_too(self):
        for name in sorted(public(RemoteSyncRouter)):
            with self.subTest(name):
                self.assertTrue(hasattr(AsyncRemoteSyncRouter, name))
                self.assertEqual(list(inspect.signature(getattr(RemoteSyncRouter, name)).parameters),
                                 list(inspect.signature(getattr(AsyncRemoteSyncRouter, name)).parameters))


# One script of calls, as (method name, args, kwargs); ids are given so
# that both runs name the same policies.
SCRIPT = [
    ("healthz", (), {}),
    ("readyz", (), {}),
    ("select", (), {"timeout_ms": 0}),  # no policies: 503 no_policies
    ("register_policy", ("http://127.0.0.1:9/p0",), {"index": 0, "id": "p0", "capacity": 2, "labels": {"m": "1"}}),
    ("register_policy", ("http://127.0.0.1:9/p0",), {"index": 0, "id": "p0", "capacity": 2, "labels": {"m": "1"}}),
    ("register_policy", ("http://127.0.0.1:9/other",), {"index": 0}),  # 409
    ("register_policy", ("ftp://x",), {}),  # 422 with fields
    ("replace_registration", ([{"url": "http://127.0.0.1:9/p%d" % i, "index": i, "id": "p%d" % i} for i in range(4)],
                              {"a": {"env": {"ids": [0, 1]}, "eval": {"ids": [0, 1]}},
                               "b": {"env": {"ids": [2, 3]}, "eval": {"ids": [2, 3]}}}), {}),
    ("get_registration", (), {}),
    ("list_policies", (), {}),
    ("get_policy", (2,), {}),
    ("get_policy", ("p3",), {}),
    ("get_policy", ("nope",), {}),  # 404
    ("drain", (1,), {}),
    ("resume", ("p1",), {}),
    ("set_weights", (3,), {"max_staleness": 1, "force": True}),  # no policy at 2 yet: forced
    ("get_weights", (), {}),
    ("set_topology", ({"a": {"env": {"ids": [0, 1]}, "eval": {"ids": [0, 1]}},
                       "b": {"env": {"ids": [2, 3]}, "eval": {"ids": [2, 3]}}},), {}),
    ("get_topology", (), {}),
    ("set_weights", (0,), {}),
    ("assign", (5,), {"current_loads": [3, 1, 2, 0], "router": "simple"}),
    ("assign", (4,), {"env_ids": ["env-0", "env-3", "env-x", "env-1"], "router": "node_affinity"}),
    ("assign", (3,), {"session_ids": ["g", None, "g"]}),
    ("assign", (-1,), {}),  # 422
    ("complete", (0,), {"count": 1}),
    ("select", (), {"env_id": "env-2", "router": "idle_affinity"}),
    ("select", (), {"session_id": "traj-1", "sticky_wait_ms": 0}),
    ("select", (), {"router": "node_affinity", "env_id": "env-0"}),
    ("release", (), {"index": 2}),
    ("release", (), {"index": 2}),  # 404: no lease out
    ("release", (), {}),  # 422
    ("delete_policy", ("p3",), {}),
    ("delete_policy", ("p3",), {}),  # 404
    ("rolling_update", (1,), {"max_unavailable": 2}),
    ("rolling_update", (2,), {}),  # 409: one is running
    ("abort_update", ("nope",), {}),  # 404
    ("list_updates", (), {}),
]


def outcome(result=None, error=None):
    if error is not None:
        if not isinstance(error, PolicyRouterError):
            raise error
        return ["error", type(error).__name__, error.status, error.code, error.fields, normalise(error.message),
                getattr(error, "retry_after", None)]
    extra = [getattr(result, "created")] if hasattr(result, "created") else []
    return ["ok", normalise(result)] + extra


def run_sync(url):
    out = []
    with Client(url, timeout=5.0) as c:
        for name, args, kw in SCRIPT:
            try:
                out.append(outcome(getattr(c, name)(*args, **kw)))
            except PolicyRouterError as e:
                out.append(outcome(error=e))
    return out


async def run_async(url):
    out = []
    async with AsyncClient(url, timeout=5.0) as c:
        for name, args, kw in SCRIPT:
            try:
                out.append(outcome(await getattr(c, name)(*args, **kw)))
            except PolicyRouterError as e:
                out.append(outcome(error=e))
    return out


class SameAnswersTest(unittest.TestCase):
    def server(self):
        s = Server()
        self.addCleanup(lambda: self.assertEqual(s.stop(), 0))
        return s

    def test_the_real_binary_answers_both_alike(self):
        got_sync = run_sync(self.server().url)
        got_async = asyncio.run(run_async(self.server().url))
        self.assertEqual(len(got_sync), len(SCRIPT))
        for (name, _, _), s, a in zip(SCRIPT, got_sync, got_async):
            with self.subTest(name):
                self.assertEqual(s, a)
        kinds = [o[0] if o[0] == "ok" else o[1] for o in got_sync]
        # The script covers answers and every error class the binary gives.
        self.assertTrue({"ok", "UnavailableError", "ConflictError", "ValidationError", "NotFoundError"} <= set(kinds), kinds)

    def test_a_scripted_server_sees_the_same_requests(self):
        # Retries, dropped connections, error bodies: the core decides, so
        # both shells send the same requests and end the same way.
        def script(fake):
            fake.script[("GET", "/stats")] = [UNAVAILABLE, "drop", (200, {}, {"ok": 1})]
            fake.script[("POST", "/select")] = ["drop"]
            fake.script[("POST", "/assign")] = [(422, {}, envelope("validation_failed", "bad", fields={"num_tasks": "x"}))]
            fake.script[("PUT", "/topology")] = [(502, {"Content-Type": "text/html"}, b"<html>bad gateway</html>")]
            fake.script[("DELETE", "/policies/p")] = ["drop", (404, {}, envelope("not_found", "gone"))]
            fake.script[("POST", "/policies")] = [UNAVAILABLE, (201, {}, {"index": 4, "id": "x"})]

        calls = [("stats", (), {}), ("select", (), {"timeout_ms": 5}), ("assign", (1,), {}),
                 ("set_topology", ({},), {}), ("delete_policy", ("p",), {}),
                 ("register_policy", ("http://x:1",), {"index": 4})]

        def record(fake):
            return [(m, p, json.loads(b) if b else None,
                     {k: v for k, v in h.items() if k.lower() in ("authorization", "content-type", "accept")})
                    for m, p, h, b in fake.requests]

        def ended(call):
            try:
                return outcome(call())
            except TransportError as e:
                return ["transport", type(e).__name__, type(e.__cause__).__name__]
            except PolicyRouterError as e:
                return outcome(error=e)

        sync_fake, async_fake = FakeServer(), FakeServer()
        self.addCleanup(sync_fake.close)
        self.addCleanup(async_fake.close)
        script(sync_fake)
        script(async_fake)
        with Client(sync_fake.url, token="t", retries=2, backoff=0.001) as c:
            got_sync = [ended(lambda: getattr(c, n)(*a, **k)) for n, a, k in calls]

        async def run():
            out = []
            async with AsyncClient(async_fake.url, token="t", retries=2, backoff=0.001) as c:
                for n, a, k in calls:
                    try:
                        out.append(outcome(await getattr(c, n)(*a, **k)))
                    except TransportError as e:
                        out.append(["transport", type(e).__name__, type(e.__cause__).__name__])
                    except PolicyRouterError as e:
                        out.append(outcome(error=e))
            return out

        got_async = asyncio.run(run())
        self.assertEqual(got_sync, got_async)
        self.assertEqual(record(sync_fake), record(async_fake))
        # A select is never resent.
        self.assertEqual(got_sync[1], ["transport", "ConnectionLostError", "RemoteProtocolError"])
        self.assertEqual(sync_fake.count("GET", "/stats"), 3)


if __name__ == "__main__":
    unittest.main()
