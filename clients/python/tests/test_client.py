"""Client tests: against the real policyrouter binary (ServerTestCase), and
against a scripted fake server for what the binary cannot be made to do on
demand (dropped connections, proxy errors, 503 then success)."""

import asyncio
import copy
import json
import pickle
import random
import socket
import threading
import time
import unittest
import warnings
from email.utils import formatdate

import httpx

from policyrouter import (
    AuthError,
    Client,
    Conflict,
    ConnectionFailedError,
    ConnectionLostError,
    ForbiddenError,
    NotFound,
    PolicyRouterError,
    UnauthorizedError,
    Unavailable,
    ValidationError,
)
from policyrouter import _core
from policyrouter.client import request_was_not_sent
from policyrouter.errors import parse_retry_after

from tests import seed_reference as seed
from tests._server import ServerTestCase, wait_until
from tests._stub import LoopbackServer, drop, reply


class RegistrationTest(ServerTestCase):
    def test_health(self):
        self.assertEqual(self.client.healthz(), {"status": "ok"})
        # Alive, but not ready before a policy can be routed to.
        with self.assertRaises(Unavailable) as cm:
            self.client.readyz()
        self.assertEqual((cm.exception.status, cm.exception.code), (503, "no_policies"))
        self.assertIn("PUT /registration", str(cm.exception))
        self.client.register_policy("http://127.0.0.1:9/a")  # no poller: trusted at once
        self.assertEqual(self.client.readyz(), {"status": "ok"})

    def test_register_list_get_delete(self):
        a = self.client.register_policy("http://127.0.0.1:9/a", node_id="node-a", index=0,
                                        capacity=2, labels={"model": "m1"})
        self.assertTrue(a.created)
        self.assertEqual((a["index"], a["url"], a["node_id"], a["capacity"], a["labels"], a["draining"]),
                         (0, "http://127.0.0.1:9/a", "node-a", 2, {"model": "m1"}, False))
        b = self.client.register_policy("http://127.0.0.1:9/b", id="pol-b")
        self.assertEqual((b["index"], b["id"]), (1, "pol-b"))  # lowest free index

        listed = self.client.list_policies()
        self.assertEqual([p["index"] for p in listed], [0, 1])
        self.assertEqual(listed[0], dict(a))
        self.assertEqual(self.client.get_policy("pol-b"), dict(b))

        self.assertIsNone(self.client.delete_policy(a["id"]))
        with self.assertRaises(NotFound) as cm:
            self.client.get_policy(a["id"])
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "not_found"))
        self.assertTrue(cm.exception.request_id)
        with self.assertRaises(NotFound):
            self.client.delete_policy(a["id"])
        self.assertEqual([p["id"] for p in self.client.list_policies()], ["pol-b"])

    def test_ids_with_odd_characters_are_quoted(self):
        for i, pid in enumerate(["a b:c", "x!'()*$&+,;=@~", "<tag>[1]"]):
            with self.subTest(id=pid):
                self.client.register_policy("http://127.0.0.1:9/", id=pid, index=i)
                self.assertEqual(self.client.get_policy(pid)["id"], pid)
                self.assertTrue(self.client.drain(pid)["draining"])
                self.client.delete_policy(pid)
        with self.assertRaises(ValueError):
            self.client.get_policy("")

    def test_reregister_is_idempotent(self):
        first = self.client.register_policy("http://127.0.0.1:9/", node_id="n", index=3)
        again = self.client.register_policy("http://127.0.0.1:9/", node_id="n", index=3)
        self.assertTrue(first.created)
        self.assertFalse(again.created)
        self.assertEqual(dict(first), dict(again))
        by_id = self.client.register_policy("http://127.0.0.1:9/", node_id="n", id=first["id"])
        self.assertFalse(by_id.created)
        self.assertEqual(by_id["index"], 3)
        self.assertEqual(len(self.client.list_policies()), 1)
        self.assertIn("created=False", repr(again))
        self.assertEqual(pickle.loads(pickle.dumps(again)).created, False)

    def test_conflict(self):
        self.client.register_policy("http://127.0.0.1:9/", index=0)
        with self.assertRaises(Conflict) as cm:
            self.client.register_policy("http://127.0.0.1:9/other", index=0)
        e = cm.exception
        self.assertEqual((e.status, e.code), (409, "conflict"))
        self.assertIn("index 0", e.message)
        self.assertIsInstance(e, PolicyRouterError)

    def test_replace_policies(self):
        got = self.client.replace_policies(
            [{"url": "http://127.0.0.1:9/%d" % i, "index": i, "node_id": "n%d" % (i % 2)} for i in (2, 0, 1)])
        self.assertEqual([p["index"] for p in got], [0, 1, 2])
        self.assertEqual(got, self.client.list_policies())
        self.assertEqual(self.client.replace_policies([]), [])
        self.assertEqual(self.client.list_policies(), [])

    def test_validation_error_fields(self):
        with self.assertRaises(ValidationError) as cm:
            self.client.register_policy("ftp://127.0.0.1/")
        self.assertIn("url", cm.exception.fields)
        self.assertIsInstance(cm.exception, ValueError)
        with self.assertRaises(ValidationError) as cm:
            self.client.register_policy("http://127.0.0.1:9/", capacity=0)
        self.assertIn("capacity", cm.exception.fields)

    def test_drain_resume(self):
        ps = self.register_n(2)
        drained = self.client.drain(ps[0]["id"])
        self.assertTrue(drained["draining"])
        self.assertEqual(self.client.select(timeout_ms=0)["index"], 1)
        # a draining policy gets no tasks, even in stateless mode
        self.assertEqual(self.client.assign(3, current_loads=[0, 5])["assignments"], [1, 1, 1])
        self.assertTrue(self.client.drain(ps[0]["id"])["draining"])  # idempotent
        self.assertFalse(self.client.resume(ps[0]["id"])["draining"])
        self.assertEqual(self.client.select(timeout_ms=0)["index"], 0)
        with self.assertRaises(NotFound):
            self.client.drain("nope")

    def test_topology_round_trip(self):
        self.register_n(3)
        topo = {
            "node-a": {"env": {"ids": [0, 1]}, "eval": {"ids": [0, 1]}},
            "node-b": {"env": {"ids": [2]}, "eval": {"ids": [2]}},
        }
        self.assertEqual(self.client.set_topology(copy.deepcopy(topo)), topo)
        self.assertEqual(self.client.get_topology(), topo)
        # a policy registered without node_id takes the node of its eval id
        self.assertEqual([p["node_id"] for p in self.client.list_policies()], ["node-a", "node-a", "node-b"])

    def test_a_typo_in_the_topology_names_its_path(self):
        self.register_n(1)
        with self.assertRaises(ValidationError) as cm:
            self.client.set_topology({"node-a": {"envs": {"ids": [0]}, "eval": {"ids": [0]}}})
        self.assertIn("topology.node-a.envs", cm.exception.fields)

    def test_replace_registration_shrinks_a_fleet_in_one_call(self):
        topo = {"node-a": {"env": {"ids": [0, 1]}, "eval": {"ids": [0, 1]}},
                "node-b": {"env": {"ids": [2, 3]}, "eval": {"ids": [2, 3]}}}
        pols = [{"url": f"http://127.0.0.1:9/p{i}", "index": i} for i in range(4)]
        got = self.client.replace_registration(pols, topo)
        self.assertEqual([p["node_id"] for p in got["policies"]], ["node-a", "node-a", "node-b", "node-b"])
        # Shrinking with PUT /policies alone conflicts with the topology ...
        with self.assertRaises(Conflict) as cm:
            self.client.replace_policies(pols[:2])
        self.assertIn("PUT /registration", cm.exception.message)
        # ... and with the topology in the same call it is one atomic change.
        small = {"node-a": {"env": {"ids": [0, 1]}, "eval": {"ids": [0, 1]}}}
        got = self.client.replace_registration(pols[:2], small)
        self.assertEqual((len(got["policies"]), got["topology"]), (2, small))
        self.assertEqual(self.client.get_registration()["topology"], small)

    def test_weight_version_is_shown(self):
        p = self.client.register_policy("http://127.0.0.1:9/p0", index=0, version=3)
        self.assertEqual(p["version"], 3)
        self.assertEqual(self.client.stats()["policies"][0]["version"], 3)

    def test_weights_floor(self):
        self.client.register_policy("http://127.0.0.1:9/p0", index=0, version=3)
        self.client.register_policy("http://127.0.0.1:9/p1", index=1, version=5)
        self.assertEqual(self.client.set_weights(6, max_staleness=1),
                         {"version": 6, "max_staleness": 1, "min_version": 5})
        self.assertEqual(self.client.get_weights()["min_version"], 5)
        self.assertEqual(self.client.assign(2)["assignments"], [1, 1])
        self.assertEqual(self.client.select(timeout_ms=0)["index"], 1)
        self.assertEqual(self.client.select(timeout_ms=0, min_version=3)["index"], 0)
        with self.assertRaises(Unavailable) as cm:
            self.client.assign(1, min_version=9)
        self.assertEqual(cm.exception.code, "no_fresh_policy")
        # A floor above every policy would stop all routing: refused unless forced.
        with self.assertRaises(Conflict) as cm:
            self.client.set_weights(9, max_staleness=1)
        self.assertIn("0 of 2 policies", str(cm.exception))
        self.assertEqual(self.client.get_weights()["min_version"], 5)
        self.assertEqual(self.client.set_weights(9, max_staleness=1, force=True)["min_version"], 8)

    def test_rolling_update_external_mode(self):
        self.register_n(4, nodes=["a", "a", "b", "b"])
        update = self.client.rolling_update(5, max_unavailable=2, min_available_per_node=1)
        self.assertEqual((update["state"], update["external"], update["max_unavailable"]), ("running", True, 2))
        with self.assertRaises(Conflict):
            self.client.rolling_update(6)
        confirmed = []

        def confirm(u):  # the trainer loads the weights into each ready policy
            if u["ready"]:
                confirmed.extend(u["ready"])
                self.client.update_done(u["id"], u["ready"])

        done = self.client.wait_update(update["id"], timeout=30, on_progress=confirm)
        self.assertEqual(done["state"], "succeeded")
        self.assertEqual(sorted(confirmed), sorted(p["id"] for p in self.client.list_policies()))
        self.assertEqual([p["version"] for p in self.client.list_policies()], [5, 5, 5, 5])
        self.assertEqual(self.client.list_updates()[0]["id"], update["id"])
        with self.assertRaises(Conflict):
            self.client.abort_update(update["id"])

    def test_engine_policies_and_a_model_path_update(self):
        p = self.client.register_policy("http://127.0.0.1:9/sg", index=0, engine="sglang", api_key="k-1",
                                        admin_api_key="k-2")
        self.assertEqual((p["engine"], p["weight_version"]), ("sglang", ""))
        self.assertFalse({"api_key", "admin_api_key"} & set(p), "write-only keys came back")
        # The same registration again is the same: the keys are part of it.
        again = self.client.register_policy("http://127.0.0.1:9/sg", index=0, engine="sglang", api_key="k-1",
                                            admin_api_key="k-2")
        self.assertFalse(again.created)
        update = self.client.rolling_update(7, model_path="/ckpt/step-7", pause_mode="abort", set_floor=True,
                                            phase_timeout_ms=60000, max_unavailable=1)
        self.assertEqual((update["model_path"], update["pause_mode"], update["set_floor"],
                          update["phase_timeout_ms"], update["external"]),
                         ("/ckpt/step-7", "abort", True, 60000, False))
        self.client.abort_update(update["id"])
        with self.assertRaises(ValidationError) as cm:
            self.client.rolling_update(8, model_path="/ckpt/step-8", pause_mode="sideways")
        self.assertIn("pause_mode", cm.exception.fields)

    def test_admin_by_index(self):
        self.register_n(2)
        self.assertTrue(self.client.drain(1)["draining"])
        self.assertEqual(self.client.get_policy(1)["state"], "draining")
        self.assertEqual(self.client.resume(1)["state"], "idle")
        self.client.delete_policy(1)
        with self.assertRaises(NotFound) as cm:
            self.client.get_policy(1)
        self.assertIn("index 1", cm.exception.message)
        with self.assertRaises(NotFound) as cm:
            self.client.drain("0")  # an id, not an index: the answer says what to use
        self.assertIn("/policies/by-index/0", cm.exception.message)

    def test_a_url_registered_twice_is_a_conflict_unless_asked_for(self):
        self.client.register_policy("http://127.0.0.1:9/p0", index=0)
        with self.assertRaises(Conflict) as cm:
            self.client.register_policy("http://127.0.0.1:9/p0", index=1)
        self.assertIn("allow_shared_url", cm.exception.message)
        self.assertEqual(self.client.register_policy("http://127.0.0.1:9/p0", index=1, allow_shared_url=True)["index"], 1)

    def test_topology_rule_is_a_validation_error(self):
        self.register_n(1)
        with self.assertRaises(ValidationError) as cm:
            self.client.set_topology({"node-a": {"env": {"ids": [0]}}})
        self.assertIn("node-a", cm.exception.message)
        self.assertTrue(any("node-a" in f for f in cm.exception.fields))

    def test_stats(self):
        self.register_n(2, nodes=["a", "b"])
        st = self.client.stats()
        self.assertEqual([p["index"] for p in st["policies"]], [0, 1])
        self.assertEqual(st["totals"]["policies"], 2)
        self.assertEqual(set(st["nodes"]), {"a", "b"})


class AssignTest(ServerTestCase):
    def test_assign_matches_seed_simple_router(self):
        rng = random.Random(1)
        for case in range(150):
            loads = [rng.randint(-5, 20) for _ in range(rng.randint(1, 12))]
            n = rng.randint(1, 40)
            want = seed.SimpleRouter().assign(list(loads), n)
            got = self.client.assign(n, current_loads=loads, router="simple")
            self.assertEqual(got["assignments"], want, f"case {case}: loads={loads} n={n}")
            self.assertEqual(got["policies"], {})  # stateless, nothing registered

    def test_assign_matches_seed_node_affinity_router(self):
        rng = random.Random(2)
        for topo_case in range(12):
            n_nodes = rng.randint(1, 4)
            n_policies = rng.randint(n_nodes, 10)
            nodes = ["node-%d" % i for i in range(n_nodes)]
            # every node gets at least one policy (eval) and one env worker
            policy_node = nodes + [rng.choice(nodes) for _ in range(n_policies - n_nodes)]
            rng.shuffle(policy_node)
            workers = list(range(rng.randint(n_nodes, 12)))
            env_node = nodes + [rng.choice(nodes) for _ in range(len(workers) - n_nodes)]
            rng.shuffle(env_node)
            cd = {n: {"env": {"ids": [w for w in workers if env_node[w] == n]},
                      "eval": {"ids": [i for i in range(n_policies) if policy_node[i] == n]}} for n in nodes}
            self.client.set_topology({})
            self.client.replace_policies([{"url": "http://127.0.0.1:9/%d" % i, "index": i, "node_id": policy_node[i]}
                                          for i in range(n_policies)])
            self.client.set_topology(cd)
            oracle = seed.NodeAffinityRouter(cd, policy_node)
            for case in range(15):
                loads = [rng.randint(0, 6) for _ in range(n_policies)]
                env_ids = [rng.choice(["env-%d" % rng.randint(0, 14), "env-x", "worker-%d" % rng.randint(0, 3), "7"])
                           for _ in range(rng.randint(1, 25))]
                want = oracle.assign(list(loads), len(env_ids), env_ids)
                got = self.client.assign(len(env_ids), current_loads=loads, env_ids=env_ids, router="node_affinity")
                self.assertEqual(got["assignments"], want, f"topology {cd} loads={loads} env_ids={env_ids}")
                for idx in set(want):
                    self.assertEqual(got["policies"][str(idx)]["node_id"], policy_node[idx])

    def test_assign_tracked_loads_and_complete(self):
        self.register_n(3)
        got = self.client.assign(4)
        self.assertEqual(got["assignments"], [0, 1, 2, 0])
        self.assertEqual(set(got["policies"]), {"0", "1", "2"})
        self.assertEqual(got["policies"]["0"]["url"], "http://127.0.0.1:9/p0")
        self.assertEqual([p["load"] for p in self.client.stats()["policies"]], [2, 1, 1])
        self.assertEqual(self.client.complete(0), {"index": 0, "load": 1})
        self.assertEqual(self.client.complete(2, count=1)["load"], 0)
        self.assertEqual(self.client.assign(2)["assignments"], [2, 0])

    def test_zero_tasks_is_no_assignment_as_in_the_seed(self):
        self.assertEqual(self.client.assign(0, current_loads=[1, 2]), {"assignments": [], "policies": {}})

    def test_assign_validation(self):
        with self.assertRaises(ValidationError) as cm:
            self.client.assign(-1, current_loads=[1, 2])
        e = cm.exception
        self.assertEqual((e.status, e.code), (422, "validation_failed"))
        self.assertIn("num_tasks", e.fields)
        self.assertTrue(e.request_id)
        self.assertIn("num_tasks", str(e))
        with self.assertRaises(ValidationError) as cm:
            self.client.assign(2, current_loads=[0], env_ids=["env-0"])
        self.assertIn("env_ids", cm.exception.fields)
        with self.assertRaises(ValidationError) as cm:
            self.client.assign(1, current_loads=[0], router="fastest")
        self.assertIn("router", cm.exception.fields)

    def test_assign_without_policies_is_unavailable(self):
        with self.assertRaises(Unavailable) as cm:
            self.client.assign(1)
        self.assertEqual(cm.exception.retry_after, 1.0)

    def test_numpy_like_loads_are_sent_as_ints(self):
        class Int:  # stands in for numpy.int64
            def __init__(self, v):
                self.v = v

            def __int__(self):
                return self.v

        self.assertEqual(self.client.assign(2, current_loads=[Int(3), Int(1)])["assignments"], [1, 1])


class SelectTest(ServerTestCase):
    def test_select_release_cycle(self):
        self.register_n(2, nodes=["a", "b"])
        s0 = self.client.select()
        s1 = self.client.select(env_id="env-0")
        self.assertEqual((s0["index"], s1["index"]), (0, 1))  # FIFO, index order
        self.assertEqual(s0["url"], "http://127.0.0.1:9/p0")
        self.assertEqual(s1["node_id"], "b")
        self.assertNotEqual(s0["lease_id"], s1["lease_id"])
        self.assertEqual(self.client.stats()["leases"], 2)

        r = self.client.release(lease_id=s0["lease_id"])
        self.assertEqual((r["released"], r["index"], r["lease_id"]), (True, 0, s0["lease_id"]))
        self.assertEqual(self.client.select(timeout_ms=0)["index"], 0)
        again = self.client.release(lease_id=s0["lease_id"])  # already released
        self.assertEqual((again["released"], again["lease_id"]), (False, s0["lease_id"]))
        self.assertEqual(self.client.release(index=1)["index"], 1)
        with self.assertRaises(NotFound):
            self.client.release(index=1)  # no lease out
        with self.assertRaises(ValidationError) as cm:
            self.client.release()
        self.assertTrue({"lease_id", "index"} & set(cm.exception.fields))

    def test_lease_releases_on_exit_and_on_error(self):
        self.register_n(2)
        with self.client.lease(env_id="env-0") as sel:
            self.assertEqual((sel["index"], self.client.stats()["leases"]), (0, 1))
        self.assertEqual(self.client.stats()["leases"], 0)
        with self.assertRaises(KeyError):
            with self.client.lease():
                raise KeyError("rollout failed")
        self.assertEqual(self.client.stats()["leases"], 0)
        from policyrouter import LeaseEndedWarning

        with self.assertWarnsRegex(LeaseEndedWarning, r"lease \S+ had already ended .*how: release"):
            with self.client.lease() as sel:
                self.client.release(lease_id=sel["lease_id"])  # ended early: the block hears of it
        self.assertEqual(self.client.leases_ended_before_release, 1)
        with self.client.lease(router="node_affinity") as sel:  # the round robin issues no lease
            self.assertNotIn("lease_id", sel)

    def test_select_timeout_is_unavailable_with_retry_after(self):
        self.register_n(1)
        self.client.select()
        start = time.monotonic()
        with self.assertRaises(Unavailable) as cm:
            self.client.select(timeout_ms=50)
        self.assertGreaterEqual(time.monotonic() - start, 0.045)
        e = cm.exception
        self.assertEqual((e.status, e.code, e.retry_after), (503, "no_idle_policy", 1.0))
        self.assertIn("retry after 1s", str(e))

    def test_select_waits_longer_than_the_client_timeout(self):
        self.register_n(1)
        lease = self.client.select()["lease_id"]
        slow = Client(self.server.url, timeout=0.3)
        self.addCleanup(slow.close)
        timer = threading.Timer(0.6, self.client.release, kwargs={"lease_id": lease})
        timer.start()
        self.addCleanup(timer.join)  # before the client closes
        start = time.monotonic()
        got = slow.select(timeout_ms=3000)  # read timeout 0.3s + 3s
        self.assertGreaterEqual(time.monotonic() - start, 0.5)
        self.assertEqual(got["index"], 0)

    def test_select_without_policies(self):
        with self.assertRaises(Unavailable):
            self.client.select(timeout_ms=10)

    def test_select_session_is_sticky(self):
        self.register_n(8)
        first = self.client.select(session_id="traj-1")
        for _ in range(3):
            self.client.release(lease_id=first["lease_id"])
            again = self.client.select(session_id="traj-1", sticky_wait_ms=0, load_factor=1.5)
            self.assertEqual(again["index"], first["index"])
            first = again
        sticky = self.client.stats()["sticky"]
        self.assertEqual((sticky["hits"], sticky["spills"], sticky["misses"]), (4, 0, 0))
        self.assertEqual(sticky["hit_rate"], 1.0)

    def test_select_session_validation(self):
        self.register_n(1)
        with self.assertRaises(ValidationError) as cm:
            self.client.select(session_id="x" * 257)
        self.assertIn("session_id", cm.exception.fields)
        with self.assertRaises(ValidationError) as cm:
            self.client.select(session_id="s", load_factor=0.5)
        self.assertIn("load_factor", cm.exception.fields)

    def test_assign_ttl(self):
        self.register_n(1)
        self.client.assign(3, assign_ttl_ms=60000)
        stats = self.client.stats()
        self.assertEqual(stats["policies"][0]["load"], 3)
        self.assertGreaterEqual(stats["oldest_task_seconds"], 0)
        # The tasks expire unless completed: one that expires in 50 ms
        # leaves the load.
        self.client.assign(1, assign_ttl_ms=50)
        self.assertTrue(wait_until(lambda: self.client.stats()["policies"][0]["load"] == 3, timeout=10))
        with self.assertRaises(ValidationError) as cm:
            self.client.assign(1, assign_ttl_ms=0)
        self.assertIn("assign_ttl_ms", cm.exception.fields)

    def test_assign_session_ids(self):
        # A group lands on its home as a unit when the home's capacity
        # takes it all; with capacity 1 its second task would move on.
        self.register_n(4, capacity=2)
        got = self.client.assign(3, current_loads=[5, 5, 5, 5], session_ids=["g", None, "g"])
        self.assertEqual(got["assignments"][0], got["assignments"][2])
        self.assertEqual(got["sticky"], ["home", None, "home"])
        self.assertEqual(self.client.stats()["sticky"]["hits"], 2)
        self.client.replace_policies([{"url": f"http://127.0.0.1:9/p{i}", "index": i} for i in range(4)])
        got = self.client.assign(2, current_loads=[5, 5, 5, 5], session_ids=["g", "g"])
        self.assertEqual(got["sticky"], ["home", "moved"])
        self.assertNotEqual(got["assignments"][0], got["assignments"][1])
        with self.assertRaises(ValidationError) as cm:
            self.client.assign(2, session_ids=["g"])
        self.assertIn("session_ids", cm.exception.fields)

    def test_round_robin_select_has_no_lease(self):
        self.register_n(2)
        got = [self.client.select(router="node_affinity") for _ in range(3)]
        self.assertEqual([g["index"] for g in got], [0, 1, 0])
        self.assertTrue(all(not g.get("lease_id") for g in got))


# -- a scripted fake server -------------------------------------------------


class FakeServer:
    """Answers requests from a script: a list of actions per (method, path),
    consumed in order (the last one repeats). An action is
    (status, headers, body) or "drop" (read the request, close the
    connection without answering)."""

    def __init__(self):
        self.script = {}
        self.requests = []
        self.server = LoopbackServer(self._serve)
        self.httpd, self.url = self.server.httpd, self.server.url

    def _serve(self, h, body):
        self.requests.append((h.command, h.path, dict(h.headers), body))
        actions = self.script.get((h.command, h.path)) or [(200, {}, b"{}")]
        action = actions.pop(0) if len(actions) > 1 else actions[0]
        if action == "drop":
            drop(h)
            return
        reply(h, *action)

    def count(self, method, path):
        return sum(1 for r in self.requests if r[0] == method and r[1] == path)

    def close(self):
        self.server.close()


def envelope(code, message, **extra):
    return {"error": {"code": code, "message": message, "request_id": "rid-1", **extra}}


UNAVAILABLE = (503, {"Retry-After": "0"}, envelope("no_idle_policy", "busy"))


class FakeServerTest(unittest.TestCase):
    def setUp(self):
        self.fake = FakeServer()
        self.addCleanup(self.fake.close)
        self.client = Client(self.fake.url + "/", token="tok-123", timeout=2.0, retries=2, backoff=0.01)
        self.addCleanup(self.client.close)

    def test_headers(self):
        self.client.healthz()
        self.client.assign(1, current_loads=[0])
        for method, path, headers, _ in self.fake.requests:
            self.assertEqual(headers.get("Authorization"), "Bearer tok-123")
            self.assertEqual(headers.get("Content-Type"), "application/json")
            self.assertRegex(headers.get("X-Request-ID", ""), r"^[0-9a-f]{32}$")
        self.assertEqual(json.loads(self.fake.requests[1][3]), {"num_tasks": 1, "current_loads": [0]})
        plain = Client(self.fake.url)
        self.addCleanup(plain.close)
        plain.healthz()
        self.assertNotIn("Authorization", self.fake.requests[-1][2])

    def test_connection_reuse(self):
        seen = set()
        orig = self.fake.httpd.RequestHandlerClass.setup

        def setup(handler):
            seen.add(handler.client_address)
            orig(handler)

        self.fake.httpd.RequestHandlerClass.setup = setup
        for _ in range(5):
            self.client.healthz()
        self.assertEqual(len(seen), 1)

    def test_get_is_retried_on_503_and_dropped_connections(self):
        self.fake.script[("GET", "/stats")] = [UNAVAILABLE, "drop", (200, {}, {"ok": 1})]
        self.assertEqual(self.client.stats(), {"ok": 1})
        self.assertEqual(self.fake.count("GET", "/stats"), 3)
        ids = {r[2]["X-Request-ID"] for r in self.fake.requests}
        self.assertEqual(len(ids), 1, "retries reuse the call's request id")

    def test_get_gives_up_after_retries(self):
        self.fake.script[("GET", "/stats")] = [(502, {"Content-Type": "text/html"}, b"<html>bad gateway</html>")]
        with self.assertRaises(PolicyRouterError) as cm:
            self.client.stats()
        self.assertEqual(self.fake.count("GET", "/stats"), 3)
        e = cm.exception
        self.assertEqual((type(e), e.status, e.code), (PolicyRouterError, 502, None))
        self.assertIn("bad gateway", e.message)

    def test_register_and_update_bodies(self):
        self.client.register_policy("http://x:1", index=2, engine="vllm", api_key="secret")
        self.client.rolling_update(3, model_path="/m", pause_mode="keep", set_floor=True, phase_timeout_ms=5000)
        self.client.rolling_update(4)
        bodies = [json.loads(r[3]) for r in self.fake.requests]
        self.assertEqual(bodies, [
            {"url": "http://x:1", "index": 2, "engine": "vllm", "api_key": "secret"},
            {"version": 3, "model_path": "/m", "pause_mode": "keep", "set_floor": True, "phase_timeout_ms": 5000},
            {"version": 4},
        ])

    def test_retries_zero(self):
        c = Client(self.fake.url, retries=0)
        self.addCleanup(c.close)
        self.fake.script[("GET", "/stats")] = [UNAVAILABLE]
        with self.assertRaises(Unavailable):
            c.stats()
        self.assertEqual(self.fake.count("GET", "/stats"), 1)

    def test_routing_posts_are_not_retried_once_sent(self):
        for method, path, call in [
            ("POST", "/assign", lambda: self.client.assign(1, current_loads=[0])),
            ("POST", "/select", lambda: self.client.select(timeout_ms=0)),
            ("POST", "/complete", lambda: self.client.complete(0)),
            ("POST", "/release", lambda: self.client.release(index=0)),
            ("POST", "/policies", lambda: self.client.register_policy("http://x:1")),
        ]:
            with self.subTest(path=path, answer="503"):
                self.fake.script[(method, path)] = [UNAVAILABLE]
                before = self.fake.count(method, path)
                with self.assertRaises(Unavailable):
                    call()
                self.assertEqual(self.fake.count(method, path) - before, 1)
            with self.subTest(path=path, answer="dropped"):
                self.fake.script[(method, path)] = ["drop"]
                before = self.fake.count(method, path)
                with self.assertRaises(ConnectionLostError):
                    call()
                self.assertEqual(self.fake.count(method, path) - before, 1)

    def test_register_with_index_or_id_is_retried(self):
        self.fake.script[("POST", "/policies")] = [UNAVAILABLE, "drop", (200, {}, {"index": 4, "id": "x"}),
                                                   UNAVAILABLE, (201, {}, {"index": 0, "id": "y"})]
        got = self.client.register_policy("http://x:1", index=4)
        self.assertEqual((dict(got), got.created), ({"index": 4, "id": "x"}, False))
        self.assertEqual(self.fake.count("POST", "/policies"), 3)
        got = self.client.register_policy("http://x:1", id="y")
        self.assertEqual((got["id"], got.created), ("y", True))
        self.assertEqual(self.fake.count("POST", "/policies"), 5)

    def test_idempotent_writes_are_retried(self):
        for method, path, call in [
            ("PUT", "/policies", lambda: self.client.replace_policies([])),
            ("PUT", "/topology", lambda: self.client.set_topology({})),
            ("POST", "/policies/p/drain", lambda: self.client.drain("p")),
            ("POST", "/policies/p/resume", lambda: self.client.resume("p")),
        ]:
            with self.subTest(path=path):
                self.fake.script[(method, path)] = ["drop", UNAVAILABLE, (200, {}, {"policies": []})]
                call()
                self.assertEqual(self.fake.count(method, path), 3)

    def test_delete_retry_after_lost_answer_accepts_404(self):
        self.fake.script[("DELETE", "/policies/p")] = ["drop", (404, {}, envelope("not_found", "policy not found"))]
        self.assertIsNone(self.client.delete_policy("p"))
        self.assertEqual(self.fake.count("DELETE", "/policies/p"), 2)
        # a first-attempt 404 is an error
        with self.assertRaises(NotFound):
            self.client.delete_policy("p")

    def test_connect_errors_are_retried_for_posts(self):
        # A port that refuses connections for 0.2 s, then answers once. The
        # transport's connect retries (after 0 s, then 0.5 s) get the POST
        # through: a refused connection sent nothing.
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.addCleanup(sock.close)
        url = "http://127.0.0.1:%d" % sock.getsockname()[1]
        got = []

        def serve_once():
            time.sleep(0.2)
            sock.listen(1)
            conn, _ = sock.accept()
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, body = data.split(b"\r\n\r\n", 1)
                n = int([ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")][0])
                while len(body) < n:
                    body += conn.recv(65536)
                got.append(head.split(b"\r\n")[0])
                payload = b'{"assignments": [0], "policies": {}}'
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload))

        t = threading.Thread(target=serve_once, daemon=True)
        t.start()
        c = Client(url, retries=2, backoff=0.001)
        self.addCleanup(c.close)
        self.assertEqual(c.assign(1, current_loads=[0])["assignments"], [0])
        t.join(5)
        self.assertEqual(got, [b"POST /assign HTTP/1.1"])

        # Without retries the refusal is raised at once, and says so.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            refused = "http://127.0.0.1:%d" % s.getsockname()[1]
            c = Client(refused, retries=0)
            self.addCleanup(c.close)
            with self.assertRaises(ConnectionFailedError) as cm:
                c.assign(1, current_loads=[0])
        self.assertTrue(request_was_not_sent(cm.exception))
        self.assertIsInstance(cm.exception.__cause__, httpx.ConnectError)

    def test_request_was_not_sent(self):
        req = httpx.Request("POST", "http://127.0.0.1:1/select")
        self.assertTrue(request_was_not_sent(httpx.ConnectTimeout("t", request=req)))
        self.assertTrue(request_was_not_sent(httpx.ConnectError("refused", request=req)))
        self.assertFalse(request_was_not_sent(httpx.ReadTimeout("t", request=req)))
        self.assertFalse(request_was_not_sent(httpx.RemoteProtocolError("closed", request=req)))
        self.assertFalse(request_was_not_sent(httpx.ReadError("reset", request=req)))
        self.assertFalse(request_was_not_sent(ValueError()))

    def test_error_envelope(self):
        self.fake.script[("POST", "/assign")] = [
            (422, {}, envelope("validation_failed", "invalid request: num_tasks must be >= 1",
                               fields={"num_tasks": "must be >= 1"}))]
        with self.assertRaises(ValidationError) as cm:
            self.client.assign(0)
        e = cm.exception
        self.assertEqual((e.status, e.code, e.fields, e.request_id),
                         (422, "validation_failed", {"num_tasks": "must be >= 1"}, "rid-1"))
        e2 = pickle.loads(pickle.dumps(e))
        self.assertEqual((type(e2), e2.fields, str(e2)), (ValidationError, e.fields, str(e)))

    def test_status_classes(self):
        for status, cls in [(400, ValidationError), (401, UnauthorizedError), (403, ForbiddenError), (404, NotFound),
                            (409, Conflict), (413, PolicyRouterError), (500, PolicyRouterError)]:
            with self.subTest(status=status):
                self.fake.script[("POST", "/complete")] = [(status, {}, envelope("x", "m"))]
                with self.assertRaises(cls) as cm:
                    self.client.complete(0)
                self.assertIs(type(cm.exception), cls)
                self.assertEqual(cm.exception.status, status)
                if status in (401, 403):
                    self.assertIsInstance(cm.exception, AuthError)

    def test_non_json_error_bodies(self):
        self.fake.script[("POST", "/select")] = [(401, {"Content-Type": "text/plain", "X-Request-ID": "hdr-id"},
                                                  b"token expired\n")]
        with self.assertRaises(AuthError) as cm:
            self.client.select()
        self.assertEqual((cm.exception.message, cm.exception.code, cm.exception.request_id),
                         ("token expired", None, "hdr-id"))
        self.fake.script[("POST", "/select")] = [(503, {"Retry-After": "7"}, b"")]
        with self.assertRaises(Unavailable) as cm:
            self.client.select()
        self.assertEqual(cm.exception.retry_after, 7.0)
        self.assertTrue(cm.exception.message)
        e = pickle.loads(pickle.dumps(cm.exception))
        self.assertEqual(e.retry_after, 7.0)

    def test_readyz_not_ready(self):
        self.fake.script[("GET", "/readyz")] = [(503, {}, {"status": "not ready"})]
        with self.assertRaises(Unavailable) as cm:
            self.client.readyz()
        self.assertEqual(cm.exception.message, "not ready")

    def test_select_read_timeout_covers_the_wait(self):
        seen = []

        def record(request):
            t = request.extensions["timeout"]
            seen.append((t["connect"], t["read"]))

        session = httpx.Client(event_hooks={"request": [record]})
        self.addCleanup(session.close)
        c = Client(self.fake.url, session=session, timeout=2.0)
        c.select(timeout_ms=5000)
        c.select()
        c.stats()
        self.assertEqual(seen, [(2.0, 7.0), (2.0, 32.0), (2.0, 2.0)])


class LeaseReleaseTest(unittest.TestCase):
    """lease() warns and counts when its release answers released: false,
    naming how the lease ended when the answer says (``how``, else the
    older ``reason``); select() and lease() send ``release``."""

    def setUp(self):
        self.fake = FakeServer()
        self.addCleanup(self.fake.close)
        self.fake.script[("POST", "/select")] = [(200, {}, {"index": 3, "lease_id": "l-1"})]

    def released(self, **answer):
        self.fake.script[("POST", "/release")] = [(200, {}, {"lease_id": "l-1", **answer})]

    def test_sync(self):
        from policyrouter import LeaseEndedWarning

        c = Client(self.fake.url)
        self.addCleanup(c.close)
        for answer, want in [({"released": False, "index": 3, "how": "ttl"}, r"lease l-1 of policy 3 .*\(how: ttl\)"),
                             ({"released": False, "reason": "aborted"}, r"lease l-1 had .*\(how: aborted\)"),
                             ({"released": False}, r"\(the router did not say how\)")]:
            with self.subTest(**answer):
                self.released(**answer)
                with self.assertWarnsRegex(LeaseEndedWarning, want) as cm:
                    with c.lease(release="explicit"):
                        pass
                self.assertEqual(cm.filename, __file__)  # points at the with
        self.assertEqual(c.leases_ended_before_release, 3)
        self.released(released=True, index=3)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with c.lease():
                pass
        self.assertEqual(c.leases_ended_before_release, 3)
        bodies = [json.loads(r[3]) for r in self.fake.requests if r[1] == "/select"]
        self.assertEqual([b.get("release") for b in bodies], ["explicit"] * 3 + [None])

    def test_async(self):
        from policyrouter import AsyncClient, LeaseEndedWarning

        async def run():
            async with AsyncClient(self.fake.url) as c:
                self.released(released=False, how="probe")
                with self.assertWarnsRegex(LeaseEndedWarning, r"\(how: probe\)"):
                    async with c.lease(release="on_idle"):
                        pass
                self.released(released=True)
                async with c.lease():
                    pass
                await c.select(release="on_idle")
                return c.leases_ended_before_release

        self.assertEqual(asyncio.run(run()), 1)
        bodies = [json.loads(r[3]) for r in self.fake.requests if r[1] == "/select"]
        self.assertEqual([b.get("release") for b in bodies], ["on_idle", None, "on_idle"])


class LifecycleTest(unittest.TestCase):
    def setUp(self):
        self.fake = FakeServer()
        self.addCleanup(self.fake.close)

    def test_use_after_close(self):
        from policyrouter import ClientClosedError

        with Client(self.fake.url) as c:
            self.assertFalse(c.is_closed)
            c.healthz()
        self.assertTrue(c.is_closed)
        with self.assertRaises(ClientClosedError) as cm:
            c.stats()
        self.assertIsInstance(cm.exception, RuntimeError)  # what httpx raised
        self.assertIsInstance(cm.exception, PolicyRouterError)
        self.assertIn("is closed: GET /stats was not sent", str(cm.exception))
        c.close()  # twice is harmless
        self.assertEqual(self.fake.count("GET", "/stats"), 0)

    def test_a_given_session_closed_by_its_owner(self):
        from policyrouter import ClientClosedError

        session = httpx.Client()
        c = Client(self.fake.url, session=session)
        c.healthz()
        session.close()
        self.assertTrue(c.is_closed)
        with self.assertRaises(ClientClosedError):
            c.healthz()
        # Closing the client leaves a given session alone (open or not).
        session = httpx.Client()
        self.addCleanup(session.close)
        c = Client(self.fake.url, session=session)
        c.close()
        self.assertEqual((c.is_closed, session.is_closed), (True, False))


class AsyncLifecycleTest(unittest.IsolatedAsyncioTestCase):
    async def test_use_after_close(self):
        from policyrouter import AsyncClient, ClientClosedError

        fake = FakeServer()
        self.addCleanup(fake.close)
        async with AsyncClient(fake.url) as c:
            self.assertFalse(c.is_closed)
            await c.healthz()
        self.assertTrue(c.is_closed)
        with self.assertRaises(ClientClosedError):
            await c.stats()
        await c.aclose()
        self.assertEqual(fake.count("GET", "/stats"), 0)


class TimeoutTest(unittest.TestCase):
    """timeout: seconds, a (connect, read) pair, an httpx.Timeout or None,
    checked at construction; any call takes its own."""

    def setUp(self):
        self.fake = FakeServer()
        self.addCleanup(self.fake.close)
        self.seen = []

        def record(request):
            t = request.extensions["timeout"]
            self.seen.append((t["connect"], t["read"], t["write"], t["pool"]))

        self.session = httpx.Client(event_hooks={"request": [record]})
        self.addCleanup(self.session.close)

    def client(self, **kw):
        c = Client(self.fake.url, session=self.session, **kw)
        self.addCleanup(c.close)
        return c

    def test_forms(self):
        for timeout, want, want_select in [
            (3, (3.0, 3.0, 3.0, 3.0), (3.0, 4.0, 3.0, 3.0)),
            ((1, 2.5), (1.0, 2.5, 2.5, 1.0), (1.0, 3.5, 2.5, 1.0)),
            (httpx.Timeout(5), (5.0, 5.0, 5.0, 5.0), (5.0, 6.0, 5.0, 5.0)),
            (httpx.Timeout(5, read=None), (5.0, None, 5.0, 5.0), (5.0, None, 5.0, 5.0)),
            (None, (None, None, None, None), (None, None, None, None)),
            ((None, 2), (None, 2.0, 2.0, None), (None, 3.0, 2.0, None)),
        ]:
            with self.subTest(timeout=timeout):
                self.seen.clear()
                c = self.client(timeout=timeout)
                c.stats()
                c.select(timeout_ms=1000)
                self.assertEqual(self.seen, [want, want_select])

    def test_per_call(self):
        c = self.client(timeout=10.0)
        self.fake.script[("POST", "/select")] = [(200, {}, {"index": 0, "lease_id": "l-1"})]
        self.fake.script[("POST", "/release")] = [(200, {}, {"released": True, "lease_id": "l-1"})]
        c.stats(timeout=0.5)
        c.select(timeout_ms=1000, timeout=(1, 2))
        c.stats(timeout=None)
        with c.lease(timeout=httpx.Timeout(4)):
            pass
        c.stats()
        self.assertEqual(self.seen, [(0.5, 0.5, 0.5, 0.5), (1.0, 3.0, 2.0, 1.0), (None, None, None, None),
                                     (4.0, 34.0, 4.0, 4.0), (4.0, 4.0, 4.0, 4.0), (10.0, 10.0, 10.0, 10.0)])

    def test_checked_before_anything_is_sent(self):
        for bad, exc in [("5", TypeError), (True, TypeError), (-1, ValueError), (float("nan"), ValueError),
                         ((1, 2, 3), TypeError), ((1, "2"), TypeError), (httpx.Timeout(-1), ValueError),
                         ([1, 2], TypeError)]:
            with self.subTest(timeout=bad):
                with self.assertRaises(exc):
                    Client(self.fake.url, timeout=bad)
                c = self.client()
                with self.assertRaises(exc):
                    c.stats(timeout=bad)
        self.assertEqual(self.fake.requests, [])


class RetryDelayTest(unittest.TestCase):
    """Retry-After is honoured up to max_retry_after, apart from the backoff
    cap; the pauses are recorded by an injected sleep, never waited for."""

    def setUp(self):
        self.fake = FakeServer()
        self.addCleanup(self.fake.close)

    def client(self, **kw):
        c = Client(self.fake.url, retries=2, backoff=0.01, max_backoff=0.05, **kw)
        self.addCleanup(c.close)
        self.slept = []
        c._sleep = self.slept.append
        return c

    def unavailable(self, retry_after):
        return (503, {"Retry-After": retry_after}, envelope("not_ready", "starting"))

    def test_retry_after_is_waited_for_beyond_the_backoff_cap(self):
        c = self.client()
        self.fake.script[("GET", "/stats")] = [self.unavailable("5"), (200, {}, {"ok": 1})]
        self.assertEqual(c.stats(), {"ok": 1})
        self.assertEqual(self.slept, [5.0])
        self.assertEqual(self.fake.count("GET", "/stats"), 2)

    def test_up_to_the_ceiling(self):
        for kw, want in [({}, 30.0), ({"max_retry_after": 2.5}, 2.5)]:
            with self.subTest(**kw):
                c = self.client(**kw)
                self.fake.script[("GET", "/stats")] = [self.unavailable("3600"), self.unavailable("3600"),
                                                       (200, {}, {"ok": 1})]
                c.stats()
                self.assertEqual(self.slept, [want, want])

    def test_a_short_retry_after_keeps_the_backoff(self):
        c = self.client()
        self.fake.script[("GET", "/stats")] = [self.unavailable("0"), self.unavailable("0"), (200, {}, {"ok": 1})]
        c.stats()
        self.assertEqual(len(self.slept), 2)
        # 0.01 then 0.02, jittered down to half.
        self.assertTrue(0.005 <= self.slept[0] <= 0.01 and 0.01 <= self.slept[1] <= 0.02, self.slept)

    def test_bad_settings(self):
        for kw in ({"max_retry_after": -1}, {"backoff": -0.1}, {"max_backoff": float("nan")}):
            with self.subTest(**kw), self.assertRaises(ValueError):
                Client(self.fake.url, **kw)

    def test_retries_are_logged_at_debug_with_the_request_id(self):
        c = self.client()
        self.fake.script[("GET", "/stats")] = [self.unavailable("5"), "drop", (200, {}, {"ok": 1})]
        with self.assertLogs("policyrouter", "DEBUG") as logs:
            c.stats()
        rid = self.fake.requests[0][2]["X-Request-ID"]
        self.assertEqual(len(logs.records), 2, logs.output)
        self.assertTrue(all(r.levelname == "DEBUG" and rid in r.getMessage() for r in logs.records), logs.output)
        self.assertIn("503 not_ready, Retry-After 5s; retry 1 of 2 in 5.000s", logs.records[0].getMessage())
        self.assertIn("RemoteProtocolError; retry 2 of 2", logs.records[1].getMessage())


class AsyncRetryDelayTest(unittest.IsolatedAsyncioTestCase):
    async def test_retry_after_is_waited_for(self):
        from policyrouter import AsyncClient

        fake = FakeServer()
        self.addCleanup(fake.close)
        fake.script[("GET", "/stats")] = [(503, {"Retry-After": "5"}, envelope("not_ready", "starting")),
                                          (503, {"Retry-After": "600"}, envelope("not_ready", "starting")),
                                          (200, {}, {"ok": 1})]
        slept = []

        async def sleep(s):
            slept.append(s)

        async with AsyncClient(fake.url, retries=2, backoff=0.01, max_backoff=0.05) as c:
            c._sleep = sleep
            self.assertEqual(await c.stats(), {"ok": 1})
        self.assertEqual(slept, [5.0, 30.0])


class ErrorHierarchyTest(unittest.TestCase):
    """Every failure of a call is a PolicyRouterError: error answers by
    status, transport failures with the httpx exception as __cause__."""

    def test_a_refused_connection(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            url = "http://127.0.0.1:%d" % s.getsockname()[1]
            with Client(url) as c, self.assertRaises(PolicyRouterError) as cm:
                c.stats()
        e = cm.exception
        self.assertIs(type(e), ConnectionFailedError)
        self.assertIsInstance(e.__cause__, httpx.ConnectError)
        self.assertEqual((e.status, e.code, e.request_sent), (None, None, False))
        self.assertRegex(e.request_id, r"^[0-9a-f]{32}$")
        self.assertIn("GET %s/stats: ConnectError" % url, str(e))
        e2 = pickle.loads(pickle.dumps(e))
        self.assertEqual((type(e2), str(e2), e2.request_sent), (ConnectionFailedError, str(e), False))

    def test_transport_classes(self):
        from policyrouter import TimedOutError, TransportError

        req = httpx.Request("POST", "http://h/select")
        for exc, cls, sent in [
            (httpx.ConnectError("refused", request=req), ConnectionFailedError, False),
            (httpx.ConnectTimeout("t", request=req), ConnectionFailedError, False),
            (httpx.ReadTimeout("t", request=req), TimedOutError, True),
            (httpx.PoolTimeout("t", request=req), TimedOutError, True),
            (httpx.RemoteProtocolError("closed", request=req), ConnectionLostError, True),
            (httpx.ReadError("reset", request=req), ConnectionLostError, True),
            (httpx.ProxyError("proxy", request=req), TransportError, True),
        ]:
            with self.subTest(type(exc).__name__):
                ex = Client("http://h")._exchange(_core.select(None, None, 0, None, None, None, None, None))
                step = ex.failed(exc)
                self.assertIs(type(step.error), cls)
                self.assertIs(step.error.__cause__, exc)
                self.assertEqual(step.error.request_sent, sent)
                self.assertEqual(request_was_not_sent(step.error), not sent)

    def test_names_end_in_error_and_the_old_names_stay(self):
        import policyrouter

        for old, new in [("NotFound", "NotFoundError"), ("Conflict", "ConflictError"),
                         ("Unavailable", "UnavailableError"), ("NotLeader", "NotLeaderError")]:
            self.assertIs(getattr(policyrouter, old), getattr(policyrouter, new))
        for name in policyrouter.__all__:
            obj = getattr(policyrouter, name)
            if isinstance(obj, type) and issubclass(obj, BaseException) and not issubclass(obj, Warning):
                with self.subTest(name):
                    self.assertTrue(issubclass(obj, PolicyRouterError))
                    if name not in ("NotFound", "Conflict", "Unavailable", "NotLeader"):
                        self.assertTrue(name.endswith("Error"), name)


class RetryAfterTest(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(parse_retry_after("1"), 1.0)
        self.assertEqual(parse_retry_after(" 2.5 "), 2.5)
        self.assertEqual(parse_retry_after("-3"), 0.0)
        self.assertIsNone(parse_retry_after(None))
        self.assertIsNone(parse_retry_after("soon"))
        self.assertIsNone(parse_retry_after("nan"))
        now = time.time()
        self.assertAlmostEqual(parse_retry_after(formatdate(now + 30, usegmt=True), now=now), 30, delta=1)
        self.assertEqual(parse_retry_after(formatdate(now - 30, usegmt=True), now=now), 0.0)

    def test_client_rejects_bad_base_url(self):
        with self.assertRaises(ValueError):
            Client("127.0.0.1:8080")


if __name__ == "__main__":
    unittest.main()
