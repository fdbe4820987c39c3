"""The Python client's prefix hashes are the router's: the known answers of
prefix/testdata, which the Go tests check too."""

import glob
import importlib.util
import json
import os
import unittest

_HERE = os.path.dirname(os.path.abspath(__file__))
_TESTDATA = os.path.join(_HERE, "..", "..", "..", "prefix", "testdata")

try:
    import policyrouter
    from policyrouter import prefix as _prefix
except ImportError:  # the package needs httpx; the hash does not
    policyrouter = None
    _spec = importlib.util.spec_from_file_location(
        "policyrouter_prefix", os.path.join(_HERE, "..", "policyrouter", "prefix.py"))
    _prefix = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_prefix)

MAX_BLOCKS, prefix_hashes = _prefix.MAX_BLOCKS, _prefix.prefix_hashes


class PrefixHashesTest(unittest.TestCase):
    def vectors(self):
        out = []
        for path in sorted(glob.glob(os.path.join(_TESTDATA, "*.json"))):
            with open(path) as f:
                out.extend(json.load(f).get("vectors", []))
        return out

    def test_known_answers(self):
        vs = self.vectors()
        self.assertGreaterEqual(len(vs), 3, "no vectors found in " + _TESTDATA)
        for v in vs:
            with self.subTest(v["name"]):
                self.assertEqual(prefix_hashes(v["token_ids"]), v["hashes"])

    def test_form(self):
        hs = prefix_hashes(range(16 * 3 + 5))
        self.assertEqual(len(hs), 3)
        for h in hs:
            self.assertRegex(h, r"^[0-9a-f]{16}$")

    def test_chain_extends(self):
        prompt, output = list(range(70)), list(range(1000, 1050))
        self.assertEqual(prefix_hashes(prompt + output)[:4], prefix_hashes(prompt))

    def test_cap(self):
        ids = list(range(16 * 10))
        self.assertEqual(prefix_hashes(ids, 3), prefix_hashes(ids)[:3])
        self.assertEqual(len(prefix_hashes([1] * 16 * (MAX_BLOCKS + 2))), MAX_BLOCKS)

    @unittest.skipIf(policyrouter is None, "httpx is not installed")
    def test_exported(self):
        self.assertIs(policyrouter.prefix_hashes, prefix_hashes)
        self.assertIn("prefix_hashes", policyrouter.__all__)


if __name__ == "__main__":
    unittest.main()


if policyrouter is not None:
    from tests._server import ServerTestCase

    class AssignPrefixTest(ServerTestCase):
        """An /assign of a GRPO group with its prompt's hashes gathers the
        tasks where the prompt is cached; the next /select follows them."""

        def test_group_gathers(self):
            self.register_n(4, capacity=16)
            hashes = prefix_hashes(list(range(1000, 1000 + 8 * 16)))
            plain = self.client.assign(4)
            self.assertEqual(len(set(plain["assignments"])), 4, "the seed spreads a batch without hashes")
            out = self.client.assign(4, prefix_hashes=hashes)
            self.assertEqual(len(set(out["assignments"])), 1, out)
            home = out["policies"][str(out["assignments"][0])]["id"]
            sel = self.client.select(prefix_hashes=hashes)
            self.assertEqual((sel["id"], sel["prefix_outcome"]), (home, "hit"))
