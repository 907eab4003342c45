"""``/dashboard``: the operator's page, served by the API, live, behind the API's tokens.

A browser cannot send a bearer token with a page load, so it signs in once: the token is
checked like any API call (it must cover every collection, ``*``: the page shows the whole
fleet, every tenant's bill and failures), and the browser gets a random session id in an
HttpOnly, SameSite=Strict cookie (Secure over HTTPS); Redis keeps only the id's SHA-256, for
``SITUATE_DASHBOARD_SESSION_S``. Every request of the session checks its token again: revoking
the token (or changing the admin token) ends the session at once. The page's one action,
retrying failed documents, also needs the session's CSRF token in a header (and a
write-scoped token at sign-in): a cookie alone, sent by another site's form, does nothing.

The page polls ``/dashboard/data`` every two seconds: the same ``fleet.snapshot()`` as
``/metrics``, the bill as ``situate stats`` computes it, and per-minute and per-day series
from ``workers.metrics`` for the charts (drawn as SVG by ``assets/dashboard.js``, no library).
"""

from __future__ import annotations

import hashlib
import html
import json
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from producers import auth, fleet, http_guard, submit
from workers import errors, keys, metrics
from workers.connections import redis_client
from workers.settings import get_settings
from workers.storage import catalog, states

ASSETS = Path(__file__).with_name("assets")
COOKIE = "situate_session"
_SESSIONS = keys.SESSIONS
# The page's script and styles come from here only; nothing may frame it.
HEADERS = {"Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                                      "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
           "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}

router = APIRouter(include_in_schema=False)


def _key(session_id: str) -> str:
    return _SESSIONS + hashlib.sha256(session_id.encode()).hexdigest()


def session(request: Request) -> dict[str, Any] | None:
    session_id = request.cookies.get(COOKIE)
    if not session_id:
        return None
    raw = redis_client().get(_key(session_id))
    return json.loads(raw) if raw else None


def _signin(message: str = "", status: int = 401) -> HTMLResponse:
    page = (ASSETS / "signin.html").read_text().replace("{{message}}", html.escape(message))
    return HTMLResponse(page, status_code=status, headers=HEADERS)


@router.get("/dashboard")
def page(request: Request) -> Response:
    try:
        s = _checked(request)
    except errors.Denied:
        return _signin()
    body = (ASSETS / "dashboard.html").read_text().replace("{{csrf}}", s["csrf"]).replace(
        "{{who}}", html.escape(f"{s['principal']} ({s['scope']})"))
    return HTMLResponse(body, headers=HEADERS)


@router.post("/dashboard/login")
async def login(request: Request) -> Response:
    # The sign-in form's one field: a body of at most http_guard.SMALL_BODY_BYTES (the guard
    # refuses more before it is read), so parsing it here costs the event loop nothing.
    form = (await http_guard.read_body(request)).decode("utf-8", "replace")
    token = (parse_qs(form).get("token") or [""])[0][:512]
    try:
        principal = auth.authenticate(f"Bearer {token}" if token else None)
        auth.authorize(principal, None, "read")
    except errors.Denied as e:
        return _signin(f"Not signed in: {e}.")
    session_id, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    ttl = get_settings().dashboard_session_s
    redis_client().set(_key(session_id), json.dumps({"principal": principal.id, "scope": principal.scope,
                                                     "collection": principal.collection, "token": principal.token,
                                                     "csrf": csrf}), ex=ttl)
    response = RedirectResponse("/dashboard", status_code=303, headers=HEADERS)
    response.set_cookie(COOKIE, session_id, max_age=ttl, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https", path="/dashboard")
    return response


def _checked(request: Request, need: str = "read") -> dict[str, Any]:
    s = session(request)
    if s is None:
        raise errors.Denied(401, "sign in at /dashboard")
    principal = auth.Principal(s["principal"], s["collection"], s["scope"], s.get("token", ""))
    if not auth.still_valid(principal):  # revoked since sign-in: the session ends with its token
        redis_client().delete(_key(request.cookies[COOKIE]))
        raise errors.Denied(401, "the token this session was opened with is no longer valid: sign in again")
    if need != "read":
        sent = request.headers.get("x-csrf-token", "")
        if not secrets.compare_digest(sent.encode(), s["csrf"].encode()):
            raise errors.Denied(403, "missing or wrong CSRF token")
    return s


@router.post("/dashboard/logout")
def logout(request: Request) -> Response:
    _checked(request, "write")
    redis_client().delete(_key(request.cookies[COOKIE]))
    response = JSONResponse({"signed_out": True}, headers=HEADERS)
    response.delete_cookie(COOKIE, path="/dashboard")
    return response


@router.get("/dashboard/app.js")
def script(request: Request) -> Response:
    _checked(request)
    return Response((ASSETS / "dashboard.js").read_text(), media_type="text/javascript", headers=HEADERS)


@router.get("/dashboard/data")
async def data(request: Request) -> JSONResponse:
    _checked(request)
    return JSONResponse(await run_in_threadpool(build), headers=HEADERS)


@router.post("/dashboard/retry")
async def retry(request: Request) -> JSONResponse:
    s = _checked(request, "write")
    body = await http_guard.json_body(request)
    try:
        collection, doc_ids = body["collection"], body.get("doc_ids")
        assert isinstance(collection, str) and (doc_ids is None or all(isinstance(d, str) for d in doc_ids))
    except (KeyError, TypeError, AttributeError, AssertionError):
        return JSONResponse({"detail": 'expected {"collection": "...", "doc_ids": [...] or null}'}, 422)
    auth.authorize(auth.Principal(s["principal"], s["collection"], s["scope"]), collection, "write")
    config = catalog.load(collection)
    results = await run_in_threadpool(submit.retry_failed, config, doc_ids)
    return JSONResponse({"retried": [{"doc_id": r.doc_id, "outcome": r.outcome} for r in results]}, headers=HEADERS)


# -- the page's data -----------------------------------------------------------------------------

FAILED_SHOWN = 50


def build(window_minutes: int = 60, window_days: int = 14) -> dict[str, Any]:
    snap = fleet.snapshot()
    failed = []
    for row in snap["collections"]:
        name = row["collection"]
        if row["documents"].get(states.FAILED):
            for d in states.get_many(name, states.doc_ids(name, states.FAILED, FAILED_SHOWN)):
                if d:
                    failed.append({"collection": name, "doc_id": d["doc_id"], "error": d.get("error")})
    snap["failed"] = failed[:FAILED_SHOWN]
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
