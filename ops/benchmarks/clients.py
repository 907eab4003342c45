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

import httpx

from ops.benchmarks.search_page import DATA, _ensure, _p
from ops.harness import Api

TOKEN = "bench-clients-token-4471"


def _load(url: str, collection: str, questions: list[str], clients: int, seconds: float) -> dict:
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
                r = http.post(f"/v1/collections/{collection}/search", json={"query": questions[i % len(questions)], "k": 10})
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

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k * 7,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"clients": clients, "queries": len(took), "errors": errors, "queries_per_s": round(len(took) / wall, 1),
            "p50_ms": round(statistics.median(took), 1), "p95_ms": round(_p(took, 0.95), 1),
            "parts_p50_ms": {k: round(statistics.median(v), 1) for k, v in parts.items()}}


def bench_clients(args) -> None:
    _ensure(args.collection)
    questions = [json.loads(line)["query"] for line in (DATA / "queries.jsonl").read_text().splitlines() if line.strip()]
    api = Api(env={"SITUATE_API_TOKEN": TOKEN, "SITUATE_API_WORKERS": str(args.api_workers)})
    rows = []
    try:
        _load(api.url, args.collection, questions, 2, 5)  # warm: the embedder, OpenSearch's caches
        for clients in (1, 4, 16):
            row = _load(api.url, args.collection, questions, clients, args.seconds)
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        api.stop()
    print(f"\n{args.collection}, API processes {args.api_workers}:")
    print(f"{'clients':>8} {'q/s':>7} {'p50 ms':>8} {'p95 ms':>8}  parts p50 (ms)")
    for r in rows:
        print(f"{r['clients']:8d} {r['queries_per_s']:7.1f} {r['p50_ms']:8.1f} {r['p95_ms']:8.1f}  {r['parts_p50_ms']}")
    print("target: 16 clients >= 33 queries/s with p95 <= 1 s")
