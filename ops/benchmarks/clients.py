"""``ops/bench clients``: hybrid search through a real API process with 1, 4 and 16 clients at
once — queries per second and p50/p95 — on the FinanceBench filings (``--collection``, what
``ops/bench corpora`` builds; ingested once when missing), and where a query's time goes (the
API's ``Server-Timing``: embed, opensearch, fusion, fetch) at each load: the API as it was (each
query embedded on ONNX's thread pool) and as it is (one thread a query) on the index as ingestion
left it, then on the index merged into few segments (``storage/compaction``), each graded on the
filings' questions (Pass@10, page@10, MRR@10) beside its speed.

Each client is a thread with its own HTTP connection, sending the FinanceBench questions in turn
(from a different starting point each) for ``--seconds``; the API runs as ``situate api`` does,
with ``--api-workers`` processes.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from ops.benchmarks.compaction import grade
from ops.benchmarks.search_page import DATA, _ensure, _p
from ops.harness import Api

TOKEN = "bench-clients-token-4471"


def _in_threads(client: Callable[[int], None], clients: int) -> float:
    """``client(offset)`` on ``clients`` threads at once, each from its own starting question; the
    wall time until the last one stops."""
    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k * 7,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def _load(url: str, collection: str, questions: list[str], clients: int, seconds: float,
          extra: dict[str, Any] | None = None) -> dict:
    extra = extra or {}
    took: list[float] = []
    parts: dict[str, list[float]] = {}
    errors = 0
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client(offset: int) -> None:
        nonlocal errors
        with httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            i = offset
            while time.monotonic() < stop:
                t0 = time.perf_counter()
                r = http.post(f"/v1/collections/{collection}/search", json={"query": questions[i % len(questions)], "k": 10,
                                                                              **extra})
                ms = (time.perf_counter() - t0) * 1000
                with lock:
                    if r.status_code != 200:
                        errors += 1
                        continue
                    took.append(ms)
                    for item in r.headers.get("server-timing", "").split(","):
                        name, _, rest = item.strip().partition(";dur=")
                        if rest:
                            parts.setdefault(name, []).append(float(rest))
                i += 1

    wall = _in_threads(client, clients)
    return {"clients": clients, "queries": len(took), "errors": errors, "queries_per_s": round(len(took) / wall, 1),
            "p50_ms": round(statistics.median(took), 1), "p95_ms": round(_p(took, 0.95), 1),
            "parts_p50_ms": {k: round(statistics.median(v), 1) for k, v in parts.items()}}


def bench_clients(args) -> None:
    from workers.storage import catalog, compaction

    if args.sweep:
        sweep(args)
        return
    _ensure(args.collection)
    index = catalog.load(args.collection).index_name
    questions = [json.loads(line)["query"] for line in (DATA / "queries.jsonl").read_text().splitlines() if line.strip()]
    # A second configuration, each load run right after the default's: another number of
    # candidates a side (``--reference-candidates``, 0: none).
    runs = {"default": {}, **({f"{args.reference_candidates} candidates a side": {"candidates": args.reference_candidates}}
                           if args.reference_candidates else {})}
    # The reference and the changes in one run: the API as it was (ONNX's own thread pool for
    # each query, one thread a core) on the index as ingestion left it; then the API as it is
    # (one thread a query); then the index merged (``situate compact``, what the workers do once
    # it goes unwritten).
    cores = str(os.cpu_count() or 1)
    phases = [("as written, query embedding on ONNX's threads", cores, False),
              ("as written", "", False)] + ([] if args.no_compact else [("compacted", "", True)])
    rows: dict[str, list[dict[str, Any]]] = {}
    for phase, embed_threads, compact in phases:
        if compact:
            merged_in = time.perf_counter()
            merged = compaction.compact(index)
            assert merged is not None
            print(f"merged in {time.perf_counter() - merged_in:.1f} s", flush=True)
            shape = merged[1]
        else:
            shape = compaction.shapes([index])[index]
            if shape.segments <= shape.target:
                print(f"{index} is already merged ({shape.segments} segments): for the as-written figure, drop "
                      f"{args.collection} and run again (it is ingested afresh)", flush=True)
        print(json.dumps({"phase": phase, "segments": shape.segments,
                          **grade(args.collection, str(DATA / "queries.jsonl"), "jsonl")}), flush=True)
        api = Api(env={"SITUATE_API_TOKEN": TOKEN, "SITUATE_API_WORKERS": str(args.api_workers),
                       **({"SITUATE_EMBED_THREADS": embed_threads} if embed_threads else {})})
        try:
            _load(api.url, args.collection, questions, 2, 5)  # warm: the embedder, OpenSearch's caches
            for clients in (1, 4, 16):
                for name, extra in runs.items():
                    label = f"{phase}, {shape.segments} segments" + ("" if name == "default" else f", {name}")
                    row = _load(api.url, args.collection, questions, clients, args.seconds, extra)
                    rows.setdefault(label, []).append(row)
                    print(json.dumps({"run": label, **row}), flush=True)
        finally:
            api.stop()
    for label, table in rows.items():
        print(f"\n{args.collection}, {label}, API processes {args.api_workers}:")
        print(f"{'clients':>8} {'q/s':>7} {'p50 ms':>8} {'p95 ms':>8}  parts p50 (ms)")
        for r in table:
            print(f"{r['clients']:8d} {r['queries_per_s']:7.1f} {r['p50_ms']:8.1f} {r['p95_ms']:8.1f}  {r['parts_p50_ms']}")
    print("target: 16 clients >= 50 queries/s with p95 <= 600 ms (issue 51)")


# ``--sweep``: where OpenSearch's part of a query goes at 16 clients. The same requests the API
# sends (``search.bm25_body``/``knn_body``), straight to OpenSearch from 16 threads with the
# query vectors embedded beforehand, one shape at a time: each side alone, more or fewer
# candidates, a smaller ``ef_search``, two requests against one ``_msearch``, gzip on and off.
SHAPES: list[dict[str, Any]] = [
    {"name": "as the API does (msearch, 150 + 150, ef 500)", "bm25": 150, "knn": 150, "ef": 500, "gzip": False},
    {"name": "msearch, 50 + 50, ef 500", "bm25": 50, "knn": 50, "ef": 500, "gzip": False},
    {"name": "msearch, 150 + 150, ef 500, gzip", "bm25": 150, "knn": 150, "ef": 500, "gzip": True},
    {"name": "msearch, 100 + 100, ef 500", "bm25": 100, "knn": 100, "ef": 500, "gzip": False},
    {"name": "BM25 alone, 150", "bm25": 150, "knn": 0, "ef": 500, "gzip": False},
    {"name": "k-NN alone, 150, ef 500", "bm25": 0, "knn": 150, "ef": 500, "gzip": False},
    {"name": "k-NN alone, 150, ef 150", "bm25": 0, "knn": 150, "ef": 150, "gzip": False},
    {"name": "msearch, ef 150", "bm25": 150, "knn": 150, "ef": 150, "gzip": False},
    {"name": "msearch, 50 + 50, ef 150", "bm25": 50, "knn": 50, "ef": 150, "gzip": False},
    {"name": "two requests, 150 + 150, ef 500", "bm25": 150, "knn": 150, "ef": 500, "gzip": False, "two": True},
]


def _shape_lines(index: str, query: str, vector: list[float], shape: dict[str, Any]) -> list[list[dict[str, Any]]]:
    from producers.retrieval.search import bm25_body, knn_body

    requests: list[list[dict[str, Any]]] = []
    if shape["bm25"]:
        requests.append([{"index": index}, bm25_body(query, [], shape["bm25"], 1.0)])
    if shape["knn"]:
        body = knn_body(vector, [], shape["knn"])
        body["query"]["knn"]["vector"]["method_parameters"]["ef_search"] = max(shape["ef"], shape["knn"])
        requests.append([{"index": index}, body])
    if shape.get("two"):
        return requests
    return [[line for r in requests for line in r]]


def _sweep_one(base: str, index: str, queries: list[tuple[str, list[float]]], shape: dict[str, Any], clients: int,
               seconds: float) -> dict[str, Any]:
    import gzip

    took: list[float] = []
    os_took: list[float] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client(offset: int) -> None:
        headers = {"Content-Type": "application/x-ndjson"}
        if shape["gzip"]:
            headers.update({"Content-Encoding": "gzip", "Accept-Encoding": "gzip"})
        with httpx.Client(base_url=base, timeout=60, headers=headers) as http:
            i = offset
            while time.monotonic() < stop:
                query, vector = queries[i % len(queries)]
                t0 = time.perf_counter()
                inner = 0
                for lines in _shape_lines(index, query, vector, shape):
                    data = ("\n".join(json.dumps(line) for line in lines) + "\n").encode()
                    r = http.post("/_msearch", content=gzip.compress(data) if shape["gzip"] else data)
                    r.raise_for_status()
                    inner += max(int(x.get("took", 0)) for x in r.json()["responses"])
                ms = (time.perf_counter() - t0) * 1000
                with lock:
                    took.append(ms)
                    os_took.append(inner)
                i += 1

    wall = _in_threads(client, clients)
    return {"shape": shape["name"], "clients": clients, "queries_per_s": round(len(took) / wall, 1),
            "p50_ms": round(statistics.median(took), 1), "p95_ms": round(_p(took, 0.95), 1),
            "opensearch_took_p50_ms": statistics.median(os_took)}


def sweep(args: Any) -> None:
    from workers.embedding import registry as embedders
    from workers.settings import get_settings
    from workers.storage import catalog

    _ensure(args.collection)
    config = catalog.find(args.collection)
    assert config is not None
    embedder = embedders.get(config.embedder, config.embed_model)
    questions = [json.loads(line)["query"] for line in (DATA / "queries.jsonl").read_text().splitlines() if line.strip()]
    queries = [(q, [float(x) for x in embedder.embed_query(q)]) for q in questions]
    base = get_settings().opensearch_url.split(",")[0]
    print(f"{args.collection}: OpenSearch alone, query vectors embedded beforehand, {args.seconds:.0f} s a shape")
    for shape in SHAPES:
        _sweep_one(base, config.index_name, queries, shape, 2, 2)  # warm
        row = _sweep_one(base, config.index_name, queries, shape, 16, args.seconds)
        print(json.dumps(row), flush=True)
    _merged_against_written(base, config.index_name, queries, args.seconds)


def _merged_against_written(base: str, index: str, queries: list[tuple[str, list[float]]], seconds: float) -> None:
    """The API's shape on the index as it is and on a copy merged into one segment (``_clone``
    shares its files; the copy is then merged), one after the other, twice."""
    from workers.connections import opensearch_client
    from workers.storage import compaction

    client, copy = opensearch_client(), f"{index}-bench-merged"
    client.indices.delete(index=copy, ignore_unavailable=True)
    client.indices.put_settings(index=index, body={"index.blocks.write": True})
    try:
        client.indices.clone(index=index, target=copy, body={"settings": {"index.blocks.write": None}})
    finally:
        client.indices.put_settings(index=index, body={"index.blocks.write": None})
    try:
        client.cluster.health(index=copy, wait_for_status="yellow", request_timeout=90)
        compaction.compact(copy)
        shape = SHAPES[0]
        for _ in range(2):
            for name in (index, copy):
                _sweep_one(base, name, queries, shape, 2, 2)  # warm
                row = _sweep_one(base, name, queries, shape, 16, seconds)
                print(json.dumps({**row, "index": name, "segments": compaction.shapes([name])[name].segments}),
                      flush=True)
    finally:
        client.indices.delete(index=copy, ignore_unavailable=True)
