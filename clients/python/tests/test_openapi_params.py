"""Every request field of openapi.yaml reaches the server from both clients.

The test walks each operation of the spec: an operation is either mapped
to a client method (``COVERED``) or named, with why, in ``NOT_COVERED``;
a new operation in neither fails the test. For each mapped operation it
builds a value for every field of the request body (nested objects and
arrays included, from the schema) and for every path, query and header
parameter, calls the method of ``Client`` and of ``AsyncClient`` with one
keyword argument per field, named as in the spec, and checks the request
each sent: the path, the query, the headers and the JSON body must carry
exactly those values. So a field without a client parameter fails (the
call raises ``TypeError``, reported by name), and so does a parameter
that the client accepts but does not send.

No server is needed: the requests go to an ``httpx.MockTransport``.
"""

import asyncio
import inspect
import json
import unittest
from typing import Any, Dict, List, Tuple

import httpx

from policyrouter import AsyncClient, Client

from tests.test_types import load_spec

# operationId -> (client method, {spec name: client parameter} where they
# differ). The spec name of a request body that a method takes whole,
# rather than field by field, is "<body>".
COVERED: Dict[str, Tuple[str, Dict[str, str]]] = {
    "healthz": ("healthz", {}),
    "readyz": ("readyz", {}),
    "stats": ("stats", {}),
    "registerPolicy": ("register_policy", {}),
    "replacePolicies": ("replace_policies", {}),
    "listPolicies": ("list_policies", {}),
    # An int names a policy by index (/policies/by-index/{index}), a str by id.
    "getPolicy": ("get_policy", {}),
    "deletePolicy": ("delete_policy", {}),
    "drainPolicy": ("drain", {}),
    "resumePolicy": ("resume", {}),
    "getPolicyByIndex": ("get_policy", {"index": "id"}),
    "deletePolicyByIndex": ("delete_policy", {"index": "id"}),
    "drainPolicyByIndex": ("drain", {"index": "id"}),
    "resumePolicyByIndex": ("resume", {"index": "id"}),
    # The body is the seed's component_distribution, as is.
    "putTopology": ("set_topology", {"<body>": "component_distribution"}),
    "getTopology": ("get_topology", {}),
    "putRegistration": ("replace_registration", {}),
    "getRegistration": ("get_registration", {}),
    "putWeights": ("set_weights", {}),
    "getWeights": ("get_weights", {}),
    "startUpdate": ("rolling_update", {}),
    "listUpdates": ("list_updates", {}),
    "getUpdate": ("get_update", {"id": "update_id"}),
    "updateDone": ("update_done", {"id": "update_id"}),
    "abortUpdate": ("abort_update", {"id": "update_id"}),
    "assign": ("assign", {}),
    "selectPolicy": ("select", {}),
    "release": ("release", {}),
    "complete": ("complete", {}),
    "fleetSleep": ("fleet_sleep", {}),
    "fleetWake": ("fleet_wake", {}),
    "fleetEngine": ("fleet_engine", {}),
}

# Operations the client deliberately leaves out, and why.
NOT_COVERED = {
    # Not JSON, or not for programs: read by Prometheus, browsers, tools.
    "getOpenAPI": "the spec itself (YAML), for tools",
    "metrics": "Prometheus text format, for a scraper",
    "dashboard": "HTML page for a browser",
    "dashboardScript": "the dashboard's script",
    "dashboardCharts": "the dashboard's script",
    "dashboardStyle": "the dashboard's style sheet",
    # Proxy mode carries the engines' own APIs: callers use plain httpx or
    # an OpenAI SDK pointed at the router (docs/proxy.md).
    "proxyCompletions": "OpenAI API, through any OpenAI client",
    "proxyChatCompletions": "OpenAI API, through any OpenAI client",
    "proxyGenerate": "SGLang's native API, through plain httpx",
    "proxyModels": "OpenAI API, through any OpenAI client",
    # SGLang Model Gateway's worker API, for frameworks written against that
    # router (slime, miles, SkyRL, Prime-RL); register_policy and
    # delete_policy do the same for users of this client.
    "createWorker": "SMG compatibility: register_policy",
    "listWorkers": "SMG compatibility: list_policies",
    "getWorker": "SMG compatibility: get_policy",
    "deleteWorker": "SMG compatibility: delete_policy",
    "addWorkerLegacy": "SMG compatibility (legacy): register_policy",
    "removeWorkerLegacy": "SMG compatibility (legacy): delete_policy",
    "listWorkerURLsLegacy": "SMG compatibility (legacy): list_policies",
    # vllm-router's session release: a no-op here (a session's home follows
    # from its key by consistent hashing; there is no table to clear).
    "finishSession": "vllm-router compatibility, a no-op on this router",
    # Replica to replica: a follower that proxies takes and returns its
    # leases from the leader (docs/ha.md).
    "takeLease": "between router replicas, not for clients",
    "returnLease": "between router replicas, not for clients",
    "adoptLease": "between router replicas, not for clients",
    "routable": "between router replicas, not for clients",
    "returning": "between router replicas, not for clients",
}


class Spec:
    def __init__(self, doc):
        self.doc = doc

    def resolve(self, node):
        while isinstance(node, dict) and "$ref" in node:
            target: Any = self.doc
            for part in node["$ref"].lstrip("#/").split("/"):
                target = target[part]
            node = target
        return node

    def sample(self, schema, depth=0):
        """A value for ``schema`` with every property set, so that a field
        the client drops or renames shows in the comparison."""
        schema = self.resolve(schema)
        if depth > 8:
            raise AssertionError(f"schema too deep: {schema}")
        if "enum" in schema:
            return schema["enum"][0]
        for key in ("oneOf", "anyOf"):
            if key in schema and "type" not in schema and "properties" not in schema:
                return self.sample(schema[key][0], depth + 1)
        if "allOf" in schema:
            out: Dict[str, Any] = {}
            for part in schema["allOf"]:
                value = self.sample(part, depth + 1)
                if not isinstance(value, dict):
                    return value  # a described $ref to an array or a scalar
                out.update(value)
            return out
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next(k for k in kind if k != "null")
        if kind is None:
            kind = "object" if ("properties" in schema or "additionalProperties" in schema) else "string"
        if kind == "string":
            return "x-1"
        if kind == "integer":
            return max(3, schema.get("minimum", 3))
        if kind == "number":
            return 1.5
        if kind == "boolean":
            return True
        if kind == "array":
            return [self.sample(schema.get("items", {}), depth + 1)]
        props = schema.get("properties") or {}
        if props:
            return {name: self.sample(sub, depth + 1) for name, sub in props.items()}
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            return {"node-a": self.sample(extra, depth + 1)}
        return {}

    def operations(self):
        for path, item in self.doc["paths"].items():
            shared = item.get("parameters", [])
            for method, op in item.items():
                if method == "parameters":
                    continue
                params = [self.resolve(p) for p in shared + op.get("parameters", [])]
                yield op["operationId"], method.upper(), path, op, params

    def body_schema(self, op):
        body = self.resolve(op.get("requestBody") or {})
        content = body.get("content", {})
        if not content:
            return None
        return self.resolve(content["application/json"]["schema"])


def request_fields(spec, method, path, op, params):
    """The fields of one operation, as (location, spec name, value), and the
    expected path: each path parameter substituted."""
    fields: List[Tuple[str, str, Any]] = []
    for p in params:
        value = spec.sample(p.get("schema", {}))
        fields.append((p["in"], p["name"], value))
        if p["in"] == "path":
            path = path.replace("{" + p["name"] + "}", str(value))
    schema = spec.body_schema(op)
    if schema is not None:
        if schema.get("properties"):
            for name, sub in schema["properties"].items():
                fields.append(("body", name, spec.sample(sub)))
        else:
            fields.append(("body", "<body>", spec.sample(schema)))
    return fields, path


def answer(request):
    # Enough for every method's decoder.
    return httpx.Response(200, json={"policies": [], "updates": [], "state": "succeeded"})


def sent(request):
    body = json.loads(request.content) if request.content else None
    return (request.method, request.url.path, dict(request.url.params), request.headers, body)


def call_sync(name, kwargs):
    seen = []
    session = httpx.Client(transport=httpx.MockTransport(lambda r: seen.append(r) or answer(r)))
    with Client("http://router.test", session=session, retries=0) as c:
        getattr(c, name)(**kwargs)
    session.close()
    return seen


def call_async(name, kwargs):
    seen = []

    async def run():
        session = httpx.AsyncClient(transport=httpx.MockTransport(lambda r: seen.append(r) or answer(r)))
        async with AsyncClient("http://router.test", session=session, retries=0) as c:
            await getattr(c, name)(**kwargs)
        await session.aclose()

    asyncio.run(run())
    return seen


class OpenAPIParamsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.spec = Spec(load_spec())

    def test_every_operation_is_mapped_or_left_out_on_purpose(self):
        ids = [op_id for op_id, *_ in self.spec.operations()]
        self.assertEqual(len(ids), len(set(ids)), "duplicate operationIds")
        unknown = sorted(set(ids) - set(COVERED) - set(NOT_COVERED))
        self.assertEqual(unknown, [], "operations neither in COVERED nor in NOT_COVERED: map them to a client method")
        stale = sorted((set(COVERED) | set(NOT_COVERED)) - set(ids))
        self.assertEqual(stale, [], "operations listed here that openapi.yaml no longer has")
        self.assertEqual(sorted(set(COVERED) & set(NOT_COVERED)), [])

    def test_every_field_is_a_parameter_and_is_sent(self):
        checked = 0
        for op_id, method, path, op, params in self.spec.operations():
            if op_id not in COVERED:
                continue
            name, rename = COVERED[op_id]
            fields, want_path = request_fields(self.spec, method, path, op, params)
            kwargs = {rename.get(field, field): value for _, field, value in fields}
            with self.subTest(op_id):
                for cls in (Client, AsyncClient):
                    accepted = inspect.signature(getattr(cls, name)).parameters
                    lacking = [f"{loc} field {field!r}" + (f" (parameter {rename[field]!r})" if field in rename else "")
                               for loc, field, _ in fields if rename.get(field, field) not in accepted]
                    self.assertEqual(lacking, [], f"{cls.__name__}.{name} has no parameter for {op_id}'s "
                                                  f"{', '.join(lacking)}")
                got = []
                for caller in (call_sync, call_async):
                    requests = caller(name, kwargs)
                    self.assertEqual(len(requests), 1, caller.__name__)
                    got.append(sent(requests[0]))
                for verb, url_path, query, headers, body in got:
                    self.assertEqual((verb, url_path), (method, want_path))
                    for loc, field, value in fields:
                        if loc == "query":
                            self.assertEqual(query.get(field), str(value), f"query {field}")
                        elif loc == "header":
                            self.assertEqual(headers.get(field), str(value), f"header {field}")
                    want_body = {f: v for loc, f, v in fields if loc == "body"}
                    if "<body>" in want_body:
                        want_body = want_body["<body>"]
                    self.assertEqual(body, want_body or None, f"{op_id}: the JSON body sent")
                    checked += len(fields)
                # And the two shells sent the same request.
                self.assertEqual(got[0][:3] + (got[0][4],), got[1][:3] + (got[1][4],))
        # The walk did reach the fields (a spec it cannot read would pass empty).
        self.assertGreater(checked, 100)


if __name__ == "__main__":
    unittest.main()
