"""Fail-over between router replicas: the list form of Client, following
``not_leader`` answers and refused connections, and what is never resent.

Replicas are stubs (``http.server`` in a thread) that answer as the
server's followers and leader do; one test uses the real binary.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, List, Optional, Tuple

from policyrouter import Client, NotLeader, Unavailable
from policyrouter.errors import error_from_response

from ._server import Server

Answer = Tuple[int, dict, dict]  # status, headers, JSON body


def not_leader(leader: Optional[str]) -> Answer:
    err = {"code": "not_leader", "message": "this replica does not route", "request_id": "r"}
    headers = {"Retry-After": "1"}
    if leader:
        err["leader"] = leader
        headers["X-Policyrouter-Leader"] = leader
    return 503, headers, {"error": err}


SELECTED: Answer = (200, {}, {"index": 3, "id": "p3", "url": "http://p3", "lease_id": "6f1c1f5e-8d0a-4a55-9c43-0d5b3a1e2f10"})


class Stub:
    """A replica that answers every request with answer(path), and counts
    the requests it saw."""

    def __init__(self, answer: Callable[[str], Optional[Answer]]) -> None:
        self.answer = answer
        self.requests: List[str] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                stub.requests.append(self.command + " " + self.path)
                ans = stub.answer(self.path)
                if ans is None:  # drop the connection without an answer
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                status, headers, body = ans
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = _serve

            def log_message(self, *args) -> None:  # quiet
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def dead_url() -> str:
    """A loopback URL where nothing listens (a port that was free)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return "http://127.0.0.1:%d" % port


class FailoverTest(unittest.TestCase):
    def stub(self, answer: Callable[[str], Optional[Answer]]) -> Stub:
        s = Stub(answer)
        self.addCleanup(s.close)
        return s

    def test_list_form_and_validation(self) -> None:
        c = Client(["http://a:1/", "http://b:2"])
        self.assertEqual(c.base_urls, ["http://a:1", "http://b:2"])
        self.assertEqual(c.base_url, "http://a:1")
        self.assertIn("http://b:2", repr(c))
        for bad in ([], ["http://a:1", "b:2"], [None]):
            with self.assertRaises(ValueError, msg=repr(bad)):
                Client(bad)  # type: ignore[arg-type]
        with self.assertRaises(ValueError):
            Client("http://a:1", failover_timeout=-1)

    def test_follows_the_named_leader(self) -> None:
        leader = self.stub(lambda path: SELECTED)
        follower = self.stub(lambda path: not_leader(leader.url))
        c = Client([follower.url, "http://127.0.0.1:9"], timeout=5.0)
        sel = c.select(timeout_ms=0)
        self.assertEqual(sel["index"], 3)
        self.assertEqual(len(follower.requests), 1)
        self.assertEqual(leader.requests, ["POST /select"])
        # The client stays with the leader: the next call goes straight there.
        self.assertEqual(c.base_url, leader.url)
        c.select(timeout_ms=0)
        self.assertEqual(len(follower.requests), 1)
        self.assertEqual(len(leader.requests), 2)

    def test_rotates_past_refused_connections_and_leaderless_followers(self) -> None:
        leader = self.stub(lambda path: SELECTED)
        electing = self.stub(lambda path: not_leader(None))
        c = Client([dead_url(), electing.url, leader.url], timeout=5.0, retries=0)
        self.assertEqual(c.select(timeout_ms=0)["index"], 3)
        self.assertEqual(len(electing.requests), 1)
        self.assertEqual(c.base_url, leader.url)

    def test_bounded_when_no_replica_leads(self) -> None:
        a = self.stub(lambda path: not_leader(None))
        b = self.stub(lambda path: not_leader(None))
        c = Client([a.url, b.url], timeout=5.0, failover_timeout=0.5)
        start = time.monotonic()
        with self.assertRaises(NotLeader) as cm:
            c.select(timeout_ms=0)
        elapsed = time.monotonic() - start
        self.assertIsNone(cm.exception.leader)
        self.assertIsInstance(cm.exception, Unavailable)
        self.assertLess(elapsed, 5.0, "fail-over outlasted its bound tenfold")
        self.assertGreaterEqual(len(a.requests) + len(b.requests), 2)

    def test_bounded_when_every_replica_refuses(self) -> None:
        c = Client([dead_url(), dead_url()], timeout=2.0, failover_timeout=0.5)
        start = time.monotonic()
        with self.assertRaises(Exception) as cm:
            c.select(timeout_ms=0)
        self.assertNotIsInstance(cm.exception, NotLeader)
        self.assertLess(time.monotonic() - start, 5.0)

    def test_select_not_resent_after_it_may_have_reached_a_replica(self) -> None:
        # The replica takes the /select and drops the connection: a lease may
        # have been issued, so the call is not sent again, to it or another.
        dropper = self.stub(lambda path: None)
        other = self.stub(lambda path: SELECTED)
        c = Client([dropper.url, other.url], timeout=5.0)
        with self.assertRaises(Exception) as cm:
            c.select(timeout_ms=0)
        self.assertNotIsInstance(cm.exception, NotLeader)
        self.assertEqual(dropper.requests, ["POST /select"])
        self.assertEqual(other.requests, [])

    def test_readyz_does_not_follow(self) -> None:
        leader = self.stub(lambda path: (200, {}, {"status": "ok"}))
        follower = self.stub(lambda path: not_leader(leader.url))
        with self.assertRaises(NotLeader) as cm:
            Client([follower.url, leader.url]).readyz()
        self.assertEqual(cm.exception.leader, leader.url)
        self.assertEqual(leader.requests, [])

    def test_not_leader_error_from_header_alone(self) -> None:
        class Resp:
            status_code = 503
            headers = {"X-Policyrouter-Leader": "http://l:8080", "Retry-After": "1"}
            text = json.dumps({"error": {"code": "not_leader", "message": "m", "request_id": "r"}})
            reason = "Service Unavailable"

        err = error_from_response(Resp())
        self.assertIsInstance(err, NotLeader)
        self.assertEqual(err.leader, "http://l:8080")
        self.assertEqual(err.retry_after, 1.0)


class RealServerFailoverTest(unittest.TestCase):
    def test_skips_a_dead_replica(self) -> None:
        server = Server()
        self.addCleanup(lambda: self.assertEqual(server.stop(), 0))
        c = Client([dead_url(), server.url], timeout=5.0)
        c.register_policy("http://10.0.0.1:8000", index=0)
        sel = c.select(timeout_ms=0)
        self.assertEqual(sel["index"], 0)
        self.assertEqual(c.base_url, server.url)
        self.assertTrue(c.release(sel["lease_id"])["released"])


if __name__ == "__main__":
    unittest.main()
