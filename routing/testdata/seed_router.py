"""The seed's router module, the one reference every oracle in this repository uses.

The four router classes and _parse_env_worker_index are the seed's (its
module with the lost indentation restored; Ray's check_idle.remote() is an
``idle(policy) -> bool`` callable and logging is gone). Do not "fix" them:
they are what the Go routers, the Python client and the benchmark are
checked against. Used by routing/testdata/seed_oracle.py,
clients/python/tests/seed_reference.py and bench/seed_assign.py.
"""
import heapq
import threading
from collections import deque
from typing import Any, Dict, List, Optional, Sequence


class SimpleRouter:
    def assign(self, current_loads: List[int], num_tasks: int, env_ids=None) -> List[int]:
        heap = [(int(current_loads[i]), i) for i in range(len(current_loads))]
        if not heap:
            raise ValueError("No policies available for routing")
        heapq.heapify(heap)
        assignments: List[int] = []
        for _ in range(num_tasks):
            load, idx = heapq.heappop(heap)
            assignments.append(idx)
            heapq.heappush(heap, (load + 1, idx))
        return assignments


def _parse_env_worker_index(env_id: str) -> Optional[int]:
    try:
        suffix = env_id.rsplit("-", 1)[-1]
        return int(suffix)
    except (ValueError, AttributeError):
        return None


class NodeAffinityRouter:
    def __init__(self, component_distribution, policy_node_ids=None):
        self._env_worker_to_node: Dict[int, str] = {}
        for node_id, components in component_distribution.items():
            for env_worker_id in components.get("env", {}).get("ids", []):
                self._env_worker_to_node[int(env_worker_id)] = node_id
        self._policy_node_ids = policy_node_ids or []

    def assign(self, current_loads, num_tasks, env_ids=None):
        if not self._policy_node_ids or not env_ids:
            return SimpleRouter().assign(current_loads, num_tasks)
        assignments = []
        for env_id in env_ids:
            worker_idx = _parse_env_worker_index(env_id)
            node_id = self._env_worker_to_node.get(worker_idx) if worker_idx is not None else None
            candidates = [idx for idx, pn in enumerate(self._policy_node_ids) if pn == node_id]
            if not candidates:
                idx = int(min(range(len(current_loads)), key=lambda i: current_loads[i]))
            else:
                idx = int(min(candidates, key=lambda i: current_loads[i]))
            assignments.append(idx)
            current_loads[idx] += 1
        return assignments


class SyncSimpleRouter:
    """idle(p) -> bool stands in for p.check_idle.remote()."""

    def __init__(self, eval_policies, idle=None):
        self._eval_policies = list(eval_policies)
        self._idle_deque = deque(self._eval_policies)
        self._lock = threading.Lock()
        self._idle = idle

    def _flush_idle(self):
        # the seed takes set(policies) - set(idle_deque), whose order is arbitrary; index order here
        busy = [p for p in self._eval_policies if p not in self._idle_deque]
        if not busy:
            return
        if self._idle is None:
            self._idle_deque.extend(busy)
            return
        self._idle_deque.extend([p for p in busy if self._idle(p)])

    def select_policy(self, env_id=None):
        with self._lock:
            while len(self._idle_deque) == 0:
                self._flush_idle()
            return self._idle_deque.popleft()


class SyncNodeAffinityRouter:
    def __init__(self, eval_policies, component_distribution):
        self._eval_policies = list(eval_policies)
        self._env_worker_to_node = {}
        self._node_to_eval_policies = {}
        for node_id, components in component_distribution.items():
            env_ids = components.get("env", {}).get("ids", [])
            eval_ids = components.get("eval", {}).get("ids", [])
            if env_ids:
                assert len(eval_ids) > 0, "eval workers must be assigned to the same node as env workers"
                for e in env_ids:
                    self._env_worker_to_node[int(e)] = node_id
            if eval_ids:
                assert len(env_ids) > 0, "env workers must be assigned to the same node as eval workers"
                self._node_to_eval_policies[node_id] = [self._eval_policies[int(w)] for w in eval_ids]
        self._rr = {n: 0 for n in self._node_to_eval_policies}
        self._grr = 0

    def select_policy(self, env_id):
        w = _parse_env_worker_index(env_id)
        node = self._env_worker_to_node.get(w) if w is not None else None
        if node is not None and node in self._node_to_eval_policies:
            ps = self._node_to_eval_policies[node]
            r = ps[self._rr[node] % len(ps)]
            self._rr[node] += 1
            return r
        r = self._eval_policies[self._grr % len(self._eval_policies)]
        self._grr += 1
        return r
