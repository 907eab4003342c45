"""What a framework's document carries of a hit, the same for LangChain and LlamaIndex."""

from __future__ import annotations

from typing import Any

from producers.retrieval.hits import citation


def citation_metadata(hit: dict[str, Any]) -> dict[str, Any]:
    """What a framework document carries of a hit: where it is (document, chunk, pages, section,
    title, a one-line citation), its score and context, and the document's own metadata."""
    return {"doc_id": hit["doc_id"], "chunk": hit["chunk"], "score": hit["score"], "pages": hit.get("pages"),
            "section": hit.get("section"), "title": hit.get("title"), "context": hit.get("context", ""),
            "citation": citation(hit["doc_id"], hit.get("pages"), hit.get("section")),
            "metadata": hit.get("metadata") or {}}
