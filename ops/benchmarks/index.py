"""``ops/bench index``: hybrid search at 100k and 1M chunks, with one client and with 16, and
what OpenSearch holds in memory and on disk, for float vectors and a compressed storage (bytes).

Chunks are written straight to a collection's index (its real mapping, analyzers and k-NN
field): texts from every public corpus (cycled, each copy marked), vectors synthetic of low
intrinsic dimension as ``ops/bench vectors`` makes them (a 32-dimensional latent through a
random projection, plus noise) — embedding a million chunks on 2 cores would take a day and is
not what is measured. Queries go through ``search`` as the API calls it (the query embedded by
the collection's embedder, both sides, fusion, the fetch of the top 10): a dozen words from
the corpora's documents. After each size is written, the index is refreshed and its merges
left to settle (up to ``SETTLE_S``), then searched.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ops.benchmarks.scale import _corpus_texts, _merges_settle, _pid_of, _rss_kb

SIZES = (100_000, 1_000_000)
STORAGES = ("float", "byte")
QUERIES = 200
SETTLE_S = 300
DIM = 384


def _vectors(rng: np.random.Generator, projection: np.ndarray, n: int) -> np.ndarray:
    data = rng.normal(size=(n, 32)) @ projection + 0.5 * rng.normal(size=(n, DIM))
    return data / np.linalg.norm(data, axis=1, keepdims=True)


def _write(config, texts: list[tuple[str, str]], start: int, end: int, rng, projection) -> None:
    from opensearchpy import helpers

    from workers.connections import opensearch_client
    from workers.storage.index_mapping import stored_vector

    client = opensearch_client()
    client.indices.put_settings(index=config.index_name, body={"index": {"refresh_interval": "-1"}})
    step = 2_000
    for lo in range(start, end, step):
        vectors = _vectors(rng, projection, min(step, end - lo))
        actions = []
        for j, vector in enumerate(vectors):
            i = lo + j
            name, text = texts[i % len(texts)]
            doc_id = f"{i // 20:07d}/{name}"
            piece = text[(i % 20) * 640:(i % 20) * 640 + 640] or text[:640]
            actions.append({"_index": config.index_name, "_id": f"{doc_id}#{i % 20}", "_source": {
                "doc_id": doc_id, "chunk": i % 20, "version": "v1", "seq": 1, "text": f"(copy {i}) {piece}",
                "context": "", "metadata": {}, "vector": stored_vector(config, vector)}})
        helpers.bulk(client, actions, request_timeout=600)
    client.indices.put_settings(index=config.index_name, body={"index": {"refresh_interval": "1s"}})


def _latencies(config, queries: list[str], clients: int) -> dict:
    from producers.evaluation.evaluate import percentile
    from producers.retrieval.search import search

    search(config, queries[0], 10)
    took: list[float] = []
    lock = threading.Lock()

    def one(q: str) -> None:
        t0 = time.perf_counter()
        search(config, q, 10)
        with lock:
            took.append((time.perf_counter() - t0) * 1000)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, queries))
    wall = time.perf_counter() - t0
    return {"clients": clients, "p50_ms": round(percentile(took, 0.5), 1), "p95_ms": round(percentile(took, 0.95), 1),
            "queries_per_s": round(len(queries) / wall, 1)}


def _memory(config) -> dict:
    from workers.connections import opensearch_client

    client = opensearch_client()
    node = next(iter(client.nodes.stats(metric="jvm")["nodes"].values()))
    store = client.indices.stats(index=config.index_name, metric="store,segments")["_all"]["primaries"]
    pid = _pid_of("org.opensearch.bootstrap")
    return {"heap_used_mb": round(node["jvm"]["mem"]["heap_used_in_bytes"] / 2**20),
            "rss_mb": round(_rss_kb(pid) / 1024) if pid else None,
            "index_mb": round(store["store"]["size_in_bytes"] / 2**20),
            "segments": store["segments"]["count"]}


def bench_index(args) -> None:
    from workers.storage import chunk_index
    from workers.storage.catalog import CollectionConfig

    sizes = [s for s in SIZES if s <= args.chunks]
    texts = [(name, text) for name, text in _corpus_texts() if len(text) >= 640]
    queries = [" ".join(text.split()[5:17]) for _, text in texts][:QUERIES]
    rows = []
    for storage in [s for s in STORAGES if not args.vectors or s in args.vectors.split(",")]:
        config = CollectionConfig(name=f"bench-index-{storage}", embedder="local-e5", vectors=storage,
                                  index="situate-bench-index-" + storage)
        chunk_index.delete_index(config)
        chunk_index.ensure_index(config)
        rng = np.random.default_rng(11)
        projection = rng.normal(size=(32, DIM))
        written = 0
        try:
            for size in sizes:
                t0 = time.perf_counter()
                _write(config, texts, written, size, rng, projection)
                written = size
                chunk_index.refresh(config)
                write_s = time.perf_counter() - t0
                settled = _merges_settle(config, SETTLE_S)
                row = {"vectors": storage, "chunks": chunk_index.count(config), "write_s": round(write_s, 1),
                       "merges_settled_s": round(settled, 1), "memory": _memory(config),
                       "search": [_latencies(config, queries, c) for c in (1, 16)]}
                rows.append(row)
                print(json.dumps(row), flush=True)
        finally:
            chunk_index.delete_index(config)
    print(f"\n{'vectors':8} {'chunks':>10} {'1 client p50/p95 ms':>20} {'16 clients p50/p95 ms':>22} {'q/s 16':>7} "
          f"{'heap MB':>8} {'RSS MB':>7} {'index MB':>9}")
    for r in rows:
        one, many = r["search"]
        m = r["memory"]
        print(f"{r['vectors']:8} {r['chunks']:10,} {one['p50_ms']:9.1f} / {one['p95_ms']:7.1f} "
              f"{many['p50_ms']:11.1f} / {many['p95_ms']:7.1f} {many['queries_per_s']:7.1f} "
              f"{m['heap_used_mb']:8} {m['rss_mb'] or 0:7} {m['index_mb']:9,}")
    for storage in STORAGES:
        mine = [r for r in rows if r["vectors"] == storage]
        if len(mine) >= 2:
            ratio = mine[-1]["search"][0]["p95_ms"] / max(mine[0]["search"][0]["p95_ms"], 1e-9)
            print(f"{storage}: one client's p95 at {mine[-1]['chunks']:,} over at {mine[0]['chunks']:,}: "
                  f"{ratio:.2f} (target <= 2)")
