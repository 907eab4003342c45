"""The shape of a search hit as every interface returns it: the HTTP API's search route, the MCP
``search`` tool and the framework retrievers (through the API). One model, so the three cannot
drift apart: a hit, its chunk and context, and where it came from (pages, section, title)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from producers.retrieval.fusion import Hit


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


def citation(doc_id: str, pages: list[int] | tuple[int, ...] | None, section: str | None) -> str:
    """'3M_2018_10K.pdf p. 60 · Item 8 › Cash flows': where a hit is, in one line."""
    where = doc_id
    if pages:
        where += f" p. {pages[0]}" if pages[0] == pages[-1] else f" pp. {pages[0]}-{pages[-1]}"
    return where + (f" · {section}" if section else "")
