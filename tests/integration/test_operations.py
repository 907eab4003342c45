"""What an operator watches: /metrics, the /dashboard in a real headless Chromium, Flower
behind auth, and the worker's autoscale flag; every figure checked against ``situate stats``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ops.harness import SITUATE, free_port, stop
from tests.support import TEST_MODEL, cookbook_docs, ingest, run_cli, running_api

TOKEN = "ops-token-5c1e"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def api():
    with running_api({"SITUATE_API_TOKEN": TOKEN}, secret=TOKEN) as server:
        yield server


@pytest.fixture(scope="module")
def run(worker, api):
    """One collection situated by the stand-in Claude (a bill to show), with a failed document."""
    import uuid

    from workers import lifecycle

    name = f"t-ops-{uuid.uuid4().hex[:8]}"
    # Over the model's cache minimum (a warm-up call, streamed, then cache reads), in fewer
    # chunks than a slice (a sliced document's first call is not streamed).
    docs = [d for d in cookbook_docs() if 10_000 < len(d["content"]) < 20_000][:3]
    final = ingest(name, [{"id": d["original_uuid"], "text": d["content"]} for d in docs] + [{"id": "empty", "text": ""}],
                   contextualizer="anthropic", model=TEST_MODEL, chunk_tokens=800)
    yield name, final
    lifecycle.delete(name)


def stats(collection: str) -> dict:
    result = run_cli("stats", "-c", collection, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["collections"][collection]["total"]


def scrape(api) -> dict[str, list]:
    r = httpx.get(f"{api.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {f.name: f.samples for f in text_string_to_metric_families(r.text)}


def value(samples: list, name: str, **labels: str) -> float:
    return sum(s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def test_metrics_match_stats_and_cover_the_pipeline(api, run):
    name, final = run
    assert final["empty"]["state"] == "failed" and sum(s["state"] == "indexed" for s in final.values()) == 3
    assert httpx.get(f"{api.url}/metrics").status_code == 401
    assert httpx.get(f"{api.url}/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401

    m, bill = scrape(api), stats(name)
    assert bill["calls"] > 0 and bill["cache_read_tokens"] > 0
    for kind in ("input", "cache_write", "cache_read", "output"):
        assert value(m["situate_llm_tokens"], "situate_llm_tokens_total", collection=name, kind=kind) == \
            bill[f"{kind}_tokens"], kind
    assert value(m["situate_llm_calls"], "situate_llm_calls_total", collection=name, model=TEST_MODEL) == bill["calls"]
    assert value(m["situate_llm_cost_usd"], "situate_llm_cost_usd_total", collection=name) == \
        pytest.approx(bill["cost_usd"], rel=1e-9)
    assert value(m["situate_llm_cache_read_ratio"], "situate_llm_cache_read_ratio", collection=name) == \
        pytest.approx(bill["cache_read_ratio"])
    assert value(m["situate_llm_cache_read_best_ratio"], "situate_llm_cache_read_best_ratio", collection=name) == \
        pytest.approx(bill["best_read_ratio"])
    assert value(m["situate_documents"], "situate_documents", collection=name, state="indexed") == 3
    assert value(m["situate_documents"], "situate_documents", collection=name, state="failed") == 1
    chunks = sum(s["chunks"] for s in final.values() if s["state"] == "indexed")
    assert value(m["situate_index_chunks"], "situate_index_chunks", collection=name) == chunks
    assert value(m["situate_chunks_indexed"], "situate_chunks_indexed_total", collection=name) == chunks
    # Histograms: every stage ran; each call has a latency; warm-up calls (streamed) a first token.
    for stage in ("chunk", "contextualize", "index"):
        assert value(m["situate_stage_seconds"], "situate_stage_seconds_count", stage=stage) >= 3, stage
    assert value(m["situate_llm_call_seconds"], "situate_llm_call_seconds_count", model=TEST_MODEL) >= bill["calls"] - 3
    assert value(m["situate_llm_first_token_seconds"], "situate_llm_first_token_seconds_count", model=TEST_MODEL) >= 1
    # Queues (every one, with Kombu's priority lists counted), deliveries, workers.
    assert {s.labels["queue"] for s in m["situate_queue_messages"]} >= {"chunk", "index", "contextualize.0"}
    assert "situate_unacked_messages" in m and "situate_queue_oldest_age_seconds" in m
    assert value(m["situate_workers_online"], "situate_workers_online") >= 1
    # This API's own requests, by route template (a scrape is counted once answered: the next one shows it).
    m = scrape(api)
    assert value(m["situate_api_requests"], "situate_api_requests_total", route="/metrics", status="200") >= 1
    assert value(m["situate_api_requests"], "situate_api_requests_total", route="/metrics", status="401") >= 2


def test_queue_depth_and_oldest_age_follow_waiting_messages(api, worker):
    """A message waiting while the workers stop reading its queue: counted, in its priority
    list, with its age."""
    import socket

    from workers.connections import redis_client
    from workers.pipeline.app import app

    queue = "contextualize.3"
    # Only the session's worker reads it now; naming it, the reply comes as soon as it answers.
    workers = [f"{worker.name}@{socket.gethostname()}"]
    assert app.control.cancel_consumer(queue, reply=True, timeout=5, destination=workers)
    try:
        app.send_task("situate.noop-for-metrics", args=[], queue=queue, priority=4)
        time.sleep(1.5)
        m = scrape(api)
        assert value(m["situate_queue_messages"], "situate_queue_messages", queue=queue) == 1
        lists = [s for s in m["situate_queue_list_messages"] if s.labels["queue"] == queue]
        assert [(s.labels["list"], s.value) for s in lists] == [(f"{queue}:4", 1.0)]
        assert 1.4 <= value(m["situate_queue_oldest_age_seconds"], "situate_queue_oldest_age_seconds", queue=queue) < 30
    finally:
        r = redis_client()
        for key in r.scan_iter(f"{queue}*"):
            r.delete(key)
        app.control.add_consumer(queue, reply=True, timeout=5, destination=workers)


def test_dashboard_in_a_real_browser_shows_what_stats_says(api, run, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    assert CHROMIUM, "no chromium: ops/test installs Debian's package (apt-get install chromium)"
    name, _ = run
    bill = stats(name)
    assert httpx.get(f"{api.url}/dashboard").status_code == 401
    assert httpx.get(f"{api.url}/dashboard/data").status_code == 401
    assert httpx.get(f"{api.url}/dashboard/app.js").status_code == 401
    assert httpx.post(f"{api.url}/dashboard/retry", json={"collection": name}).status_code == 401

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1400})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{api.url}/dashboard")
        page.fill("#token", "wrong")
        page.click("button[type=submit]")
        assert "Not signed in" in page.text_content("#message")
        page.fill("#token", TOKEN)
        page.click("button[type=submit]")
        row = page.locator(f'#bill tr[data-collection="{name}"]')
        row.wait_for(timeout=15_000)
        page.wait_for_timeout(2500)  # one more live update: the charts are drawn

        cookie = next(c for c in page.context.cookies() if c["name"] == "situate_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"

        def cell(field: str) -> str | None:
            return row.locator(f'[data-field="{field}"]').text_content()

        assert cell("calls") == f"{bill['calls']:,}"
        for kind in ("input", "cache_write", "cache_read", "output"):
            assert cell(f"{kind}_tokens") == f"{bill[f'{kind}_tokens']:,}", kind
        assert cell("cost_usd") == f"{bill['cost_usd']:.4f}"
        assert cell("cache_read") == f"{bill['cache_read_ratio']:.1%} ({bill['best_read_ratio']:.1%})"
        docs = page.locator(f'#collections tr[data-collection="{name}"] [data-field="documents"]').text_content()
        assert docs == "failed=1, indexed=3"
        failed = page.locator("#failed tbody tr", has_text=name)
        from workers.storage import states

        assert "empty" in failed.text_content()
        assert failed.locator("td.bad").text_content() == states.get(name, "empty")["error"] != ""
        assert int(page.text_content("#workers-count")) >= 1

        shot = tmp_path / "dashboard.png"
        page.screenshot(path=str(shot), full_page=True)
        pixels = _image(shot)
        # The charts are drawn (series colours on screen), and this collection's throughput line
        # and cache-read series are among them: its legend entry's colour is on a path or dot.
        # Other tests' collections have series of their own in the same minutes, drawn over ours
        # where their values are the same, so ours is found in the drawing, not in the pixels.
        for chart in ("throughput", "cache"):
            box = page.locator(f"#chart-{chart}").bounding_box()
            region = pixels[int(box["y"]):int(box["y"] + box["height"]), int(box["x"]):int(box["x"] + box["width"])]
            colours = page.eval_on_selector_all(f"#legend-{chart} i", "els => els.map(e => getComputedStyle(e).backgroundColor)")
            assert sum(_pixels_near(region, _rgb(c)) for c in set(colours)) > 30, f"{chart}: no series drawn"
            # Each live update redraws legend and chart, so both are read in one synchronous call:
            # a swatch read before a redraw and a chart read after it had no colour in common.
            ours, drawn = page.evaluate(
                """([chart, name]) => {
                    const item = [...document.querySelectorAll(`#legend-${chart} span`)]
                        .find((s) => s.textContent.includes(name));
                    if (!item) return [null, 0];
                    const colour = getComputedStyle(item.querySelector("i")).backgroundColor;
                    const marks = [...document.querySelectorAll(`#chart-${chart} path, #chart-${chart} circle`)];
                    const s = (e) => [getComputedStyle(e).stroke, getComputedStyle(e).fill];
                    return [colour, marks.filter((e) => s(e).includes(colour)).length];
                }""", [chart, name])
            assert drawn >= 1, f"{chart}: no series of {name} ({ours})"
        # The one action: CSRF-protected. The cookie alone (another site's form) is refused.
        refused = page.request.post(f"{api.url}/dashboard/retry", data=json.dumps({"collection": name}),
                                    headers={"Content-Type": "application/json"})
        assert refused.status == 403
        failed.locator("button").click()
        expect(page.locator("#retry-result")).to_contain_text("empty: ", timeout=10_000)
        assert errors == [], errors
        browser.close()
    print(f"dashboard screenshot: {shot} ({shot.stat().st_size:,} bytes)")


def _image(path) -> np.ndarray:
    from matplotlib import image

    return (image.imread(str(path))[:, :, :3] * 255).astype(int)


def _rgb(css: str) -> tuple[int, int, int]:
    r, g, b = (int(v) for v in re.findall(r"\d+", css)[:3])
    return r, g, b


def _pixels_near(region: np.ndarray, rgb: tuple[int, int, int], tolerance: int = 40) -> int:
    return int((np.abs(region - np.array(rgb)).sum(axis=2) < tolerance).sum())


def test_flower_refuses_every_request_without_credentials(tmp_path):
    port = free_port()
    log = open(tmp_path / "flower.log", "wb")
    proc = subprocess.Popen([SITUATE, "flower", "--port", str(port)], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True,
                            env={**os.environ, "SITUATE_FLOWER_USER": "ops", "SITUATE_FLOWER_PASSWORD": "s3cret-pw"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline and proc.poll() is None, (tmp_path / "flower.log").read_text()
                time.sleep(0.3)
        for path in ("/", "/workers", "/tasks", "/api/workers", "/api/tasks", "/metrics", "/healthcheck"):
            assert httpx.get(url + path).status_code == 401, path
            assert httpx.get(url + path, auth=("ops", "wrong")).status_code == 401, path
        for path in ("/", "/metrics", "/healthcheck"):
            assert httpx.get(url + path, auth=("ops", "s3cret-pw")).status_code == 200, path
    finally:
        stop(proc)
        log.close()
    assert "s3cret-pw" not in (tmp_path / "flower.log").read_text()
    refused = run_cli("flower", "--host", "0.0.0.0", "--port", str(free_port()),
                      env={"SITUATE_FLOWER_USER": "", "SITUATE_FLOWER_PASSWORD": ""})
    assert refused.returncode != 0 and "without credentials" in refused.stderr


def test_flower_shows_the_workers_tasks_once_it_runs(worker, collection_name, tmp_path):
    """Workers send no task events of their own (three messages a task, for nobody until someone
    watches): Flower asks for them when it starts, and the tasks of documents ingested then are
    in its task list."""
    port = free_port()
    log = open(tmp_path / "flower.log", "wb")
    proc = subprocess.Popen([SITUATE, "flower", "--port", str(port)], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True,
                            env={**os.environ, "SITUATE_FLOWER_USER": "ops", "SITUATE_FLOWER_PASSWORD": "s3cret-pw"})
    url, auth = f"http://127.0.0.1:{port}", ("ops", "s3cret-pw")
    try:
        deadline = time.monotonic() + 90
        names: set[str] = set()
        n = 0
        while "situate.chunk" not in names:
            assert time.monotonic() < deadline and proc.poll() is None, (names, (tmp_path / "flower.log").read_text())
            try:
                httpx.get(url, auth=auth)
            except httpx.HTTPError:  # not serving yet
                time.sleep(0.5)
                continue
            ingest(collection_name, [{"id": f"d{n}", "text": f"Document {n} for Flower to see."}])
            n += 1
            time.sleep(1)
            names = {t.get("name") for t in httpx.get(url + "/api/tasks", auth=auth).json().values()}
    finally:
        stop(proc)
        log.close()


def test_worker_autoscale_takes_min_max():
    bad = run_cli("worker", "--autoscale", "4")
    assert bad.returncode != 0 and "MIN,MAX" in bad.stderr
    threads = run_cli("worker", "--autoscale", "1,4", "--pool", "threads")
    assert threads.returncode != 0 and "prefork" in threads.stderr


def test_ingest_estimate_calls_nothing_and_matches_the_run_it_precedes(run, standin, tmp_path):
    """The same documents estimated again for their collection (as before adding more of the
    same kind): no call, nothing queued; calibrated on the collection's own calls, the bill
    within a few percent of what the run paid. For a new collection: no call, none created."""
    from tests.support import write_jsonl
    from workers.storage import catalog

    name, _ = run
    docs = [d for d in cookbook_docs() if 10_000 < len(d["content"]) < 20_000][:3]
    path = write_jsonl(tmp_path / "docs.jsonl", [{"id": d["original_uuid"], "text": d["content"]} for d in docs]
                       + [{"id": "empty", "text": ""}])
    before, bill = standin.stats()["requests"], stats(name)
    fresh = run_cli("ingest", "-c", name + "-est", "--contextualizer", "anthropic", "--model", TEST_MODEL,
                    "--chunk-tokens", "800", "--estimate", "--json", path)
    assert fresh.returncode == 0, fresh.stderr
    assert json.loads(fresh.stdout)["calls"] == bill["calls"] and not catalog.exists(name + "-est")
    result = run_cli("ingest", "-c", name, "--estimate", "--json", path)
    assert result.returncode == 0, result.stderr
    estimate = json.loads(result.stdout)
    assert standin.stats()["requests"] == before and stats(name) == bill
    assert (estimate["documents"], estimate["failing"], estimate["calls"]) == (4, 1, bill["calls"])
    assert "output_per_call" in estimate["measured"] and "block_chars_per_token" in estimate["measured"]
    assert estimate["cost_usd"] == pytest.approx(bill["cost_usd"], rel=0.15), (estimate, bill)
    assert estimate["cache_read_ratio"] == pytest.approx(bill["cache_read_ratio"], abs=0.05)
    assert estimate["minutes_at_rate_limits"] > 0 and estimate["binding_limit"]


@pytest.fixture(scope="module")
def s3_endpoint():
    """moto's S3 server: a real HTTP endpoint speaking S3's protocol, driven through boto3."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


def test_ingest_from_s3_reads_only_what_changed(worker, s3_endpoint, collection_name):
    import boto3

    env = {"AWS_ENDPOINT_URL_S3": s3_endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1"}
    s3 = boto3.client("s3", endpoint_url=s3_endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
                      region_name="us-east-1")
    s3.create_bucket(Bucket="corpus")
    s3.put_object(Bucket="corpus", Key="docs/otters.md", Body=b"# Otters\n\nSea otters hold hands while they sleep.")
    s3.put_object(Bucket="corpus", Key="docs/kernel.txt", Body=b"The scheduler balances runnable tasks across cores.")
    s3.put_object(Bucket="corpus", Key="docs/empty.txt", Body=b"   ")
    s3.put_object(Bucket="corpus", Key="docs/logo.png", Body=b"\x89PNG\r\n\x1a\n")
    s3.put_object(Bucket="corpus", Key="other/elsewhere.md", Body=b"Not under the prefix.")

    def ingest_s3() -> dict:
        result = run_cli("ingest", "-c", collection_name, "--json", "s3://corpus/docs/", env=env)
        assert result.returncode in (0, 1), result.stderr  # 1: the empty object failed, visibly
        return json.loads(result.stdout)

    first = ingest_s3()
    assert (first["documents"], first["indexed"], first["s3_skipped"]) == (3, 2, 0)
    assert first["failed"] == [{"doc_id": "s3://corpus/docs/empty.txt", "error": "empty document (no text)"}]

    second = ingest_s3()  # nothing changed: the two indexed objects are not even read; the failed one is tried again
    assert (second["documents"], second["s3_skipped"]) == (1, 2)

    s3.put_object(Bucket="corpus", Key="docs/kernel.txt", Body=b"The kernel scheduler now prefers idle cores.")
    third = ingest_s3()
    assert (third["documents"], third["indexed"], third["s3_skipped"]) == (2, 1, 1)
    hits = json.loads(run_cli("search", "-c", collection_name, "--json", "--k", "1", "scheduler prefers idle").stdout)["hits"]
    assert hits[0]["doc_id"] == "s3://corpus/docs/kernel.txt" and "idle cores" in hits[0]["text"]

    # A PDF is a document like any other (extracted by the workers), cited by page.
    from tests.documents import make

    s3.put_object(Bucket="corpus", Key="docs/annual.pdf", Body=make.pdf([["Cover"], ["Our narwhal fleet grew by a third."]]))
    fourth = ingest_s3()
    assert fourth["indexed"] >= 1 and not [f for f in fourth["failed"] if f["doc_id"].endswith(".pdf")], fourth
    hits = json.loads(run_cli("search", "-c", collection_name, "--json", "--k", "1", "narwhal fleet").stdout)["hits"]
    assert hits[0]["doc_id"] == "s3://corpus/docs/annual.pdf" and hits[0]["pages"] == [2, 2]

    # An object over the size limit is refused from the listing's size: never downloaded.
    s3.put_object(Bucket="corpus", Key="docs/huge.txt", Body=b"otters " * 2000)
    result = run_cli("ingest", "-c", collection_name, "--json", "s3://corpus/docs/",
                     env={**env, "SITUATE_MAX_DOCUMENT_BYTES": "10000"})
    huge = [f for f in json.loads(result.stdout)["failed"] if f["doc_id"] == "s3://corpus/docs/huge.txt"]
    assert huge and "not read" in huge[0]["error"], result.stdout


def test_status_watch_draws_live_bars_until_interrupted(run):
    import signal

    name, _ = run
    # How long this machine, now, takes to start the CLI and take one snapshot: the watch is
    # interrupted well after its first frame, not after fixed seconds a busy machine misses.
    started = time.monotonic()
    run_cli("status", "-c", name)
    startup = time.monotonic() - started
    # Ctrl-C's signal as a terminal sends it; restored, as a job started in the background
    # (a CI runner's, say) inherits SIGINT ignored.
    proc = subprocess.Popen([SITUATE, "status", "--watch", "--interval", "0.5", "-c", name], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env={**os.environ, "COLUMNS": "200", "TERM": "xterm"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(max(4.0, 3 * startup + 1))
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text[-2000:]
    assert name in text and "workers online" in text and "contextualize.0" in text
