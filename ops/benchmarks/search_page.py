"""``ops/bench search-page``: the search page on the public FinanceBench filings (the search
page issue's targets), through a real API process, signed in as a person would be:

- 20 sequential searches (FinanceBench's first 20 questions) with a warm cache: the page's p50 /
  p95, beside the API's JSON search route for the same questions (the reference);
- the top hit's page image of each, first render at 150 dpi (drawn in the API's sandbox child),
  then again (cached): p50 / p95, beside drawing the same pages in this process (the reference);
- the API process's memory (VmRSS) before and after the 20 images, and its peak (VmHWM).

The filings are ingested into ``--collection`` (default ``bench-financebench``, what ``ops/bench
corpora`` builds) when it does not exist yet: that takes a while, once.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import httpx

from ops.harness import SITUATE, Api, Worker

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data" / "financebench"
TOKEN = "bench-search-page-token-5521"
SEARCHES = 20


def _p(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def _row(label: str, ms: list[float]) -> str:
    return f"  {label:44} p50 {statistics.median(ms):7.1f} ms   p95 {_p(ms, 0.95):7.1f} ms   (n={len(ms)})"


def _kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _ensure(collection: str) -> None:
    import subprocess

    from workers.storage import catalog

    if catalog.find(collection) is not None:
        return
    print(f"ingesting {DATA / 'pdfs'} into {collection} (once)", flush=True)
    worker = Worker(2, name="bench-search-page")
    try:
        subprocess.run([SITUATE, "ingest", "-c", collection, str(DATA / "pdfs")], check=True, timeout=7200,
                       stdout=subprocess.DEVNULL)
    finally:
        worker.stop()


def bench_search_page(args) -> None:
    from workers.extraction import render
    from workers.storage import states
    from workers.storage.bodies import body_store

    collection = args.collection
    _ensure(collection)
    questions = [json.loads(line)["query"] for line in (DATA / "queries.jsonl").read_text().splitlines()
                 if line.strip()][:SEARCHES]
    api = Api(env={"SITUATE_API_TOKEN": TOKEN})
    try:
        client = httpx.Client(base_url=api.url, timeout=120, follow_redirects=False)
        assert client.post("/signin", data={"token": TOKEN}).status_code == 303
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        for q in questions:  # warm: the query path, OpenSearch's caches, the embedder loaded
            client.get("/search", params={"collection": collection, "q": q})
        page_ms, route_ms, images = [], [], []
        for q in questions:
            started = time.perf_counter()
            page = client.get("/search", params={"collection": collection, "q": q})
            page_ms.append((time.perf_counter() - started) * 1000)
            assert page.status_code == 200, page.text[:300]
            src = page.text.split('<img src="', 1)[1].split('"', 1)[0].replace("&amp;", "&") \
                if '<img src="' in page.text else None
            if src and src not in images:
                images.append(src)
            started = time.perf_counter()
            client.post(f"/v1/collections/{collection}/search", json={"query": q, "k": 10}, headers=bearer)
            route_ms.append((time.perf_counter() - started) * 1000)
        rss_before = _kb(api.proc.pid, "VmRSS")
        first_ms, again_ms, marked = [], [], 0
        for src in images:
            started = time.perf_counter()
            drawn = client.get(src)
            first_ms.append((time.perf_counter() - started) * 1000)
            assert drawn.status_code == 200, drawn.text[:300]
            marked += int(drawn.headers.get("x-marked-lines", "0")) > 0
            started = time.perf_counter()
            client.get(src)
            again_ms.append((time.perf_counter() - started) * 1000)
        rss_after, peak = _kb(api.proc.pid, "VmRSS"), _kb(api.proc.pid, "VmHWM")
        # The reference: the same pages drawn in this process, without the sandbox or HTTP.
        direct_ms = []
        for src in images:
            params = dict(httpx.URL(src).params)
            found = states.fields_of(collection, [params["doc_id"]], "indexed_version")[0][0]
            kept = body_store().kept_original(collection, params["doc_id"])
            assert kept is not None and kept[0] == found
            started = time.perf_counter()
            render.page_png(kept[1], int(params.get("page") or 1), 150, [])
            direct_ms.append((time.perf_counter() - started) * 1000)
    finally:
        api.stop()
    print(f"\nsearch page on {collection} ({len(questions)} FinanceBench questions, warm):")
    print(_row("GET /search (the page, k=10)", page_ms))
    print(_row("POST /v1/collections/…/search (reference)", route_ms))
    print(f"  page / route at p95: {_p(page_ms, 0.95) / _p(route_ms, 0.95):.2f}x   target: page p95 < 300 ms")
    print(f"\npage images ({len(images)} distinct top-hit pages, 150 dpi, {marked} with the chunk marked):")
    print(_row("first render (sandbox child)", first_ms))
    print(_row("again (cached)", again_ms))
    print(_row("drawn in this process (reference, no marks)", direct_ms))
    print(f"  first / in-process at p95: {_p(first_ms, 0.95) / _p(direct_ms, 0.95):.2f}x   target: first p95 < 1500 ms")
    print(f"\nAPI process memory: VmRSS {rss_before / 1024:.0f} MB before the images, {rss_after / 1024:.0f} MB after "
          f"(+{(rss_after - rss_before) / 1024:.1f} MB), peak {peak / 1024:.0f} MB   target: +50 MB at most")
