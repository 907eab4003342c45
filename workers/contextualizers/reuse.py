"""Contexts already paid for, found again when a collection is rebuilt (``situate reindex``).

A context depends on the document it situates (its version), the chunk's text, and what wrote
it: the contextualizer, its model and its prompt. When all of these are unchanged, the live
generation's index already holds the context a new call would write, so the new generation
takes it from there instead of paying for it again: an embedder-only change makes no LLM call,
a chunking change pays only for the chunks whose text changed. Offline contexts are not reused:
they cost nothing to write again, and their vector-only part (``embed``) is not in the index.
"""

from __future__ import annotations

from workers.chunks.splitting import Chunk
from workers.contextualizers import registry
from workers.storage import checkpoints, chunk_index
from workers.storage.catalog import CollectionConfig


def reusable(source: CollectionConfig, target: CollectionConfig) -> bool:
    """Whether ``target``'s contexts would be written exactly as ``source``'s were."""
    return (registry.is_model_written(target.contextualizer) and source.contextualizer == target.contextualizer
            and source.model == target.model and source.prompt == target.prompt and source.glossary == target.glossary)


def fill(source: CollectionConfig, target: CollectionConfig, doc_id: str, version: str, chunks: list[Chunk],
         done: set[int]) -> int:
    """Checkpoint, for ``target``, the contexts ``source`` holds for chunks of the same text in
    the same document version; how many. They carry no usage: nothing was paid for them now."""
    if not reusable(source, target):
        return 0
    wanted = [c for c in chunks if c.n not in done]
    if not wanted:
        return 0
    found = chunk_index.contexts_by_text(source, doc_id, version)
    reused = 0
    for chunk in wanted:
        context = found.get(chunk.text)
        if context:
            checkpoints.save_context(target.name, doc_id, version, chunk.n,
                                     {"text": context, "usage": {}, "reused": True})
            reused += 1
    if reused:
        checkpoints.flush(target.name, doc_id, version)
    return reused
