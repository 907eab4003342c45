"""``ops/bench reindex`` and ``ops/bench vectors``: a collection rebuilt behind its name.

``reindex``: the cookbook corpus is ingested with the English embedder; then, timed side by side
in this run, (a) a fresh ingest of the same documents with the multilingual embedder into a new
collection and (b) ``situate reindex`` of the first collection to that embedder; a search loop
on the first collection runs at the same pace through both (a live collection is searched while
it is rebuilt; with searches in (b) alone, the ratio measured the searches' CPU on 2 cores: 1.52
at 6.3/s). Printed: the ratio, the reindex's phases (how long submissions were held, how often
the switch was put off), searches and failures. Target: (b) <= 1.2 x (a), 0 failed searches.

``reindex --llm``: the cookbook situated by Claude (the stand-in), then reindexed to another
embedder (the stand-in's Voyage): the stand-in's request count before and after (target 0 new
calls), every document present after the switch, a search loop through it.

``vectors``: how much each vector storage saves, and what it costs in retrieval.
- On the cookbook corpus: the collection rebuilt with each storage (``float``, ``lucene-sq``,
  ``byte``): Pass@10 dense and hybrid through ``situate eval``, and the index's bytes on disk
  per chunk after a force-merge.
- At 100,000 vectors (synthetic, 384 dimensions, of low intrinsic dimension as embeddings are): an index per
  storage with the collections' own mapping (``chunk_index.vector_field``), recall@10 of 200
  queries against the exact neighbours (numpy), p50 latency, bytes per vector on disk; and the
  bytes a search reads per vector (the format's: floats 4 per dimension, int7 and int8 1).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time

import numpy as np

from ops.benchmarks.common import DATA
from ops.harness import SITUATE, Worker

COOKBOOK = DATA / "cookbook"
SOURCE = ["--format", "cookbook", str(COOKBOOK / "codebase_chunks.json")]


def _run(*args: str, timeout: float = 7200) -> str:
    done = subprocess.run([SITUATE, *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"situate {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def _drop(*names: str) -> None:
    for name in names:
        subprocess.run([SITUATE, "drop", "-c", name, "--yes"], capture_output=True)


def _search_loop(collection: str, every_s: float = 0.1) -> tuple[list[int], list[int], threading.Event, threading.Thread]:
    """Searches on ``collection`` until stopped, one every ``every_s`` at most."""
    from producers.retrieval.search import search
    from workers.storage import catalog

    searches, failures, stop = [0], [0], threading.Event()

    def loop() -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                search(catalog.load(collection), "how is the retry backoff computed", k=10)
                searches[0] += 1
            except Exception:  # counted, and the figure says how many
                failures[0] += 1
            stop.wait(max(0.0, every_s - (time.perf_counter() - t0)))

    thread = threading.Thread(target=loop)
    thread.start()
    return searches, failures, stop, thread


def bench_reindex_llm() -> None:
    import os

    from ops.harness import StandIn
    from workers.storage import catalog, chunk_index, states

    standin = StandIn({"base_latency_s": 0.05, "uncached_s_per_ktok": 0.01, "read_s_per_ktok": 0.0,
                       "output_s_per_tok": 0.0005})
    env = {"ANTHROPIC_API_KEY": "bench-key", "ANTHROPIC_BASE_URL": standin.url, "VOYAGE_API_KEY": "bench-key",
           "VOYAGE_BASE_URL": f"{standin.url}/v1",
           "SITUATE_RATE_LIMITS": json.dumps({"claude-haiku-5-5": {"rpm": 10**6, "itpm": 10**9, "otpm": 10**9}})}
    os.environ.update(env)  # this process's searches embed with the stand-in's Voyage after the switch
    from workers.embedding import registry
    from workers.settings import get_credentials, get_settings

    get_settings.cache_clear()  # settings are read once per process: read them again
    get_credentials.cache_clear()
    registry.get.cache_clear()
    name = "bench-reindex-llm"
    _drop(name)
    worker = Worker(4, ["--pool", "threads"], env)
    try:
        done = subprocess.run([SITUATE, "ingest", "-c", name, "--contextualizer", "anthropic", "--model",
                               "claude-haiku-5-5", "--embedder", "local", *SOURCE], capture_output=True, text=True,
                              env={**os.environ, **env}, timeout=3600)
        assert done.returncode == 0, done.stderr
        calls = standin.stats()["requests"]
        documents = sorted(states.doc_ids(name))
        searches, failures, stop, thread = _search_loop(name)
        t0 = time.perf_counter()
        done = subprocess.run([SITUATE, "reindex", "-c", name, "--embedder", "voyage", "--json"], capture_output=True,
                              text=True, env={**os.environ, **env}, timeout=3600)
        took = time.perf_counter() - t0
        stop.set()
        thread.join()
        assert done.returncode == 0, done.stderr
        config = catalog.load(name)
        chunk_index.refresh(config)
        present = sorted({h for h in documents if chunk_index.count(config, h)})
        print(f"cookbook situated by the stand-in Claude ({calls} calls), reindexed local -> voyage in {took:.1f} s: "
              f"{standin.stats()['requests'] - calls} new LLM calls; {len(present)}/{len(documents)} documents in "
              f"{config.index_name}; {searches[0]} searches during it ({searches[0] / took:.1f}/s), "
              f"{failures[0]} failed", flush=True)
    finally:
        worker.stop()
        _drop(name)
        standin.close()


SEARCH_EVERY_S = 0.4  # 2.5 searches/s, above the 2/s the issue asks for, through both legs


def bench_reindex(args) -> None:
    """The same documents, the same new embedder, the same search load (a live collection being
    searched) in both legs: a fresh ingest beside searches on another collection, then the reindex
    beside searches on the collection being reindexed."""
    if args.llm:
        bench_reindex_llm()
        return
    live, fresh = "bench-reindex", "bench-reindex-fresh"
    _drop(live, fresh)
    worker = Worker(2, name="bench-reindex")
    try:
        _run("ingest", "-c", live, "--embedder", "local", *SOURCE)
        searches, failures, stop, searcher = _search_loop(live, SEARCH_EVERY_S)
        t0 = time.perf_counter()
        _run("ingest", "-c", fresh, "--embedder", "local-multilingual", *SOURCE)
        fresh_s = time.perf_counter() - t0
        stop.set()
        searcher.join()
        fresh_searches = searches[0]
        searches, failures, stop, searcher = _search_loop(live, SEARCH_EVERY_S)
        t0 = time.perf_counter()
        record = json.loads(_run("reindex", "-c", live, "--embedder", "local-multilingual", "--json"))
        reindex_s = time.perf_counter() - t0
        stop.set()
        searcher.join()
    finally:
        worker.stop()
    print(f"fresh ingest (local-multilingual): {fresh_s:.1f} s ({fresh_searches / fresh_s:.1f} searches/s beside it); "
          f"reindex local -> local-multilingual: {reindex_s:.1f} s; ratio {reindex_s / fresh_s:.2f} (target <= 1.2)",
          flush=True)
    if {"started", "draining_since", "swapped"} <= record.keys():
        print(f"  reindex phases: building {record['draining_since'] - record['started']:.1f} s, "
              f"draining and switching {record['swapped'] - record['draining_since']:.1f} s "
              f"(submissions held meanwhile), put off {record.get('put_off', 0)} times")
    print(f"searches during the reindex: {searches[0]} ({searches[0] / reindex_s:.1f}/s), failed: {failures[0]}")
    _drop(live, fresh)


def _store_bytes(index: str) -> tuple[int, int]:
    from workers.connections import opensearch_client

    client = opensearch_client()
    client.indices.forcemerge(index=index, max_num_segments=1, request_timeout=1800)
    client.indices.refresh(index=index)
    stats = client.indices.stats(index=index, metric="store,docs")["indices"][index]["primaries"]
    return stats["store"]["size_in_bytes"], stats["docs"]["count"]


def _pass10(collection: str) -> dict[str, float]:
    payload = json.loads(_run("eval", "-c", collection, "--queries", str(COOKBOOK / "evaluation_set.jsonl"),
                              "--configs", "dense,hybrid", "--json"))
    return {r["config"].split(":")[-1]: r["pass@10"] for r in payload["results"]}


def bench_vectors(args) -> None:
    from workers.storage import catalog

    if args.synthetic_only:
        _synthetic(args.vectors)
        return
    name = "bench-vectors"
    _drop(name)
    worker = Worker(2, name="bench-vectors")
    rows = []
    try:
        _run("ingest", "-c", name, *SOURCE)
        for vectors in ("float", "lucene-sq", "byte"):
            if vectors != "float":
                _run("reindex", "-c", name, "--vectors", vectors, "--json")
            size, docs = _store_bytes(catalog.load(name).index_name)
            rows.append((vectors, _pass10(name), size / docs))
            if vectors != "float":
                _run("reindex", "-c", name, "--rollback", "--json")  # back to float for the next one
    finally:
        worker.stop()
        _drop(name)
    print("cookbook (737 chunks): storage | Pass@10 dense | Pass@10 hybrid | index bytes on disk per chunk")
    for vectors, scores, per_chunk in rows:
        print(f"  {vectors:9s} | {scores.get('dense', 0):6.2f} | {scores.get('hybrid', 0):6.2f} | {per_chunk:8,.0f}",
              flush=True)
    _synthetic(args.vectors)


CANDIDATES = 150  # the k-NN side's candidates in a search (producers/retrieval/search.py)


def _synthetic(count: int, dim: int = 384, queries: int = 200) -> None:
    """``count`` unit vectors, indexed per storage;
    each query asks for ``CANDIDATES`` as a search does and keeps the first 10."""
    from opensearchpy import helpers

    from workers.connections import opensearch_client
    from workers.storage import index_mapping
    from workers.storage.catalog import CollectionConfig

    # Text embeddings lie near a space of a few dozen dimensions: a 32-dimensional latent seen
    # through a random projection, plus a little noise (isotropic noise alone would make every
    # neighbour equidistant, and recall a measure of ties).
    rng = np.random.default_rng(7)
    projection = rng.normal(size=(32, dim))
    data = rng.normal(size=(count, 32)) @ projection + 0.5 * rng.normal(size=(count, dim))
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    asked = rng.normal(size=(queries, 32)) @ projection + 0.5 * rng.normal(size=(queries, dim))
    asked /= np.linalg.norm(asked, axis=1, keepdims=True)
    exact = np.argsort(-(asked @ data.T), axis=1)[:, :10]
    client = opensearch_client()
    print(f"{count:,} synthetic vectors ({dim} dims): storage | recall@10 vs exact | p50 ms | bytes/vector on disk "
          "| bytes/vector a search reads", flush=True)
    for vectors, reads in (("float", dim * 4), ("lucene-sq", dim + 4), ("byte", dim)):
        config = CollectionConfig(name=f"bench-vectors-{vectors}", embedder="local", vectors=vectors)
        index = config.index_name
        client.indices.delete(index=index, ignore_unavailable=True)
        client.indices.create(index=index, body={"settings": {"index": {"knn": True, "number_of_shards": 1,
                                                                        "number_of_replicas": 0,
                                                                        "refresh_interval": "-1"}},
                                                 "mappings": {"properties": {"v": index_mapping.vector_field(config)}}})
        actions = ({"_index": index, "_id": str(i), "_source": {"v": index_mapping.stored_vector(config, row)}}
                   for i, row in enumerate(data))
        helpers.bulk(client, actions, chunk_size=2000, request_timeout=600)
        # Not merged to one segment (rebuilding a 100k graph takes minutes on 2 cores): searched
        # as an index is between merges, its size as it stands.
        client.indices.refresh(index=index)
        size = client.indices.stats(index=index, metric="store")["indices"][index]["primaries"]["store"]["size_in_bytes"]
        found, took = [], []
        for q in asked:
            t0 = time.perf_counter()
            hits = client.search(index=index, body={"size": 10, "_source": False, "query": {"knn": {"v": {
                "vector": index_mapping.stored_vector(config, q), "k": CANDIDATES}}}})["hits"]["hits"]
            took.append((time.perf_counter() - t0) * 1000)
            found.append([int(h["_id"]) for h in hits])
        recall = np.mean([len(set(f) & set(e)) / 10 for f, e in zip(found, exact)])
        print(f"  {vectors:9s} | {recall:.3f} | {np.median(took):6.1f} | {size / count:8,.0f} | {reads:,}", flush=True)
        client.indices.delete(index=index, ignore_unavailable=True)
