import os

from policyrouter import Client

c = Client(os.environ.get("POLICYROUTER_URL", "http://127.0.0.1:8080"))


def load_weights_into(policy_ids):
    """Your code: move the new weights into these paused policies (NCCL or IPC)."""
    print("loading weights into", len(policy_ids), "policies")


u = c.rolling_update(8, max_unavailable=2, min_available_per_node=1)   # external mode
def load(u):                      # called with each state seen
    if u["ready"]:
        load_weights_into(u["ready"])          # your code
        c.update_done(u["id"], u["ready"])
done = c.wait_update(u["id"], timeout=600, on_progress=load)
print("external mode:", done["state"], sorted({p["reported_version"] for p in done["policies"]}))

u = c.rolling_update(43, model_path="/ckpt/step-43", pause_mode="abort", set_floor=True,
                     max_unavailable="25%", phase_timeout_ms=300000)
print(c.wait_update(u["id"], timeout=1800)["state"], c.get_weights()["min_version"])   # succeeded 43
