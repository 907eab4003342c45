"""What every contextualizer shares: the interface, the document it reads, the context it writes.

The interface is per *document*, not per chunk, because that is where prompt caching is won
or lost: a provider sees all of a document's chunks at once and decides the order and the
concurrency of its calls (warm the cache with one call, then fan out). A context carries its
``usage`` (tokens, cost) so the bill is checkpointed with the text.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from workers.chunks.splitting import Chunk


@dataclass
class SourceDocument:
    """What a contextualizer may read: the whole text, its language and metadata."""

    collection: str
    doc_id: str
    version: str
    text: str
    language: str
    metadata: dict[str, Any] = field(default_factory=dict)
    chunks: list[Chunk] = field(default_factory=list)  # all of them, for long-document windows
    run: str | None = None  # the ingest run, for the bill
    batch: bool = False     # situate through Message Batches (half price, hours)
    warm: bool = False      # its cache entry was written by an earlier call: no warm-up needed
    # An extracted file's structure (``extraction.document.Extracted`` without its text): title,
    # profile (who, what, when), headings, page offsets. None for text.
    structure: dict[str, Any] | None = None


@dataclass
class Context:
    text: str
    usage: dict[str, Any] = field(default_factory=dict)
    # What of the context goes into the chunk's vector when the collection embeds the chunk alone
    # (offline contexts): an extracted document's header — whose, when, which section — which
    # says what the chunk is about, where the key terms would only blur it.
    embed: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"text": self.text, "usage": self.usage}
        if self.embed:
            out["embed"] = self.embed
        return out


class Contextualizer(Protocol):
    name: str

    def contextualize(self, doc: SourceDocument, chunks: list[Chunk]) -> Iterator[tuple[Chunk, Context]]:
        """Yield (chunk, context) for each chunk as soon as it is ready, in any order: the
        caller checkpoints each one, so work done before a crash is never paid again. Raise to
        fail the document: it is never indexed with chunks silently left without context."""
        ...


def contextualized_text(context: str, chunk: str) -> str:
    """What goes into the embedder and the reranker: the context first, as the cookbook does."""
    return f"{context}\n\n{chunk}" if context else chunk
