"""The shapes of a search as every interface takes and returns it: the HTTP API's search route,
the MCP ``search`` tool and the framework retrievers (through the API). One model each way, so
they cannot drift apart: a request's limits (query length, filter values, numbers that are
numbers) hold on every door, and a hit is its chunk and context, and where it came from (pages,
section, title)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from producers.retrieval.fusion import Hit

Scalar = str | int | float | bool
FilterKey = Annotated[str, StringConstraints(min_length=1, max_length=128)]
# OpenSearch refuses a terms query past 65,536 values (index.max_terms_count): a caller's list is
# bounded well below it, so a long one is a 422 that says so, not a 500 from the node.
FILTER_VALUES = 1024
FilterValue = Scalar | Annotated[list[Scalar], Field(max_length=FILTER_VALUES)]


class SearchIn(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    query: str = Field(..., max_length=4096)
    k: int = Field(10, ge=1, le=1000)
    filters: dict[FilterKey, FilterValue] | None = Field(None, max_length=32)
    mode: str = Field("hybrid", pattern="^(hybrid|bm25|dense)$")
    # None: the collection's stored defaults (reranker: the server's SITUATE_RERANKER).
    fusion: str | None = Field(None, pattern="^(rrf|weighted)$")
    context_weight: float | None = Field(None, ge=0, le=100)
    dense_weight: float | None = Field(None, ge=0, le=100)
    rrf_k: int | None = Field(None, ge=1, le=1000)
    reranker: str | None = Field(None, description="none | voyage | bedrock | cohere | onnx")
    candidates: int | None = Field(None, ge=1, le=1000,
                                   description="Each side's candidates (default: 150).")
    distinct_pages: bool = Field(True, description="A page's best chunk stands for it: the top k name k pages "
                                 "(its other chunks follow every page's first).")


class HitOut(BaseModel):
    doc_id: str
    chunk: int
    score: float
    text: str
    context: str
    metadata: dict[str, Any]
    pages: list[int] | None = Field(None, description="[first, last] page (1-based), for paged documents.")
    section: str | None = Field(None, description="The heading path the chunk starts under.")
    title: str | None = Field(None, description="The document's title.")

    @classmethod
    def of(cls, h: Hit) -> HitOut:
        return cls(doc_id=h.doc_id, chunk=h.chunk, score=h.score, text=h.text, context=h.context,
                   metadata=h.metadata, pages=h.pages, section=h.section, title=h.title)


class SearchOut(BaseModel):
    hits: list[HitOut]
