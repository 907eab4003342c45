"""``ops/bench reconcile``: what a reconciler pass costs Redis with 10k, 100k and 1M documents in
flight (synthetic states in a Redis of its own), and again once 90% of them have finished.

Each document has a state hash and its place in the in-flight index, last moved an hour ago;
almost all wait in the fair gate (``fairqueue.WAITING``), as a backlog does, and 1 in 1,000 has
no message anywhere (those the pass sends on). The pass reads only the oldest of the index, so
its Redis time must not grow with the number of documents: printed as the sum of the Redis
commands' own time (``INFO commandstats``) and the pass's wall-clock time.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from ops.harness import RedisServer

SIZES = (10_000, 100_000, 1_000_000)


def _redis_usec(r) -> int:
    return sum(int(v["usec"]) for k, v in r.info("commandstats").items() if k.startswith("cmdstat_"))


QUEUE = "contextualize.0"


def _populate(r, start: int, n: int, at: float) -> None:
    """Documents ``start`` .. ``start + n``: a state hash each, in the in-flight index; all but 1
    in 1,000 with their contextualize message parked in the fair gate's line (a backlog)."""
    from workers import keys
    from workers.storage import fairqueue, states

    line = keys.fair_line(QUEUE, "bench")
    if not r.exists(keys.fair_ring(QUEUE)):
        r.rpush(keys.fair_ring(QUEUE), "bench")
    for lo in range(start, start + n, 10_000):
        pipe = r.pipeline(transaction=False)
        moving, waiting, entries = {}, {}, []
        for i in range(lo, min(lo + 10_000, start + n)):
            doc = f"doc-{i:07d}"
            pipe.hset(f"situate:doc:bench:{doc}", mapping={"state": "chunked", "version": "v1", "chunks_total": 3})
            m = states.member("bench", doc)
            moving[m] = at + i * 1e-6
            if i % 1000:
                waiting[m] = 1
                entries.append(json.dumps({"id": f"e{i}", "task": "situate.contextualize", "args": ["bench", doc, "v1"],
                                           "priority": 0, "at": at, "queue": QUEUE, "collection": "bench"}))
        pipe.zadd(states.MOVING, moving)
        if waiting:
            pipe.rpush(line, *entries)
            pipe.hset(fairqueue.WAITING, mapping=waiting)
            pipe.incrby(fairqueue.WAITING_TOTAL, len(waiting))
        pipe.execute()


def _pass(r) -> tuple[float, float, dict]:
    from workers.pipeline import reconcile

    usec = _redis_usec(r)
    t0 = time.perf_counter()
    outcome = reconcile.reconcile_once()
    wall = time.perf_counter() - t0
    return (_redis_usec(r) - usec) / 1e6, wall, dict(outcome)


def bench_reconcile(args) -> None:
    folder = Path(tempfile.mkdtemp(prefix="bench-reconcile-"))
    server = RedisServer(folder)
    os.environ["SITUATE_REDIS_URL"] = server.url()
    from workers import connections
    from workers.pipeline.app import app
    from workers.settings import get_settings
    from workers.storage import states

    get_settings.cache_clear()
    connections.redis_client.cache_clear()
    app.conf.broker_url = server.url()
    r = connections.redis_client()
    rows = []
    try:
        populated, hour_ago = 0, time.time() - 3600
        for size in SIZES:
            _populate(r, populated, size - populated, hour_ago)
            populated = size
            redis_s, wall, outcome = _pass(r)
            rows.append((f"{size:,} in flight", redis_s, wall, outcome))
        # 90% of them finish: out of the index (as their last state move takes them out).
        finished = [m for m, _ in r.zscan_iter(states.MOVING, count=10_000)][: int(populated * 0.9)]
        for lo in range(0, len(finished), 10_000):
            r.zrem(states.MOVING, *finished[lo:lo + 10_000])
        redis_s, wall, outcome = _pass(r)
        rows.append((f"{populated:,}, 90% finished", redis_s, wall, outcome))
    finally:
        server.stop()
    print(f"\n{'documents':24} {'Redis s':>8} {'wall s':>7}  outcome (batch {1000}, at most 10 batches a pass)")
    for name, redis_s, wall, outcome in rows:
        print(f"{name:24} {redis_s:8.3f} {wall:7.3f}  {outcome}")
