"""Drive select/release through policyrouter's Python client against several
router replicas while the leader is killed (see ha_python_test.go).

Usage: ha_python_client.py THREADS TIMEOUT_MS MAX_SECONDS URL...

THREADS threads share one Client of every URL and loop select then release
until stdin closes (or MAX_SECONDS pass). Each line read from stdin marks a
leader kill: calls begun after it count toward the next epoch. At the end
one JSON line of counts is printed.
"""

import json
import sys
import threading
import time

from policyrouter import Client, NotLeaderError, PolicyRouterError, TransportError, UnavailableError


def main() -> int:
    threads = int(sys.argv[1])
    timeout_ms = int(sys.argv[2])
    max_seconds = float(sys.argv[3])
    urls = sys.argv[4:]

    client = Client(urls, failover_timeout=15.0)
    lock = threading.Lock()
    stop = threading.Event()
    state = {"epoch": 0}
    counts = {
        "selects": 0,
        "successes_by_epoch": [0],
        "not_leader": 0,
        "unavailable": 0,
        "request_errors": 0,
        "select_request_errors": 0,
        "release_request_errors": 0,
        "other_errors": 0,
        "released_true": 0,
        "released_false": 0,
        "base_url_changes": 0,
        "base_urls": [client.base_url],
        "max_gap_s": 0.0,
        "errors": [],
        "timed_out": False,
    }
    last = {"success": None, "base_url": client.base_url}

    def note_error(kind: str, exc: BaseException) -> None:
        if len(counts["errors"]) < 20:
            counts["errors"].append(f"{kind}: {type(exc).__name__}: {exc}")

    def watch_stdin() -> None:
        for _ in sys.stdin:
            with lock:
                state["epoch"] += 1
                counts["successes_by_epoch"].append(0)
        stop.set()

    def call(what: str, fn):
        """Run one client call; count and note an error it raises, and
        return None then."""
        try:
            return fn()
        except PolicyRouterError as exc:
            if isinstance(exc, NotLeaderError):
                kind = "not_leader"
            elif isinstance(exc, UnavailableError):
                kind = "unavailable"
            elif isinstance(exc, TransportError):
                kind = "request_errors"  # no answer: the client's transport failed
            else:
                kind = "other_errors"
            with lock:
                counts[kind] += 1
                if kind == "request_errors":
                    counts[what + "_request_errors"] += 1
                note_error(what, exc)
        return None

    def worker() -> None:
        while not stop.is_set():
            with lock:
                epoch = state["epoch"]
            sel = call("select", lambda: client.select(timeout_ms=timeout_ms))
            if sel is None:
                continue
            now = time.monotonic()
            with lock:
                counts["selects"] += 1
                counts["successes_by_epoch"][epoch] += 1
                if last["success"] is not None:
                    counts["max_gap_s"] = max(counts["max_gap_s"], now - last["success"])
                last["success"] = now
                if client.base_url != last["base_url"]:
                    last["base_url"] = client.base_url
                    counts["base_url_changes"] += 1
                    counts["base_urls"].append(client.base_url)
            lease = sel.get("lease_id")
            if not lease:
                continue
            out = call("release", lambda: client.release(lease))
            if out is None:
                continue
            with lock:
                counts["released_true" if out.get("released") else "released_false"] += 1

    threading.Thread(target=watch_stdin, daemon=True).start()
    workers = [threading.Thread(target=worker) for _ in range(threads)]
    for w in workers:
        w.start()
    if not stop.wait(max_seconds):
        counts["timed_out"] = True
        stop.set()
    for w in workers:
        w.join()
    client.close()
    with lock:
        print(json.dumps(counts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
