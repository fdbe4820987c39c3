import os

from policyrouter import Client, RemoteRouter, RemoteSyncRouter, UnavailableError

client = Client(os.environ.get("POLICYROUTER_URL", "http://127.0.0.1:8080"))  # token="..." when the server has a key

# Async batches: the seed's NodeAffinityRouter.assign(current_loads, num_tasks, env_ids).
router = RemoteRouter(client, router="node_affinity")
print("assign:", router.assign([2, 0, 1, 0, 0, 0, 0, 0], 3, ["env-0", "env-1", "env-5"]))

# Sync steps: the seed's SyncSimpleRouter.select_policy(), preferring the env's node.
sync = RemoteSyncRouter(client, router="idle_affinity", timeout_ms=10000)
try:
    index = sync.select_policy("env-5")
    print("select: policy", index)
    # ... run the rollout step on that policy ...
    sync.release(index)  # or let the poller see it idle again
except UnavailableError as e:
    print("no idle policy, retry in", e.retry_after, "s")

print("policies by state:", {k: v for k, v in client.stats()["totals"].items() if k in ("idle", "busy")})
