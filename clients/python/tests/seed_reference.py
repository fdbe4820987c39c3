"""The seed's routers, the oracle the service must agree with.

They are loaded from routing/testdata/seed_router.py, the repository's one
copy of the seed's module (indentation restored, Ray replaced by an
``idle(policy) -> bool`` callable, logic unchanged), so that the Go tests,
these tests and the benchmark all check against the same code."""
import importlib.util
import pathlib

_PATH = pathlib.Path(__file__).resolve().parents[3] / "routing" / "testdata" / "seed_router.py"
_spec = importlib.util.spec_from_file_location("seed_router", _PATH)
_seed = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_seed)

SimpleRouter = _seed.SimpleRouter
NodeAffinityRouter = _seed.NodeAffinityRouter
SyncSimpleRouter = _seed.SyncSimpleRouter
SyncNodeAffinityRouter = _seed.SyncNodeAffinityRouter
_parse_env_worker_index = _seed._parse_env_worker_index
