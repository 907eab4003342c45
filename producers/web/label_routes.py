"""The labels routes: questions a team labels on its own collection, for ``situate eval``
(``evaluation.labelling``): post one (write scope), list them (read), delete them (write)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from producers.evaluation import labelling
from producers.web import auth, http_guard
from workers.storage import catalog
from workers.storage import labels as label_store

router = APIRouter()


class AnswerIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    doc_id: str = Field(..., max_length=1024)
    chunk: int | None = Field(None, ge=0, description="The hit's chunk number, as search returns it.")
    text: str | None = Field(None, max_length=20_000, description="Or a passage of the document (an import's).")
    page: int | None = Field(None, ge=1, description="Or a page of the document (1-based).")


class LabelIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(..., min_length=1, max_length=labelling.MAX_QUERY_CHARS)
    gold: list[AnswerIn] = Field(default_factory=list, max_length=labelling.MAX_GOLD,
                                 description="The hits that answer the question.")
    not_relevant: list[AnswerIn] = Field(default_factory=list, max_length=200,
                                         description="Hits a person judged not to answer it.")
    source: str = Field("person", pattern="^(person|generated)$")


@router.post("/v1/collections/{collection}/labels", status_code=201, openapi_extra=http_guard.documented(LabelIn))
async def add_label(collection: str, principal: Annotated[auth.Principal, Depends(auth.allowed("write"))],
                    body: Annotated[LabelIn, Depends(http_guard.body_of(LabelIn))]) -> dict[str, Any]:
    """A labelled question: ``{"query": ..., "gold": [{"doc_id": ..., "chunk": N}]}``. A question
    labelled before keeps its other answers. The chunks' text is read from the index and kept, so
    the label grades after a reindex too (``situate labels export``)."""
    config = catalog.load(collection)
    return await run_in_threadpool(labelling.add, config, body.query,
                                   [a.model_dump(exclude_none=True) for a in body.gold], body.source, principal.id,
                                   [a.model_dump(exclude_none=True) for a in body.not_relevant])


@router.get("/v1/collections/{collection}/labels", dependencies=[Depends(auth.allowed("read"))])
def list_labels(collection: str, source: str | None = None) -> dict[str, Any]:
    """Every labelled question (``?source=person`` or ``generated``), as kept: answers with their
    chunk number and text, who and when."""
    catalog.load(collection)
    found = label_store.all_of(collection, source)
    return {"labels": found, "count": len(found)}


@router.delete("/v1/collections/{collection}/labels", dependencies=[Depends(auth.allowed("write"))])
def delete_labels(collection: str, source: str | None = None) -> dict[str, Any]:
    """Every label of the collection (``?source=`` those of one source)."""
    catalog.load(collection)
    return {"deleted": label_store.delete(collection, source=source)}


@router.delete("/v1/collections/{collection}/labels/{label_id}", dependencies=[Depends(auth.allowed("write"))])
def delete_label(collection: str, label_id: str) -> dict[str, Any]:
    catalog.load(collection)
    if not label_store.delete(collection, label_id):
        raise HTTPException(404, f"no label {label_id[:64]!r} in collection {collection!r}")
    return {"deleted": 1}
