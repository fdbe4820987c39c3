"""The package as pip installs it: httpx its one dependency, the version
written once, types shipped."""

import ast
import os
import re
import unittest

import policyrouter
from policyrouter import types

from tests._server import CLIENT_ROOT, missing

PACKAGE = os.path.join(CLIENT_ROOT, "policyrouter")


def pyproject():
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        raise missing("reading pyproject.toml needs tomllib, Python 3.11 or later")
    with open(os.path.join(CLIENT_ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


class PackageTest(unittest.TestCase):
    def test_httpx_is_the_one_dependency(self):
        self.assertEqual(pyproject()["project"]["dependencies"], ["httpx>=0.23"])
        stdlib_or_own = {"__future__", "asyncio", "collections", "concurrent", "contextlib", "dataclasses", "email",
                         "hashlib", "inspect", "json", "logging", "numbers", "os", "random", "socket", "ssl", "struct", "sys",
                         "threading",
                         "time", "typing", "urllib", "uuid", "warnings", "weakref"}
        for name in sorted(os.listdir(PACKAGE)):
            if not name.endswith(".py"):
                continue
            with open(os.path.join(PACKAGE, name)) as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    mods = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    mods = [node.module]
                else:
                    continue
                for mod in mods:
                    top = mod.split(".")[0]
                    with self.subTest(file=name, module=mod):
                        self.assertIn(top, stdlib_or_own | {"httpx", "httpcore"})
                        self.assertNotIn(top, {"requests", "urllib3"})

    def test_version_is_written_once(self):
        project = pyproject()
        self.assertIn("version", project["project"]["dynamic"])
        self.assertNotIn("version", project["project"])
        self.assertEqual(project["tool"]["setuptools"]["dynamic"]["version"],
                         {"attr": "policyrouter._version.__version__"})
        self.assertRegex(policyrouter.__version__, r"^\d+\.\d+\.\d+$")
        found = []
        for name in os.listdir(PACKAGE):
            if name.endswith(".py"):
                with open(os.path.join(PACKAGE, name)) as f:
                    if re.search(r"^__version__\s*=", f.read(), re.M):
                        found.append(name)
        self.assertEqual(found, ["_version.py"])

    def test_typed(self):
        self.assertTrue(os.path.exists(os.path.join(PACKAGE, "py.typed")))
        self.assertEqual(pyproject()["tool"]["setuptools"]["package-data"]["policyrouter"], ["py.typed"])
        self.assertEqual(types.SelectResult.__required_keys__, {"index", "id", "url", "node_id"})
        self.assertEqual(types.SelectResult.__optional_keys__,
                         {"lease_id", "version", "weight_version", "sticky", "env_unmapped",
                          "prefix_match", "prefix_outcome"})
        self.assertIn("sticky", types.AssignResult.__optional_keys__)


if __name__ == "__main__":
    unittest.main()
