import os

from policyrouter import Client

# The router, and the fake-policy servers' --addr (policy i is served at /p/i).
router = os.environ.get("POLICYROUTER_URL", "http://127.0.0.1:8080")
fake = os.environ.get("FAKE_POLICY_URL", "http://127.0.0.1:9100")

c = Client(router, token=None, timeout=10.0, retries=2)
# Policies and topology (the seed's component_distribution) in one atomic call.
c.replace_registration(
    [{"url": f"{fake}/p/0", "index": 0}, {"url": f"{fake}/p/1", "index": 1}],
    {"node-a": {"env": {"ids": [0]}, "eval": {"ids": [0]}},
     "node-b": {"env": {"ids": [1]}, "eval": {"ids": [1]}}})

print(c.assign(4, current_loads=[3, 1])["assignments"])   # seed's stateless mode: [1, 1, 0, 1]
# An idle policy on env-1's node; it waits the one probe round trip the
# router needs to hear from just-registered policies.
sel = c.select(env_id="env-1", router="idle_affinity", timeout_ms=5000)
print(sel)  # {"index": 1, "id": ..., "url": ".../p/1", "node_id": "node-b", "lease_id": ...}
print(c.release(lease_id=sel["lease_id"]))  # {"released": False, ...} if the router had already freed it
print(c.drain(1)["state"])                  # an int addresses a policy by index, a str by id
