"""examples/trainer.py must work as printed against a running server."""

import os
import subprocess
import sys

from tests._server import CLIENT_ROOT, Server, ServerTestCase

EXAMPLE = os.path.join(CLIENT_ROOT, "examples", "trainer.py")


class ExampleTest(ServerTestCase):
    def run_example(self, *args, env=None):
        return subprocess.run([sys.executable, EXAMPLE, *args], capture_output=True, text=True, timeout=60,
                              env=env, cwd=CLIENT_ROOT)

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
