"""``ops/bench situate``: contextualization against the stand-in API on the cookbook corpus.

The cookbook's calling pattern (one thread pool over every chunk) vs situate, at concurrency 5
and 16; situate with 1, 2 and 4 worker processes; and a run with the shared rate limit set to
half of the measured demand. Figures: cache reads beside the best possible, chunks/s, cost,
429s, and how much of the limit was used.
"""

from __future__ import annotations

import json
import time
import uuid

from ops.benchmarks.common import CORPUS
from ops.harness import StandIn, Worker

MODEL = "claude-haiku-5-5"  # the current Haiku (a 2,048-token cache minimum, as the cookbook's Haiku 3)
# ~1 s per call: the equal-concurrency comparisons.
STANDIN_LATENCY = {"base_latency_s": 0.6, "uncached_s_per_ktok": 0.25, "read_s_per_ktok": 0.01,
                   "output_s_per_tok": 0.01}
# ~3 s per call for the scaling runs, so that calls, not the 2 CPUs, limit 4 workers x 16 calls.
STANDIN_SLOW = {"base_latency_s": 2.4, "uncached_s_per_ktok": 0.5, "read_s_per_ktok": 0.02,
                "output_s_per_tok": 0.02}


def cookbook_baseline(standin: StandIn, threads: int) -> dict:
    """The cookbook's pattern, re-implemented: one thread pool over every chunk of every
    document, each call with the document block marked for caching, non-streaming."""
    from concurrent.futures import ThreadPoolExecutor

    import anthropic

    from workers import models
    from workers.contextualizers import prompts

    client = anthropic.Anthropic(api_key="bench", base_url=standin.url, max_retries=8)
    docs = json.loads((CORPUS / "codebase_chunks.json").read_text())
    jobs = [(d, c) for d in docs for c in d["chunks"]]
    standin.update()  # reset the cache and counters

    def call(job):
        d, c = job
        r = client.messages.create(model=MODEL, max_tokens=200, messages=[{"role": "user", "content": [
            {"type": "text", "text": prompts.document_block(d["content"]), "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": prompts.chunk_instruction(c["content"])}]}])
        u = r.usage
        return (d["original_uuid"], u.input_tokens, u.cache_creation_input_tokens or 0, u.cache_read_input_tokens or 0,
                u.output_tokens)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(call, jobs))
    elapsed = time.perf_counter() - t0
    per_doc: dict[str, list] = {}
    for doc_id, *u in results:
        per_doc.setdefault(doc_id, []).append(u)
    total_in = sum(i + w + r for _, i, w, r, _ in results)
    read = sum(r for _, _, _, r, _ in results)
    best = sum((len(us) - 1) * max(max(w, r) for _, w, r, _ in us) for us in per_doc.values())
    spec = models.get(MODEL)
    cost = sum(models.cost_usd(spec, i, w, r, o) for _, i, w, r, o in results)
    return {"run": f"cookbook pattern, {threads} threads", "calls": len(results), "chunks": len(jobs),
            "cache_read_ratio": read / total_in, "best_ratio": best / total_in, "chunks_per_s": len(jobs) / elapsed,
            "cost_usd": cost, "http_429": standin.stats()["http_429"], "seconds": elapsed}


def situate_run(standin: StandIn, label: str, workers: int, concurrency: int,
                limits: dict | None = None, burst_s: float = 60.0) -> dict:
    from producers.ingest import loaders, submit
    from workers import lifecycle
    from workers.contextualizers.llm import usage
    from workers.pipeline.routing import CHUNK_QUEUE, contextualize_queue
    from workers.settings import get_settings
    from workers.storage import states

    standin.update(limits={MODEL: limits} if limits else {}, burst_s=burst_s)
    env = {"ANTHROPIC_API_KEY": "bench-key", "ANTHROPIC_BASE_URL": standin.url,
           "SITUATE_LLM_CONCURRENCY": str(concurrency), "SITUATE_RATE_LIMIT_BURST_S": str(burst_s),
           "SITUATE_RATE_LIMITS": json.dumps({MODEL: limits or {"rpm": 10**6, "itpm": 10**9, "otpm": 10**9}})}
    queues = ",".join([CHUNK_QUEUE] + [contextualize_queue(i) for i in range(get_settings().shards)])
    # One document per call slot, as docs/claude-and-cost.md runs them: a held document always has a call in
    # flight or queued, so the slots stay full; holding more (2x: 11-13 chunks/s with 4
    # workers, against 13.6) keeps documents on a busy worker while others idle at the end.
    procs = [Worker(concurrency, ["--pool", "threads", "--queues", queues], env) for _ in range(workers)]
    name = f"bench-{uuid.uuid4().hex[:6]}"
    config = lifecycle.ensure(name, contextualizer="anthropic", model=MODEL)
    docs = list(loaders.load_cookbook(CORPUS / "codebase_chunks.json"))
    chunks = sum(len(d.chunks) for d in docs)
    try:
        run = submit.new_run()
        t0 = time.perf_counter()
        subs = submit.submit(config, docs, run)
        pending = {s.doc_id for s in subs}
        while pending:
            for doc in states.get_many(name, list(pending)):
                if doc and doc["state"] in ("situated", "failed", "indexed"):
                    pending.discard(doc["doc_id"])
            time.sleep(0.1)
        elapsed = time.perf_counter() - t0
    finally:
        for p in procs:
            p.stop()
    failed = sum(1 for d in states.get_many(name, [s.doc_id for s in subs]) if d["state"] == "failed")
    t = usage.totals(name, run)
    s = standin.stats()
    times = standin.stats(times=True)
    steady = steady_rates(sorted(zip(times["admitted_at"], times["admitted_tokens"])), limits)
    lifecycle.delete(name)
    return {"run": label, "calls": t["calls"], "chunks": chunks, "failed_documents": failed,
            "cache_read_ratio": t["cache_read_ratio"], "best_ratio": t["best_read_ratio"],
            "chunks_per_s": chunks / elapsed, "cost_usd": t["cost_usd"], "http_429": t["http_429"],
            "http_529": t["http_529"], "seconds": elapsed, "requests_per_min": s["requests"] / elapsed * 60,
            "input_tokens_per_min": (t["input_tokens"] + t["cache_write_tokens"]) / elapsed * 60,
            "standin_429": s["http_429"], "standin_429_by": s.get("http_429_by", {}),
            "standin_requests": s["requests"], "mean_calls_in_flight": s["busy_s"] / elapsed, **steady}


def steady_rates(admitted: list[tuple[float, int]], limits: dict | None, window_s: float = 10.0) -> dict:
    """Rates in steady state: between the 10th and 90th percentile of admitted requests (no
    ramp, no tail). Against a limit, also the share of it used in each 10-second window by
    whichever of rpm / itpm binds there, averaged: the demand's mix moves between
    token-heavy warm-ups and request-heavy reads, so at any moment only one of the two can
    be full, and that one is the limit being used."""
    if len(admitted) < 20:
        return {"steady_rpm": None, "steady_itpm": None}
    lo, hi = len(admitted) // 10, len(admitted) * 9 // 10
    span = admitted[hi][0] - admitted[lo][0]
    rates = {"steady_rpm": (hi - lo) / span * 60,
             "steady_itpm": sum(tokens for _, tokens in admitted[lo:hi]) / span * 60}
    if limits:
        shares, start = [], admitted[lo][0]
        while start + window_s <= admitted[hi][0]:
            inside = [tokens for t, tokens in admitted[lo:hi] if start <= t < start + window_s]
            shares.append(max(len(inside) / (limits["rpm"] * window_s / 60),
                              sum(inside) / (limits["itpm"] * window_s / 60)))
            start += window_s
        rates["steady_binding_used_of_limit"] = sum(shares) / len(shares) if shares else None
    return rates


def bench_situate(args) -> None:
    standin = StandIn(STANDIN_LATENCY)
    rows = []

    def show(row: dict) -> None:
        rows.append(row)
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}), flush=True)

    try:
        for c in (5, 16) if not args.limit_only else ():
            show(cookbook_baseline(standin, c))
            show(situate_run(standin, f"situate, 1 worker, concurrency {c}", 1, c))
        standin.update(**STANDIN_SLOW)
        for w in (1, 2, 4) if not args.limit_only else (2,):
            show(situate_run(standin, f"situate, {w} worker(s), concurrency 16, ~3 s calls", w, 16))
        demand = next(r for r in rows if r["run"].startswith("situate, 2 worker(s)"))
        limits = {"rpm": int(demand["requests_per_min"] / 2), "itpm": int(demand["input_tokens_per_min"] / 2),
                  "otpm": 10**9}
        row = situate_run(standin, f"situate, 2 workers, limit = half demand {limits}", 2, 16, limits, burst_s=5.0)
        row["rpm_used_of_limit"] = row["requests_per_min"] / limits["rpm"]
        row["steady_rpm_used_of_limit"] = (row["steady_rpm"] or 0) / limits["rpm"]
        row["itpm_used_of_limit"] = row["input_tokens_per_min"] / limits["itpm"]
        row["steady_itpm_used_of_limit"] = (row["steady_itpm"] or 0) / limits["itpm"]
        row["share_429"] = row["standin_429"] / max(1, row["standin_requests"])
        show(row)
    finally:
        standin.close()

    limit_row = rows[-1]
    if not args.limit_only:
        print(f"\n{'run':58} {'read':>7} {'best':>7} {'of best':>7} {'chunks/s':>8} {'cost $':>8} {'429':>5}")
        for r in rows:
            print(f"{r['run'][:58]:58} {r['cache_read_ratio']:7.1%} {r['best_ratio']:7.1%} "
                  f"{r['cache_read_ratio'] / r['best_ratio'] if r['best_ratio'] else 0:7.1%} "
                  f"{r['chunks_per_s']:8.2f} {r['cost_usd']:8.4f} {r['http_429']:5d}")
        one = next(r for r in rows if r["run"].startswith("situate, 1 worker(s)"))["chunks_per_s"]
        for w in (2, 4):
            r = next(r for r in rows if r["run"].startswith(f"situate, {w} worker(s)"))
            print(f"scaling: {w} workers = {r['chunks_per_s'] / one:.2f}x one")
    r = limit_row
    print(f"limit at half demand: {r['steady_binding_used_of_limit']:.1%} of the limit used in steady state "
          f"(per 10 s, the binding one of rpm/itpm); rpm alone {r['steady_rpm_used_of_limit']:.1%} "
          f"({r['rpm_used_of_limit']:.1%} over the whole run, ramp and tail included), itpm alone "
          f"{r['steady_itpm_used_of_limit']:.1%} ({r['itpm_used_of_limit']:.1%}); "
          f"{r['share_429']:.2%} of requests answered 429; failed documents: {r['failed_documents']}")
