"""``ops/bench pipeline`` and ``ops/bench search``: ingest speed against the embedder's own, and
search latency and Pass@k through the HTTP API, on the cookbook corpus.

pipeline  Ingest the cookbook corpus (737 chunks) through real worker processes and compare
          chunks/s end to end with the embedder's own passages/s on the same texts: their
          ratio is what the pipeline (queues, Redis, chunk bookkeeping, OpenSearch) costs.
search    The 248 cookbook queries through the HTTP API: latency p50/p95 and Pass@5/10/20.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

from ops.benchmarks.common import CORPUS
from ops.harness import Api, Worker


def bench_pipeline(args) -> None:
    """The cookbook through the whole pipeline, once per embedder named (``--embedders``), each
    against that embedder alone on the same texts in this process; ratios between the embedders
    come from the same run."""
    rates = {}
    for spec in args.embedders.split(","):
        embedder, _, batch = spec.partition(":")  # "local:32": texts per encoder call, as 0.2 did
        rates[spec] = _pipeline_once(args, embedder or None, int(batch) if batch else None)
    if len(rates) > 1:
        first, *rest = rates
        for other in rest:
            print(f"ingest {other} / {first}: {rates[other] / rates[first]:.2f}x chunks/s")


def _pipeline_once(args, embedder_name: str | None, batch: int | None = None) -> float:
    from producers.ingest import loaders, submit
    from workers import lifecycle
    from workers.chunks.splitting import guess_language, locate
    from workers.contextualizers import registry
    from workers.contextualizers.base import SourceDocument, contextualized_text
    from workers.embedding import registry as embedders
    from workers.settings import get_settings

    docs = list(loaders.load_cookbook(CORPUS / "codebase_chunks.json"))
    name = f"bench-{uuid.uuid4().hex[:6]}"
    config = lifecycle.ensure(name, contextualizer=args.contextualizer, embedder=embedder_name)
    env = {"SITUATE_EMBED_BATCH_SIZE": str(batch)} if batch else {}
    before = {key: os.environ.get(key) for key in env}  # the caller's own, put back after this run
    os.environ.update(env)  # the reference below, in this process, embeds as the workers do
    get_settings.cache_clear()
    embedders.get.cache_clear()
    worker = Worker(args.concurrency, env=env)
    try:
        started = time.perf_counter()
        subs = submit.submit(config, docs)
        final = submit.wait(config, subs)
        elapsed = time.perf_counter() - started
    finally:
        worker.stop()
    failed = [d for d in final.values() if d["state"] != "indexed"]
    chunks = sum(d.get("chunks", 0) for d in final.values())

    # Reference, same texts, same machine: the embedder alone, in this process.
    ctx = registry.for_collection(config)
    texts = []
    for d in docs:
        text = d.body if isinstance(d.body, str) else d.body.decode()
        chunk_list = locate(text, [(c["n"], c["text"]) for c in d.chunks])
        source = SourceDocument(name, d.doc_id, "", text, guess_language(text, d.metadata), d.metadata)
        texts += [contextualized_text(c.text, chunk.text) for chunk, c in ctx.contextualize(source, chunk_list)]
    embedder = embedders.get(config.embedder, config.embed_model)
    embedder.embed_documents(texts[:32])  # warm-up
    t0 = time.perf_counter()
    embedder.embed_documents(texts)
    embed_s = time.perf_counter() - t0
    lifecycle.delete(name)
    for key, value in before.items():
        if value is None:
            del os.environ[key]
        else:
            os.environ[key] = value

    pipeline_rate, embed_rate = chunks / elapsed, len(texts) / embed_s
    print(json.dumps({"bench": "pipeline", "embedder": config.embedder, "batch": getattr(embedder, "batch_size", None),
                      "contextualizer": args.contextualizer,
                      "worker_processes": args.concurrency,
                      "documents": len(docs), "failed": len(failed), "chunks": chunks,
                      "seconds": round(elapsed, 1), "chunks_per_s": round(pipeline_rate, 2),
                      "embedder_passages_per_s": round(embed_rate, 2),
                      "pipeline_over_embedder": round(pipeline_rate / embed_rate, 3)}), flush=True)
    return pipeline_rate


def bench_search(args) -> None:
    """Through the HTTP API, as a caller sees it, with where the time goes (the API's
    Server-Timing header: query embedding, OpenSearch, fusion, fetching the hits)."""
    import httpx

    from producers.evaluation.evaluate import KS, Retrieved, evaluate, load_queries, percentile
    from workers.storage import catalog

    config = catalog.load(args.collection)
    queries = load_queries(Path(args.queries) if args.queries else CORPUS / "evaluation_set.jsonl")
    api = Api()
    parts: dict[str, list[float]] = {}
    try:
        with httpx.Client(base_url=api.url, timeout=30) as http:
            def run(q: str, k: int):
                r = http.post(f"/v1/collections/{config.name}/search", json={"query": q, "k": k})
                r.raise_for_status()
                for item in r.headers.get("server-timing", "").split(","):
                    name, _, duration = item.strip().partition(";dur=")
                    if duration:
                        parts.setdefault(name, []).append(float(duration))
                return [Retrieved(h["doc_id"], h["chunk"], h["text"], h.get("pages")) for h in r.json()["hits"]]
            run(queries[0].query, 20)  # warm-up: loads the query embedder in the API process
            parts.clear()
            result = evaluate(queries, run)
    finally:
        api.stop()
    print(json.dumps({"bench": "search", "collection": config.name, "contextualizer": config.contextualizer,
                      "queries": result.queries, **{f"pass@{k}": round(result.pass_at[k], 2) for k in KS},
                      "latency_ms_p50": round(result.latency_ms_p50, 1),
                      "latency_ms_p95": round(result.latency_ms_p95, 1),
                      "server_ms_p50": {n: round(percentile(v, 0.5), 1) for n, v in parts.items()},
                      "server_ms_p95": {n: round(percentile(v, 0.95), 1) for n, v in parts.items()}}))
