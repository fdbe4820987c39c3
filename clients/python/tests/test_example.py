"""examples/trainer.py must work as printed against a running server."""

import os
import subprocess
import sys

from tests._server import CLIENT_ROOT, Server, ServerTestCase

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
            self.client.replace_policies([{"url": u, "index": i, "capacity": 2} for i, u in enumerate(urls)])
            proc = self.run_example(self.server.url, "--episodes", "4", "--turns", "4", example=PROXY_EXAMPLE)
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
            # Each episode waits for its home: every turn lands there.
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
