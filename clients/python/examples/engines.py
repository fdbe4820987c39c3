import os
import time

from policyrouter import Client

c = Client(os.environ.get("POLICYROUTER_URL", "http://127.0.0.1:8080"))
c.replace_registration([
    {"url": os.environ.get("SGLANG_URL", "http://gpu-0:30000"), "index": 0, "engine": "sglang", "capacity": 8,
     "api_key": os.environ["SGLANG_API_KEY"], "admin_api_key": os.environ["SGLANG_ADMIN_KEY"]},
    {"url": os.environ.get("VLLM_URL", "http://gpu-1:8000"), "index": 1, "engine": "vllm", "capacity": 8},
], topology={})
while any(p["state"] == "unknown" for p in c.list_policies()):  # until the router's first probe of each
    time.sleep(0.1)
for p in c.get_registration()["policies"]:  # the keys are write-only: no answer shows them
    print(p["index"], p["engine"], c.get_policy(p["index"])["state"], sorted(k for k in p if "key" in k))
