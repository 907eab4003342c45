"""Benchmarks for the foundation: run by ``ops/bench``; each prints its figures and the
reference it is compared with, measured in the same run on the same machine.

pipeline  Ingest the cookbook corpus (737 chunks) through real worker processes and compare
          chunks/s end to end with the embedder's own passages/s on the same texts: their
          ratio is what the pipeline (queues, Redis, chunk bookkeeping, OpenSearch) costs.
search    The 248 cookbook queries through the HTTP API: latency p50/p95 and Pass@5/10/20.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("SITUATE_DEMO_CORPUS", ROOT.parent / "shared" / "data" / "cookbook"))
SITUATE = str(Path(sys.executable).with_name("situate"))


def start_worker(concurrency: int) -> subprocess.Popen:
    from workers.app import app

    name = f"bench-{uuid.uuid4().hex[:6]}"
    log = open(ROOT / ".services" / "logs" / f"{name}.log", "w")
    proc = subprocess.Popen([SITUATE, "worker", "-c", str(concurrency), "--hostname", f"{name}@%h"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    while not any(f"{name}@" in k for r in app.control.ping(timeout=0.5) for k in r):
        if proc.poll() is not None:
            sys.exit(f"worker died, see {log.name}")
        time.sleep(0.3)
    return proc


def stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=60)


def bench_pipeline(args) -> None:
    from producers import loaders, submit
    from workers import collections, contextualizers, embedders
    from workers.chunking import guess_language, locate

    docs = list(loaders.load_cookbook(CORPUS / "codebase_chunks.json"))
    name = f"bench-{uuid.uuid4().hex[:6]}"
    config = collections.ensure(name, contextualizer=args.contextualizer)
    worker = start_worker(args.concurrency)
    try:
        started = time.perf_counter()
        subs = submit.submit(config, docs)
        final = submit.wait(config, subs)
        elapsed = time.perf_counter() - started
    finally:
        stop(worker)
    failed = [d for d in final.values() if d["state"] != "indexed"]
    chunks = sum(d.get("chunks", 0) for d in final.values())

    # Reference, same texts, same machine: the embedder alone, in this process.
    ctx = contextualizers.for_collection(config)
    texts = []
    for d in docs:
        text = d.body if isinstance(d.body, str) else d.body.decode()
        chunk_list = locate(text, [(c["n"], c["text"]) for c in d.chunks])
        source = contextualizers.SourceDocument(name, d.doc_id, "", text, guess_language(text, d.metadata), d.metadata)
        texts += [contextualizers.contextualized_text(c.text, chunk.text) for chunk, c in ctx.contextualize(source, chunk_list)]
    embedder = embedders.get(config.embedder)
    embedder.embed_documents(texts[:32])  # warm-up
    t0 = time.perf_counter()
    embedder.embed_documents(texts)
    embed_s = time.perf_counter() - t0
    collections.delete(name)

    pipeline_rate, embed_rate = chunks / elapsed, len(texts) / embed_s
    print(json.dumps({"bench": "pipeline", "contextualizer": args.contextualizer, "worker_processes": args.concurrency,
                      "documents": len(docs), "failed": len(failed), "chunks": chunks,
                      "seconds": round(elapsed, 1), "chunks_per_s": round(pipeline_rate, 2),
                      "embedder_passages_per_s": round(embed_rate, 2),
                      "pipeline_over_embedder": round(pipeline_rate / embed_rate, 3)}))


def bench_search(args) -> None:
    import httpx

    from producers.evaluate import KS, evaluate, load_queries
    from workers import collections

    config = collections.load(args.collection)
    queries = load_queries(CORPUS / "evaluation_set.jsonl")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    api = subprocess.Popen([SITUATE, "api", "--port", str(port)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                httpx.get(f"{url}/healthz")
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        with httpx.Client(base_url=url, timeout=30) as http:
            def run(q: str, k: int):
                r = http.post(f"/v1/collections/{config.name}/search", json={"query": q, "k": k})
                r.raise_for_status()
                return [(h["doc_id"], h["chunk"]) for h in r.json()["hits"]]
            run(queries[0].query, 20)  # warm-up: loads the query embedder in the API process
            result = evaluate(queries, run)
    finally:
        stop(api)
    print(json.dumps({"bench": "search", "collection": config.name, "contextualizer": config.contextualizer,
                      "queries": result.queries, **{f"pass@{k}": round(result.pass_at[k], 2) for k in KS},
                      "latency_ms_p50": round(result.latency_ms_p50, 1),
                      "latency_ms_p95": round(result.latency_ms_p95, 1)}))


def main() -> None:
    parser = argparse.ArgumentParser(prog="ops/bench")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pipeline")
    p.add_argument("--contextualizer", default="structural")
    p.add_argument("--concurrency", type=int, default=2)
    p.set_defaults(fn=bench_pipeline)
    s = sub.add_parser("search")
    s.add_argument("--collection", default="cookbook")
    s.set_defaults(fn=bench_search)
    args = parser.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
