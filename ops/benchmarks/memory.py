"""``ops/bench memory``: what Redis holds through a run of 10,000 documents, and after it.

Documents of three pre-made chunks go through the whole pipeline — LLM contexts from the
stand-in, vectors from the stand-in's Voyage, OpenSearch — submitted as fast as one producer can
(the pace that piles work up). Redis's used memory is sampled every 0.25 s. Printed: the bytes
submitted (what Redis would hold if nothing were released), the peak above the starting point,
what is left once every document is indexed, and the same run again under a ``maxmemory`` set
below the first peak: producers wait, Redis stays under the line, nothing fails.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

from ops.harness import StandIn, Worker

MODEL = "claude-haiku-5-5"
FAST = {"base_latency_s": 0.01, "uncached_s_per_ktok": 0.005, "read_s_per_ktok": 0.0, "output_s_per_tok": 0.0001}


def _documents(n: int, tag: str) -> list:
    from workers.documents.validation import RawDocument

    out = []
    for d in range(n):
        parts = [f"Record {d} part {i} ({tag}): " + " ".join(f"t{d % 97}x{i}w{j}" for j in range(50)) + "\n"
                 for i in range(3)]
        out.append(RawDocument(f"doc-{d:05d}", "".join(parts), {"batch": tag},
                               [{"n": i, "text": t} for i, t in enumerate(parts)]))
    return out


class Sampler(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        from workers.connections import redis_client

        self.redis, self.samples, self.running = redis_client(), [], True

    def run(self):
        while self.running:
            self.samples.append(int(self.redis.info("memory")["used_memory"]))
            time.sleep(0.25)


def _run(documents: int, workers: int, standin: StandIn, maxmemory: int | None) -> dict:
    from producers.ingest import submit
    from workers import lifecycle
    from workers.connections import redis_client
    from workers.storage import capacity, states

    r = redis_client()
    name = f"bench-{uuid.uuid4().hex[:6]}"
    config = lifecycle.ensure(name, contextualizer="anthropic", model=MODEL, embedder="voyage")
    docs = _documents(documents, name)
    submitted_bytes = sum(len(d.body) * 2 + 200 for d in docs)  # text + pre-made chunks, JSON
    before = r.config_get("maxmemory")["maxmemory"]
    start = int(r.info("memory")["used_memory"])
    sampler, waits = Sampler(), 0
    sampler.start()
    if maxmemory:
        r.config_set("maxmemory", start + maxmemory)
    t0 = time.perf_counter()
    try:
        run = submit.new_run()
        for d in docs:
            while capacity.too_full():
                waits += 1
                time.sleep(0.5)
            submit.submit_one(config, d, run)
        ids = [d.doc_id for d in docs]
        while True:
            done = [s for s in states.get_many(name, ids) if s and s["state"] in states.TERMINAL]
            if len(done) == len(ids):
                break
            time.sleep(1)
        elapsed = time.perf_counter() - t0
        time.sleep(2)
        after = int(r.info("memory")["used_memory"])
    finally:
        sampler.running = False
        sampler.join()
        r.config_set("maxmemory", before)
    failed = sum(1 for s in states.get_many(name, ids) if s["state"] == "failed")
    lifecycle.delete(name)
    return {"documents": documents, "workers": workers, "failed": failed, "seconds": round(elapsed, 1),
            "submitted_mb": round(submitted_bytes / 2**20, 1), "maxmemory_above_start_mb":
            round(maxmemory / 2**20, 1) if maxmemory else None, "producer_waits": waits,
            "peak_above_start_mb": round((max(sampler.samples) - start) / 2**20, 1),
            "after_run_above_start_mb": round((after - start) / 2**20, 2), "stand_in_calls": standin.stats()["requests"]}


def bench_memory(args) -> None:
    standin = StandIn(FAST)
    env = {"ANTHROPIC_API_KEY": "bench-key", "ANTHROPIC_BASE_URL": standin.url, "VOYAGE_API_KEY": "bench-key",
           "VOYAGE_BASE_URL": f"{standin.url}/v1", "SITUATE_LOG_FORMAT": "json",
           "SITUATE_RATE_LIMITS": json.dumps({MODEL: {"rpm": 10**7, "itpm": 10**10, "otpm": 10**10}})}
    import os

    os.environ.update({k: v for k, v in env.items() if k.startswith("VOYAGE")})
    fleet = [Worker(4, env=env, name=f"bench-mem-{i}") for i in range(args.workers)]
    try:
        free = _run(args.documents, args.workers, standin, None)
        print(json.dumps({"bench": "memory", **free}), flush=True)
        standin.update()
        limit = max(8 * 2**20, int(free["peak_above_start_mb"] * 2**20 * 0.4))
        capped = _run(args.documents, args.workers, standin, limit)
        print(json.dumps({"bench": "memory", **capped}), flush=True)
    finally:
        for w in fleet:
            w.stop()
        standin.close()
    print(f"\n{args.documents:,} documents, {args.workers} workers: {free['submitted_mb']} MB submitted; Redis peak "
          f"+{free['peak_above_start_mb']} MB, +{free['after_run_above_start_mb']} MB once all indexed "
          f"({free['seconds']} s). Under maxmemory +{capped['maxmemory_above_start_mb']} MB: peak "
          f"+{capped['peak_above_start_mb']} MB, producer waited {capped['producer_waits']}x, "
          f"{capped['failed']} failed ({capped['seconds']} s).")
