"""Tests cannot pass by not running: without the binary (no
POLICYROUTER_BIN, no go on PATH) a test that needs it skips on a developer's
machine and fails under CI (POLICYROUTER_CI set, as .ci/run does)."""

import os
import subprocess
import sys
import tempfile
import unittest

from tests._server import CLIENT_ROOT

# One test that needs the server.
NEEDS_SERVER = "tests.test_client.RegistrationTest.test_health"


def run_without_binary(ci: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("POLICYROUTER_BIN", "POLICYROUTER_CI")}
    with tempfile.TemporaryDirectory() as empty:
        env["PATH"] = empty  # no go
        if ci:
            env["POLICYROUTER_CI"] = ci
        return subprocess.run([sys.executable, "-m", "unittest", "-v", NEEDS_SERVER], cwd=CLIENT_ROOT, env=env,
                              capture_output=True, text=True, timeout=60)


class NoBinaryTest(unittest.TestCase):
    def test_skips_on_a_developer_machine(self):
        proc = run_without_binary("")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("OK (skipped=1)", proc.stderr)
        self.assertIn("go is not on PATH", proc.stderr)

    def test_fails_under_ci(self):
        proc = run_without_binary("1")
        self.assertNotEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("FAILED (errors=1)", proc.stderr)
        self.assertIn("required: POLICYROUTER_CI is set", proc.stderr)


if __name__ == "__main__":
    unittest.main()
