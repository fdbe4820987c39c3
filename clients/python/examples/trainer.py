#!/usr/bin/env python3
"""What a trainer does with policyrouter, start to finish.

    policyrouter serve &                       # in another terminal
    python3 trainer.py [BASE_URL] [--replace]  # default $POLICYROUTER_URL or http://127.0.0.1:8080

1. registers 4 policies on two nodes and the topology (the seed's
   component_distribution) in one atomic call. PUT /registration replaces
   the router's whole registration, so the script stops if the router
   already has one (``--replace`` takes it over), and at the end it removes
   only what it registered, if nobody changed the registration since,
2. waits until the router has heard from them (none `unknown` in GET /stats),
3. assigns a batch of 8 rollout tasks with node affinity (async mode) and
   reports them finished,
4. selects an idle policy for one sync step, then releases it.

The policies are stand-ins: small /idle servers started in this process
(answering {"idle": true}), so that the router's poller finds them healthy.
Set POLICYROUTER_POLICY_URLS to four comma-separated URLs of real policy
servers to use those instead. POLICYROUTER_TOKEN is sent as bearer token.
"""

import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

try:
    import policyrouter  # noqa: F401
except ImportError:  # running from a checkout: use the package next door
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import policyrouter  # noqa: F401

from policyrouter import Client


class _IdlePolicy(BaseHTTPRequestHandler):
    """A stand-in policy server: GET /idle -> {"idle": true}."""

    def do_GET(self):
        body = json.dumps({"idle": True}).encode() if self.path == "/idle" else b"{}"
        self.send_response(200 if self.path == "/idle" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def start_stub_policies(n):
    servers = []
    for _ in range(n):
        srv = ThreadingHTTPServer(("127.0.0.1", 0), _IdlePolicy)
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(srv)
    return servers


def wait_until_heard(client, n, timeout_s=10.0):
    """Wait until none of the n policies is still unknown to the router."""
    deadline = time.monotonic() + timeout_s
    while True:
        unknown = client.stats()["totals"]["unknown"]
        if unknown == 0:
            return
        if time.monotonic() > deadline:
            sys.exit("the router has not heard from %d of %d policies after %.0fs: see GET /stats" % (unknown, n, timeout_s))
        time.sleep(0.05)


def main(argv):
    args = [a for a in argv[1:] if a != "--replace"]
    replace = "--replace" in argv[1:]
    base_url = args[0] if args else os.environ.get("POLICYROUTER_URL", "http://127.0.0.1:8080")
    client = Client(base_url, token=os.environ.get("POLICYROUTER_TOKEN"))
    print("policyrouter at", base_url, client.healthz())
    current = client.get_registration()
    if (current["policies"] or current["topology"]) and not replace:
        client.close()
        sys.exit("the router at %s already has a registration (%d policies); this script replaces the whole "
                 "registration: run it against a router of your own, or pass --replace"
                 % (base_url, len(current["policies"])))

    stubs = []
    urls = [u for u in os.environ.get("POLICYROUTER_POLICY_URLS", "").split(",") if u]
    if not urls:
        stubs = start_stub_policies(4)
        urls = ["http://127.0.0.1:%d" % s.server_address[1] for s in stubs]
    if len(urls) != 4:
        sys.exit("POLICYROUTER_POLICY_URLS must name 4 policy servers")

    ours = None
    try:
        # Policies and the seed's component_distribution in one call: env
        # workers 0-1 and policies (eval workers) 0-1 on node-a, env workers
        # 2-3 and policies 2-3 on node-b. Policies take their node from the
        # topology.
        reg = client.replace_registration(
            [{"url": url, "index": i} for i, url in enumerate(urls)],
            {
                "node-a": {"env": {"ids": [0, 1]}, "eval": {"ids": [0, 1]}},
                "node-b": {"env": {"ids": [2, 3]}, "eval": {"ids": [2, 3]}},
            },
        )
        policies = reg["policies"]
        ours = {p["id"] for p in policies}
        # A polling router hands a policy out only once it has answered its
        # first /idle probe; that takes one probe round trip.
        wait_until_heard(client, len(policies))
        for p in policies:
            print("policy %d on %s: %s" % (p["index"], p["node_id"], p["url"]))

        # Async mode: one batch of rollout tasks, each to the least-loaded
        # policy on its env worker's node. The router tracks the loads.
        env_ids = ["env-%d" % w for w in (0, 1, 2, 3, 0, 1, 2, 3)]
        batch = client.assign(len(env_ids), env_ids=env_ids, router="node_affinity")
        for env_id, index in zip(env_ids, batch["assignments"]):
            print("%s -> policy %d (%s)" % (env_id, index, batch["policies"][str(index)]["url"]))
        # ... send the rollouts, and as each finishes:
        for index in batch["assignments"]:
            client.complete(index)

        # Sync mode: take an idle policy on env-2's node for one step.
        sel = client.select(env_id="env-2", router="idle_affinity", timeout_ms=5000)
        print("env-2 selected policy %d on %s (lease %s)" % (sel["index"], sel["node_id"], sel["lease_id"]))
        # ... send the request to sel["url"]; when its answer is back:
        released = client.release(lease_id=sel["lease_id"])
        if released["released"]:
            print("released policy %d" % sel["index"])
        else:
            # A late release: the router already saw the policy idle (or the
            # lease expired) and freed it. Nothing to do.
            print("policy %d was already freed by the router" % sel["index"])

        totals = client.stats()["totals"]
        print("router totals: %d policies, %d idle, %d assigned, %d selected"
              % (totals["policies"], totals["idle"], totals["assigned_total"], totals["selected_total"]))
    finally:
        if stubs and ours is not None:
            # The stand-ins go away with this process: unregister them, if
            # the registration is still the one this script made.
            if {p["id"] for p in client.get_registration()["policies"]} == ours:
                client.replace_registration([], {})
            else:
                print("the registration changed during the run: left as it is")
        for s in stubs:
            s.shutdown()
        client.close()


if __name__ == "__main__":
    main(sys.argv)
