"""A stored document body cut into chunks: the chunk stage's one recipe.

The chunk task (``pipeline.tasks.chunk``), a rebuild and the estimates (``situate ingest
--estimate``, ``situate reindex --estimate``) all call ``chunks_of``: they must cut a body
exactly alike, or an estimate plans chunks the workers never make. An extracted file is cut by
its layout (pages, sections, tables), pre-made chunks are taken as given, code by tree-sitter,
other text by the splitter with its Markdown headings as sections. It takes the collection's
shape (any object with ``chunk_tokens`` and ``chunk_overlap``, a ``CollectionConfig`` in
practice), so this package stays below storage.
"""

from __future__ import annotations

from typing import Any, Protocol

from workers.chunks import layout, sections
from workers.chunks.splitting import Chunk, guess_language, is_code, locate, split
from workers.extraction.document import Extracted


class Shape(Protocol):
    """How a collection cuts its documents (``storage.catalog.CollectionConfig`` has these)."""

    @property
    def chunk_tokens(self) -> int: ...

    @property
    def chunk_overlap(self) -> int: ...


def chunks_of(config: Shape, payload: dict[str, Any]) -> tuple[list[Chunk], str, dict[str, object]]:
    """(chunks, language, facts about the file) for a payload whose text is there (extracted)."""
    text, metadata = payload["text"], payload.get("metadata") or {}
    if payload.get("extracted") is not None:
        extracted = Extracted.from_json({**payload["extracted"], "text": text})
        language = "markdown" if extracted.headings and extracted.media_type != "application/pdf" else "text"
        facts: dict[str, object] = {"media_type": extracted.media_type, "title": extracted.title,
                                    "pages": extracted.pages_total or "",
                                    "pages_without_text": extracted.pages_without_text}
        return layout.chunks_of(extracted, config.chunk_tokens), language, facts
    language = guess_language(text, metadata)
    if payload.get("chunks") is not None:
        chunks = locate(text, [(c["n"], c["text"]) for c in payload["chunks"]])
    else:
        chunks = split(text, language, config.chunk_tokens, config.chunk_overlap)
    if not is_code(language):  # Markdown headings, in .md files or in text given as such
        chunks = layout.with_sections(chunks, sections.markdown_paths(text, chunks))
    return chunks, language, {}
