"""Fail-over between several routers (HA): in-process stub routers playing a
leader, followers that answer not_leader (naming the leader or not), a
router that drops a /select unanswered, and dead addresses; plus one test
against the real binary behind a dead address."""

import pickle
import socket
import threading
import time
import unittest

import httpx

from policyrouter import Client, ConnectionFailedError, ConnectionLostError, NotLeader, TimedOutError, Unavailable
from policyrouter.client import request_was_not_sent

from tests._server import Server
from tests._stub import LoopbackServer, drop, reply

LEADER_ONLY = ("/select", "/assign", "/release", "/complete", "/readyz")


def leader_only(path):
    return path in LEADER_ONLY or path == "/updates" or path.startswith("/updates/")


def dead_url():
    """A loopback URL nothing listens on: connecting is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return "http://127.0.0.1:%d" % port


class Stub:
    """A router replica on a loopback port. ``role`` (changeable while it
    runs) is ``"leader"`` (answers everything), ``"follower"`` (leader-only
    calls get not_leader naming ``self.leader``, in the header, the body or
    both as ``leader_in`` says; other calls are answered) or ``"drop"``
    (reads a /select or /assign and closes the connection unanswered). One
    connection per request (HTTP/1.0), so that :meth:`kill` leaves no
    kept-alive connection answering."""

    def __init__(self, name, role="leader", leader=None, leader_in="both", retry_after="0"):
        self.name = name
        self.role = role
        self.leader = leader
        self.leader_in = leader_in
        self.retry_after = retry_after
        self.requests = []
        self._lock = threading.Lock()
        self.server = LoopbackServer(self._serve, protocol="HTTP/1.0")
        self.url = self.server.url
        self.alive = True

    def _serve(self, h, body):
        with self._lock:
            self.requests.append((h.command, h.path, body))
            role, leader = self.role, self.leader
        if role == "drop" and h.path in ("/select", "/assign"):
            drop(h)
            return
        headers = {}
        if role == "follower" and leader_only(h.path):
            status = 503
            headers["Retry-After"] = self.retry_after
            err = {"code": "not_leader", "message": "this router is not the leader",
                   "request_id": "rid-%s" % self.name}
            if leader and self.leader_in in ("both", "header"):
                headers["X-Policyrouter-Leader"] = leader
            if leader and self.leader_in in ("both", "body"):
                err["leader"] = leader
            payload = {"error": err}
        elif h.path == "/select":
            status, payload = 200, {"index": 0, "lease_id": "lease-" + self.name, "replica": self.name}
        elif h.path == "/release":
            status, payload = 200, {"released": True, "replica": self.name}
        else:
            status, payload = 200, {"replica": self.name}
        reply(h, status, headers, payload)

    def set(self, role, leader=None):
        with self._lock:
            self.role, self.leader = role, leader

    def count(self, path=None):
        with self._lock:
            return sum(1 for r in self.requests if path is None or r[1] == path)

    def kill(self):
        """Stop listening: connecting is refused from now on."""
        if self.alive:
            self.alive = False
            self.server.close()


class FailoverTest(unittest.TestCase):
    def stub(self, *a, **kw):
        s = Stub(*a, **kw)
        self.addCleanup(s.kill)
        return s

    def client(self, urls, **kw):
        kw.setdefault("timeout", 5.0)
        kw.setdefault("backoff", 0.01)
        c = Client(urls, **kw)
        self.addCleanup(c.close)
        return c

    # -- construction ----------------------------------------------------

    def test_list_form(self):
        a, b = "http://127.0.0.1:1", "http://127.0.0.1:2"
        c = self.client([a + "/", b, a])
        self.assertEqual(c.base_urls, [a, b])  # normalised, duplicates dropped
        self.assertEqual(c.base_url, a)
        self.assertEqual(self.client((a, b)).base_urls, [a, b])
        one = self.client(a + "/")
        self.assertEqual((one.base_url, one.base_urls), (a, [a]))
        self.assertEqual(repr(one), "Client(%r)" % a)
        for bad in ([], [a, "127.0.0.1:8080"], [a, ""], [a, None]):
            with self.subTest(urls=bad):
                with self.assertRaises(ValueError):
                    Client(bad)
        with self.assertRaises(ValueError):
            Client(a, failover_timeout=-1)
        with self.assertRaises(ValueError):
            Client(a, failover_timeout=float("nan"))

    def test_not_leader_error(self):
        leader = self.stub("l")
        follower = self.stub("f", role="follower", leader=leader.url)
        c = self.client(follower.url, failover_timeout=0)
        with self.assertRaises(NotLeader) as cm:
            c.select()
        e = cm.exception
        self.assertIsInstance(e, Unavailable)
        self.assertEqual((e.status, e.code, e.leader, e.retry_after, e.request_id),
                         (503, "not_leader", leader.url, 0.0, "rid-f"))
        self.assertIn(leader.url, str(e))
        e2 = pickle.loads(pickle.dumps(e))
        self.assertEqual((type(e2), e2.leader, e2.retry_after, str(e2)), (NotLeader, e.leader, 0.0, str(e)))
        self.assertEqual(leader.count(), 0)  # failover_timeout=0: no fail-over
        for where in ("header", "body"):
            with self.subTest(leader_in=where):
                follower.leader_in = where
                with self.assertRaises(NotLeader) as cm:
                    c.assign(1)
                self.assertEqual(cm.exception.leader, leader.url)
        follower.set("follower", None)
        with self.assertRaises(NotLeader) as cm:
            c.readyz()
        self.assertIsNone(cm.exception.leader)
        self.assertIn("no leader known", str(cm.exception))

    # -- following the leader --------------------------------------------

    def test_follows_the_named_leader(self):
        for where in ("header", "body", "both"):
            with self.subTest(leader_in=where):
                leader = self.stub("l")
                other = self.stub("o", role="follower", leader=leader.url)
                follower = self.stub("f", role="follower", leader=leader.url + "/", leader_in=where)
                c = self.client([follower.url, other.url, leader.url])
                self.assertEqual(c.select()["replica"], "l")
                self.assertEqual(other.count(), 0, "the named leader is asked next, not the next in the list")
                self.assertEqual(c.base_url, leader.url)
                self.assertEqual(c.release(lease_id="lease-l")["replica"], "l")
                self.assertEqual(follower.count(), 1, "the client sticks to the leader")

    def test_readyz_does_not_follow(self):
        leader = self.stub("l")
        follower = self.stub("f", role="follower", leader=leader.url)
        with self.assertRaises(NotLeader) as cm:
            self.client([follower.url, leader.url]).readyz()
        self.assertEqual(cm.exception.leader, leader.url)
        self.assertEqual(leader.count(), 0, "readyz reports the router asked, not the leader")

    def test_a_leader_outside_the_list_is_used_and_remembered(self):
        leader = self.stub("l")
        follower = self.stub("f", role="follower", leader=leader.url)
        c = self.client(follower.url)  # the single-URL form follows the leader too
        for call in (lambda: c.select(), lambda: c.assign(2), lambda: c.complete(0),
                     lambda: c.release(lease_id="x"), lambda: c.readyz(),
                     lambda: c.rolling_update(3), lambda: c.abort_update("u1")):
            self.assertEqual(call()["replica"], "l")
        self.assertEqual((c.base_url, c.base_urls), (leader.url, [follower.url]))
        self.assertEqual(follower.count(), 1)
        # The remembered leader dies; the listed router is the new leader.
        leader.kill()
        follower.set("leader")
        self.assertEqual(c.select()["replica"], "f")
        self.assertEqual(c.base_url, follower.url)

    def test_admin_calls_are_answered_by_a_follower(self):
        leader = self.stub("l")
        follower = self.stub("f", role="follower", leader=leader.url)
        c = self.client([follower.url, leader.url])
        self.assertEqual(c.stats()["replica"], "f")
        self.assertEqual(c.set_weights(3)["replica"], "f")
        self.assertEqual(c.base_url, follower.url)
        self.assertEqual(leader.count(), 0)

    def test_no_leader_named_tries_the_next_router_after_retry_after(self):
        follower = self.stub("f", role="follower", retry_after="1")
        leader = self.stub("l")
        c = self.client([follower.url, leader.url])
        t0 = time.monotonic()
        self.assertEqual(c.select()["replica"], "l")
        self.assertGreaterEqual(time.monotonic() - t0, 0.9, "Retry-After: 1 is honoured")
        self.assertEqual(c.base_url, leader.url)

    def test_a_stale_leader_is_not_followed_twice(self):
        # The old leader is dead, the followers still name it, the new one
        # is further down the list.
        old = dead_url()
        f = self.stub("f", role="follower", leader=old)
        new = self.stub("n")
        c = self.client([old, f.url, new.url])
        self.assertEqual(c.select()["replica"], "n")
        self.assertEqual(f.count("/select"), 1)
        self.assertEqual(c.base_url, new.url)

    # -- connections refused --------------------------------------------

    def test_refused_connections_rotate_for_every_method(self):
        leader = self.stub("l")
        c = self.client([dead_url(), dead_url(), leader.url], retries=0)
        self.assertEqual(c.select()["replica"], "l")
        self.assertEqual(c.base_url, leader.url)
        for path, call in (("/assign", lambda: c.assign(1)), ("/release", lambda: c.release(lease_id="x")),
                           ("/complete", lambda: c.complete(0)), ("/policies", lambda: c.register_policy("http://x:1")),
                           ("/updates", lambda: c.rolling_update(2))):
            c.base_url = c.base_urls[0]  # as after a restart of the client
            with self.subTest(path=path):
                self.assertEqual(call()["replica"], "l")
                self.assertEqual(leader.count(path), 1)

    def test_election_then_success(self):
        # The leader is killed; the followers know no leader for a while,
        # then one of them wins the election.
        a = self.stub("a")
        b = self.stub("b", role="follower", leader=a.url)
        d = self.stub("d", role="follower", leader=a.url)
        c = self.client([a.url, b.url, d.url], failover_timeout=10.0)
        self.assertEqual(c.select()["replica"], "a")
        a.kill()
        b.set("follower", None)
        d.set("follower", None)

        def elect():
            time.sleep(0.5)
            d.set("leader")
            b.set("follower", d.url)

        t = threading.Thread(target=elect)
        t.start()
        self.addCleanup(t.join)
        self.assertEqual(c.select()["replica"], "d")
        self.assertEqual(c.base_url, d.url)

    # -- bounds ----------------------------------------------------------

    def test_no_leader_anywhere_raises_not_leader_within_the_bound(self):
        f1 = self.stub("f1", role="follower", retry_after="1")
        f2 = self.stub("f2", role="follower", retry_after="1")
        c = self.client([f1.url, f2.url], failover_timeout=0.5)
        t0 = time.monotonic()
        with self.assertRaises(NotLeader) as cm:
            c.select()
        self.assertLess(time.monotonic() - t0, 5.0)
        self.assertIsNone(cm.exception.leader)
        self.assertEqual(c.base_url, f1.url, "no router answered as leader")

    def test_all_routers_dead_raises_the_connection_error(self):
        c = self.client([dead_url(), dead_url()], failover_timeout=0.5)
        t0 = time.monotonic()
        with self.assertRaises(ConnectionFailedError) as cm:
            c.select()
        self.assertIsInstance(cm.exception.__cause__, httpx.ConnectError)
        self.assertTrue(request_was_not_sent(cm.exception))
        self.assertLess(time.monotonic() - t0, 5.0)

    def test_attempts_are_capped(self):
        # A follower naming a dead leader, answering at once: without the
        # time bound, the attempt cap ends the call.
        for backoff in (0.001, 0.0):
            with self.subTest(backoff=backoff):
                f = self.stub("f", role="follower", leader=dead_url())
                c = self.client([f.url], failover_timeout=3600.0, backoff=backoff, max_backoff=0.001)
                t0 = time.monotonic()
                with self.assertRaises((NotLeader, ConnectionFailedError)):
                    c.assign(1)
                self.assertLess(time.monotonic() - t0, 30.0)
                self.assertLessEqual(f.count(), 40)

    # -- what is never resent ---------------------------------------------

    def test_a_select_that_may_have_been_received_is_not_resent(self):
        dropper = self.stub("d", role="drop")
        leader = self.stub("l")
        c = self.client([dropper.url, leader.url])
        for path, call in (("/select", lambda: c.select()), ("/assign", lambda: c.assign(1))):
            with self.subTest(path=path):
                with self.assertRaises(ConnectionLostError) as cm:
                    call()
                self.assertFalse(request_was_not_sent(cm.exception))
                self.assertEqual(dropper.count(path), 1)
                self.assertEqual(leader.count(), 0)
        self.assertEqual(c.base_url, dropper.url)

    def test_a_read_timeout_is_not_resent(self):
        # A router that accepts the connection and never answers.
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        self.addCleanup(srv.close)
        leader = self.stub("l")
        c = self.client(["http://127.0.0.1:%d" % srv.getsockname()[1], leader.url], timeout=(2.0, 0.3))
        with self.assertRaises(TimedOutError) as cm:
            c.select(timeout_ms=0)
        self.assertIsInstance(cm.exception.__cause__, httpx.ReadTimeout)
        self.assertEqual(leader.count(), 0)

    # -- sharing ---------------------------------------------------------

    def test_threads_share_a_client(self):
        leader = self.stub("l")
        follower = self.stub("f", role="follower", leader=leader.url)
        c = self.client([dead_url(), follower.url, leader.url])
        errors, answers = [], []

        def work():
            try:
                for _ in range(5):
                    answers.append(c.select()["replica"])
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(errors, [])
        self.assertEqual(answers, ["l"] * 40)
        self.assertEqual(c.base_url, leader.url)
        self.assertEqual(leader.count("/select"), 40)


class RealServerFailoverTest(unittest.TestCase):
    def test_dead_router_then_a_live_one(self):
        server = Server()
        self.addCleanup(server.stop)
        c = Client([dead_url(), server.url], timeout=5.0)
        self.addCleanup(c.close)
        p = c.register_policy("http://127.0.0.1:9/p0", index=0)
        self.assertTrue(p.created)
        self.assertEqual(c.base_url, server.url)
        sel = c.select(timeout_ms=0)
        self.assertEqual((sel["index"], sel["id"]), (0, p["id"]))
        self.assertTrue(sel["lease_id"])
        self.assertTrue(c.release(lease_id=sel["lease_id"])["released"])


if __name__ == "__main__":
    unittest.main()
