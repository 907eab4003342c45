"""A stored document body cut into chunks: the chunk stage's one recipe, shared with estimates.

The chunk task (``pipeline.tasks.chunk``) and a rebuild's estimate (``pipeline.rebuild``) must
cut a body exactly alike, or the estimate's count of contexts to reuse is wrong: an extracted
file by its layout (pages, sections, tables), pre-made chunks as given, code by tree-sitter,
other text by the splitter with its Markdown headings as sections.
"""

from __future__ import annotations

from typing import Any

from workers import layout
from workers.chunking import Chunk, guess_language, is_code, locate, split
from workers.contextualizers import structure
from workers.extraction.document import Extracted
from workers.storage.catalog import CollectionConfig


def chunks_of(config: CollectionConfig, payload: dict[str, Any]) -> tuple[list[Chunk], str, dict[str, object]]:
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
        chunks = layout.with_sections(chunks, structure.markdown_paths(text, chunks))
    return chunks, language, {}
