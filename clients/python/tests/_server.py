"""Test fixture: the real policyrouter binary.

The binary is built once per test run (``go build`` from the repository
root, found relative to this file) or taken from ``POLICYROUTER_BIN``.
Without either, tests using it are skipped, or fail under CI
(``POLICYROUTER_CI`` set, as ``.ci/run`` does): see :func:`missing`.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest
from typing import List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT_ROOT = os.path.dirname(HERE)  # clients/python
REPO_ROOT = os.path.dirname(os.path.dirname(CLIENT_ROOT))

_lock = threading.Lock()


def ci() -> bool:
    """Whether the tests run under CI (``POLICYROUTER_CI`` set, as
    ``.ci/run`` does, which installs everything the tests need)."""
    return bool(os.environ.get("POLICYROUTER_CI"))


def missing(what: str) -> BaseException:
    """The exception for a test whose prerequisite (a tool, the binary, a
    module) is missing: a skip on a developer's machine, a failure under CI,
    so that CI cannot pass a test by not running it."""
    if ci():
        return RuntimeError(f"{what} (required: POLICYROUTER_CI is set)")
    return unittest.SkipTest(what)


def require_tool(name: str, install: str) -> str:
    """The path of the program ``name``; skips the test without it, or fails
    it under CI."""
    path = shutil.which(name)
    if path is None:
        raise missing(f"{name} is not on PATH ({install})")
    return path
_binary: Optional[str] = None
_build_error: Optional[BaseException] = None


def binary() -> str:
    """Return the path of the policyrouter binary, building it on first use.

    Without POLICYROUTER_BIN and go, skips (or, under CI, fails) the test.
    """
    global _binary, _build_error
    with _lock:
        if _binary is not None:
            return _binary
        if _build_error is not None:
            raise _build_error
        env_bin = os.environ.get("POLICYROUTER_BIN")
        if env_bin:
            if not os.access(env_bin, os.X_OK):
                _build_error = RuntimeError(f"POLICYROUTER_BIN={env_bin!r} is not an executable file")
                raise _build_error
            _binary = env_bin
            return _binary
        go = shutil.which("go")
        if go is None:
            _build_error = missing("go is not on PATH and POLICYROUTER_BIN is unset")
            raise _build_error
        if not os.path.exists(os.path.join(REPO_ROOT, "go.mod")):
            _build_error = missing(f"no go.mod at {REPO_ROOT}; set POLICYROUTER_BIN")
            raise _build_error
        tmp = tempfile.mkdtemp(prefix="policyrouter-pytest-")
        atexit.register(shutil.rmtree, tmp, True)
        out = os.path.join(tmp, "policyrouter")
        proc = subprocess.run(
            [go, "build", "-o", out, "./cmd/policyrouter"],
            cwd=REPO_ROOT, capture_output=True, text=True,
        )
        if proc.returncode != 0:
            _build_error = RuntimeError(f"go build failed ({proc.returncode}):\n{proc.stderr}")
            raise _build_error
        _binary = out
        return _binary


class Server:
    """A running ``policyrouter serve`` (or ``command``, e.g. ``demo``) on
    a free loopback port."""

    def __init__(self, *extra_args: str, command: str = "serve") -> None:
        self.args = [
            binary(), command, "--addr", "127.0.0.1:0", "--log-format", "json",
            # No poller unless a test asks for one: the policies the tests
            # register do not answer /idle, and without a poller the server
            # trusts them idle.
            "--poll-interval", "0", *extra_args,
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("POLICYROUTER_")}
        self.proc = subprocess.Popen(
            self.args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            env=env, text=True, bufsize=1,
        )
        self.log: List[str] = []
        self.addr = self._wait_listening(timeout=20.0)
        scheme = "https" if "--tls-cert" in extra_args else "http"
        self.url = f"{scheme}://{self.addr}"
        # Keep draining stderr (one JSON line per request) so the server
        # never blocks on a full pipe.
        self._drain = threading.Thread(target=self._read_rest, daemon=True)
        self._drain.start()

    def _wait_listening(self, timeout: float) -> str:
        found: List[str] = []

        def read() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.log.append(line)
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict) and rec.get("msg") == "policyrouter listening":
                    found.append(rec["addr"])
                    return

        t = threading.Thread(target=read, daemon=True)
        t.start()
        t.join(timeout)
        if not found:
            self.proc.kill()
            self.proc.wait()
            t.join(5)
            if self.proc.stderr is not None:
                self.proc.stderr.close()
            raise RuntimeError("policyrouter did not start:\n" + "".join(self.log))
        return found[0]

    def _read_rest(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM the server, wait for it and return its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("policyrouter did not exit within %.0fs of SIGTERM" % timeout)
        self._drain.join(5)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        return rc


class ServerTestCase(unittest.TestCase):
    """A test case with a fresh server per test (``self.server``) and a
    client on it (``self.client``); at the end the server is stopped with
    SIGTERM and must exit 0."""

    server_args: tuple = ()

    def setUp(self) -> None:
        from policyrouter import Client

        self.server = Server(*self.server_args)
        self.addCleanup(self._stop_server)
        self.client = Client(self.server.url, timeout=5.0)
        self.addCleanup(self.client.close)

    def _stop_server(self) -> None:
        rc = self.server.stop()
        self.assertEqual(rc, 0, "policyrouter exited %d after SIGTERM; log:\n%s" % (rc, "".join(self.server.log[-20:])))

    def register_n(self, n: int, nodes: Optional[List[str]] = None, **kw) -> list:
        """Register policies 0..n-1 at dummy URLs (node ``nodes[i]``)."""
        out = []
        for i in range(n):
            out.append(self.client.register_policy(
                f"http://127.0.0.1:9/p{i}", node_id=None if nodes is None else nodes[i], index=i, **kw))
        return out


def wait_until(cond, timeout: float = 5.0, interval: float = 0.02) -> bool:
    """Poll cond() until it is true or timeout passes."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(interval)
    return cond()


class AsyncServerTestCase(unittest.IsolatedAsyncioTestCase):
    """:class:`ServerTestCase` for asyncio tests: a fresh server per test
    (``self.server``) and an :class:`~policyrouter.AsyncClient` on it
    (``self.client``); the server must exit 0 on SIGTERM."""

    server_args: tuple = ()
    client_kw: dict = {}

    def setUp(self) -> None:
        self.server = Server(*self.server_args)
        self.addCleanup(self._stop_server)

    async def asyncSetUp(self) -> None:
        import asyncio

        from policyrouter import AsyncClient

        # IsolatedAsyncioTestCase runs the loop in debug mode, which slows
        # every task down severalfold and logs each slow step; the tests
        # measure the client as trainers run it.
        asyncio.get_running_loop().set_debug(False)
        self.client = AsyncClient(self.server.url, timeout=5.0, **self.client_kw)
        self.addAsyncCleanup(self.client.aclose)

    def _stop_server(self) -> None:
        rc = self.server.stop()
        self.assertEqual(rc, 0, "policyrouter exited %d after SIGTERM; log:\n%s" % (rc, "".join(self.server.log[-20:])))

    async def register_n(self, n: int, nodes: Optional[List[str]] = None, **kw) -> list:
        """Register policies 0..n-1 at dummy URLs (node ``nodes[i]``)."""
        return [await self.client.register_policy(f"http://127.0.0.1:9/p{i}", node_id=None if nodes is None else nodes[i],
                                                  index=i, **kw) for i in range(n)]

    async def wait_stats(self, cond, timeout: float = 10.0, interval: float = 0.002) -> dict:
        """Poll GET /stats until cond(stats) holds; return those stats."""
        import asyncio

        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while True:
            st = await self.client.stats()
            if cond(st):
                return st
            if loop.time() > end:
                raise AssertionError(f"stats never matched within {timeout}s: waiters={st.get('waiters')} "
                                     f"leases={st.get('leases')}")
            await asyncio.sleep(interval)
