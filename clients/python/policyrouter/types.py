"""Result types of the policyrouter API, as ``TypedDict`` s.

The client returns the server's JSON as plain ``dict`` s and ``list`` s;
these types describe them for type checkers (the package ships
``py.typed``). Keys the server adds in later versions are not listed and
still appear at run time. Keys marked optional are absent from some answers
(or from older routers): ``lease_id`` from the round-robin router's
``/select``, ``sticky`` unless a session was named, ``version`` from
routers older than the one-decision ``/select``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional, TypedDict

__all__ = [
    "Sticky",
    "Policy",
    "PolicyRef",
    "Registration",
    "Weights",
    "AssignResult",
    "SelectResult",
    "ReleaseResult",
    "CompleteResult",
    "Health",
    "UpdatePolicy",
    "Update",
    "Stats",
]

#: Where a request that named a session landed: its ``home``, ``moved``
#: (the home was unavailable or at the load bound, the next successor took
#: it) or ``spilled`` (to the router's pick, after ``sticky_wait_ms``).
Sticky = Literal["home", "moved", "spilled"]


class Policy(TypedDict):
    """A registered policy (``GET /policies``, ``POST /policies``, drain)."""

    index: int
    id: str
    url: str
    node_id: str
    capacity: int
    labels: Dict[str, str]
    draining: bool
    state: str  # idle, busy, unhealthy, draining, unknown
    version: int
    last_error: str
    unhealthy_since: Optional[str]
    last_ok: Optional[str]


class PolicyRef(TypedDict):
    """The short form of a policy in ``/assign`` answers."""

    id: str
    url: str
    node_id: str


class Registration(TypedDict):
    """``GET|PUT /registration``: every policy and the topology."""

    policies: List[Policy]
    topology: Dict[str, Dict[str, Dict[str, List[int]]]]


class Weights(TypedDict):
    """``GET|PUT /weights``."""

    version: int
    max_staleness: Optional[int]
    min_version: int


class _AssignRequired(TypedDict):
    assignments: List[int]
    policies: Dict[str, PolicyRef]


class AssignResult(_AssignRequired, total=False):
    """``POST /assign``: one policy index per task; ``policies`` resolves
    the registered ones (keys are decimal strings). ``sticky``, when
    ``session_ids`` were given: per task, where it landed (``None`` for a
    task without a session)."""

    sticky: List[Optional[Sticky]]


class _SelectRequired(TypedDict):
    index: int
    id: str
    url: str
    node_id: str


class SelectResult(_SelectRequired, total=False):
    """``POST /select``. ``lease_id`` is absent from the round-robin
    (``node_affinity``) router's answers; ``version`` is the policy's weight
    version at dispatch; ``sticky`` is present when a ``session_id`` was
    given."""

    lease_id: str
    version: int
    sticky: Sticky


class _ReleaseRequired(TypedDict):
    released: bool
    lease_id: str


class ReleaseResult(_ReleaseRequired, total=False):
    """``POST /release``. ``released`` is ``False`` for a lease that had
    already ended; ``index`` and ``id`` name the policy when it is true."""

    index: int
    id: str


class CompleteResult(TypedDict):
    """``POST /complete``: the policy's tracked load after the call."""

    index: int
    load: int


class Health(TypedDict):
    """``GET /healthz``, ``GET /readyz``."""

    status: str


class UpdatePolicy(TypedDict, total=False):
    """One policy's progress in a rolling update."""

    id: str
    index: int
    node_id: str
    phase: str  # pending (listed from the update's start), draining, updating, done, failed
    wave: int  # 0 while pending
    since: str
    drained: Optional[str]
    ended: Optional[str]
    drain_timed_out: bool
    error: str
    engine: str
    step: str  # while updating: pause, load, ready, version, resume, confirm
    in_phase_ms: float
    in_step_ms: float
    expected_version: int
    reported_version: int
    weight_version: str
    last_call: Optional[Dict[str, Any]]
    aborted_leases: int
    held: bool  # joined during the update: no work until at its version


class Update(TypedDict, total=False):
    """A rolling update (``POST /updates``, ``GET /updates/{id}``)."""

    id: str
    state: str  # running, succeeded, failed, aborted
    version: int
    external: bool
    max_unavailable: int
    min_available_per_node: int
    drain_timeout_ms: int
    max_failures: int
    created: str
    ended: Optional[str]
    waves: int
    failures: int
    capacity_held: int
    ready: List[str]
    policies: List[UpdatePolicy]
    error: str


class Stats(TypedDict, total=False):
    """``GET /stats``; ``waiters`` counts the ``/select`` calls waiting for
    a policy, ``leases`` the leases out. The nested documents are described
    by the server's ``openapi.yaml``."""

    policies: List[Dict[str, Any]]
    nodes: Dict[str, Dict[str, Any]]
    totals: Dict[str, Any]
    waiters: int
    leases: int
    router: str
    min_version: int
    decisions: Dict[str, Any]
    poller: Optional[Dict[str, Any]]
    sticky: Dict[str, Any]
    update: Optional[Dict[str, Any]]
    replica: Optional[Dict[str, Any]]
    uptime_seconds: float
    time: str
