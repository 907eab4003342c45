"""Where a hit is, in one line, and what a framework's document carries of it: the same for the
search page, the MCP server, the CLI and the LangChain and LlamaIndex retrievers (the server
imports this one recipe)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def citation(doc_id: str, pages: Sequence[int] | None, section: str | None) -> str:
    """'3M_2018_10K.pdf p. 60 · Item 8 › Cash flows'."""
    where = doc_id
    if pages:
        where += f" p. {pages[0]}" if pages[0] == pages[-1] else f" pp. {pages[0]}-{pages[-1]}"
    return where + (f" · {section}" if section else "")


def citation_metadata(hit: dict[str, Any]) -> dict[str, Any]:
    """What a framework document carries of a hit: where it is (document, chunk, pages, section,
    title, a one-line citation), its score and context, and the document's own metadata."""
    return {"doc_id": hit["doc_id"], "chunk": hit["chunk"], "score": hit["score"], "pages": hit.get("pages"),
            "section": hit.get("section"), "title": hit.get("title"), "context": hit.get("context", ""),
            "citation": citation(hit["doc_id"], hit.get("pages"), hit.get("section")),
            "metadata": hit.get("metadata") or {}}
