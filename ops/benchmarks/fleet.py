"""``ops/bench fleet``: what a network between the hosts costs — Redis and OpenSearch round trips
per document and per chunk, stage by stage, and chunks per second with 1 ms and 5 ms added each
way against loopback, in one run (``ops/fleet/hosts.py``; needs root and network namespaces).

Each stage runs on a host of its own (chunk on ``w1``, the contextualize shards on ``w2``, index on
``api``), so each host's routes count its stage's traffic: a round trip is a write a client makes
that the relay forwards (pipelined commands travel as one). Contexts and vectors come from the
stand-ins for Claude and Voyage at their usual speed (``tests/faults``' latency), reached through
the same network. Redis's own command counts (``INFO commandstats``) are printed beside, by
command, for the loopback run.
"""

from __future__ import annotations

import json
import time
import uuid

from ops.fleet.hosts import Fleet, available
from ops.harness import StandIn

MODEL = "claude-haiku-5-5"
LATENCY = {"base_latency_s": 0.25, "uncached_s_per_ktok": 0.05, "read_s_per_ktok": 0.0, "output_s_per_tok": 0.002}
STAGES = {"w1": ("chunk", "chunk"), "w2": ("contextualize", "contextualize.0,contextualize.1,contextualize.2,"
                                                             "contextualize.3"), "api": ("index", "index")}
KEY = "sk-ant-bench-fleet"


def _documents(n: int, chunks: int, tag: str) -> list[dict]:
    out = []
    for d in range(n):
        parts = [f"Record {d} section {i} ({tag}). " + " ".join(f"w{d}x{i}y{j}" for j in range(60)) + "\n\n"
                 for i in range(chunks)]
        out.append({"id": f"r{d:04d}", "text": "".join(parts), "chunks": parts})
    return out


def _commandstats(r) -> dict[str, int]:
    return {k.removeprefix("cmdstat_"): v["calls"] for k, v in r.info("commandstats").items()}


def _run(fleet: Fleet, delay_ms: float, n: int, chunks: int) -> dict:
    from producers.ingest import submit
    from workers import lifecycle
    from workers.connections import redis_client
    from workers.documents.validation import RawDocument
    from workers.storage import states

    fleet.delay(delay_ms)
    name = f"bench-fleet-{int(delay_ms)}ms-{uuid.uuid4().hex[:4]}"
    config = lifecycle.ensure(name, contextualizer="anthropic", model=MODEL, embedder="voyage")
    docs = _documents(n, chunks, f"{delay_ms}")
    before, commands = fleet.stats(), _commandstats(redis_client())
    t0 = time.perf_counter()
    submit.submit(config, [RawDocument(d["id"], d["text"], {}, [{"n": i, "text": t} for i, t in enumerate(d["chunks"])])
                           for d in docs])
    while states.counts(name).get("indexed", 0) + states.counts(name).get("failed", 0) < n:
        time.sleep(0.2)
    seconds = time.perf_counter() - t0
    after, commands_after = fleet.stats(), _commandstats(redis_client())
    counts = states.counts(name)
    trips = {}
    for host, (stage, _) in STAGES.items():
        for service in ("redis", "search"):
            route = f"{host}-{service}"
            trips[f"{stage} {service}"] = after[route]["writes_up"] - before[route]["writes_up"]
    lifecycle.delete(name)
    calls = {k: commands_after.get(k, 0) - commands.get(k, 0) for k in commands_after}
    return {"delay_ms_each_way": delay_ms, "documents": n, "chunks": n * chunks, "indexed": counts.get("indexed", 0),
            "seconds": round(seconds, 1), "chunks_per_s": round(n * chunks / seconds, 2),
            "round_trips_per_document": {k: round(v / n, 1) for k, v in trips.items()},
            "round_trips_per_chunk": {k: round(v / (n * chunks), 1) for k, v in trips.items()},
            "redis_commands_per_document": {k: round(v / n, 1) for k, v in sorted(calls.items(), key=lambda kv: -kv[1])
                                            if v >= n}}


def bench_fleet(args) -> None:
    why = available()
    if why:
        raise SystemExit(f"ops/bench fleet: {why}")
    standin = StandIn(LATENCY)
    fleet = Fleet(standin.url)
    from tests.support import use_services

    rows = []
    try:
        with use_services(redis_url=fleet.redis_url, opensearch_url=fleet.opensearch_url):
            env = {"ANTHROPIC_API_KEY": KEY, "VOYAGE_API_KEY": KEY,
                   "SITUATE_RATE_LIMITS": json.dumps({MODEL: {"rpm": 10**6, "itpm": 10**9, "otpm": 10**9}})}
            for host, (stage, queues) in STAGES.items():
                pool = ["--pool", "threads"] if stage == "contextualize" else []
                fleet.worker(host, 8 if stage == "contextualize" else args.concurrency, env, [*pool, "--queues", queues])
            for delay in (0.0, 1.0, 5.0):
                row = _run(fleet, delay, args.documents, args.chunks)
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        fleet.close()
        standin.close()
    base = rows[0]["chunks_per_s"]
    print(f"\n{'added each way':>15} {'chunks/s':>9} {'of loopback':>11}  round trips per document (stage service)")
    for r in rows:
        trips = ", ".join(f"{k} {v}" for k, v in r["round_trips_per_document"].items())
        print(f"{r['delay_ms_each_way']:>12.0f} ms {r['chunks_per_s']:9.2f} {r['chunks_per_s'] / base:11.0%}  {trips}")
    print("targets: >= 95% at 1 ms, >= 75% at 5 ms")
