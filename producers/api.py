"""The HTTP API: submit documents, read their state, search. OpenAPI docs at ``/docs``.

Every route but ``/healthz`` requires ``Authorization: Bearer $SITUATE_API_TOKEN`` when that
variable is set. Submissions answer 202 with one entry per document: a bad document is
reported failed with its reason while the rest of the batch is queued.
"""

from __future__ import annotations

import secrets
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field

from producers.retrieval.search import SearchOptions, search
from producers.submit import RawDocument, submit
from workers import lifecycle
from workers.settings import get_settings
from workers.storage import catalog, chunk_index, states

# Requests larger than this are refused before being read (documents have their own limit).
MAX_REQUEST_BYTES = 64 * 1024 * 1024


def require_token(request: Request) -> None:
    expected = get_settings().api_token
    if not expected:
        return
    given = request.headers.get("authorization", "")
    if not (given.startswith("Bearer ") and secrets.compare_digest(given[7:].encode(), expected.encode())):
        raise HTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})


app = FastAPI(title="situate", version="0.1.0",
              description="Contextual Retrieval at production scale: ingest documents, search them.")
authed = [Depends(require_token)]


class DocumentIn(BaseModel):
    id: str = Field(..., description="Your document id, unique in the collection.")
    text: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    chunks: list[str] | None = Field(None, description="Pre-made chunks, kept exactly as given.")


class DocumentsIn(BaseModel):
    documents: list[DocumentIn]


class CollectionIn(BaseModel):
    contextualizer: str | None = None
    model: str | None = None
    embedder: str | None = None
    language: str | None = None
    chunk_tokens: int | None = None
    chunk_overlap: int | None = None
    prompt: str | None = None
    embed_context: bool | None = None
    context_weight: float | None = Field(None, ge=0)
    fusion: str | None = Field(None, pattern="^(rrf|weighted)$")
    dense_weight: float | None = Field(None, ge=0)


class SearchIn(BaseModel):
    query: str
    k: int = Field(10, ge=1, le=1000)
    filters: dict[str, Any] | None = None
    mode: str = Field("hybrid", pattern="^(hybrid|bm25|dense)$")
    # None: the collection's stored defaults (reranker: the server's SITUATE_RERANKER).
    fusion: str | None = Field(None, pattern="^(rrf|weighted)$")
    context_weight: float | None = Field(None, ge=0)
    dense_weight: float | None = Field(None, ge=0)
    reranker: str | None = Field(None, description="none | voyage | bedrock | cohere | onnx")


class HitOut(BaseModel):
    doc_id: str
    chunk: int
    score: float
    text: str
    context: str
    metadata: dict[str, Any]


class SearchOut(BaseModel):
    hits: list[HitOut]


def _config(name: str, create: bool = False, **requested):
    try:
        return lifecycle.ensure(name, **requested) if create else catalog.load(name)
    except catalog.CollectionError as e:
        raise HTTPException(404 if "does not exist" in str(e) else 409, str(e))
    except ValueError as e:
        raise HTTPException(422, str(e))


@app.middleware("http")
async def limit_body(request: Request, call_next):
    length = request.headers.get("content-length")
    if length and length.isdigit() and int(length) > MAX_REQUEST_BYTES:
        from fastapi.responses import JSONResponse

        return JSONResponse({"detail": f"request body over {MAX_REQUEST_BYTES:,} bytes"}, status_code=413)
    return await call_next(request)


@app.get("/healthz", include_in_schema=False)
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@app.put("/v1/collections/{collection}", dependencies=authed)
def create_collection(collection: str, body: CollectionIn) -> dict[str, Any]:
    """Create a collection with explicit settings (or check an existing one matches them)."""
    return catalog.describe(_config(collection, create=True, **body.model_dump()))


@app.get("/v1/collections/{collection}", dependencies=authed)
def get_collection(collection: str) -> dict[str, Any]:
    config = _config(collection)
    return {"settings": catalog.describe(config), "documents": states.counts(collection),
            "chunks_indexed": chunk_index.count(config)}


@app.post("/v1/collections/{collection}/refresh", dependencies=authed)
def refresh_collection(collection: str) -> dict[str, str]:
    """Make what is indexed searchable now, not at the next scheduled refresh (within 1 s)."""
    chunk_index.refresh(_config(collection))
    return {"status": "refreshed"}


@app.post("/v1/collections/{collection}/documents", status_code=202, dependencies=authed)
def add_documents(collection: str, body: DocumentIn | DocumentsIn | list[DocumentIn]) -> dict[str, Any]:
    """Submit one document, ``{"documents": [...]}``, or a list. The collection is created on
    first use with the server's default settings (use PUT to choose them)."""
    docs = body.documents if isinstance(body, DocumentsIn) else body if isinstance(body, list) else [body]
    config = _config(collection, create=True)
    raws = [RawDocument(d.id, d.text, d.metadata,
                        None if d.chunks is None else [{"n": i, "text": t} for i, t in enumerate(d.chunks)])
            for d in docs]
    results = submit(config, raws)
    return {"documents": [{"doc_id": r.doc_id, "state": r.state, "version": r.version, "error": r.error}
                          for r in results]}


@app.get("/v1/collections/{collection}/documents/{doc_id:path}", dependencies=authed)
def get_document(collection: str, doc_id: str) -> dict[str, Any]:
    """``state`` is queued, chunked, situated, indexed or failed; ``chunks`` counts indexed chunks."""
    _config(collection)
    doc = states.get(collection, doc_id)
    if doc is None:
        raise HTTPException(404, f"no document {doc_id!r} in collection {collection!r}")
    return doc


@app.post("/v1/collections/{collection}/search", response_model=SearchOut, dependencies=authed)
async def search_collection(collection: str, body: SearchIn) -> SearchOut:
    config = _config(collection)
    # The query embedding is CPU work: keep it off the event loop.
    options = SearchOptions(mode=body.mode, fusion=body.fusion, context_weight=body.context_weight,
                            dense_weight=body.dense_weight, reranker=body.reranker)
    try:
        hits = await run_in_threadpool(search, config, body.query, body.k, body.filters, options=options)
    except ValueError as e:  # an unknown reranker, say
        raise HTTPException(422, str(e)) from None
    return SearchOut(hits=[HitOut(doc_id=h.doc_id, chunk=h.chunk, score=h.score, text=h.text, context=h.context,
                                  metadata=h.metadata) for h in hits])
