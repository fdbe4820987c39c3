"""The result types follow the contract: every object schema of openapi.yaml
that a 2xx answer holds has its TypedDict in policyrouter.types with the
same keys, required where the schema requires them (or is named below as
left untyped, with why), and the real binary's answers carry the keys the
types require and no key they lack."""

import os
import unittest
from typing import Any, TypedDict, get_args

from policyrouter import types

from tests._server import REPO_ROOT, ServerTestCase, missing

# Schema -> TypedDict.
TYPED = {
    "Policy": types.Policy,
    "PolicyStats": types.PolicyStats,
    "PolicyRef": types.PolicyRef,
    "Registration": types.Registration,
    "Weights": types.Weights,
    "AssignResponse": types.AssignResult,
    "SelectResponse": types.SelectResult,
    "ReleaseResponse": types.ReleaseResult,
    "CompleteResponse": types.CompleteResult,
    "Health": types.Health,
    "UpdateCall": types.UpdateCall,
    "UpdatePolicy": types.UpdatePolicy,
    "Update": types.Update,
    "UpdateSummary": types.UpdateSummary,
    "Stats": types.Stats,
}

# Object schemas of answers without a TypedDict of their own, and why.
UNTYPED = {
    "PolicyList": "unwrapped: list_policies() and replace_policies() return its policies",
    "UpdateList": "unwrapped: list_updates() returns its updates",
    "Component": "part of the topology, the seed's component_distribution, passed through as is",
    "StateCounts": "figures of GET /stats (nodes, totals): Dict[str, Any]",
    "DecisionStats": "figures of GET /stats: Dict[str, Any]",
    "Histogram": "figures of GET /stats: Dict[str, Any]",
    "PollerStats": "figures of GET /stats: Dict[str, Any]",
    "StickyStats": "figures of GET /stats: Dict[str, Any]",
    "PrefixStats": "figures of GET /stats (prefix): Dict[str, Any]",
    # Answers of the compatibility routes the client does not call
    # (test_openapi_params.NOT_COVERED says why).
    "WorkerAccepted": "SGLang Model Gateway's worker API: not a client method",
    "WorkerInfo": "SGLang Model Gateway's worker API: not a client method",
    "WorkerList": "SGLang Model Gateway's worker API: not a client method",
    "WorkerURLList": "SGLang Model Gateway's worker API: not a client method",
    "FinishSessionResponse": "vllm-router's session release: not a client method",
    "FleetResponse": "the fleet verbs' answers: Dict[str, Any] (fleet_sleep, fleet_wake, fleet_engine)",
    "FleetResult": "the fleet verbs' answers: Dict[str, Any] (fleet_sleep, fleet_wake, fleet_engine)",
    "FleetSelector": "echoed by an update as it was sent: the caller's own mapping",
    # Answers of the replicas' internal routes (test_openapi_params.NOT_COVERED).
    "Routable": "between router replicas: not a client method",
    "Returning": "between router replicas: not a client method",
}


def load_spec():
    try:
        import yaml  # Debian's python3-yaml; .ci/run installs it
    except ImportError:
        raise missing("python3-yaml is not installed (apt-get install python3-yaml)")
    with open(os.path.join(REPO_ROOT, "openapi.yaml")) as f:
        return yaml.safe_load(f)


def _refs(node, out):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                out.add(v)
            else:
                _refs(v, out)
    elif isinstance(node, list):
        for v in node:
            _refs(v, out)


def answer_schemas(spec):
    """The component schemas a 2xx JSON answer holds, directly or nested."""
    schemas, responses = spec["components"]["schemas"], spec["components"].get("responses", {})
    todo = set()
    for ops in spec["paths"].values():
        for op in ops.values():
            if not isinstance(op, dict):
                continue
            for status, resp in op.get("responses", {}).items():
                if not str(status).startswith("2"):
                    continue
                if "$ref" in resp:
                    resp = responses[resp["$ref"].rsplit("/", 1)[1]]
                _refs(resp.get("content", {}).get("application/json", {}), todo)
    seen = set()
    while todo:
        ref = todo.pop()
        if not ref.startswith("#/components/schemas/"):
            continue
        name = ref.rsplit("/", 1)[1]
        if name not in seen:
            seen.add(name)
            _refs(schemas[name], todo)
    return {n: schemas[n] for n in seen}


def keys(td):
    return td.__required_keys__ | td.__optional_keys__


def drift(schema, td):
    """How a TypedDict differs from its schema, as sorted lines; [] when
    they agree."""
    props, required = set(schema["properties"]), set(schema.get("required", []))
    return sorted([f"{k}: in the schema, not in the type" for k in props - keys(td)] +
                  [f"{k}: in the type, not in the schema" for k in keys(td) - props] +
                  [f"{k}: required by one only" for k in (td.__required_keys__ ^ required) & props & keys(td)])


class ContractTest(unittest.TestCase):
    def test_every_answer_schema_is_typed(self):
        found = answer_schemas(load_spec())
        self.assertIn("SelectResponse", found)  # the walk works
        for name, schema in sorted(found.items()):
            if schema.get("type") != "object" or "properties" not in schema:
                continue
            with self.subTest(schema=name):
                self.assertTrue(name in TYPED or name in UNTYPED,
                                f"openapi.yaml's {name} is in an answer but has no TypedDict in types.py")

    def test_keys_match_the_schemas(self):
        schemas = load_spec()["components"]["schemas"]
        for name, td in TYPED.items():
            with self.subTest(schema=name, type=td.__name__):
                self.assertEqual(drift(schemas[name], td), [])

    def test_engine_names(self):
        """types.Engine lists the engines of openapi.yaml's EngineName, the
        router's table of engines (a Go test ties the two)."""
        names = load_spec()["components"]["schemas"]["EngineName"]["enum"]
        self.assertEqual(list(get_args(types.Engine)), names)

    def test_drift_is_seen(self):
        schema = load_spec()["components"]["schemas"]["Policy"]
        fields = {k: Any for k in keys(types.Policy)}
        del fields["engine"]
        self.assertEqual(drift(schema, TypedDict("NoEngine", fields)), ["engine: in the schema, not in the type"])
        fields = {k: Any for k in keys(types.Policy)}
        fields["api_key"] = str  # write-only: never in an answer
        self.assertEqual(drift(schema, TypedDict("WithKey", fields)), ["api_key: in the type, not in the schema"])
        self.assertEqual(drift(schema, TypedDict("Optional", fields, total=False)),
                         ["api_key: in the type, not in the schema"] +
                         [f"{k}: required by one only" for k in sorted(types.Policy.__required_keys__)])


class AnswersTest(ServerTestCase):
    """The real binary's answers against the types: every required key
    there, no key the type lacks."""

    def check(self, td, answer):
        self.assertEqual(sorted(td.__required_keys__ - set(answer)), [], f"{td.__name__}: required keys missing")
        self.assertEqual(sorted(set(answer) - keys(td)), [], f"{td.__name__}: keys the type lacks")

    def test_answers(self):
        p = self.client.register_policy("http://127.0.0.1:9/p0", index=0, node_id="a")
        self.check(types.Policy, p)
        self.client.register_policy("http://127.0.0.1:9/p1", index=1, node_id="b")
        for p in self.client.list_policies():
            self.check(types.Policy, p)
        reg = self.client.get_registration()
        self.check(types.Registration, reg)
        self.check(types.Weights, self.client.set_weights(0))
        a = self.client.assign(2, session_ids=["s", None])
        self.check(types.AssignResult, a)
        for ref in a["policies"].values():
            self.check(types.PolicyRef, ref)
        sel = self.client.select(session_id="t")
        self.check(types.SelectResult, sel)
        self.check(types.ReleaseResult, self.client.release(lease_id=sel["lease_id"]))
        self.check(types.CompleteResult, self.client.complete(0))
        self.check(types.Health, self.client.healthz())
        update = self.client.rolling_update(1)
        self.check(types.Update, update)
        stats = self.client.stats()
        self.check(types.Stats, stats)
        self.check(types.UpdateSummary, stats["update"])
        for p in stats["policies"]:
            self.check(types.PolicyStats, p)
        for p in self.client.get_update(update["id"])["policies"]:
            self.check(types.UpdatePolicy, p)


if __name__ == "__main__":
    unittest.main()
