import os
import time

import httpx

R = os.environ.get("POLICYROUTER_URL", "http://127.0.0.1:8080")
s = httpx.Client(timeout=30)  # s.headers["Authorization"] = "Bearer <admin token>" when the router has a key


def roll_out(version, model_path=None, load=None):
    """Roll `version` through the fleet. With model_path the engines load
    it; without it (external mode) load(policy_ids) moves the weights."""
    body = {"version": version, "max_unavailable": "25%", "set_floor": True,
            "phase_timeout_ms": 300_000}
    if model_path:
        body["model_path"] = model_path
    r = s.post(f"{R}/updates", json=body)
    r.raise_for_status()
    u = r.json()
    while u["state"] == "running":
        if u["ready"] and load is not None:
            load(u["ready"])  # NCCL/IPC broadcast to these paused policies
            s.post(f"{R}/updates/{u['id']}/done", json={"policies": u["ready"]}).raise_for_status()
        time.sleep(0.5)
        u = s.get(f"{R}/updates/{u['id']}").json()
    for p in u["policies"]:
        if p["phase"] == "failed":  # quarantined: drained until resumed
            print(f"policy {p['index']} failed at step {p.get('step')}: {p['error']}")
    if u["state"] != "succeeded":
        raise RuntimeError(f"update {u['id']} {u['state']}: {u.get('error')}")
    return u


# After each checkpoint:
roll_out(43, model_path="/ckpt/step-43")
print("floor:", s.get(f"{R}/weights").json()["min_version"])
