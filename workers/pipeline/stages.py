"""The pipeline's stages as plain functions: what each does to one document, given where it
reads and writes (``stores.Stores``).

The Celery tasks (``tasks``) are shells that call these with the deployment's stores (Redis,
S3, OpenSearch: ``tasks.STORES``); the unit tests call them with in-memory ones
(``tests/memory.py``) and check what a stage does — a redelivery, a changed version, a failed
context, a finished document — without a service.

Every stage is safe to run again (``guard``, ``delivery``): it runs only while its document,
at this version, has not reached the stage's state; it skips work already checkpointed; it
sends the next stage *before* recording its own state, so a crash between the two repeats a
little work rather than losing the hand-off (the next stage, delivered twice, is a no-op the
second time).

What the in-memory stores do not cover: a reindex's generation (``config.rebuilds``) reads the
live collection and advances the rebuild through Redis directly (``reuse``, ``rebuild``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workers.chunks import recipe
from workers.chunks.splitting import Chunk, is_code
from workers.contextualizers import registry
from workers.contextualizers.base import SourceDocument, contextualized_text
from workers.embedding import registry as embedders
from workers.errors import BadDocument, ExtractionError
from workers.extraction import detect, sandbox
from workers.extraction.limits import Limits
from workers.pipeline import bundling, stores
from workers.pipeline.routing import CHUNK_QUEUE, INDEX_QUEUE, contextualize_priority, document_queue
from workers.pipeline.sending import CONTEXTUALIZE_TASK, INDEX_TASK, SLICE_TASK
from workers.pipeline.stores import Stores
from workers.settings import get_settings
from workers.storage import states as state_names
from workers.storage.bundle_pool import CONTEXTUALIZE, INDEX
from workers.storage.catalog import CollectionConfig
from workers.storage.working_set import Opening

if TYPE_CHECKING:
    from workers.contextualizers.base import Contextualizer

log = logging.getLogger("situate.tasks")


# ---- chunk ------------------------------------------------------------------------------

def chunk(s: Stores, collection: str, doc_id: str, version: str) -> None:
    """Body (a file extracted first) -> chunks, checkpointed; then the document's contextualize
    message, on its shard. An offline contextualizer's contexts (free, instant) are written here
    and the document goes straight to the index: a message, a task and their bookkeeping fewer."""
    opened = stores.open_document(s, collection, doc_id, version, body=True)
    if not stores.current(opened.state, version, state_names.CHUNKED):
        return
    config = stores.config_of(collection, opened)
    facts: dict[str, object] = {}
    payload: dict[str, Any] | None = None
    if opened.chunks is not None:  # delivered again after chunking: the chunks are checkpointed
        chunks, language, metadata = opened.chunks
    else:
        payload = stores.body_of(s, opened, collection, doc_id, version)
        if payload is None:
            raise BadDocument("document body is gone from the body store (expired before a worker took it)")
        if payload.get("text") is None and payload.get("original"):
            payload = _extract(s, collection, doc_id, version, payload)
        metadata = payload.get("metadata") or {}
        chunks, language, facts = recipe.chunks_of(config, payload)
        if not chunks:
            raise BadDocument("chunking produced no chunk (no text content)")
        limit = get_settings().max_chunks_per_document
        if len(chunks) > limit:
            raise BadDocument(f"document has {len(chunks):,} chunks, over the limit of {limit:,} "
                              "(SITUATE_MAX_CHUNKS_PER_DOCUMENT)")
        s.checkpoints.save_chunks(collection, doc_id, version, chunks, language, metadata)
        s.catalog.record_mix(collection, len(chunks) if is_code(language) else 0, 0 if is_code(language) else len(chunks),
                             sum(1 for c in chunks if c.pages))
    if config.contextualizer in registry.INLINE:
        payload = payload if payload is not None else _present(stores.body_of(s, opened, collection, doc_id, version))
        doc = _source_of(collection, doc_id, version, chunks, language, metadata, payload)
        contexts_for(s, registry.for_collection(config), doc, chunks)
        _to_index(s, collection, doc_id, version, chunks)
        s.states.set_state(collection, doc_id, version, state_names.SITUATED, chunks_total=len(chunks), **facts)
        return
    _to_contextualize(s, config, opened, collection, doc_id, version, chunks, payload)
    s.states.set_state(collection, doc_id, version, state_names.CHUNKED, chunks_total=len(chunks), **facts)


def _to_contextualize(s: Stores, config: CollectionConfig, opened: Opening, collection: str, doc_id: str,
                      version: str, chunks: list[Chunk], payload: dict[str, Any] | None) -> None:
    """The contextualize stage's message, on the document's shard; a one-chunk document joins its
    collection's bundle instead (``bundling``), unless it goes to a Message Batch or is a reindex's
    (their documents' own paths: the pool of batch requests, the live generation's contexts)."""
    if len(chunks) == 1 and bundling.enabled(s) and not config.rebuilds:
        payload = payload if payload is not None else _present(stores.body_of(s, opened, collection, doc_id, version))
        if not payload.get("batch"):
            bundling.offer(s, CONTEXTUALIZE, collection, doc_id, version, len(chunks[0].text.encode("utf-8")))
            return
    s.gate.send(CONTEXTUALIZE_TASK, (collection, doc_id, version), queue=document_queue(collection, doc_id),
                priority=contextualize_priority(len(chunks)))


# What a chunk task's turn in the fair gate is worth: extraction beyond it is charged to the
# collection as turns given up to the others (storage/fairqueue.py).
TURN_S = 2.0


def _extract(s: Stores, collection: str, doc_id: str, version: str, payload: dict[str, Any]) -> dict[str, Any]:
    """A file's original bytes -> its text and structure, in the sandbox, under limits. The text
    replaces the original in the body store (later stages and a redelivery read it from there),
    once Redis has room for it (``capacity.make_room``: the producer only saw the file)."""
    original = s.bodies().get_original(collection, doc_id, version)
    if original is None:
        raise BadDocument("the file is gone from the body store (expired before a worker took it): submit it again")
    info = payload["original"]
    started = time.monotonic()
    try:
        extracted = sandbox.extract(original, info["media_type"], info.get("name") or doc_id, Limits.from_settings())
    except ExtractionError as e:
        raise BadDocument(f"{detect.LABELS.get(info['media_type'], info['media_type'])}: {e}") from None
    finally:
        s.gate.charge(CHUNK_QUEUE, collection, (time.monotonic() - started) / TURN_S - 1)
    found = extracted.to_json()
    payload = {**payload, "text": found.pop("text"), "extracted": found}
    s.capacity.wait_for_room(len(payload["text"].encode("utf-8")), "this file's text")
    s.bodies().put(collection, doc_id, version, payload)
    _keep_original(s, collection, doc_id, version)
    return payload


def _keep_original(s: Stores, collection: str, doc_id: str, version: str) -> None:
    """The original bytes, kept for the search page to draw its pages (within their budget), or
    dropped; the document's state says which."""
    settings = get_settings()
    if not settings.keep_originals:
        s.bodies().delete_original(collection, doc_id, version)
        s.states.annotate(collection, doc_id, original="not kept: SITUATE_KEEP_ORIGINALS is off")
        return
    kept = s.bodies().keep_original(collection, doc_id, version, settings.keep_originals_mb * 1_000_000)
    s.states.annotate(collection, doc_id, original="kept" if kept else
                      f"not kept: over the {settings.keep_originals_mb:,} MB kept for originals (SITUATE_KEEP_ORIGINALS_MB)")


# ---- contextualize ----------------------------------------------------------------------

# A Message Batch submitted for the chunks still missing (``tasks``: Anthropic's batches and
# the poll that collects them are Celery's business, not a stage's).
BatchSubmitter = Callable[["Contextualizer", SourceDocument, list[Chunk]], None]
# Contexts a rebuild takes from the live generation for these chunks (``tasks``: reads it).
Reuser = Callable[[CollectionConfig, str, str, list[Chunk], set[int]], int]


def contextualize(s: Stores, collection: str, doc_id: str, version: str, submit_batch: BatchSubmitter | None = None,
                  reuse: Reuser | None = None) -> None:
    """Chunks -> contexts, each checkpointed as it arrives; a big document warmed, then sliced
    for any worker; then the index message."""
    opened = stores.open_document(s, collection, doc_id, version, contexts=True, body=True)
    if not stores.current(opened.state, version, state_names.SITUATED):
        return
    config, chunks, language, metadata = stores.loaded(collection, opened)
    done = opened.contexts
    if config.rebuilds and reuse and reuse(config, doc_id, version, chunks, set(done)):  # paid for already?
        done = s.checkpoints.load_contexts(collection, doc_id, version)
    missing = [c for c in chunks if c.n not in done]
    if missing:
        doc = opened_source(s, opened, collection, doc_id, version)
        contextualizer = registry.for_collection(config)
        if doc.batch and config.contextualizer == "anthropic" and submit_batch is not None:
            submit_batch(contextualizer, doc, missing)
            return
        slice_size = get_settings().llm_document_concurrency
        if config.contextualizer in registry.SLICED and len(missing) > slice_size:
            _warm_then_slice(s, contextualizer, doc, chunks, done, slice_size)
            return
        if len(done) + len(contexts_for(s, contextualizer, doc, missing)) == len(chunks):
            _send_to_index(s, collection, doc_id, version, chunks)  # every context is in: no need to read them again
            return
    hand_to_index(s, collection, doc_id, version, len(chunks))


def contextualize_slice(s: Stores, collection: str, doc_id: str, version: str, numbers: list[int]) -> None:
    """Part of a big document, after its warm-up call: reads the cached document block."""
    opened = stores.open_document(s, collection, doc_id, version, contexts=True, body=True)
    if not stores.current(opened.state, version, state_names.SITUATED):
        return
    config, chunks, language, metadata = stores.loaded(collection, opened)
    done = opened.contexts
    wanted = set(numbers)
    todo = [c for c in chunks if c.n in wanted and c.n not in done]
    if todo:
        doc = opened_source(s, opened, collection, doc_id, version)
        # Read the warm-up's cache entry only if it can still be alive; a slice that waited
        # in the queue longer than that warms it again itself (one call, then the rest), instead
        # of sending all its calls at once to a cold cache and paying a write for each.
        doc.warm = s.checkpoints.still_warm(collection, doc_id, version)
        contexts_for(s, registry.for_collection(config), doc, todo)
        s.checkpoints.mark_warm(collection, doc_id, version)
    hand_to_index(s, collection, doc_id, version, len(chunks))


def contexts_for(s: Stores, contextualizer: Contextualizer, doc: SourceDocument, chunks: list[Chunk]) -> set[int]:
    """Each context checkpointed as it arrives — kept in memory when Redis is away, so that the
    answers still in flight are not lost, nor paid again on the next attempt. The chunks whose
    contexts were written."""
    written: set[int] = set()
    try:
        for c, context in contextualizer.contextualize(doc, chunks):
            s.checkpoints.save_context(doc.collection, doc.doc_id, doc.version, c.n, context.to_json())
            written.add(c.n)
    finally:
        s.checkpoints.flush(doc.collection, doc.doc_id, doc.version)
    return written


def _warm_then_slice(s: Stores, contextualizer: Contextualizer, doc: SourceDocument, chunks: list[Chunk],
                     done: dict[int, dict[str, Any]], size: int) -> None:
    """A big document: warm its cache with its first chunk here, then let any idle worker take
    a slice of the rest (the provider's cache is per account, not per process), instead of one
    worker's bound setting the pace of the whole run. The slices are the same whatever is done
    already, so a delivery of this task again sends the same ones: their leases and the
    checkpoints make the copies no-ops, and no chunk is sent to the provider twice at once."""
    first, rest = chunks[0], chunks[1:]
    if first.n not in done:
        contexts_for(s, contextualizer, doc, [first])
        s.checkpoints.mark_warm(doc.collection, doc.doc_id, doc.version)
    queue = document_queue(doc.collection, doc.doc_id)
    for numbers in _slices(contextualizer, doc, rest, size):
        if any(n not in done for n in numbers):  # ahead of the collection's other documents: the cache is warm now
            s.gate.send(SLICE_TASK, (doc.collection, doc.doc_id, doc.version, numbers), queue=queue, front=True)


def _slices(contextualizer: Contextualizer, doc: SourceDocument, chunks: list[Chunk], size: int) -> list[list[int]]:
    """Runs of at most ``2 x size`` chunks; a long document's along its windows (each window
    written once, by the first call of the slice that holds it), else of ``size``."""
    windowed = getattr(contextualizer, "long_document_plan", lambda _doc: None)(doc)
    if windowed is None:
        return [[c.n for c in chunks[i:i + size]] for i in range(0, len(chunks), size)]
    wanted = {c.n for c in chunks}
    out: list[list[int]] = []
    for window in windowed.windows:
        numbers = [n for n in window.chunks if n in wanted]
        step = size if len(numbers) > 2 * size else len(numbers) or 1
        out += [numbers[i:i + step] for i in range(0, len(numbers), step) if numbers[i:i + step]]
    return out


def hand_to_index(s: Stores, collection: str, doc_id: str, version: str, total: int) -> None:
    """Send the document to the index queue once every chunk has its context. Whichever slice
    finishes last sends it; two finishing at once both do, and the second index is a no-op."""
    if len(s.checkpoints.load_contexts(collection, doc_id, version)) < total:
        return
    _send_to_index(s, collection, doc_id, version)


def _send_to_index(s: Stores, collection: str, doc_id: str, version: str, chunks: list[Chunk] | None = None) -> None:
    _to_index(s, collection, doc_id, version, chunks)
    s.states.set_state(collection, doc_id, version, state_names.SITUATED)


def _to_index(s: Stores, collection: str, doc_id: str, version: str, chunks: list[Chunk] | None) -> None:
    """The index stage's message; a one-chunk document (``chunks`` known) joins its collection's
    bundle instead (``bundling``)."""
    if chunks is not None and len(chunks) == 1 and bundling.enabled(s):
        bundling.offer(s, INDEX, collection, doc_id, version, len(chunks[0].text.encode("utf-8")))
    else:
        s.gate.send(INDEX_TASK, (collection, doc_id, version), queue=INDEX_QUEUE)


def source(s: Stores, collection: str, doc_id: str, version: str, chunks: list[Chunk], language: str,
           metadata: dict[str, Any]) -> SourceDocument:
    return _source_of(collection, doc_id, version, chunks, language, metadata,
                      _present(s.bodies().get(collection, doc_id, version)))


def opened_source(s: Stores, o: Opening, collection: str, doc_id: str, version: str) -> SourceDocument:
    _, chunks, language, metadata = stores.loaded(collection, o)
    return _source_of(collection, doc_id, version, chunks, language, metadata,
                      _present(stores.body_of(s, o, collection, doc_id, version)))


def _present(payload: dict[str, Any] | None) -> dict[str, Any]:
    if payload is None:
        raise BadDocument("document body is gone from the body store; submit the document again")
    return payload


def _source_of(collection: str, doc_id: str, version: str, chunks: list[Chunk], language: str,
               metadata: dict[str, Any], payload: dict[str, Any]) -> SourceDocument:
    return SourceDocument(collection, doc_id, version, payload["text"], language, metadata,
                          chunks, payload.get("run"), bool(payload.get("batch")), structure=payload.get("extracted"))


# ---- index ------------------------------------------------------------------------------

def tail_weight(config: CollectionConfig, chunks: list[Chunk]) -> float:
    """How much of a chunk past a local embedder's 256 tokens counts: the collection's
    ``embed_tail`` for a paged document's chunks (a PDF's, a deck's), none for a text's. On pages
    the header (title, page title, table header) fills the head and the tail holds the table's
    last rows; a text chunk's tail is only more of its prose: the FAQs lost with it, the filings
    gained (``ops/bench corpora``; docs/decisions.md)."""
    return config.embed_tail if any(c.pages for c in chunks) else 0.0


@dataclass
class Ready:
    """A document version opened by the index stage: its rows made, their texts to embed."""

    doc_id: str
    version: str
    doc: dict[str, Any]  # its state
    config: CollectionConfig
    opened: Opening
    chunks: list[Chunk]
    metadata: dict[str, Any]
    rows: list[dict[str, Any]]
    texts: list[str]


def ready_to_index(s: Stores, collection: str, doc_id: str, version: str) -> Ready | None:
    """The document opened for indexing, or None if this version needs none (done, superseded)."""
    opened = stores.open_document(s, collection, doc_id, version, contexts=True, body=get_settings().keep_text)
    doc = stores.current(opened.state, version, state_names.INDEXED)
    if not doc:
        return None
    config, chunks, _, metadata = stores.loaded(collection, opened)
    contexts = opened.contexts
    if lacking := [c.n for c in chunks if c.n not in contexts]:
        raise RuntimeError(f"refusing to index half-situated: no context for chunks {lacking[:20]}")
    title = doc.get("title") or None
    rows = [{"n": c.n, "text": c.text, "start": c.start, "end": c.end, "context": contexts[c.n]["text"],
             "pages": list(c.pages) if c.pages else None, "section": c.section, "title": title} for c in chunks]
    # The chunk alone, with its context (LLM contexts), or with an offline context's part for the vector (a header).
    texts = [contextualized_text(r["context"] if config.embed_context else contexts[r["n"]].get("embed", ""), r["text"])
             for r in rows]
    return Ready(doc_id, version, doc, config, opened, chunks, metadata, rows, texts)


def embed(config: CollectionConfig, ready: list[Ready]) -> None:
    """Each document's rows their vectors: one request for the documents whose long chunks' tails weigh
    alike; one a document for a contextual embedder (voyage-context reads one document's chunks together)."""
    groups: dict[float, list[Ready]] = {}
    for r in ready:
        groups.setdefault(tail_weight(config, r.chunks), []).append(r)
    for tail, group in groups.items():
        embedder = embedders.for_documents(config.embedder, config.embed_model, tail)
        parts = [[r] for r in group] if getattr(embedder, "contextual", False) else [group]
        for part in parts:
            vectors = iter(embedder.embed_documents([t for r in part for t in r.texts]))
            for r in part:
                for row in r.rows:
                    row["vector"] = next(vectors)


def record_indexed(s: Stores, config: CollectionConfig, r: Ready) -> bool:
    """The state moved to indexed, its version written; False if superseded or deleted meanwhile (then unwritten)."""
    if s.states.set_state(config.name, r.doc_id, r.version, state_names.INDEXED, indexed_version=r.version,
                          chunks=len(r.rows), chunks_total=len(r.rows), error="", indexed_at=f"{time.time():.3f}"):
        return True
    now = s.states.get(config.name, r.doc_id)
    if now is None or now.get("version") != r.version:  # superseded or deleted while we wrote
        s.index.delete_version(config, r.doc_id, r.version, [row["n"] for row in r.rows])
        log.info("%s/%s v%s: superseded while indexing; its chunks removed", config.name, r.doc_id, r.version)
        if not s.catalog.is_current(config):  # dropped between our check and the write
            s.index.delete_stray_index(config)
    return False


def recently_indexed(r: Ready) -> bool:
    """The previous version was indexed moments ago: the search for older chunks must see it."""
    return time.time() - float(r.doc.get("indexed_at") or 0) < 5


def release_indexed(s: Stores, config: CollectionConfig, r: Ready) -> None:
    stores.close_indexed(s, config.name, r.doc_id, r.version, _kept_body(s, r.opened, config, r.doc_id, r.version),
                         lambda m: _count_indexed(m, config.name, len(r.rows)))


def index(s: Stores, collection: str, doc_id: str, version: str) -> CollectionConfig | None:
    """Contexts -> vectors -> the index, this version whole; older versions removed after; the
    document's working data released. The collection's config when this version was indexed
    (a reindex's generation then advances: ``tasks``), else None."""
    r = ready_to_index(s, collection, doc_id, version)
    if r is None:
        return None
    config = r.config
    embed(config, [r])
    if not s.catalog.is_current(config):  # dropped (and perhaps made again) while we embedded
        log.info("%s/%s v%s: its collection was dropped; nothing written", collection, doc_id, version)
        return None
    s.index.ensure_index(config)
    s.index.write_version(config, doc_id, version, r.doc["seq"], r.rows, r.metadata,
                          rollback=r.doc.get("indexed_version") != version)
    if not record_indexed(s, config, r):
        return None
    removed = s.index.delete_older(config, doc_id, r.doc["seq"], refresh_first=recently_indexed(r))
    release_indexed(s, config, r)
    log.info("indexed %s/%s v%s: %d chunks, %d older removed", collection, doc_id, version, len(r.rows), removed)
    return config


def _count_indexed(m: stores.Counter, collection: str, chunks: int) -> None:
    """Throughput over time, for /metrics and the dashboard."""
    m.count("documents_indexed", 1, collection=collection)
    m.count("chunks_indexed", chunks, collection=collection)


def _kept_body(s: Stores, o: Opening, config: CollectionConfig, doc_id: str, version: str) -> dict[str, Any] | None:
    """The indexed version's body, to keep compressed for a rebuild of the collection without its
    source (``situate reindex``), or None. A generation being built reads from there already."""
    if config.rebuilds or not get_settings().keep_text:
        return None
    payload = stores.body_of(s, o, config.name, doc_id, version)
    return None if payload is None else {**payload, "version": version, "run": None, "batch": False}
