#!/usr/bin/env python3
"""Times the seed's async routers, as a reference point for the Go routing core.

SimpleRouter and NodeAffinityRouter are the seed's own, loaded from
routing/testdata/seed_router.py (the seed's module with its indentation
restored, unchanged): a heapq over (load, index) tuples, and a per-task scan
of the policies' nodes. Each case is timed with time.perf_counter over repetitions
until a time budget is spent, and the script prints one JSON document:

    {"python": "3.11.7", "cases": [{"name": "simple/n=4096/p=1024",
      "reps": 120, "median_ns": ..., "min_ns": ..., "checksum": "..."}]}

The inputs are a pure function of the arguments, and cmd/policyrouter-bench
builds the same ones in Go: policy i has load (i*37 + 11) % 64 and sits on
node "node-<i % nodes>", env worker i sits on the same node, and task k has
env id "env-<(k*7) % policies>". checksum is the first 16 hex digits of the
SHA-256 of the assignment, comma-joined, so the Go side can check it computed
the same answer.

Usage: python3 bench/seed_assign.py [--policies 1024] [--tasks 4096]
       [--nodes 16] [--budget 0.5]
"""
import argparse
import hashlib
import json
import os
import platform
import sys
import time
from typing import Dict, List

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "routing", "testdata"))
from seed_router import NodeAffinityRouter, SimpleRouter  # noqa: E402

# The most repetitions of one case, whatever the budget.
MAX_REPS = 100_000


def inputs(policies: int, nodes: int):
    """The loads, policy nodes and topology the Go harness uses too."""
    loads = [(i * 37 + 11) % 64 for i in range(policies)]
    node_of = [f"node-{i % nodes}" for i in range(policies)]
    dist: Dict[str, Dict[str, Dict[str, List[int]]]] = {}
    for i in range(policies):
        d = dist.setdefault(node_of[i], {"env": {"ids": []}, "eval": {"ids": []}})
        d["env"]["ids"].append(i)
        d["eval"]["ids"].append(i)
    return loads, node_of, dist


def env_ids(tasks: int, policies: int) -> List[str]:
    return [f"env-{(k * 7) % policies}" for k in range(tasks)]


def checksum(assignments: List[int]) -> str:
    return hashlib.sha256(",".join(map(str, assignments)).encode()).hexdigest()[:16]


def time_case(name: str, run, budget: float) -> dict:
    """Runs run() (which returns the assignment) until budget seconds are
    spent (at least 3 times, at most MAX_REPS) and reports per-call times."""
    times: List[int] = []
    out: List[int] = []
    deadline = time.perf_counter() + budget
    while len(times) < MAX_REPS and (len(times) < 3 or time.perf_counter() < deadline):
        prepare, call = run()
        arg = prepare()
        t0 = time.perf_counter_ns()
        out = call(arg)
        times.append(time.perf_counter_ns() - t0)
    times.sort()
    return {
        "name": name,
        "reps": len(times),
        "median_ns": times[len(times) // 2],
        "min_ns": times[0],
        "checksum": checksum(out),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", type=int, default=1024)
    ap.add_argument("--tasks", type=int, default=4096)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--budget", type=float, default=0.5, help="seconds per case")
    args = ap.parse_args()

    loads, node_of, dist = inputs(args.policies, args.nodes)
    simple = SimpleRouter()
    affinity = NodeAffinityRouter(dist, node_of)
    cases = []
    for n in (args.tasks, 1):
        envs = env_ids(n, args.policies)

        def simple_run(n=n):
            # SimpleRouter copies the loads into its heap itself.
            return (lambda: loads), (lambda ls: simple.assign(ls, n))

        def affinity_run(n=n, envs=envs):
            # NodeAffinityRouter raises the caller's loads: give it a fresh
            # copy, made outside the timed call.
            return (lambda: list(loads)), (lambda ls: affinity.assign(ls, n, envs))

        cases.append(time_case(f"simple/n={n}/p={args.policies}", simple_run, args.budget))
        cases.append(time_case(f"node_affinity/n={n}/p={args.policies}/nodes={args.nodes}", affinity_run, args.budget))
    print(json.dumps({"python": platform.python_version(), "cases": cases}))


if __name__ == "__main__":
    main()
