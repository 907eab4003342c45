"""``ops/bench tiny``: per-document cost as a run grows — tiny documents (one chunk each) through
the whole pipeline, submitted by ``situate ingest`` from one JSONL file as a user would.

The stand-ins answer for Claude and Voyage (fast, rate limits out of the way), so what is
measured is the pipeline's own work per document: submission, state moves, routing, the three
stages, OpenSearch writes. The producer runs with a small backlog budget (``SITUATE_BACKLOG_MB``),
so documents wait in the file until the pipeline has room, as they would from a large source.

Printed: documents per second for each tenth of the run; at 10k, 100k (and further with
``--documents``): Redis's used memory and per indexed document, and the RSS of the producer and
of each worker (process group: parent and pool children). Targets (issue 43): the last tenth's
documents per second >= 90% of the first's; RSS and Redis per document flat from mark to mark.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from ops.benchmarks.common import fast_standin_env
from ops.benchmarks.scale import Sampler, _deciles, _ingest_clock, _pid_of
from ops.harness import SITUATE, StandIn, Worker

MODEL = "claude-haiku-5-5"
FAST = {"base_latency_s": 0.005, "uncached_s_per_ktok": 0.0, "read_s_per_ktok": 0.0, "output_s_per_tok": 0.0}
MARKS = (10_000, 100_000, 1_000_000)
WORDS = ("harbour", "ledger", "turbine", "orchard", "invoice", "glacier", "compiler", "lantern", "meadow", "quarry")


def _write(path: Path, n: int) -> None:
    with path.open("w") as out:
        for i in range(n):
            words = " ".join(WORDS[(i // 10**k) % 10] for k in range(6))
            out.write(json.dumps({"id": f"t{i:07d}", "text": f"Note {i}: the {words} record, filed under {i % 997}."})
                      + "\n")


def bench_tiny(args) -> None:
    from workers import lifecycle
    from workers.connections import redis_client
    from workers.storage import states

    n = args.documents
    standin = StandIn(FAST)
    env = fast_standin_env(standin.url, MODEL)
    os.environ.update(env)
    name = f"bench-tiny-{uuid.uuid4().hex[:6]}"
    config = lifecycle.ensure(name, contextualizer="anthropic", model=MODEL, embedder="voyage")
    cpu = Worker(2, env=env, name="tiny-cpu", extra=["--queues", "chunk,index"])
    llm = Worker(8, env=env, name="tiny-llm", extra=["--pool", "threads", "--queues",
                                                     "contextualize.0,contextualize.1,contextualize.2,contextualize.3"])
    watched = {"worker chunk+index": (cpu.pid, True), "worker llm": (llm.pid, True)}
    redis_pid = _pid_of("redis-server")
    if redis_pid:
        watched["redis"] = (redis_pid, False)
    redis_before = int(redis_client().info("memory")["used_memory"])
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "tiny.jsonl"
        _write(source, n)
        producer = subprocess.Popen([SITUATE, "ingest", "-c", name, "--json", str(source)],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                    env={**os.environ, **env, "SITUATE_BACKLOG_MB": str(args.backlog_mb)})
        watched["producer"] = (producer.pid, False)
        sampler = Sampler(config, watched)
        start = time.monotonic()
        sampler.start()
        at_mark: dict[int, dict] = {}
        try:
            while producer.poll() is None:
                time.sleep(2)
                indexed = states.counts(name).get("indexed", 0)
                for mark in MARKS:
                    if mark <= n and mark not in at_mark and indexed >= mark:
                        sample = sampler.sample()
                        at_mark[mark] = sample
                        print(json.dumps({"indexed": indexed, "seconds": round(time.monotonic() - start, 1),
                                          "rss_mb": sample["rss_mb"], "redis_mb": sample["redis_mb"]}), flush=True)
            seconds = time.monotonic() - start
        finally:
            sampler.running = False
            if producer.poll() is None:
                producer.kill()
            cpu.stop()
            llm.stop()
    counts = states.counts(name)
    redis_used = int(redis_client().info("memory")["used_memory"])
    deciles = _deciles(_ingest_clock(sampler.samples, start, []))
    marks = sorted(at_mark)
    first, last = (at_mark[marks[0]], at_mark[marks[-1]]) if marks else ({}, {})
    report = {"bench": "tiny", "documents": n, "indexed": counts.get("indexed", 0), "failed": counts.get("failed", 0),
              "seconds": round(seconds, 1), "documents_per_s": round(counts.get("indexed", 0) / seconds, 1),
              "documents_per_s_by_tenth": deciles,
              "last_tenth_over_first": round(deciles[-1] / deciles[0], 3) if deciles and deciles[0] else None,
              "redis_bytes_per_indexed_document": round((redis_used - redis_before) / max(1, counts.get("indexed", 0))),
              "rss_mb_at": {m: at_mark[m]["rss_mb"] for m in marks},
              "rss_last_over_first": {k: round(last["rss_mb"][k] / max(1, first["rss_mb"][k]), 3)
                                      for k in (last.get("rss_mb") or {}) if k in first.get("rss_mb", {})},
              "redis_mb_at": {m: at_mark[m]["redis_mb"] for m in marks},
              "rss_mb_peak": {k: max(s["rss_mb"].get(k, 0) for s in sampler.samples) for k in watched}}
    print(json.dumps(report), flush=True)
    lifecycle.delete(name)
    standin.close()
