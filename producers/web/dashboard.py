"""``/dashboard``: the operator's page, served by the API, live, behind the API's tokens.

Signed in as every page is (``signin``), with a token that covers every collection (``*``): the
page shows the whole fleet, every tenant's bill and failures; a collection's token is sent to the
search page. The page's one action, retrying failed documents, also needs the session's CSRF
token in a header (and a write-scoped token at sign-in).

The page polls ``/dashboard/data`` every two seconds: the same ``fleet.snapshot()`` as
``/metrics``, the bill as ``situate stats`` computes it, and per-minute and per-day series
from ``workers.metrics`` for the charts (drawn as SVG by ``assets/dashboard.js``, no library).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse, Response

from producers.ingest import submit
from producers.web import auth, fleet, http_guard, signin, templates
from workers import errors, metrics
from workers.storage import catalog, states

router = APIRouter(include_in_schema=False)


def _checked(request: Request, need: str = "read") -> signin.Session:
    """The session, if it may see the whole fleet (a token on ``*``)."""
    session = signin.current(request, need)
    auth.authorize(session.principal, None, "read")
    return session


@router.get("/dashboard")
def page(request: Request) -> Response:
    try:
        s = _checked(request)
    except errors.Denied as e:
        if e.status == 403:  # signed in with a collection's token: its page is the search page
            return HTMLResponse(templates.render("notice.html", message=str(e)), status_code=403, headers=signin.HEADERS)
        return signin.page(then="/dashboard")
    body = templates.render("dashboard.html", csrf=s.csrf, who=f"{s.principal.id} ({s.principal.scope})")
    return HTMLResponse(body, headers=signin.HEADERS)


@router.post("/dashboard/logout")
async def logout(request: Request) -> Response:
    return await signin.sign_out(request)


@router.get("/dashboard/app.js")
def script(request: Request) -> Response:
    _checked(request)
    return Response((templates.ASSETS / "dashboard.js").read_text(), media_type="text/javascript", headers=signin.HEADERS)


@router.get("/dashboard/data")
async def data(request: Request) -> JSONResponse:
    _checked(request)
    return JSONResponse(await run_in_threadpool(build), headers=signin.HEADERS)


@router.post("/dashboard/retry")
async def retry(request: Request) -> JSONResponse:
    s = _checked(request, "write")
    body = await http_guard.json_body(request)
    try:
        collection, doc_ids = body["collection"], body.get("doc_ids")
        assert isinstance(collection, str) and (doc_ids is None or all(isinstance(d, str) for d in doc_ids))
    except (KeyError, TypeError, AttributeError, AssertionError):
        return JSONResponse({"detail": 'expected {"collection": "...", "doc_ids": [...] or null}'}, 422)
    auth.authorize(s.principal, collection, "write")
    config = catalog.load(collection)
    results = await run_in_threadpool(submit.retry_failed, config, doc_ids)
    return JSONResponse({"retried": [{"doc_id": r.doc_id, "outcome": r.outcome} for r in results]},
                        headers=signin.HEADERS)


# -- the page's data -----------------------------------------------------------------------------

FAILED_SHOWN = 50


def build(window_minutes: int = 60, window_days: int = 14) -> dict[str, Any]:
    snap = fleet.snapshot()
    failed = []
    for row in snap["collections"]:
        name = row["collection"]
        if row["documents"].get(states.FAILED):
            for d in states.get_many(name, states.failed_ids(name, 0, FAILED_SHOWN)[0]):
                if d:
                    failed.append({"collection": name, "doc_id": d["doc_id"], "error": d.get("error")})
    snap["failed"] = failed[:FAILED_SHOWN]
    snap["replicas"] = fleet.replicas()
    snap["series"] = _minute_series(window_minutes)
    snap["spend"] = _daily_spend(window_days)
    snap["latency"] = {h["labels"].get("model", ""): {"p50": metrics.quantile(0.5, h["buckets"]),
                                                      "p95": metrics.quantile(0.95, h["buckets"]), "calls": h["count"]}
                       for h in metrics.read_histograms().get("llm_call_seconds", [])}
    return snap


def _minute_series(last: int) -> dict[str, Any]:
    minutes: list[Any] = []
    chunks: dict[str, Any] = {}
    read: dict[str, Any] = {}
    best: dict[str, Any] = {}
    p50: dict[str, Any] = {}
    p95: dict[str, Any] = {}
    for i, (minute, counters, histograms) in enumerate(metrics.minutes(last)):
        minutes.append(minute * 60)
        for labels, value in counters.get("chunks_indexed", []):
            chunks.setdefault(labels["collection"], [0.0] * last)[i] += value
        prompt: dict[str, float] = {}
        reads: dict[str, float] = {}
        for labels, value in counters.get("llm_tokens", []):
            key = f"{labels['collection']} · {labels['model']}"
            if labels["kind"] != "output":
                prompt[key] = prompt.get(key, 0.0) + value
            if labels["kind"] == "cache_read":
                reads[key] = reads.get(key, 0.0) + value
        for key, total in prompt.items():
            if total:
                read.setdefault(key, [None] * last)[i] = reads.get(key, 0.0) / total
        for labels, value in counters.get("llm_best_read_tokens", []):
            key = f"{labels['collection']} · {labels['model']}"
            if prompt.get(key):
                best.setdefault(key, [None] * last)[i] = min(1.0, value / prompt[key])
        for h in histograms.get("llm_call_seconds", {}).values():
            model = h["labels"].get("model", "")
            p50.setdefault(model, [None] * last)[i] = metrics.quantile(0.5, h["buckets"])
            p95.setdefault(model, [None] * last)[i] = metrics.quantile(0.95, h["buckets"])
    return {"minutes": minutes, "chunks_per_minute": chunks, "cache_read_ratio": read, "best_read_ratio": best,
            "latency_p50_s": p50, "latency_p95_s": p95}


def _daily_spend(last: int) -> dict[str, Any]:
    days: list[Any] = []
    by_collection: dict[str, Any] = {}
    by_model: dict[str, Any] = {}
    for i, (day, counters) in enumerate(metrics.days(last)):
        days.append(day)
        for labels, value in counters.get("llm_cost_usd", []):
            by_collection.setdefault(labels["collection"], [0.0] * last)[i] += value
            by_model.setdefault(labels["model"], [0.0] * last)[i] += value
    return {"days": days, "by_collection": by_collection, "by_model": by_model}
