"""Contextualizers: given a whole document and its chunks, write a context for each chunk.

The interface is per *document*, not per chunk, because that is where prompt caching is won
or lost: a provider sees all of a document's chunks at once and decides the order and the
concurrency of its calls (warm the cache with one call, then fan out). A context carries its
``usage`` (tokens, cost) so the bill is checkpointed with the text.

Shipped here, offline and free: ``keywords`` (the default: the chunk's place plus the
document's key terms and outline), ``structural`` (the chunk's place alone) and ``none``.
LLM providers (``anthropic``, ``bedrock``, local ``llama``) register in ``PROVIDERS`` the same way.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol

from workers.chunking import Chunk
from workers.collections import CollectionConfig
from workers import structure


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


@dataclass
class Context:
    text: str
    usage: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "usage": self.usage}


class Contextualizer(Protocol):
    name: str

    def contextualize(self, doc: SourceDocument, chunks: list[Chunk]) -> Iterator[tuple[Chunk, Context]]:
        """Yield (chunk, context) for each chunk as soon as it is ready, in any order: the
        caller checkpoints each one, so work done before a crash is never paid again. Raise to
        fail the document: it is never indexed with chunks silently left without context."""
        ...


class NoContext:
    name = "none"

    def contextualize(self, doc: SourceDocument, chunks: list[Chunk]) -> Iterator[tuple[Chunk, Context]]:
        for chunk in chunks:
            yield chunk, Context("")


class StructuralContext:
    """``<title> > <section or definition path>``: what a reader sees in a table of contents."""

    name = "structural"

    def contextualize(self, doc: SourceDocument, chunks: list[Chunk]) -> Iterator[tuple[Chunk, Context]]:
        title = structure.title_of(doc.text, doc.metadata)
        for chunk, path in zip(chunks, structure.paths(doc.text, doc.language, chunks)):
            parts = [title] + [p for p in path if p != title]
            yield chunk, Context(" > ".join(p for p in parts if p))


class KeywordContext:
    """``<title> > <path>``, then the document's key terms, then its outline (``keywords``).

    Document-level words on every chunk: they help BM25 find the right file (weighted below
    the chunk's own text, see ``search``) and are kept out of the chunk's vector by default.
    """

    name = "keywords"

    def contextualize(self, doc: SourceDocument, chunks: list[Chunk]) -> Iterator[tuple[Chunk, Context]]:
        from workers import keywords

        every = doc.chunks or chunks
        about = " ".join(keywords.key_terms(doc.text, every))
        names = " ".join(keywords.outline(doc.text, doc.language))
        for chunk, context in StructuralContext().contextualize(doc, chunks):
            yield chunk, Context("\n".join(p for p in (context.text, about, names) if p))


def _anthropic(config: CollectionConfig) -> Contextualizer:
    from workers.llm import anthropic_contextualizer

    return anthropic_contextualizer(config)


def _bedrock(config: CollectionConfig) -> Contextualizer:
    from workers.llm import bedrock_contextualizer

    return bedrock_contextualizer(config)


def _llama(config: CollectionConfig) -> Contextualizer:
    from workers.llm_local import LlamaContextualizer

    return LlamaContextualizer(config)


PROVIDERS: dict[str, Callable[[CollectionConfig], Contextualizer]] = {
    "none": lambda config: NoContext(),
    "structural": lambda config: StructuralContext(),
    "keywords": lambda config: KeywordContext(),
    "anthropic": _anthropic,
    "bedrock": _bedrock,
    "llama": _llama,
}
LLM_PROVIDERS = ("anthropic", "bedrock")  # paid APIs: model table, rate limits, the bill
MODEL_WRITTEN = LLM_PROVIDERS + ("llama",)  # contexts a language model wrote: embedded too


def check_name(name: str) -> None:
    if name not in PROVIDERS:
        raise ValueError(f"unknown contextualizer {name!r}; choose one of {sorted(PROVIDERS)}")


_cache: dict[str, Contextualizer] = {}
_cache_lock = threading.Lock()


def for_collection(config: CollectionConfig) -> Contextualizer:
    key = f"{config.name}:{config.contextualizer}:{config.model}"
    with _cache_lock:  # a worker's threads start many documents of a collection at once: build one
        if key not in _cache:
            check_name(config.contextualizer)
            _cache[key] = PROVIDERS[config.contextualizer](config)
        return _cache[key]


def contextualized_text(context: str, chunk: str) -> str:
    """What goes into BM25 and the embedder: the context first, as the cookbook does."""
    return f"{context}\n\n{chunk}" if context else chunk
