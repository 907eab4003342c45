"""The reindex routes (admin only: the API mounts them behind the admin check): start, watch,
estimate, roll back and finish a collection's next generation (``workers.pipeline.rebuild``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from producers.web import http_guard
from workers.errors import NoSuchCollection
from workers.pipeline import rebuild

router = APIRouter()


class ShapingIn(BaseModel):
    """The settings that shape an index, as a request names them (creation, reindex)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    contextualizer: str | None = Field(None, max_length=64)
    model: str | None = Field(None, max_length=256)
    embedder: str | None = Field(None, max_length=64)
    embed_model: str | None = Field(None, max_length=128)
    embed_tail: float | None = Field(None, ge=0, le=1, description="How much of a paged document's chunk past a "
                                     "local embedder's 256 tokens counts in its vector: 0 (cut) to 1 (as much as the head).")
    embed_header: str | None = Field(None, pattern="^(cover|all|none)$", description="What of an extracted "
                                     "document's offline header its chunks' vectors read: cover (its place, and the "
                                     "document line of a filing's or a release's cover), all, none.")
    language: str | None = Field(None, max_length=32)
    chunk_tokens: int | None = Field(None, ge=16, le=8192)
    chunk_overlap: int | None = Field(None, ge=0, le=4096)
    prompt: str | None = Field(None, max_length=10_000, description="The chunk instruction for a language model "
                               "(holds {chunk_content}).")
    glossary: str | None = Field(None, max_length=60_000, description="Terms the documents use, sent to the language "
                                 "model before each document, in a block cached across them.")
    vectors: str | None = Field(None, pattern="^(float|lucene-sq|byte)$",
                                description="How vectors are stored: exact floats, Lucene's int7, or bytes.")
    index_shards: int | None = Field(None, ge=1, le=64, description="The index's primary shards (at creation, "
                                     "from expected_chunks when not named).")
    index_replicas: str | None = Field(None, pattern=r"^(\d{1,2}|\d{1,2}-(\d{1,2}|all))$",
                                       description="Copies of each shard: a count (1) or a range kept to the nodes "
                                       "there are (0-1). A reindex that changes only this changes it in place.")


class ReindexIn(ShapingIn):
    """What the next generation changes (the others stay as they are)."""

    estimate: bool = Field(False, description="Only the bill: calls, tokens, cost; nothing starts.")


@router.post("/v1/collections/{collection}/reindex", status_code=202)
async def start(collection: str, body: Annotated[ReindexIn, Depends(http_guard.body_of(ReindexIn))]) -> dict[str, Any]:
    """Build the next generation behind the collection's name; searches answer from the live one
    until it switches. ``estimate``: the bill only."""
    changes = body.model_dump(exclude={"estimate"})
    if body.estimate:
        from producers.ingest.estimate import estimate_reindex

        return (await run_in_threadpool(lambda: estimate_reindex(collection, **changes))).to_json()
    return await run_in_threadpool(lambda: rebuild.start(collection, **changes))


@router.get("/v1/collections/{collection}/reindex")
def status(collection: str) -> dict[str, Any]:
    found = rebuild.status(collection)
    if found is None:
        raise NoSuchCollection(f"no reindex of {collection!r}")
    return found


@router.post("/v1/collections/{collection}/reindex/rollback")
def rollback(collection: str) -> dict[str, Any]:
    return rebuild.rollback(collection)


@router.post("/v1/collections/{collection}/reindex/finish")
def finish(collection: str) -> dict[str, Any]:
    return rebuild.finish(collection)
