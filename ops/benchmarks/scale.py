"""``ops/bench scale``: 100,000 chunks through the whole pipeline, then 1, 2, 4 and 8 workers.

Synthetic documents are made from the bundled corpora (every public corpus's documents, each
copy marked so its text, and so its version and its prompt cache entry, is its own) and go
through everything a real run does: submit, chunking, LLM contexts from the stand-in Claude
(fast answers, rate limits out of the way), vectors from the stand-in Voyage, OpenSearch. The
local embedder is not in this run (it would set the pace at ~20 chunks/s on 2 cores: its own
speed is ``ops/bench pipeline``'s); the point is what the pipeline itself does as it grows.

Ingest runs in three legs, to 1k, 10k and 100k chunks; after each, hybrid search p50/p95 over
the index so far (200 queries, through ``search``, as the API calls it). Printed as it goes:
chunks/s for each tenth of the run (ingest time only), every process's RSS (sampled each
2 s: workers and their pool children, the stand-in, OpenSearch, Redis), Redis's used memory,
the index size. Then the LLM stage alone with 1, 2, 4 and 8 worker processes, calls of 1 s
from the stand-in: it waits on the network, so it should scale with the processes.

Targets (issue 11): last tenth >= 90% of the first; a worker's RSS at 100k <= 1.2x at 10k;
Redis flat once indexed; 8 workers >= 7x one; search p95 at 100k <= 2x at 1k.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import threading
import time
import uuid
from pathlib import Path

from ops.benchmarks.common import DATA, fast_standin_env
from ops.harness import StandIn, Worker

MODEL = "claude-haiku-5-5"
FAST = {"base_latency_s": 0.01, "uncached_s_per_ktok": 0.002, "read_s_per_ktok": 0.0, "output_s_per_tok": 0.0001}
LEGS = (1_000, 10_000, 100_000)
CHARS_PER_CHUNK = 640  # measured on these corpora (~100k chunks from 64M characters): no top-up needed


def _corpus_texts() -> list[tuple[str, str]]:
    texts = []
    for corpus in sorted(DATA.iterdir()):
        path = corpus / "codebase_chunks.json"
        if path.exists():
            texts += [(f"{corpus.name}/{d['original_uuid']}", d["content"]) for d in json.loads(path.read_text())]
    return texts


def _documents(texts: list[tuple[str, str]], copy: int):
    from workers.documents.validation import RawDocument

    for doc_id, text in texts:
        yield RawDocument(f"{copy:04d}/{doc_id}", f"(copy {copy})\n{text}", {"copy": copy})


# -- sampling --------------------------------------------------------------------------------------

def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _group(pgid: int) -> list[int]:
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            pids.append(int(stat.parent.name))
    return pids


def _pid_of(pattern: str) -> int | None:
    for cmd in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if pattern in cmd.read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                return int(cmd.parent.name)
        except OSError:
            continue
    return None


class Sampler(threading.Thread):
    """Every 2 s: chunks indexed, Redis's used memory, and the RSS of each watched process
    (a worker: the sum over its process group, parent and pool children)."""

    def __init__(self, config, watched: dict[str, tuple[int, bool]]):
        super().__init__(daemon=True)
        from workers.connections import redis_client

        self.config, self.watched, self.redis = config, watched, redis_client()
        self.samples: list[dict] = []
        self.running = True

    def sample(self) -> dict:
        from workers.storage import chunk_index

        rss = {}
        for name, (pid, group) in self.watched.items():
            rss[name] = sum(_rss_kb(p) for p in (_group(pid) if group else [pid])) // 1024
        try:
            chunks = chunk_index.count(self.config)
        except Exception:
            chunks = self.samples[-1]["chunks"] if self.samples else 0
        return {"t": time.monotonic(), "chunks": chunks, "rss_mb": rss,
                "redis_mb": round(int(self.redis.info("memory")["used_memory"]) / 2**20, 1)}

    def run(self):
        while self.running:
            self.samples.append(self.sample())
            time.sleep(2)


# -- the run -------------------------------------------------------------------------------------

def bench_scale(args) -> None:
    from producers.ingest import submit
    from workers import lifecycle
    from workers.connections import opensearch_client, redis_client
    from workers.storage import capacity, chunk_index

    target = args.chunks
    legs = [n for n in LEGS if n < target] + [target]
    standin = StandIn(FAST)
    env = fast_standin_env(standin.url, MODEL)
    os.environ.update(env)
    name = f"bench-scale-{uuid.uuid4().hex[:6]}"
    config = lifecycle.ensure(name, contextualizer="anthropic", model=MODEL, embedder="voyage")
    cpu = Worker(2, env=env, name="scale-cpu", extra=["--queues", "chunk,index"])
    llm = Worker(4, env=env, name="scale-llm", extra=["--pool", "threads", "--queues",
                                                      "contextualize.0,contextualize.1,contextualize.2,contextualize.3"])
    watched = {"worker chunk+index": (cpu.pid, True), "worker llm": (llm.pid, True),
               "stand-in": (standin.proc.pid, False)}
    for label, pattern in (("opensearch", "org.opensearch.bootstrap"), ("redis", "redis-server")):
        pid = _pid_of(pattern)
        if pid:
            watched[label] = (pid, False)
    sampler = Sampler(config, watched)
    sampler.start()
    texts = _corpus_texts()
    pauses: list[list] = []  # [start, end] of each search phase
    run_start = time.monotonic()
    ingest_s, searches, at_leg = 0.0, {}, {}
    queries = [" ".join(text.split()[5:17]) for _, text in texts][:200]  # a dozen words from each document
    docs = itertools.chain.from_iterable(_documents(texts, c) for c in itertools.count())
    expected = 0  # chunks the submitted documents will make, estimated from their length
    try:
        for leg in legs:
            started = time.monotonic()
            submissions = []
            while True:  # submit what should make the leg, wait, top up if the estimate fell short
                while expected < leg:
                    while capacity.too_full():  # as `situate ingest` does: let the workers drain Redis
                        time.sleep(1)
                    raw = next(docs)
                    submissions.append(submit.submit_one(config, raw))
                    expected += math.ceil(len(raw.body) / CHARS_PER_CHUNK)
                submit.wait(config, submissions)
                expected = chunk_index.count(config)
                if expected >= leg:
                    break
            ingest_s += time.monotonic() - started
            pauses.append([time.monotonic(), None])  # searching: off the ingest clock
            chunk_index.refresh(config)
            total = chunk_index.count(config)
            at_leg[leg] = sampler.sample()
            searches[leg] = {"chunks": total, "right_after_ingest": _search_latency(config, queries)}
            settled_s = _merges_settle(config)  # OpenSearch still merging the new segments: CPU it shares
            searches[leg]["merges_settled_s"] = round(settled_s, 1)
            searches[leg]["settled"] = _search_latency(config, queries)
            pauses[-1][1] = time.monotonic()
            print(json.dumps({"leg": leg, "chunks_indexed": total, "ingest_s": round(ingest_s, 1),
                              "search": searches[leg], "rss_mb": at_leg[leg]["rss_mb"],
                              "redis_mb": at_leg[leg]["redis_mb"]}), flush=True)
    finally:
        sampler.running = False
        cpu.stop()
        llm.stop()
    stats = opensearch_client().indices.stats(index=config.index_name, metric="store")
    index_mb = stats["_all"]["primaries"]["store"]["size_in_bytes"] / 2**20
    deciles = _deciles(_ingest_clock(sampler.samples, run_start, pauses))
    worker_growth = {w: round(at_leg[legs[-1]]["rss_mb"][w] / max(1, at_leg[legs[min(1, len(legs) - 1)]]["rss_mb"][w]), 3)
                     for w in ("worker chunk+index", "worker llm")}
    redis_after = redis_client().info("memory")["used_memory"] / 2**20
    report = {"bench": "scale", "chunks": chunk_index.count(config),
              "ingest_s": round(ingest_s, 1), "chunks_per_s": round(chunk_index.count(config) / ingest_s, 1),
              "chunks_per_s_by_tenth": deciles,
              "last_tenth_over_first": round(deciles[-1] / deciles[0], 3) if deciles and deciles[0] else None,
              "worker_rss_100k_over_10k": worker_growth,
              "redis_mb_at_legs": {leg: at_leg[leg]["redis_mb"] for leg in legs},
              "redis_mb_after": round(redis_after, 1), "index_mb": round(index_mb, 1),
              "search": searches,
              "search_p95_last_over_first": {
                  when: round(searches[legs[-1]][when]["p95_ms"] / searches[legs[0]][when]["p95_ms"], 3)
                  for when in ("right_after_ingest", "settled")},
              "rss_mb_peak": {k: max(s["rss_mb"].get(k, 0) for s in sampler.samples) for k in watched}}
    print(json.dumps(report), flush=True)
    if args.keep:
        print(f"kept collection {name}")
    else:
        lifecycle.delete(name)
    standin.close()
    if not args.skip_workers:
        _llm_scaling(args)


def _search_latency(config, queries: list[str]) -> dict:
    """p50/p95 of ``search`` (as the API calls it), and of each of its steps."""
    from producers.evaluation.evaluate import percentile
    from producers.retrieval.search import search

    latencies, parts = [], {}
    search(config, queries[0], 10)  # the first query pays for connections and caches
    for q in queries:
        t0, timings = time.perf_counter(), {}
        search(config, q, 10, timings=timings)
        latencies.append((time.perf_counter() - t0) * 1000)
        for part, ms in timings.items():
            parts.setdefault(part, []).append(ms)
    return {"queries": len(latencies), "p50_ms": round(percentile(latencies, 0.5), 1),
            "p95_ms": round(percentile(latencies, 0.95), 1),
            "parts_p95_ms": {p: round(percentile(v, 0.95), 1) for p, v in parts.items()}}


def _merges_settle(config, patience_s: float = 600) -> float:
    """Seconds until the index has no merge running (two polls in a row)."""
    from workers.connections import opensearch_client

    started, quiet = time.monotonic(), 0
    while quiet < 2 and time.monotonic() - started < patience_s:
        stats = opensearch_client().indices.stats(index=config.index_name, metric="merge")
        quiet = quiet + 1 if stats["_all"]["total"]["merges"]["current"] == 0 else 0
        time.sleep(1)
    return time.monotonic() - started


def _ingest_clock(samples: list[dict], start: float, pauses: list[list]) -> list[tuple[float, int]]:
    """(seconds of ingest so far, chunks indexed) for each sample taken while ingesting."""
    out = []
    for sample in samples:
        t = sample["t"]
        if t < start or any(p[0] <= t <= (p[1] or t) for p in pauses):
            continue
        paused = sum((p[1] or t) - p[0] for p in pauses if p[0] < t)
        out.append((t - start - paused, sample["chunks"]))
    return out


def _deciles(timeline: list[tuple[float, int]]) -> list[float]:
    """Chunks/s over each tenth of the chunks, on the ingest clock."""
    if not timeline:
        return []
    total = timeline[-1][1]
    out, previous = [], (0.0, 0)
    for tenth in range(1, 11):
        goal = total * tenth / 10
        point = next((p for p in timeline if p[1] >= goal), timeline[-1])
        span = point[0] - previous[0]
        out.append(round((point[1] - previous[1]) / span, 1) if span > 0 else 0.0)
        previous = point
    return out


def _llm_scaling(args) -> None:
    """The LLM stage alone: N worker processes on the contextualize queues, two calls in
    flight each, calls of ~1 s; chunk and index on one CPU worker for every N."""
    from producers.ingest import submit
    from workers import lifecycle
    from workers.documents.validation import RawDocument

    slow = {"base_latency_s": 1.0, "uncached_s_per_ktok": 0.0, "read_s_per_ktok": 0.0, "output_s_per_tok": 0.0}
    results = {}
    for n in (1, 2, 4, 8):
        standin = StandIn(slow)
        env = {"ANTHROPIC_API_KEY": "sk-ant-bench", "ANTHROPIC_BASE_URL": standin.url,
               "SITUATE_LLM_CONCURRENCY": "2", "SITUATE_LLM_DOCUMENT_CONCURRENCY": "2",
               "SITUATE_RATE_LIMITS": json.dumps({MODEL: {"rpm": 10**7, "itpm": 10**10, "otpm": 10**9}})}
        name = f"bench-llm-{n}-{uuid.uuid4().hex[:4]}"
        config = lifecycle.ensure(name, contextualizer="anthropic", model=MODEL, embedder="local")
        workers = [Worker(1, env=env, name=f"scale-cpu-{n}", extra=["--queues", "chunk,index"])]
        workers += [Worker(4, env=env, name=f"scale-llm-{n}-{i}",
                           extra=["--pool", "threads", "--queues",
                                  "contextualize.0,contextualize.1,contextualize.2,contextualize.3"])
                    for i in range(n)]
        try:
            docs = [RawDocument(f"d{i}", "\n\n".join(f"Section {j} of record {i}: " + " ".join(
                f"w{i}x{j}y{k}" for k in range(40)) for j in range(6)), {},
                [{"n": j, "text": f"Section {j} of record {i}."} for j in range(6)]) for i in range(16 * n)]
            submit.wait(config, submit.submit(config, docs), timeout=900)
            s = standin.stats()
            calls_per_s = s["requests"] / max(1e-9, s["last_at"] - s["first_at"])
            results[n] = {"calls": s["requests"], "calls_per_s": round(calls_per_s, 2)}
            print(json.dumps({"llm_workers": n, **results[n]}), flush=True)
        finally:
            for w in workers:
                w.stop()
            standin.close()
            lifecycle.delete(name)
    base = results[1]["calls_per_s"]
    print(json.dumps({"bench": "scale-llm", "calls_per_s": {n: r["calls_per_s"] for n, r in results.items()},
                      "speedup": {n: round(r["calls_per_s"] / base, 2) for n, r in results.items()}}), flush=True)
