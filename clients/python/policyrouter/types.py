"""Result types of the policyrouter API, as ``TypedDict`` s.

The client returns the server's JSON as plain ``dict`` s and ``list`` s;
these types describe them for type checkers (the package ships
``py.typed``). They follow the schemas of the router's ``openapi.yaml``:
a required key there is a required key here, an optional one optional
(``lease_id`` of the round-robin router's ``/select``, ``sticky`` unless a
session was named), and ``tests/test_types.py`` fails when a key of a
schema is missing here, or one here is not in the schema. Keys a later
router adds still appear at run time.
"""

from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional, TypedDict

__all__ = [
    "Sticky",
    "Engine",
    "Policy",
    "PolicyStats",
    "PolicyRef",
    "Registration",
    "Weights",
    "AssignResult",
    "SelectResult",
    "ReleaseResult",
    "CompleteResult",
    "Health",
    "UpdateCall",
    "UpdatePolicy",
    "Update",
    "UpdateSummary",
    "Stats",
]

#: Where a request that named a session landed: its ``home``, ``moved``
#: (the home was unavailable or at the load bound, the next successor took
#: it) or ``spilled`` (to the router's pick, after ``sticky_wait_ms``).
Sticky = Literal["home", "moved", "spilled"]

#: The kind of server a policy is: the ``GET /idle`` contract or an
#: inference engine; openapi.yaml's ``EngineName`` (a test ties the two).
Engine = Literal["policyrouter", "llamacpp", "sglang", "vllm"]


class _PolicyRequired(TypedDict):
    index: int
    id: str
    url: str
    node_id: str
    capacity: int
    labels: Dict[str, str]
    draining: bool
    state: str  # idle, busy, unhealthy, draining, unknown
    version: int
    engine: Engine
    models: List[str]
    weight_version: str
    last_error: str
    unhealthy_since: Optional[str]
    last_ok: Optional[str]


class Policy(_PolicyRequired):
    """A registered policy (``GET /policies``, ``POST /policies``, drain).
    ``version`` is the weight version as an integer (ordering),
    ``weight_version`` the engine's own string (``""`` before any report).
    The write-only ``api_key`` and ``admin_api_key`` are never returned.
    ``models`` are the model ids it serves (``[]`` when not known)."""


class _PolicyStatsRequired(TypedDict):
    index: int
    id: str
    node_id: str
    url: str
    labels: Dict[str, str]
    draining: bool
    state: str  # idle, busy, unhealthy, draining, unknown, paused, asleep, update_failed
    load: int
    inflight: int
    leases: int
    engine_load: Optional[int]
    outside_load: int
    occupancy: int
    capacity: int
    selected_total: int
    assigned_total: int
    completed_total: int
    last_poll: Optional[str]
    latency_ms: float
    consecutive_failures: int
    last_error: str
    last_error_kind: str
    unhealthy_since: Optional[str]
    last_ok: Optional[str]
    probes_total: int
    probe_failures_total: int
    probes_recent: int
    probe_failures_recent: int
    expired_total: int
    tasks_expired_total: int
    version: int
    engine: Engine
    models: List[str]
    weight_version: str


class PolicyStats(_PolicyStatsRequired, total=False):
    """One policy in ``GET /stats``: as :class:`Policy`, with its live
    figures. ``update_error`` is present while a rolling update failed on
    it."""

    update_error: str


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
    env_unmapped: bool


class _SelectRequired(TypedDict):
    index: int
    id: str
    url: str
    node_id: str


class SelectResult(_SelectRequired, total=False):
    """``POST /select``. ``lease_id`` is absent from the round-robin
    (``node_affinity``) router's answers; ``version`` is the policy's weight
    version at dispatch, ``weight_version`` the same as the policy's server
    writes it (e.g. ``"step-3"``) when it reports one; ``sticky`` is present
    when a ``session_id`` was given."""

    lease_id: str
    version: int
    weight_version: str
    sticky: Sticky
    env_unmapped: bool
    prefix_match: int
    prefix_outcome: str


class _ReleaseRequired(TypedDict):
    released: bool
    lease_id: str


class ReleaseResult(_ReleaseRequired, total=False):
    """``POST /release``. ``released`` is ``False`` for a lease that had
    already ended; ``index`` and ``id`` name the policy when it is true;
    ``reason`` says why an ended lease ended, when known (``aborted``: a
    rolling update's abort ended it); ``how`` says how it ended
    (``release``, ``ttl``, ``probe``, ``removed`` or ``aborted``)."""

    index: int
    id: str
    reason: str
    how: str


class CompleteResult(TypedDict):
    """``POST /complete``: the policy's tracked load after the call."""

    index: int
    load: int


class Health(TypedDict):
    """``GET /healthz``, ``GET /readyz``."""

    status: str


class _UpdateCallRequired(TypedDict):
    method: str
    path: str
    status: int
    time: str
    duration_ms: float


class UpdateCall(_UpdateCallRequired, total=False):
    """The last call a rolling update made to a policy's engine."""

    error: str


class _UpdatePolicyRequired(TypedDict):
    id: str
    index: int
    node_id: str
    phase: str  # pending (listed from the update's start), draining, updating, done, failed
    wave: int  # 0 while pending
    since: str
    drained: Optional[str]
    ended: Optional[str]
    drain_timed_out: bool
    engine: Engine
    in_phase_ms: float
    in_step_ms: float
    expected_version: int
    reported_version: int
    weight_version: str
    last_call: Optional[UpdateCall]
    aborted_leases: int


class UpdatePolicy(_UpdatePolicyRequired, total=False):
    """One policy's progress in a rolling update; ``step`` while
    updating, ``error`` once failed, ``held`` when it joined during the
    update (no work until at its version)."""

    error: str
    step: str  # pause, load, ready, version, resume, confirm
    held: bool


class _UpdateRequired(TypedDict):
    id: str
    state: str  # running, succeeded, failed, aborted
    version: int
    external: bool
    max_unavailable: int
    min_available_per_node: int
    drain_timeout_ms: int
    max_failures: int
    pause_mode: str  # wait, abort, retract, in_place, keep
    set_floor: bool
    phase_timeout_ms: int
    floor: int
    created: str
    ended: Optional[str]
    waves: int
    failures: int
    capacity_held: int
    ready: List[str]
    policies: List[UpdatePolicy]


class Update(_UpdateRequired, total=False):
    """A rolling update (``POST /updates``, ``GET /updates/{id}``);
    ``model_path`` when one was given, ``error`` once failed."""

    model_path: str
    error: str
    selector: Dict[str, Any]


class UpdateSummary(TypedDict):
    """The running or last update, in ``GET /stats``: its policies by
    phase."""

    id: str
    state: str
    version: int
    waves: int
    failures: int
    capacity_held: int
    phases: Dict[str, int]


class _StatsRequired(TypedDict):
    policies: List[PolicyStats]
    nodes: Dict[str, Dict[str, Any]]
    totals: Dict[str, Any]
    waiters: int
    leases: int
    leases_ended: Dict[str, int]
    router: str
    min_version: int
    floor: Dict[str, Any]
    decisions: Dict[str, Any]
    poller: Optional[Dict[str, Any]]
    sticky: Dict[str, Any]
    update: Optional[UpdateSummary]
    replica: Optional[Dict[str, Any]]
    env_unmapped: Dict[str, Any]
    prefix: Dict[str, Any]
    uptime_seconds: float
    time: str


class Stats(_StatsRequired, total=False):
    """``GET /stats``; ``waiters`` counts the ``/select`` calls waiting for
    a policy, ``leases`` the leases out. The figures per node, the totals
    and the poller's, sticky and decision figures are described by the
    server's ``openapi.yaml``."""

    oldest_lease_seconds: float
    oldest_task_seconds: float
