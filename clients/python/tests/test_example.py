"""The examples must work as printed against a running server, and each
Python block of the READMEs and of docs/ must be, word for word, in the
example file named by the ``<!-- example: PATH -->`` comment above it."""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

from tests._server import CLIENT_ROOT, REPO_ROOT, Server, ServerTestCase, binary, missing, require_tool, wait_until

EXAMPLE = os.path.join(CLIENT_ROOT, "examples", "trainer.py")
ASYNC_EXAMPLE = os.path.join(CLIENT_ROOT, "examples", "async_rollout.py")
PROXY_EXAMPLE = os.path.join(CLIENT_ROOT, "examples", "proxy_stream.py")


class ExampleTest(ServerTestCase):
    def run_example(self, *args, env=None, example=EXAMPLE):
        return subprocess.run([sys.executable, example, *args], capture_output=True, text=True, timeout=120,
                              env=env, cwd=CLIENT_ROOT)

    def test_trainer_leaves_a_registration_it_did_not_make(self):
        mine = self.client.register_policy("http://127.0.0.1:9/mine", index=0)
        proc = self.run_example(self.server.url)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("already has a registration", proc.stderr)
        self.assertEqual(self.client.list_policies(), [dict(mine)])
        # Asked to, it takes the router over, and cleans up after itself.
        proc = self.run_example(self.server.url, "--replace")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(self.client.list_policies(), [])

    def test_async_rollout_example(self):
        # Its stand-ins report weight versions in /idle: the poller runs.
        server = Server("--poll-interval", "50ms")
        try:
            proc = self.run_example(server.url, "--coroutines", "16", "--episodes", "32", "--turns", "3",
                                    "--step-s", "0.2", example=ASYNC_EXAMPLE)
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
            self.assertIn("32 episodes done: 96 turns by 16 coroutines", proc.stdout)
            self.assertIn("turns dispatched below the floor: 0", proc.stdout)
            self.assertIn("router: 0 waiters, 0 leases out", proc.stdout)
            from policyrouter import Client

            with Client(server.url) as c:
                self.assertEqual(c.get_registration()["policies"], [])
            # A second run refuses nothing: the first one cleaned up.
            again = self.run_example(server.url, "--coroutines", "4", "--episodes", "4", "--turns", "2",
                                     example=ASYNC_EXAMPLE)
            self.assertEqual(again.returncode, 0, again.stdout + again.stderr)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_proxy_stream_example(self):
        # Simulated policies that serve /generate and /v1/chat/completions,
        # streaming 8 tokens in 4 ms.
        from tests._server import binary

        fake = subprocess.Popen([binary(), "fake-policy", "--n", "4", "--tokens-per-second", "2000"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            urls = [fake.stdout.readline().strip() for _ in range(4)]
            # Capacity 4: the sessions' homes come from a ring over the
            # policies' random ids, and all four episodes may share one;
            # a home of capacity 2 would then spill the third and fourth
            # by design (a home's queue of waiting sessions is bounded).
            self.client.replace_policies([{"url": u, "index": i, "capacity": 4} for i, u in enumerate(urls)])
            proc = self.run_example(self.server.url, "--episodes", "4", "--turns", "4", example=PROXY_EXAMPLE)
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
            # Each episode's home has room: every turn lands there.
            self.assertIn("4 of 4 episodes kept one policy for all their turns", proc.stdout)
            self.assertEqual(self.client.stats()["leases"], 0)
        finally:
            fake.terminate()
            fake.wait(timeout=10)
            fake.stdout.close()

    def test_trainer_example(self):
        proc = self.run_example(self.server.url)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("env-2 selected policy 2 on node-b", proc.stdout)
        self.assertIn("env-3 -> policy 3", proc.stdout)
        self.assertRegex(proc.stdout, r"released policy 2|policy 2 was already freed by the router")
        # it cleans up after its stand-in policies; a second run works too
        self.assertEqual(self.client.list_policies(), [])
        env = dict(os.environ, POLICYROUTER_URL=self.server.url)
        proc = self.run_example(env=env)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)

    def test_trainer_example_with_the_default_poller(self):
        # The stand-in policies answer /idle, so the poller keeps them healthy.
        server = Server("--poll-interval", "50ms")
        try:
            proc = self.run_example(server.url)
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        finally:
            self.assertEqual(server.stop(), 0)


# The top-level README links docs/, where its Python examples now live.
READMES = ([os.path.join(REPO_ROOT, "README.md"), os.path.join(CLIENT_ROOT, "README.md")]
           + sorted(glob.glob(os.path.join(REPO_ROOT, "docs", "*.md"))))
EXAMPLES_DIR = os.path.join(CLIENT_ROOT, "examples")
# The test that runs each example file; the check below fails when an
# example has none.
RUN_BY = {
    "trainer.py": "ExampleTest.test_trainer_example",
    "async_rollout.py": "ExampleTest.test_async_rollout_example",
    "proxy_stream.py": "ExampleTest.test_proxy_stream_example",
    "seed_adapters.py": "READMEExampleTest.test_seed_adapters",
    "quickstart.py": "READMEExampleTest.test_quickstart",
    "async_lease.py": "READMEExampleTest.test_async_lease",
    "engines.py": "READMEExampleTest.test_engines",
    "rolling_update.py": "READMEExampleTest.test_rolling_update",
    "roll_out.py": "READMEExampleTest.test_roll_out",
    "tls_client.py": "READMEExampleTest.test_tls_client",
    "several_routers.py": "READMEExampleTest.test_several_routers",
}
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
MARK = re.compile(r"<!-- example: (\S+) -->\n\Z")


def readme_blocks():
    """(README path, line, named example path or None, block text) for each
    Python block of the READMEs."""
    out = []
    for readme in READMES:
        with open(readme, encoding="utf-8") as f:
            text = f.read()
        for m in BLOCK.finditer(text):
            mark = MARK.search(text, 0, m.start())
            line = text.count("\n", 0, m.start()) + 1
            out.append((readme, line, mark.group(1) if mark else None, m.group(1)))
    return out


class READMEBlocksTest(unittest.TestCase):
    def test_every_python_block_is_in_its_example_file(self):
        blocks = readme_blocks()
        self.assertGreaterEqual(len(blocks), 11)
        for readme, line, path, block in blocks:
            where = f"{os.path.relpath(readme, REPO_ROOT)}:{line}"
            with self.subTest(where):
                self.assertIsNotNone(path, f"{where}: a python block without <!-- example: PATH --> above it")
                full = os.path.join(REPO_ROOT, path)
                self.assertTrue(os.path.isfile(full), f"{where}: {path} does not exist")
                self.assertEqual(os.path.dirname(full), EXAMPLES_DIR, f"{where}: {path} is not in examples/")
                with open(full, encoding="utf-8") as f:
                    example = f.read()
                self.assertIn(block, example, f"{where}: the block is not word for word in {path}")

    def test_every_example_is_run_by_a_test(self):
        files = sorted(f for f in os.listdir(EXAMPLES_DIR) if f.endswith(".py"))
        self.assertEqual(files, sorted(RUN_BY))
        module = sys.modules[__name__]
        for name, test in RUN_BY.items():
            cls, meth = test.split(".")
            self.assertTrue(callable(getattr(getattr(module, cls), meth, None)), f"{name}: no test {test}")


def start_fakes(test, n, *args):
    """Start ``policyrouter fake-policy --n n *args`` until the test ends;
    return the policies' URLs."""
    fake = subprocess.Popen([binary(), "fake-policy", "--n", str(n), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def stop():
        fake.terminate()
        fake.wait(timeout=10)
        fake.stdout.close()

    test.addCleanup(stop)
    return [fake.stdout.readline().strip() for _ in range(n)]


class READMEExampleTest(unittest.TestCase):
    """Each example a README shows, run as a script against real routers,
    with its inputs from the environment."""

    def server(self, *args, command="serve"):
        server = Server(*args, command=command)
        self.addCleanup(lambda: self.assertEqual(server.stop(), 0, "".join(server.log[-20:])))
        return server

    def run_example(self, name, **env):
        env = dict({k: v for k, v in os.environ.items() if not k.startswith("POLICYROUTER_")},
                   PYTHONPATH=CLIENT_ROOT, **env)
        proc = subprocess.run([sys.executable, os.path.join(EXAMPLES_DIR, name)], capture_output=True, text=True,
                              timeout=120, env=env, cwd=tempfile.gettempdir())
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        return proc.stdout

    def client(self, url):
        from policyrouter import Client

        c = Client(url, timeout=5.0)
        self.addCleanup(c.close)
        return c

    def test_quickstart(self):
        server = self.server("--poll-interval", "50ms")
        fake = start_fakes(self, 2)[0].rsplit("/p/", 1)[0]
        out = self.run_example("quickstart.py", POLICYROUTER_URL=server.url, FAKE_POLICY_URL=fake).splitlines()
        self.assertEqual(out[0], "[1, 1, 0, 1]")
        self.assertIn("'index': 1", out[1])
        self.assertIn("'node_id': 'node-b'", out[1])
        self.assertIn(f"'url': '{fake}/p/1'", out[1])
        self.assertIn("'released': True", out[2])
        self.assertEqual(out[3], "draining")
        self.assertTrue(self.client(server.url).get_policy(1)["draining"])

    def test_async_lease(self):
        server = self.server("--poll-interval", "50ms")
        urls = start_fakes(self, 4, "--min-work", "5ms", "--max-work", "20ms")
        c = self.client(server.url)
        c.replace_policies([{"url": u, "index": i, "capacity": 4} for i, u in enumerate(urls)])
        out = self.run_example("async_lease.py", POLICYROUTER_URL=server.url)
        self.assertRegex(out, r"^256 turns: \{'home': \d+")
        st = c.stats()
        self.assertEqual((st["waiters"], st["leases"]), (0, 0))

    def test_seed_adapters(self):
        server = self.server("--workers", "2", command="demo")
        out = self.run_example("seed_adapters.py", POLICYROUTER_URL=server.url)
        self.assertIn("assign: [1, 3, 4]", out)
        self.assertRegex(out, r"select: policy \d+\n")
        self.assertIn("policies by state:", out)

    def test_engines(self):
        server = self.server("--poll-interval", "50ms")
        sglang = start_fakes(self, 1, "--engine", "sglang", "--api-key", "k-sglang")[0]
        vllm = start_fakes(self, 1, "--engine", "vllm")[0]
        out = self.run_example("engines.py", POLICYROUTER_URL=server.url, SGLANG_URL=sglang, VLLM_URL=vllm,
                               SGLANG_API_KEY="k-sglang", SGLANG_ADMIN_KEY="k-sglang")
        # Probed with its key, the SGLang policy is idle; no key is shown.
        self.assertEqual(out, "0 sglang idle []\n1 vllm idle []\n")
        self.assertNotIn("k-sglang", json.dumps(self.client(server.url).stats()))

    def sglang_fleet(self, server, n=4):
        urls = start_fakes(self, n, "--engine", "sglang", "--update-time", "50ms")
        c = self.client(server.url)
        c.replace_registration([{"url": u, "index": i, "engine": "sglang", "node_id": f"node-{i % 2}"}
                                for i, u in enumerate(urls)], {})
        self.assertTrue(wait_until(lambda: c.stats()["totals"].get("idle") == n, timeout=10), c.stats()["totals"])
        return c

    def test_rolling_update(self):
        server = self.server("--poll-interval", "50ms")
        c = self.sglang_fleet(server)
        out = self.run_example("rolling_update.py", POLICYROUTER_URL=server.url)
        self.assertIn("loading weights into 2 policies", out)
        self.assertIn("external mode: succeeded [8]", out)
        self.assertTrue(out.endswith("succeeded 43\n"), out)
        self.assertEqual({p["weight_version"] for p in c.get_registration()["policies"]}, {"43"})

    def test_roll_out(self):
        server = self.server("--poll-interval", "50ms")
        c = self.sglang_fleet(server)
        self.assertEqual(self.run_example("roll_out.py", POLICYROUTER_URL=server.url), "floor: 43\n")
        self.assertEqual(c.get_weights()["min_version"], 43)

    def test_tls_client(self):
        from tests.test_tls import SECRET, make_cert, mint

        require_tool("openssl", "apt-get install openssl; .ci/run installs it")
        tmp = tempfile.mkdtemp(prefix="policyrouter-tls-example-")
        self.addCleanup(shutil.rmtree, tmp, True)
        router_crt, router_key = make_cert(tmp, "router")
        trainer_crt, trainer_key = make_cert(tmp, "trainer")
        server = self.server("--tls-cert", router_crt, "--tls-key", router_key, "--tls-client-ca", trainer_crt,
                             "--jwt-secret", SECRET)
        self.assertTrue(server.url.startswith("https://"))
        out = self.run_example("tls_client.py", POLICYROUTER_URL=server.url, POLICYROUTER_TOKEN=mint("read"),
                               POLICYROUTER_CA=router_crt, POLICYROUTER_CERT=trainer_crt,
                               POLICYROUTER_KEY=trainer_key)
        self.assertTrue(out.startswith(server.url + " {"), out)
        # Without the client certificate the same script fails.
        env = dict(os.environ, PYTHONPATH=CLIENT_ROOT, POLICYROUTER_URL=server.url, POLICYROUTER_TOKEN=mint("read"),
                   POLICYROUTER_CA=router_crt, POLICYROUTER_CERT=router_crt, POLICYROUTER_KEY=router_key)
        proc = subprocess.run([sys.executable, os.path.join(EXAMPLES_DIR, "tls_client.py")], capture_output=True,
                              text=True, timeout=60, env=env)
        self.assertNotEqual(proc.returncode, 0, proc.stdout)

    def etcd(self):
        """An embedded etcd (internal/etcdtest/etcdserve), built with go."""
        go = shutil.which("go")
        if go is None:
            raise missing("go is not on PATH (the several-routers example runs on an embedded etcd built with go)")
        tmp = tempfile.mkdtemp(prefix="policyrouter-etcd-")
        self.addCleanup(shutil.rmtree, tmp, True)
        exe = os.path.join(tmp, "etcdserve")
        subprocess.run([go, "build", "-o", exe, "./internal/etcdtest/etcdserve"], cwd=REPO_ROOT, check=True,
                       capture_output=True, timeout=600)
        proc = subprocess.Popen([exe], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

        def stop():
            proc.terminate()
            proc.wait(timeout=30)
            proc.stdout.close()

        self.addCleanup(stop)
        endpoint = proc.stdout.readline().strip()
        self.assertTrue(endpoint.startswith("http://"), endpoint)
        return endpoint

    def test_several_routers(self):
        endpoint = self.etcd()
        routers = [self.server("--store", "etcd", "--etcd-endpoints", endpoint) for _ in range(3)]
        urls = [r.url for r in routers]
        self.client(urls[0]).register_policy("http://127.0.0.1:9/p0", index=0)

        def leader():
            import httpx

            up = [u for u in urls if httpx.get(u + "/readyz", timeout=5).status_code == 200]
            return up[0] if len(up) == 1 else None

        self.assertTrue(wait_until(lambda: leader() is not None, timeout=20), "no replica became the leader")
        lead = leader()
        # The leader last, behind the followers and a dead address.
        given = ["http://127.0.0.1:9"] + [u for u in urls if u != lead] + [lead]
        out = self.run_example("several_routers.py", POLICYROUTER_URLS=",".join(given)).splitlines()
        self.assertEqual(out, [repr(given), lead])
