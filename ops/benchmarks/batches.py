"""``ops/bench batches``: Message Batches grouped across documents, against the Batches API's
first-tier limits, and what a million document tokens cost beside one batch per document step.

Two parts, each with the stand-in Claude enforcing the Batches API's limits as the API does
(``ops/standins/batches.py``: requests per minute across its endpoints, polls and result fetches
included; requests waiting in its processing queue; a batch's requests and bytes):

1. **Cost, grouped against one batch per document step** (the 0.2 way, made here with
   ``SITUATE_BATCH_MAX_REQUESTS=1``: every step is a batch of its own), the same documents in
   both runs, the limits out of the way: the bill per million document tokens, the cache reads.
2. **Scale at the first tier's limits** (50 requests a minute, a minute's burst): ``situate
   ingest --batch`` of 10,000 documents; batch creations per 1,000 documents, the Batches API's
   429s (each waited out), failed documents (must be none), the time until every document is
   situated.

Documents are made from the cookbook corpus's files, each marked so its text is its own (its own
cache entry), long enough for the document block to be cached. Workers run the chunk and
contextualize queues only: embedding is not what is measured (as ``ops/bench llm-cost``).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from ops.benchmarks.common import CORPUS, bill_of
from ops.harness import SITUATE, StandIn, Worker

MODEL = "claude-haiku-5-5"
FAST = {"base_latency_s": 0.01, "uncached_s_per_ktok": 0.0, "read_s_per_ktok": 0.0, "output_s_per_tok": 0.0,
        "batch_delay_s": 0.5}
FIRST_TIER = {"batch_rpm": 50, "batch_burst_s": 60.0, "batch_queue_limit": 100_000,
              "batch_max_requests": 100_000, "batch_max_bytes": 256_000_000}
NO_LIMITS = {"batch_rpm": 0}
QUICK = {"SITUATE_BATCH_WAIT_S": "5", "SITUATE_BATCH_POLL_S": "5"}  # the cost runs: no need to wait a minute
DOCUMENT_CHARS = 12_000  # about 3k tokens: past the cache's minimum, several chunks a document


def _documents(path: Path, n: int) -> None:
    """``n`` JSONL documents, each about DOCUMENT_CHARS of the cookbook's code under a line of its own."""
    files = json.loads((CORPUS / "codebase_chunks.json").read_text())
    texts = [f["content"] for f in files]
    with path.open("w") as out:
        for i in range(n):
            body, k = [f"Report number {i}: the module set of build {i * 7919 % 100_003}."], i
            while sum(len(t) for t in body) < DOCUMENT_CHARS:
                body.append(texts[k % len(texts)][:DOCUMENT_CHARS])
                k += 1
            out.write(json.dumps({"id": f"doc-{i:07d}", "text": "\n\n".join(body)[:DOCUMENT_CHARS]}) + "\n")


def _run(standin: StandIn, source: Path, limits: dict, extra_env: dict[str, str], label: str,
         timeout_s: float = 3600) -> dict:
    from workers import lifecycle
    from workers.pipeline.routing import CHUNK_QUEUE, contextualize_queue
    from workers.settings import get_settings
    from workers.storage import catalog, states

    env = {"ANTHROPIC_API_KEY": "bench-key", "ANTHROPIC_BASE_URL": standin.url,
           "SITUATE_RATE_LIMITS": json.dumps({MODEL: {"rpm": 10**6, "itpm": 10**9, "otpm": 10**9}}),
           "SITUATE_BATCH_API_RPM": str(limits.get("batch_rpm") or 100_000), **extra_env}
    standin.configure(**{**FAST, **limits})
    standin.update()
    name = f"bench-batches-{label}-{uuid.uuid4().hex[:4]}"
    queues = ",".join([CHUNK_QUEUE] + [contextualize_queue(i) for i in range(get_settings().shards)])
    workers = [Worker(8, ["--pool", "threads", "--queues", queues], env) for _ in range(2)]
    try:
        t0 = time.perf_counter()
        ingest = subprocess.run([SITUATE, "ingest", "-c", name, "--contextualizer", "anthropic", "--model", MODEL,
                                 "--batch", "--no-wait", "--json", str(source)], capture_output=True, text=True,
                                env={**os.environ, **env}, timeout=timeout_s)
        if ingest.returncode:
            raise RuntimeError(f"ingest failed: {ingest.stderr[-2000:]}")
        queued = json.loads(ingest.stdout)["documents"]
        submitted = time.perf_counter() - t0
        while True:  # situated: the LLM's part done (the index stage is not running here)
            counts = states.counts(name)
            settled = sum(counts.get(s, 0) for s in ("situated", "failed", "indexed"))
            if settled >= queued:
                break
            if time.perf_counter() - t0 > timeout_s:
                raise RuntimeError(f"{label}: {settled} of {queued} documents situated after {timeout_s:.0f} s")
            time.sleep(1.0)
        seconds = time.perf_counter() - t0
    finally:
        for w in workers:
            w.stop()
    bill = bill_of(name)
    stats = standin.stats()
    failed = states.counts(name).get("failed", 0)
    if catalog.exists(name):
        lifecycle.delete(name)
    return {"run": label, "documents": queued, "failed": failed, "seconds": round(seconds, 1),
            "submit_seconds": round(submitted, 1), "batch_creations": stats["batch_creations"],
            "creations_per_1000_documents": round(1000 * stats["batch_creations"] / max(queued, 1), 2),
            "batch_api_requests": stats["batch_api_requests"], "batch_api_429": stats["batch_api_429"],
            "batch_queue_429": stats["batch_queue_429"], "batch_refused_size": stats["batch_refused_size"],
            "document_tokens": bill["document_tokens"], "cost_usd": bill["cost_usd"],
            "usd_per_1000_documents": round(1000 * bill["cost_usd"] / max(queued, 1), 4),
            "usd_per_million_document_tokens": bill["cost_per_million_document_tokens"],
            "cache_read_ratio": bill["cache_read_ratio"]}


def bench_batches(args) -> None:
    standin = StandIn(FAST)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            small, large = Path(tmp) / "cost.jsonl", Path(tmp) / "scale.jsonl"
            _documents(small, args.cost_documents)
            _documents(large, args.documents)
            for label, path, limits, env in (
                    ("per-document", small, NO_LIMITS, {**QUICK, "SITUATE_BATCH_MAX_REQUESTS": "1"}),
                    ("grouped", small, NO_LIMITS, QUICK),
                    ("first-tier", large, FIRST_TIER, {})):  # the defaults: a minute's wait, polls every 30 s
                row = _run(standin, path, limits, env, label)
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        standin.close()
    print(f"\n{'run':13} {'docs':>6} {'failed':>6} {'s':>7} {'creations':>9} {'/1000 docs':>10} {'API reqs':>8} "
          f"{'429s':>5} {'$/M doc tok':>11} {'read':>6}")
    for r in rows:
        print(f"{r['run']:13} {r['documents']:6d} {r['failed']:6d} {r['seconds']:7.1f} {r['batch_creations']:9d} "
              f"{r['creations_per_1000_documents']:10.2f} {r['batch_api_requests']:8d} {r['batch_api_429']:5d} "
              f"{r['usd_per_million_document_tokens'] or 0:11.4f} {r['cache_read_ratio']:6.1%}")
    per_doc, grouped = rows[0], rows[1]
    ratio = (grouped["usd_per_million_document_tokens"] or 0) / max(per_doc["usd_per_million_document_tokens"] or 1e-9, 1e-9)
    print(f"\ngrouped / per-document cost per million document tokens: {ratio:.4f} (target within 2%)")
    print(f"first tier: {rows[2]['creations_per_1000_documents']:.2f} creations per 1,000 documents (target <= 2), "
          f"{rows[2]['batch_api_429']} refusals waited out, {rows[2]['failed']} documents failed (target 0)")
