"""``ops/bench tiny``: per-document cost as a run grows — tiny documents (one chunk each) through
the whole pipeline, submitted by ``situate ingest`` from one JSONL file as a user would.

The stand-ins answer for Claude and Voyage (fast, rate limits out of the way), so what is
measured is the pipeline's own work per document: submission, state moves, routing, the three
stages, OpenSearch writes. The producer runs with a small backlog budget (``SITUATE_BACKLOG_MB``),
so documents wait in the file until the pipeline has room, as they would from a large source.

Printed, for each run of ``--bundles`` (``SITUATE_BUNDLE_MAX_DOCUMENTS``: 1 is each document
alone, as before bundles; the runs share the stand-in and follow each other): documents per
second, and for each tenth of the run; the CPU each process spent per document (the workers'
process groups, Redis, OpenSearch, the stand-in, the producer); at 10k, 100k (and further with
``--documents``): Redis's used memory and per indexed document, and the RSS of the producer and
of each worker. Targets: the last tenth's documents per second >= 90% of the first's; RSS and
Redis per document flat from mark to mark (issue 43); 120 documents a second on 2 cores (issue 63).

``ops/bench notes`` is the same kind of documents offline, against the embedder alone.
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
from ops.benchmarks.scale import Sampler, _deciles, _group, _ingest_clock, _pid_of
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
    """One run per ``--bundles`` value (``SITUATE_BUNDLE_MAX_DOCUMENTS``; 1: each document alone, as
    before bundles), on the same stand-in, one after the other; then their ratio."""
    standin = StandIn(FAST)
    rates = {}
    try:
        for bundle in args.bundles:
            rates[bundle] = _tiny_once(args, standin, bundle)
    finally:
        standin.close()
    if len(rates) > 1:
        first, *rest = rates
        print(json.dumps({"bench": "tiny", "documents_per_s": rates,
                          **{f"bundles {b} over {first}": round(rates[b] / rates[first], 2) for b in rest}}), flush=True)


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of one process so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _tiny_once(args, standin: StandIn, bundle: int) -> float:
    from workers import lifecycle
    from workers.connections import redis_client
    from workers.storage import states

    n = args.documents
    env = {**fast_standin_env(standin.url, MODEL), "SITUATE_BUNDLE_MAX_DOCUMENTS": str(bundle)}
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
    # CPU by process: the workers' groups (parent and pool children), Redis, OpenSearch, the stand-in, the producer.
    groups = {"worker chunk+index": cpu.pid, "worker llm": llm.pid}
    singles = {k: v for k, v in {"redis": redis_pid, "opensearch": _pid_of("org.opensearch.bootstrap.OpenSearch"),
                                 "stand-in": standin.proc.pid}.items() if v}
    cpu_before = {k: sum(_cpu_s(p) for p in _group(pid)) for k, pid in groups.items()}
    cpu_before.update({k: _cpu_s(pid) for k, pid in singles.items()})
    producer_cpu = 0.0
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
                producer_cpu = max(producer_cpu, _cpu_s(producer.pid))
                indexed = states.counts(name).get("indexed", 0)
                for mark in MARKS:
                    if mark <= n and mark not in at_mark and indexed >= mark:
                        sample = sampler.sample()
                        at_mark[mark] = sample
                        print(json.dumps({"indexed": indexed, "seconds": round(time.monotonic() - start, 1),
                                          "rss_mb": sample["rss_mb"], "redis_mb": sample["redis_mb"]}), flush=True)
            seconds = time.monotonic() - start
            cpu_after = {k: sum(_cpu_s(p) for p in _group(pid)) for k, pid in groups.items()}
            cpu_after.update({k: _cpu_s(pid) for k, pid in singles.items()})
        finally:
            sampler.running = False
            if producer.poll() is None:
                producer.kill()
            cpu.stop()
            llm.stop()
    counts = states.counts(name)
    indexed = counts.get("indexed", 0)
    cpu_ms = {k: round(1000 * (cpu_after[k] - cpu_before[k]) / max(1, indexed), 1) for k in cpu_after}
    cpu_ms["producer (at its last sample)"] = round(1000 * producer_cpu / max(1, indexed), 1)
    redis_used = int(redis_client().info("memory")["used_memory"])
    deciles = _deciles(_ingest_clock(sampler.samples, start, []))
    marks = sorted(at_mark)
    first, last = (at_mark[marks[0]], at_mark[marks[-1]]) if marks else ({}, {})
    report = {"bench": "tiny", "bundle_max_documents": bundle, "documents": n, "indexed": indexed,
              "failed": counts.get("failed", 0),
              "seconds": round(seconds, 1), "documents_per_s": round(indexed / seconds, 1),
              "cpu_ms_per_document": cpu_ms, "cpu_ms_per_document_total": round(sum(cpu_ms.values()), 1),
              "documents_per_s_by_tenth": deciles,
              "last_tenth_over_first": round(deciles[-1] / deciles[0], 3) if deciles and deciles[0] else None,
              "redis_bytes_per_indexed_document": round((redis_used - redis_before) / max(1, indexed)),
              "rss_mb_at": {m: at_mark[m]["rss_mb"] for m in marks},
              "rss_last_over_first": {k: round(last["rss_mb"][k] / max(1, first["rss_mb"][k]), 3)
                                      for k in (last.get("rss_mb") or {}) if k in first.get("rss_mb", {})},
              "redis_mb_at": {m: at_mark[m]["redis_mb"] for m in marks},
              "rss_mb_peak": {k: max(s["rss_mb"].get(k, 0) for s in sampler.samples) for k in watched}}
    print(json.dumps(report), flush=True)
    lifecycle.delete(name)
    return indexed / seconds


def bench_notes(args) -> None:
    """``ops/bench notes``: one-line notes through the offline default (keywords, local-e5), one
    worker, by ``situate ingest`` as a user runs it, each document alone (``SITUATE_BUNDLE_MAX_DOCUMENTS``
    = 1, as before bundles) and in bundles, in the same run; against the embedder alone on the
    same texts in as many processes as the worker has, model load included, one at a time and
    in batches (``--batches``). Target (issue 63): bundled documents/s >= 40% of the embedder's
    best rate."""
    from workers import lifecycle
    from workers.storage import states

    n = args.documents
    rates: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "notes.jsonl"
        _write(source, n)
        texts = [json.loads(line)["text"] for line in source.read_text().splitlines()]
        for label, bundle in (("alone", "1"), ("bundled", str(args.bundle))):
            name = f"bench-notes-{uuid.uuid4().hex[:6]}"
            lifecycle.ensure(name, contextualizer="keywords", embedder="local-e5")
            env = {"SITUATE_BUNDLE_MAX_DOCUMENTS": bundle}
            worker = Worker(args.concurrency, env=env, name=f"notes-{label}", extra=["--queues", "chunk,index"])
            try:
                start = time.monotonic()
                subprocess.run([SITUATE, "ingest", "-c", name, "--json", str(source)], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **env})
                seconds = time.monotonic() - start
            finally:
                worker.stop()
            counts = states.counts(name)
            rates[label] = counts.get("indexed", 0) / seconds
            print(json.dumps({"bench": "notes", "run": label, "bundle_max_documents": int(bundle), "documents": n,
                              "indexed": counts.get("indexed", 0), "failed": counts.get("failed", 0),
                              "seconds": round(seconds, 1), "documents_per_s": round(rates[label], 1)}), flush=True)
            lifecycle.delete(name)
    embedder = {f"batch {b}": _embedder_alone(texts, b, args.concurrency) for b in (1, *args.batches)}
    best = max(embedder.values())
    print(json.dumps({"bench": "notes", "embedder_alone_texts_per_s": {k: round(v, 1) for k, v in embedder.items()},
                      "alone_over_best_embedder": round(rates["alone"] / best, 3),
                      "bundled_over_best_embedder": round(rates["bundled"] / best, 3),
                      "bundled_over_alone": round(rates["bundled"] / rates["alone"], 2)}), flush=True)


def _embedder_alone(texts: list[str], batch: int, processes: int) -> float:
    """Texts a second through the packaged e5 in ``processes`` processes of one thread each (as
    ``situate worker`` gives each pool process cores / processes), model load included."""
    from concurrent.futures import ProcessPoolExecutor

    parts = [texts[i::processes] for i in range(processes)]
    start = time.monotonic()
    with ProcessPoolExecutor(processes) as pool:
        done = sum(pool.map(_embed_part, parts, [batch] * processes))
    return done / (time.monotonic() - start)


def _embed_part(texts: list[str], batch: int) -> int:
    os.environ["SITUATE_EMBED_THREADS"] = "1"
    from workers.embedding import local

    encoder = local.e5(batch_size=batch)
    for i in range(0, len(texts), 32):
        encoder.embed_documents(texts[i:i + 32])
    return len(texts)
