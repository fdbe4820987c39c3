"""Answers routing cases with the seed's own routers, for routing's oracle test.

The four router classes and _parse_env_worker_index come from
seed_router.py beside this file: the seed's module, unchanged.

Input (stdin): {"cases": [case, ...]}; output (stdout): {"answers": [answer, ...]},
one answer per case, in order. Case kinds:

  {"kind": "parse", "env_ids": [str, ...]}
      -> [int or null, ...]: _parse_env_worker_index of each env id.
  {"kind": "simple", "loads": [int, ...], "num_tasks": int}
      -> [int, ...]: SimpleRouter().assign(loads, num_tasks).
  {"kind": "node_affinity", "loads": [int, ...], "num_tasks": int,
   "topology": {node: {"env": {"ids": [...]}, "eval": {"ids": [...]}}},
   "policy_node_ids": [str or null, ...], "env_ids": [str, ...] or null}
      -> [int, ...]: NodeAffinityRouter(topology, policy_node_ids).assign(...).
  {"kind": "sync_simple", "num_policies": int, "ops": [["select"] | ["release", [i, ...]], ...]}
      -> [int, ...]: the policy of each select of a SyncSimpleRouter over
         policies 0..num_policies-1, where a policy reports idle once it was
         released after its last selection. Every select must find an idle
         policy (the seed would spin forever otherwise).
  {"kind": "sync_node_affinity", "num_policies": int, "topology": {...}, "env_ids": [str, ...]}
      -> [int, ...]: SyncNodeAffinityRouter(range(num_policies), topology).select_policy
         of each env id in order.
An error in a case (the seed raising) answers {"error": "<exception text>"}.
"""
import json
import sys

from seed_router import (NodeAffinityRouter, SimpleRouter, SyncNodeAffinityRouter,
                         SyncSimpleRouter, _parse_env_worker_index)


def sync_simple(case):
    released = set()
    router = SyncSimpleRouter(range(case["num_policies"]), idle=lambda p: p in released)
    out = []
    for op in case["ops"]:
        if op[0] == "select":
            if len(router._idle_deque) == 0 and not released:
                raise ValueError("select with no idle policy: the seed would spin forever")
            p = router.select_policy()
            released.discard(p)
            out.append(p)
        else:
            released.update(op[1])
    return out


def answer(case):
    kind = case["kind"]
    if kind == "parse":
        return [_parse_env_worker_index(e) for e in case["env_ids"]]
    if kind == "simple":
        return SimpleRouter().assign(list(case["loads"]), case["num_tasks"])
    if kind == "node_affinity":
        router = NodeAffinityRouter(case["topology"], case["policy_node_ids"])
        return router.assign(list(case["loads"]), case["num_tasks"], case["env_ids"])
    if kind == "sync_simple":
        return sync_simple(case)
    if kind == "sync_node_affinity":
        router = SyncNodeAffinityRouter(range(case["num_policies"]), case["topology"])
        return [router.select_policy(e) for e in case["env_ids"]]
    raise ValueError("unknown case kind %r" % kind)


def main():
    cases = json.load(sys.stdin)["cases"]
    answers = []
    for case in cases:
        try:
            answers.append(answer(case))
        except Exception as e:  # the seed raising is an answer too
            answers.append({"error": "%s: %s" % (type(e).__name__, e)})
    json.dump({"answers": answers}, sys.stdout)


if __name__ == "__main__":
    main()
