"""``ops/bench clients``: hybrid search through a real API process with 1, 4 and 16 clients at
once — queries per second and p50/p95 — on the FinanceBench filings (``--collection``, what
``ops/bench corpora`` builds; ingested once when missing), and where a query's time goes (the
API's ``Server-Timing``: embed, opensearch, fusion, fetch) at each load.

Each client is a thread with its own HTTP connection, sending the FinanceBench questions in turn
(from a different starting point each) for ``--seconds``; the API runs as ``situate api`` does,
with ``--api-workers`` processes.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

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
    if args.sweep:
        sweep(args)
        return
    _ensure(args.collection)
    questions = [json.loads(line)["query"] for line in (DATA / "queries.jsonl").read_text().splitlines() if line.strip()]
    api = Api(env={"SITUATE_API_TOKEN": TOKEN, "SITUATE_API_WORKERS": str(args.api_workers)})
    # A second configuration, each load run right after the default's: another number of
    # candidates a side (``--reference-candidates``, 0: none).
    runs = {"default": {}, **({f"{args.reference_candidates} candidates a side": {"candidates": args.reference_candidates}}
                           if args.reference_candidates else {})}
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in runs}
    try:
        _load(api.url, args.collection, questions, 2, 5)  # warm: the embedder, OpenSearch's caches
        for clients in (1, 4, 16):
            for name, extra in runs.items():
                row = _load(api.url, args.collection, questions, clients, args.seconds, extra)
                rows[name].append(row)
                print(json.dumps({"run": name, **row}), flush=True)
    finally:
        api.stop()
    for name, table in rows.items():
        print(f"\n{args.collection}, {name}, API processes {args.api_workers}:")
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
