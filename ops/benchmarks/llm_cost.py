"""``ops/bench llm-cost``: what situating costs with Claude (the stand-in, the real SDK), per
million document tokens, on the cookbook corpus (90 source files, each read whole) and on the
FinanceBench filings (37 PDFs of 60k–150k tokens, read as their opening and the window of their
own section each chunk is in: ``workers/contextualizers/windows.py``).

Each corpus is ingested as a user would (``situate ingest --contextualizer anthropic``), by
workers on the chunk and contextualize queues only (the index stage's embedding is not what is
measured); the bill is ``situate stats``'s. Beside each run, ``--estimate``'s figure for the same
documents, and for the filings the estimate of reading each one whole for every chunk (the
cookbook's way), which the windows replace.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid

from ops.benchmarks.common import CORPUS, DATA, bill_of
from ops.harness import SITUATE, StandIn, Worker

MODEL = "claude-haiku-5-5"
FAST = {"base_latency_s": 0.05, "uncached_s_per_ktok": 0.01, "read_s_per_ktok": 0.0, "output_s_per_tok": 0.0005}
SOURCES = {"cookbook": ["--format", "cookbook", str(CORPUS / "codebase_chunks.json")],
           "financebench": [str(DATA / "financebench" / "pdfs")]}


def _estimate(collection: str, source: list[str], env: dict[str, str]) -> dict:
    out = subprocess.run([SITUATE, "ingest", "-c", collection, "--contextualizer", "anthropic", "--model", MODEL,
                          "--estimate", "--json", *source], capture_output=True, text=True, env={**os.environ, **env},
                         check=True, timeout=1800)
    return json.loads(out.stdout)


def run_corpus(standin: StandIn, corpus: str) -> dict:
    from workers import lifecycle
    from workers.pipeline.routing import CHUNK_QUEUE, contextualize_queue
    from workers.settings import get_settings
    from workers.storage import catalog, states

    env = {"ANTHROPIC_API_KEY": "bench-key", "ANTHROPIC_BASE_URL": standin.url,
           "SITUATE_RATE_LIMITS": json.dumps({MODEL: {"rpm": 10**6, "itpm": 10**9, "otpm": 10**9}})}
    name = f"bench-cost-{corpus.replace('_', '-')}-{uuid.uuid4().hex[:4]}"
    estimated = _estimate(name, SOURCES[corpus], env)
    whole = _estimate(name, SOURCES[corpus], {**env, "SITUATE_LLM_MAX_DOCUMENT_TOKENS": "100000000"}) \
        if corpus == "financebench" else None
    queues = ",".join([CHUNK_QUEUE] + [contextualize_queue(i) for i in range(get_settings().shards)])
    workers = [Worker(16, ["--pool", "threads", "--queues", queues], env) for _ in range(2)]
    standin.update()
    try:
        t0 = time.perf_counter()
        ingest = subprocess.Popen([SITUATE, "ingest", "-c", name, "--contextualizer", "anthropic", "--model", MODEL,
                                   "--no-wait", "--json", *SOURCES[corpus]], stdout=subprocess.PIPE, text=True,
                                  env={**os.environ, **env})
        queued = json.loads(ingest.communicate(timeout=1800)[0])
        ids = [d for d in states.doc_ids(name)]
        while True:  # situated: the LLM's part done (the index stage is not running here)
            docs = [d for d in states.get_many(name, ids) if d]
            if len(docs) >= queued["documents"] and all(d["state"] in ("situated", "failed", "indexed") for d in docs):
                break
            time.sleep(0.5)
        seconds = time.perf_counter() - t0
    finally:
        for w in workers:
            w.stop()
    stats = bill_of(name)
    failed = sum(1 for d in states.get_many(name, ids) if d and d["state"] == "failed")
    if catalog.exists(name):
        lifecycle.delete(name)
    return {"corpus": corpus, "documents": queued["documents"], "failed": failed, "calls": stats["calls"],
            "document_tokens": stats["document_tokens"], "cost_usd": stats["cost_usd"],
            "usd_per_million_document_tokens": stats["cost_per_million_document_tokens"],
            "cache_read_ratio": stats["cache_read_ratio"], "best_read_ratio": stats["best_read_ratio"],
            "estimated_usd": estimated["cost_usd"], "seconds": seconds,
            "whole_document_estimate_usd": whole["cost_usd"] if whole else None}


def bench_llm_cost(args) -> None:
    standin = StandIn(FAST)
    rows = []
    try:
        for corpus in [c for c in SOURCES if not args.only or c in args.only.split(",")]:
            row = run_corpus(standin, corpus)
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        standin.close()
    print(f"\n{'corpus':14} {'docs':>5} {'calls':>6} {'doc tokens':>11} {'cost $':>9} {'$/M doc tok':>11} "
          f"{'read':>6} {'best':>6} {'estimate $':>10} {'whole-doc est. $':>16}")
    for r in rows:
        whole = f"{r['whole_document_estimate_usd']:16.4f}" if r["whole_document_estimate_usd"] is not None else f"{'-':>16}"
        print(f"{r['corpus']:14} {r['documents']:5d} {r['calls']:6d} {r['document_tokens']:11,d} {r['cost_usd']:9.4f} "
              f"{r['usd_per_million_document_tokens'] or 0:11.3f} {r['cache_read_ratio']:6.1%} {r['best_read_ratio']:6.1%} "
              f"{r['estimated_usd']:10.4f} {whole}")
