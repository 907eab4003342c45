"""``ops/bench checkpoints``: what confirming each context checkpoint on a replica costs. A
master and a replica of their own; 2,000 contexts checkpointed one by one (as answers arrive),
once against the master alone and once with the replica attached (``WAIT 1`` after each write):
the latency per checkpoint, p50 and p95, and how many the replica did not confirm in time."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from ops.harness import RedisServer

CONTEXTS = 2_000


def _run(label: str) -> list[float]:
    from workers.storage import checkpoints

    checkpoints._replicas = (-checkpoints.REPLICAS_RECHECK_S, 0)  # look at the master again
    context = {"text": "This chunk is from the 2023 annual report; it covers revenue by region. " * 2,
               "usage": {"input_tokens": 120, "cache_read_tokens": 4100, "output_tokens": 60}}
    took = []
    for n in range(CONTEXTS):
        started = time.perf_counter()
        checkpoints.save_context("bench", f"doc-{n // 50}", "v1", n % 50, context)
        took.append(time.perf_counter() - started)
    took.sort()
    print(f"  {label}: p50 {statistics.median(took) * 1000:.2f} ms, p95 {took[int(0.95 * len(took))] * 1000:.2f} ms "
          f"per checkpoint")
    return took


def bench_checkpoints(args: Any) -> None:
    from tests.support import use_services
    from workers import metrics
    from workers.connections import redis_client

    folder = Path(tempfile.mkdtemp(prefix="bench-checkpoints-"))
    master, replica = RedisServer(folder / "master"), RedisServer(folder / "replica")
    try:
        with use_services(redis_url=master.url()):
            print(f"== {CONTEXTS:,} context checkpoints, one at a time")
            alone = _run("the master alone (no replica: no WAIT)")
            replica.cli("replicaof", "127.0.0.1", str(master.port))
            while "master_link_status:up" not in replica.cli("info", "replication"):
                time.sleep(0.1)
            confirmed = _run("with a replica (WAIT 1 after each)")
            unconfirmed = sum(v for _, v in metrics.read_counters().get("checkpoints_unconfirmed", []))
            print(f"  cost of confirming: +{(statistics.median(confirmed) - statistics.median(alone)) * 1000:.2f} ms "
                  f"a checkpoint at p50; not confirmed within {1000} ms: {int(unconfirmed)}")
            redis_client().flushdb()
    finally:
        replica.stop()
        master.stop()
