"""The HTTP API: submit and delete documents, read their state, search, label questions, manage
collections.
OpenAPI docs at ``/docs``.

Every route but ``/healthz`` takes a bearer token (``auth``): read, write or admin, for one
collection or all; ``/metrics`` (Prometheus) a token that reads every collection, and
``/dashboard`` a session its sign-in page opens with such a token (``dashboard``), ``/search``
one opened with any token that reads a collection (``search_page``; ``signin`` for both). The token is
checked before any body is read, and bodies are parsed off the event loop (``http_guard``,
which also holds one framing and the size limit for every request).

A caller's mistake is always a 4xx that says what to fix, never a 5xx: a request over
``SITUATE_MAX_REQUEST_BYTES`` (chunked uploads included) or with more than
``SITUATE_MAX_BATCH_DOCUMENTS`` documents is refused whole; inside a batch, a bad document
fails alone with its reason (202, one entry per document) and the others are queued. Near
Redis's memory limit, submissions get 503 with Retry-After. An error of ours answers 500 with
an id to find it in the log, and nothing of its internals.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, Field
from redis.exceptions import OutOfMemoryError as RedisFull
from starlette.routing import Route

from producers.ingest.submit import Submission, submit
from producers.retrieval import rerankers
from producers.retrieval.hits import HitOut, SearchIn, SearchOut
from producers.retrieval.search import SearchOptions, search
from producers.web import (
    auth,
    dashboard,
    fleet,
    http_guard,
    label_routes,
    mcp_server,
    prometheus,
    reindex_routes,
    search_page,
    signin,
)
from workers import allowlist, errors, lifecycle
from workers.documents.validation import RawDocument
from workers.pipeline.routing import all_queues
from workers.settings import get_settings
from workers.storage import capacity, catalog, chunk_index, health, states

log = logging.getLogger("situate.api")

mcp_endpoint = mcp_server.HTTPEndpoint()


@contextlib.asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    await run_in_threadpool(auth.open_mode)  # decided at start (and only ever closed after)
    async with mcp_endpoint.running():
        yield


# The schema and the docs page are served behind the same tokens as the rest (below).
app = FastAPI(title="situate", version=importlib.metadata.version("situate"), docs_url=None, redoc_url=None, openapi_url=None,
              lifespan=lifespan,
              description="Contextual Retrieval at production scale: ingest documents, search them.")


# -- limits and errors ---------------------------------------------------------------------------

app.add_middleware(http_guard.RequestGuard)

# Metric labels come from fixed sets: a made-up method (``curl -X MX1``) must not add a series.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})


@app.middleware("http")
async def count_requests(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    """Requests and latency by route template (not by path: one series per route, not per document)."""
    started = time.perf_counter()
    response = await call_next(request)
    route = getattr(request.scope.get("route"), "path", "other")
    method = request.method if request.method in METHODS else "other"
    prometheus.api_requests.labels(method, route, str(response.status_code)).inc()
    prometheus.api_seconds.labels(method, route).observe(time.perf_counter() - started)
    return response


@app.exception_handler(RequestValidationError)
async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    # Pydantic's errors echo the input back: a 2 MB query would come back whole. Where and why only.
    errors = [{"loc": e.get("loc"), "msg": e.get("msg"), "type": e.get("type")} for e in exc.errors()[:20]]
    return JSONResponse({"detail": errors}, status_code=422)


@app.exception_handler(errors.Denied)
async def denied(request: Request, exc: errors.Denied) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return JSONResponse({"detail": str(exc)}, status_code=exc.status, headers=headers)


@app.exception_handler(errors.CollectionError)
async def collection_error(request: Request, exc: errors.CollectionError) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=exc.http_status)


@app.exception_handler(RedisFull)
async def redis_full(request: Request, exc: RedisFull) -> JSONResponse:
    """Redis at its memory limit refused a write: come back once the workers have drained it."""
    return JSONResponse({"detail": "busy: the queue's store is full; try again shortly"}, status_code=503,
                        headers={"Retry-After": "30"})


@app.exception_handler(errors.ProviderUnavailable)
async def provider_unavailable(request: Request, exc: errors.ProviderUnavailable) -> JSONResponse:
    """A paid API (the query's embedder, a reranker) kept failing past its retries: not ours, not now."""
    return JSONResponse({"detail": str(exc)}, status_code=exc.http_status, headers={"Retry-After": "5"})


@app.exception_handler(errors.ProviderRefused)
async def provider_refused(request: Request, exc: errors.ProviderRefused) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=exc.http_status)


@app.exception_handler(errors.Busy)
async def busy(request: Request, exc: errors.Busy) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=503, headers={"Retry-After": "2"})


@app.exception_handler(Exception)
async def internal_error(request: Request, exc: Exception) -> JSONResponse:
    error_id = uuid.uuid4().hex[:12]
    log.exception("error %s on %s %s", error_id, request.method, request.url.path)
    return JSONResponse({"detail": "internal error", "error_id": error_id}, status_code=500)


# -- who may do what -------------------------------------------------------------------------

caller, allowed = auth.caller, auth.allowed


# -- bodies --------------------------------------------------------------------------------------

class DocumentIn(BaseModel):
    """The documentation's shape of a document; each one is checked alone (see add_documents)."""

    id: str = Field(..., description="Your document id, unique in the collection.")
    text: str
    metadata: dict[str, Any] = Field(default_factory=dict, description="At most 64 keys, 3 levels, 16 kB.")
    chunks: list[str] | None = Field(None, description="Pre-made chunks, kept exactly as given.")


class DocumentsIn(BaseModel):
    documents: list[DocumentIn]


class CollectionIn(reindex_routes.ShapingIn):
    embed_context: bool | None = None
    context_weight: float | None = Field(None, ge=0, le=100)
    fusion: str | None = Field(None, pattern="^(rrf|weighted)$")
    dense_weight: float | None = Field(None, ge=0, le=100)
    rrf_k: int | None = Field(None, ge=1, le=1000)
    reranker: str | None = Field(None, max_length=32, description="The search default; the deployment's allowlist "
                                 "(SITUATE_ALLOWED_RERANKERS) applies.")
    expected_chunks: int | None = Field(None, ge=0, le=10**10, description="About how many chunks the collection "
                                        "will hold: sizes its index's shards when index_shards is not named.")


documented = http_guard.documented


# -- routes --------------------------------------------------------------------------------------

@app.get("/healthz", include_in_schema=False)
def healthz() -> dict[str, str]:
    """Liveness: the process answers. It reads nothing else, so a store away restarts no API."""
    return {"status": "ok"}


@app.get("/readyz", include_in_schema=False)
def readyz() -> JSONResponse:
    """Readiness: Redis and OpenSearch answer, so a search sent now is served (503 with the
    one that does not, and no traffic sent here until both do)."""
    down = health.unreachable()
    return JSONResponse({"status": "unavailable", "down": down} if down else {"status": "ready"},
                        status_code=503 if down else 200)


@app.get("/openapi.json", include_in_schema=False, dependencies=[Depends(caller)])
def openapi_schema() -> dict[str, Any]:
    return app.openapi()


@app.get("/docs", include_in_schema=False, dependencies=[Depends(caller)])
def docs_page() -> HTMLResponse:
    from fastapi.openapi.docs import get_swagger_ui_html

    return get_swagger_ui_html(openapi_url="/openapi.json", title="situate API")


@app.get("/metrics", include_in_schema=False, dependencies=[Depends(allowed("read"))])
async def metrics_page() -> Response:
    """Prometheus's text format (``producers/web/prometheus.py``); a token that reads every collection."""
    return Response(await run_in_threadpool(prometheus.render), media_type=prometheus.CONTENT_TYPE)


@app.get("/v1/backlog", dependencies=[Depends(allowed("read"))])
def get_backlog(queues: str = "") -> dict[str, Any]:
    """What an autoscaler reads (KEDA's metrics-api scaler; docs/deploy.md): for the queues a
    kind of worker consumes (comma-separated; all by default), messages waiting in every
    priority list, parked in the collections' lines, and delivered but not acknowledged."""
    known = all_queues()
    names = [q.strip() for q in queues.split(",") if q.strip()] or known
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise HTTPException(400, f"unknown queue(s) {', '.join(unknown)}: situate's queues are {', '.join(known)}")
    return fleet.backlog(names)


app.include_router(signin.router)
app.include_router(dashboard.router)
app.include_router(search_page.router)
app.include_router(reindex_routes.router, dependencies=[Depends(allowed("admin"))])
app.include_router(label_routes.router)
# MCP (Streamable HTTP) for agents: the same search as below, as tools (``producers.web.mcp_server``).
app.router.routes.append(Route("/mcp", endpoint=mcp_endpoint, methods=["GET", "POST", "DELETE"]))


@app.put("/v1/collections/{collection}", dependencies=[Depends(allowed("admin"))], openapi_extra=documented(CollectionIn))
def create_collection(collection: str,
                      body: Annotated[CollectionIn, Depends(http_guard.body_of(CollectionIn))]) -> dict[str, Any]:
    """Create a collection with explicit settings (or check an existing one matches them)."""
    try:
        return catalog.describe(lifecycle.ensure(collection, **body.model_dump()))
    except errors.CollectionError:
        raise
    except ValueError as e:  # an unknown embedder, contextualizer or model
        raise HTTPException(422, str(e)) from None


@app.get("/v1/collections/{collection}", dependencies=[Depends(allowed("read"))])
def get_collection(collection: str) -> dict[str, Any]:
    config = catalog.load(collection)
    return {"settings": catalog.describe(config), "documents": states.counts(collection),
            "chunks_indexed": chunk_index.count(config), "warning": lifecycle.model_warning(config) or None}


@app.delete("/v1/collections/{collection}", dependencies=[Depends(allowed("admin"))])
def delete_collection(collection: str) -> dict[str, str]:
    """Drop the collection: its tokens, index, settings, documents' state, bodies and checkpoints.
    A drop cut short (OpenSearch unreachable: 503) is finished by the next DELETE."""
    try:
        lifecycle.delete(collection)
    except errors.CollectionError:
        raise
    except Exception as e:  # a part could not be removed now: the tombstone keeps the rest for later
        log.warning("drop of %s cut short: %s: %s", collection, type(e).__name__, e)
        raise HTTPException(503, f"collection {collection!r} is being dropped, but not everything could be "
                                 "removed now (OpenSearch or Redis unreachable): DELETE again to finish",
                            headers={"Retry-After": "30"}) from None
    return {"deleted": collection}


@app.post("/v1/collections/{collection}/refresh", dependencies=[Depends(allowed("write"))])
def refresh_collection(collection: str) -> dict[str, str]:
    """Make what is indexed searchable now, not at the next scheduled refresh (within 1 s)."""
    chunk_index.refresh(catalog.load(collection))
    return {"status": "refreshed"}


def _raw_document(i: int, item: Any) -> RawDocument:
    """One document of a batch as given; what is wrong with it fails it alone, in ``submit``."""
    if not isinstance(item, dict):
        return RawDocument(f"#{i}", None, error=f"document #{i} is not a JSON object")
    doc_id = item.get("id")
    if not isinstance(doc_id, str):
        return RawDocument(f"#{i}", None, error=f"document #{i}: 'id' must be a string")
    text = item.get("text")
    if not isinstance(text, str):
        return RawDocument(doc_id, None, error="'text' must be a string")
    chunks = item.get("chunks")
    if isinstance(chunks, list):
        chunks = [{"n": n, "text": c} if isinstance(c, str) else c for n, c in enumerate(chunks)]
    elif chunks is not None:
        return RawDocument(doc_id, None, error="'chunks' must be a list of strings")
    return RawDocument(doc_id, text, item.get("metadata") or {}, chunks)


@app.post("/v1/collections/{collection}/documents", status_code=202, openapi_extra=documented(DocumentsIn))
async def add_documents(collection: str, request: Request,
                        principal: Annotated[auth.Principal, Depends(allowed("write"))]) -> dict[str, Any]:
    """Submit one document, ``{"documents": [...]}``, or a list. A collection that does not
    exist yet is created with the server's defaults, by an admin only (PUT to choose them)."""
    payload = await http_guard.json_body(request)
    items = payload["documents"] if isinstance(payload, dict) and "documents" in payload else payload
    items = [items] if isinstance(items, dict) else items
    if not isinstance(items, list) or not items:
        raise HTTPException(422, "expected a document, a list of documents, or {\"documents\": [...]}")
    limit = get_settings().max_batch_documents
    if len(items) > limit:
        raise HTTPException(413, f"{len(items):,} documents in one request, over {limit:,} "
                                 "(SITUATE_MAX_BATCH_DOCUMENTS): send them in several")
    config = await _writable(collection, principal)
    return _submitted(await run_in_threadpool(submit, config, [_raw_document(i, item) for i, item in enumerate(items)]))


FILE_FIELDS = 8  # besides the files: id, metadata


@app.post("/v1/collections/{collection}/files", status_code=202, openapi_extra={"requestBody": {"content": {
    "multipart/form-data": {"schema": {"type": "object", "properties": {
        "file": {"type": "array", "items": {"type": "string", "format": "binary"}},
        "id": {"type": "string", "description": "The document id (one file; default: its file name)."},
        "metadata": {"type": "string", "description": "A JSON object, for every file of the request."}}}},
    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}})
async def add_files(collection: str, request: Request,
                    principal: Annotated[auth.Principal, Depends(allowed("write"))],
                    id: str | None = None, metadata: str | None = None) -> dict[str, Any]:
    """Upload files as they are — PDF, DOCX, PPTX, XLSX, CSV, HTML, text — to be extracted by the
    workers: multipart (``file`` fields; ``id`` for a single file, ``metadata`` as JSON), or one
    file as the raw body with its ``Content-Type`` (``?id=`` names it, ``?metadata=`` as JSON).
    Each file fails alone with its reason (an unsupported format, over the size limit)."""
    config = await _writable(collection, principal)
    limit = get_settings().max_document_bytes
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media == "multipart/form-data":
        form = await request.form(max_files=get_settings().max_batch_documents, max_fields=FILE_FIELDS)
        try:
            uploads = [f for f in form.getlist("file") if not isinstance(f, str)]
            if not uploads:
                raise HTTPException(422, "no file: send each one as a 'file' field")
            if form.get("id") and len(uploads) > 1:
                raise HTTPException(422, "'id' names a single file; send one file per request, or none")
            given = form.get("metadata")
            meta = _metadata(given if isinstance(given, str) else None)
            raws = []
            for upload in uploads:
                name = upload.filename or ""
                doc_id = str(form.get("id") or name)
                data = await upload.read(limit + 1)
                raws.append(_file_document(doc_id, name, data, upload.content_type, meta, limit))
        finally:
            await form.close()
    else:
        if not id:
            raise HTTPException(422, "name the document: ?id=... (or send multipart/form-data with a 'file' field)")
        body = await http_guard.read_body(request)  # kept as read: a 64 MB upload is not copied
        raws = [_file_document(id, id, body, media or None, _metadata(metadata), limit)]
    return _submitted(await run_in_threadpool(submit, config, raws))


def _submitted(results: list[Submission]) -> dict[str, Any]:
    """The answer to a submission: one entry per document, in order."""
    return {"documents": [{"doc_id": r.doc_id, "state": r.state, "version": r.version, "error": r.error}
                          for r in results]}


def _metadata(raw: str | None) -> dict[str, Any]:
    if not raw:
        return {}
    value = http_guard.parse_json(raw.encode())
    if not isinstance(value, dict):
        raise HTTPException(422, "metadata must be a JSON object")
    return value


def _file_document(doc_id: str, name: str, data: bytes | bytearray, media_type: str | None, metadata: dict[str, Any],
                   limit: int) -> RawDocument:
    if not doc_id:
        return RawDocument("#file", None, error="a file without a name: give it an id")
    if len(data) > limit:
        return RawDocument(doc_id, None, error=f"file is over the limit of {limit:,} bytes (SITUATE_MAX_DOCUMENT_BYTES)")
    return RawDocument(doc_id, data, {"path": name, **metadata} if name else dict(metadata), name=name,
                       media_type=media_type)


async def _writable(collection: str, principal: auth.Principal) -> catalog.CollectionConfig:
    """The collection to submit to (created with the server's defaults, by an admin only), if
    Redis has room."""
    config = catalog.find(catalog.validate_name(collection))
    if config is None:
        if not principal.allows(collection, "admin"):
            raise HTTPException(404, f"collection {collection!r} does not exist; an admin creates it (PUT)")
        config = lifecycle.ensure(collection)
    if capacity.too_full():
        raise HTTPException(503, "Redis is near its memory limit; the workers are draining it: retry later",
                            headers={"Retry-After": "30"})
    return config


@app.get("/v1/collections/{collection}/documents/{doc_id:path}", dependencies=[Depends(allowed("read"))])
def get_document(collection: str, doc_id: str) -> dict[str, Any]:
    """``state`` is queued, chunked, situated, indexed or failed; ``chunks`` counts indexed chunks."""
    catalog.load(collection)
    doc = states.get(collection, doc_id)
    if doc is None:
        raise HTTPException(404, f"no document {doc_id[:200]!r} in collection {collection!r}")
    return {k: v for k, v in doc.items() if k not in ("meta_hash",)}


@app.delete("/v1/collections/{collection}/documents/{doc_id:path}", dependencies=[Depends(allowed("write"))])
def delete_document(collection: str, doc_id: str) -> dict[str, Any]:
    """Remove a document from the index and from Redis."""
    if not lifecycle.delete_document(collection, doc_id):
        raise HTTPException(404, f"no document {doc_id[:200]!r} in collection {collection!r}")
    return {"deleted": doc_id}


@app.post("/v1/collections/{collection}/search", response_model=SearchOut,
          dependencies=[Depends(allowed("read"))], openapi_extra=documented(SearchIn))
async def search_collection(collection: str, response: Response,
                            body: Annotated[SearchIn, Depends(http_guard.body_of(SearchIn))]) -> SearchOut:
    """Hits, and where the time went in a ``Server-Timing`` header (embed, opensearch, fusion,
    fetch, rerank: milliseconds). A reranker the deployment did not allow is refused (403)."""
    if body.reranker in rerankers.NAMES:  # a name that is none of them: 422 from the search below
        allowlist.check_reranker(body.reranker)
    config = catalog.load(collection)
    options = SearchOptions(mode=body.mode, fusion=body.fusion, context_weight=body.context_weight,
                            dense_weight=body.dense_weight, reranker=body.reranker, rrf_k=body.rrf_k,
                            candidates=body.candidates, distinct_pages=body.distinct_pages)
    timings: dict[str, float] = {}
    try:  # the query embedding is CPU work: keep it off the event loop
        hits = await run_in_threadpool(search, config, body.query, body.k, body.filters, options=options,
                                       timings=timings)
    except ValueError as e:  # an unknown reranker, say
        raise HTTPException(422, str(e)) from None
    response.headers["Server-Timing"] = ", ".join(f"{name};dur={ms:.1f}" for name, ms in timings.items())
    return SearchOut(hits=[HitOut.of(h) for h in hits])
