"""The pipeline's tasks, one per stage. Each takes only a reference — (collection, doc_id,
version) — and reads what it needs from the body store and the checkpoints.

    chunk                (chunk)            body -> chunks, checkpointed; hands off to the document's shard
    contextualize        (contextualize.N)  chunks -> contexts, each checkpointed as it arrives
    contextualize_slice  (contextualize.N)  a big document's chunks after its warm-up call, any worker
    poll_batch           (contextualize.N)  Message Batches mode: collect results, submit the next step
    index                (index)            contexts -> vectors -> OpenSearch; older versions removed after

Every task is safe to deliver again (``guard``, ``delivery``): a stage runs only while its
document, at this version, has not reached the stage's state; it skips work already
checkpointed; it sends the next stage *before* recording its own state, so a crash between
the two repeats a little work rather than losing the hand-off (the next stage, delivered
twice, is a no-op the second time).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, cast

from workers import keys, metrics, models
from workers.chunking import Chunk, is_code
from workers.connections import redis_client
from workers.contextualizers import registry, reuse, source
from workers.contextualizers.base import SourceDocument, contextualized_text
from workers.embedding import registry as embedders
from workers.errors import BadDocument, ExtractionError
from workers.extraction import detect, sandbox
from workers.extraction.limits import Limits
from workers.pipeline import fair, rebuild, reconcile  # noqa: F401 - reconcile: a heartbeat duty of every worker
from workers.pipeline.app import app
from workers.pipeline.guard import PipelineTask
from workers.pipeline.routing import CHUNK_QUEUE, INDEX_QUEUE, contextualize_priority, document_queue
from workers.pipeline.sending import CHUNK_TASK, CONTEXTUALIZE_TASK, INDEX_TASK, POLL_BATCH_TASK, SLICE_TASK
from workers.settings import get_settings
from workers.storage import capacity, catalog, checkpoints, chunk_index, states
from workers.storage.bodies import body_store

if TYPE_CHECKING:
    from workers.contextualizers.base import Contextualizer
    from workers.contextualizers.claude.scheduler import LLMContextualizer

log = logging.getLogger("situate.tasks")


def _pending(collection: str, doc_id: str, version: str, until: str) -> dict[str, Any] | None:
    """The document's state if ``version`` is current and has not reached ``until`` yet, else
    None: superseded, deleted, failed, or this stage (or a later one) already done."""
    doc = states.get(collection, doc_id)
    if doc is None or doc.get("version") != version or doc["state"] == states.FAILED:
        return None
    return doc if states.RANK.get(doc["state"], 99) < states.RANK[until] else None


def _load(collection: str, doc_id: str, version: str) -> tuple[catalog.CollectionConfig, list[Chunk], str, dict[str, Any]]:
    """The collection's config and the document's checkpointed chunks, language, metadata."""
    loaded = checkpoints.load_chunks(collection, doc_id, version)
    if loaded is None:
        raise BadDocument("chunks are gone from the checkpoint store; submit the document again")
    return (catalog.load(collection), *loaded)


@app.task(name=CHUNK_TASK, base=PipelineTask)
def chunk(collection: str, doc_id: str, version: str) -> None:
    if not _pending(collection, doc_id, version, states.CHUNKED):
        return
    config = catalog.load(collection)
    facts: dict[str, object] = {}
    loaded = checkpoints.load_chunks(collection, doc_id, version)
    if loaded is not None:  # delivered again after chunking: the chunks are checkpointed
        chunks = loaded[0]
    else:
        payload = body_store().get(collection, doc_id, version)
        if payload is None:
            raise BadDocument("document body is gone from the body store (expired before a worker took it)")
        if payload.get("text") is None and payload.get("original"):
            payload = _extract(collection, doc_id, version, payload)
        metadata = payload.get("metadata") or {}
        chunks, language, facts = source.chunks_of(config, payload)
        if not chunks:
            raise BadDocument("chunking produced no chunk (no text content)")
        limit = get_settings().max_chunks_per_document
        if len(chunks) > limit:
            raise BadDocument(f"document has {len(chunks):,} chunks, over the limit of {limit:,} "
                              "(SITUATE_MAX_CHUNKS_PER_DOCUMENT)")
        checkpoints.save_chunks(collection, doc_id, version, chunks, language, metadata)
        catalog.record_mix(collection, len(chunks) if is_code(language) else 0, 0 if is_code(language) else len(chunks),
                           sum(1 for c in chunks if c.pages))
    fair.send(CONTEXTUALIZE_TASK, (collection, doc_id, version), queue=document_queue(collection, doc_id),
              priority=contextualize_priority(len(chunks)))
    states.set_state(collection, doc_id, version, states.CHUNKED, chunks_total=len(chunks), **facts)


# What a chunk task's turn in the fair gate is worth: extraction beyond it is charged to the
# collection as turns given up to the others (storage/fairqueue.py).
TURN_S = 2.0


def _extract(collection: str, doc_id: str, version: str, payload: dict[str, Any]) -> dict[str, Any]:
    """A file's original bytes -> its text and structure, in the sandbox, under limits. The text
    replaces the original in the body store (later stages and a redelivery read it from there),
    once Redis has room for it (``capacity.make_room``: the producer only saw the file)."""
    original = body_store().get_original(collection, doc_id, version)
    if original is None:
        raise BadDocument("the file is gone from the body store (expired before a worker took it): submit it again")
    info = payload["original"]
    started = time.monotonic()
    try:
        extracted = sandbox.extract(original, info["media_type"], info.get("name") or doc_id, Limits.from_settings())
    except ExtractionError as e:
        raise BadDocument(f"{detect.LABELS.get(info['media_type'], info['media_type'])}: {e}") from None
    finally:
        fair.charge(CHUNK_QUEUE, collection, (time.monotonic() - started) / TURN_S - 1)
    found = extracted.to_json()
    payload = {**payload, "text": found.pop("text"), "extracted": found}
    capacity.wait_for_room(len(payload["text"].encode("utf-8")), "this file's text")
    body_store().put(collection, doc_id, version, payload)
    _keep_original(collection, doc_id, version)
    return payload


def _keep_original(collection: str, doc_id: str, version: str) -> None:
    """The original bytes, kept for the search page to draw its pages (within their budget), or
    dropped; the document's state says which."""
    s = get_settings()
    if not s.keep_originals:
        body_store().delete_original(collection, doc_id, version)
        states.annotate(collection, doc_id, original="not kept: SITUATE_KEEP_ORIGINALS is off")
        return
    kept = body_store().keep_original(collection, doc_id, version, s.keep_originals_mb * 1_000_000)
    states.annotate(collection, doc_id, original="kept" if kept else
                    f"not kept: over the {s.keep_originals_mb:,} MB kept for originals (SITUATE_KEEP_ORIGINALS_MB)")


@app.task(name=CONTEXTUALIZE_TASK, base=PipelineTask)
def contextualize(collection: str, doc_id: str, version: str) -> None:
    if not _pending(collection, doc_id, version, states.SITUATED):
        return
    config, chunks, language, metadata = _load(collection, doc_id, version)
    done = checkpoints.load_contexts(collection, doc_id, version)
    if config.rebuilds and _reused(config, doc_id, version, chunks, set(done)):  # a rebuild: paid for already?
        done = checkpoints.load_contexts(collection, doc_id, version)
    missing = [c for c in chunks if c.n not in done]
    if missing:
        doc = _source(collection, doc_id, version, chunks, language, metadata)
        contextualizer = registry.for_collection(config)
        if doc.batch and config.contextualizer == "anthropic":
            from workers.contextualizers.claude import batches

            batch_id, _ = batches.submit(cast("LLMContextualizer", contextualizer), doc, missing)
            states.annotate(collection, doc_id, batch=f"{version}:{batch_id}")  # the reconciler polls it if lost
            poll_batch.apply_async((collection, doc_id, version, batch_id), queue=document_queue(collection, doc_id),
                                   countdown=get_settings().batch_poll_s)
            return
        slice_size = get_settings().llm_document_concurrency
        if config.contextualizer in registry.LLM_PROVIDERS and len(missing) > slice_size:
            _warm_then_slice(contextualizer, doc, chunks, done, slice_size)
            return
        _contextualize(contextualizer, doc, missing)
    _hand_to_index(collection, doc_id, version, len(chunks))


def _reused(config: catalog.CollectionConfig, doc_id: str, version: str, chunks: list[Chunk], done: set[int]) -> int:
    """Contexts the live generation holds for these very chunks, checkpointed for this one."""
    live = catalog.find(config.rebuilds)
    if live is None:
        return 0
    count = reuse.fill(live, config, doc_id, version, chunks, done)
    if count:
        metrics.count("contexts_reused", count, collection=config.rebuilds)
    return count


def _contextualize(contextualizer: Contextualizer, doc: SourceDocument, chunks: list[Chunk]) -> None:
    """Each context checkpointed as it arrives — kept in memory when Redis is away, so that the
    answers still in flight are not lost, nor paid again on the next attempt."""
    try:
        for c, context in contextualizer.contextualize(doc, chunks):
            checkpoints.save_context(doc.collection, doc.doc_id, doc.version, c.n, context.to_json())
    finally:
        checkpoints.flush(doc.collection, doc.doc_id, doc.version)


def _warm_then_slice(contextualizer: Contextualizer, doc: SourceDocument, chunks: list[Chunk],
                     done: dict[int, dict[str, Any]], size: int) -> None:
    """A big document: warm its cache with its first chunk here, then let any idle worker take
    a slice of the rest (the provider's cache is per account, not per process), instead of one
    worker's bound setting the pace of the whole run. The slices are the same whatever is done
    already, so a delivery of this task again sends the same ones: their leases and the
    checkpoints make the copies no-ops, and no chunk is sent to the provider twice at once."""
    first, rest = chunks[0], chunks[1:]
    if first.n not in done:
        _contextualize(contextualizer, doc, [first])
        _mark_warm(doc.collection, doc.doc_id, doc.version)
    queue = document_queue(doc.collection, doc.doc_id)
    for numbers in _slices(contextualizer, doc, rest, size):
        if any(n not in done for n in numbers):  # ahead of the collection's other documents: the cache is warm now
            fair.send(SLICE_TASK, (doc.collection, doc.doc_id, doc.version, numbers), queue=queue, front=True)


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


def _hand_to_index(collection: str, doc_id: str, version: str, total: int) -> None:
    """Send the document to the index queue once every chunk has its context. Whichever slice
    finishes last sends it; two finishing at once both do, and the second index is a no-op."""
    if len(checkpoints.load_contexts(collection, doc_id, version)) < total:
        return
    fair.send(INDEX_TASK, (collection, doc_id, version), queue=INDEX_QUEUE)
    states.set_state(collection, doc_id, version, states.SITUATED)


@app.task(name=SLICE_TASK, base=PipelineTask)
def contextualize_slice(collection: str, doc_id: str, version: str, numbers: list[int]) -> None:
    """Part of a big document, after its warm-up call: reads the cached document block."""
    if not _pending(collection, doc_id, version, states.SITUATED):
        return
    config, chunks, language, metadata = _load(collection, doc_id, version)
    done = checkpoints.load_contexts(collection, doc_id, version)
    wanted = set(numbers)
    todo = [c for c in chunks if c.n in wanted and c.n not in done]
    if todo:
        doc = _source(collection, doc_id, version, chunks, language, metadata)
        # Read the warm-up's cache entry only if it can still be alive; a slice that waited
        # in the queue longer than that warms it again itself (one call, then the rest), instead
        # of sending all its calls at once to a cold cache and paying a write for each.
        doc.warm = _still_warm(collection, doc_id, version)
        _contextualize(registry.for_collection(config), doc, todo)
        _mark_warm(collection, doc_id, version)
    _hand_to_index(collection, doc_id, version, len(chunks))


def _warm_key(collection: str, doc_id: str, version: str) -> str:
    return keys.warm(collection, version, doc_id)


def _mark_warm(collection: str, doc_id: str, version: str) -> None:
    """The document's cache entry was just read or written (each hit refreshes its TTL)."""
    redis_client().set(_warm_key(collection, doc_id, version), "1", ex=models.CACHE_TRUST_S)


def _still_warm(collection: str, doc_id: str, version: str) -> bool:
    return bool(redis_client().exists(_warm_key(collection, doc_id, version)))


def _source(collection: str, doc_id: str, version: str, chunks: list[Chunk], language: str,
            metadata: dict[str, Any]) -> SourceDocument:
    payload = body_store().get(collection, doc_id, version)
    if payload is None:
        raise BadDocument("document body is gone from the body store; submit the document again")
    return SourceDocument(collection, doc_id, version, payload["text"], language, metadata,
                          chunks, payload.get("run"), bool(payload.get("batch")), structure=payload.get("extracted"))


@app.task(name=POLL_BATCH_TASK, base=PipelineTask)
def poll_batch(collection: str, doc_id: str, version: str, batch_id: str) -> None:
    """Collect an ended Message Batch, then submit the document's next step or index it."""
    from workers.contextualizers.claude import batches

    if not _pending(collection, doc_id, version, states.SITUATED):
        return
    config, chunks, language, metadata = _load(collection, doc_id, version)
    contextualizer = registry.for_collection(config)
    doc = _source(collection, doc_id, version, chunks, language, metadata)
    queue = document_queue(collection, doc_id)
    if not batches.collect(cast("LLMContextualizer", contextualizer), doc, batch_id):
        poll_batch.apply_async((collection, doc_id, version, batch_id), queue=queue,
                               countdown=get_settings().batch_poll_s)
        return
    done = checkpoints.load_contexts(collection, doc_id, version)
    missing = [c for c in chunks if c.n not in done]
    if missing:  # the seed has ended: now the rest, reading the seed's cache entry
        next_id, _ = batches.submit(cast("LLMContextualizer", contextualizer), doc, missing)
        states.annotate(collection, doc_id, batch=f"{version}:{next_id}")
        poll_batch.apply_async((collection, doc_id, version, next_id), queue=queue,
                               countdown=get_settings().batch_poll_s)
        return
    _hand_to_index(collection, doc_id, version, len(chunks))


@app.task(name=INDEX_TASK, base=PipelineTask)
def index(collection: str, doc_id: str, version: str) -> None:
    doc = _pending(collection, doc_id, version, states.INDEXED)
    if not doc:
        return
    config, chunks, _, metadata = _load(collection, doc_id, version)
    contexts = checkpoints.load_contexts(collection, doc_id, version)
    lacking = [c.n for c in chunks if c.n not in contexts]
    if lacking:
        raise RuntimeError(f"refusing to index half-situated: no context for chunks {lacking[:20]}")
    title = doc.get("title") or None
    rows = [{"n": c.n, "text": c.text, "start": c.start, "end": c.end, "context": contexts[c.n]["text"],
             "pages": list(c.pages) if c.pages else None, "section": c.section, "title": title} for c in chunks]
    # One document's chunks, in order: a contextual embedder (voyage-context) needs them together.
    # The chunk alone, or with its context (LLM contexts), or with the part of an offline context
    # meant for the vector (an extracted document's header).
    embedded = [contextualized_text(r["context"] if config.embed_context else contexts[r["n"]].get("embed", ""), r["text"])
                for r in rows]
    vectors = embedders.get(config.embedder, config.embed_model).embed_documents(embedded)
    for row, vector in zip(rows, vectors):
        row["vector"] = vector
    if not catalog.is_current(config):  # dropped (and perhaps made again) while we embedded
        log.info("%s/%s v%s: its collection was dropped; nothing written", collection, doc_id, version)
        return
    chunk_index.ensure_index(config)
    chunk_index.write_version(config, doc_id, version, doc["seq"], rows, metadata,
                              rollback=doc.get("indexed_version") != version)
    if not states.set_state(collection, doc_id, version, states.INDEXED, indexed_version=version,
                            chunks=len(rows), chunks_total=len(rows), error="", indexed_at=f"{time.time():.3f}"):
        now = states.get(collection, doc_id)
        if now is None or now.get("version") != version:  # superseded or deleted while we wrote
            chunk_index.delete_version(config, doc_id, version, [r["n"] for r in rows])
            log.info("%s/%s v%s: superseded while indexing; its chunks removed", collection, doc_id, version)
            if not catalog.is_current(config):  # dropped between our check and the write
                chunk_index.delete_stray_index(config)
        return
    # The previous version was indexed moments ago: make sure the search below sees it.
    recent = time.time() - float(doc.get("indexed_at") or 0) < 5
    removed = chunk_index.delete_older(config, doc_id, doc["seq"], refresh_first=recent)
    _keep_body(config, doc_id, version)
    body_store().delete(collection, doc_id, version)
    checkpoints.release(collection, doc_id, version)
    with metrics.batch() as m:  # throughput over time, for /metrics and the dashboard
        m.count("documents_indexed", 1, collection=collection)
        m.count("chunks_indexed", len(rows), collection=collection)
    log.info("indexed %s/%s v%s: %d chunks, %d older removed", collection, doc_id, version, len(rows), removed)
    if config.rebuilds:  # a reindex's document landed: the reindex may be ready to move on now
        rebuild.advance()


def _keep_body(config: catalog.CollectionConfig, doc_id: str, version: str) -> None:
    """The indexed version's body, compressed, for a rebuild of the collection without its
    source (``situate reindex``). A generation being built reads from there already."""
    if config.rebuilds or not get_settings().keep_text:
        return
    payload = body_store().get(config.name, doc_id, version)
    if payload is not None:
        body_store().keep(config.name, doc_id, {**payload, "version": version, "run": None, "batch": False})


# Messages queued by 0.1 carry the old task names: the same code answers to them, so a backlog
# left in Redis across an upgrade is processed, not dropped as unknown.
LEGACY_TASK_NAMES = {"situate.ingest": chunk, "situate.situate": contextualize,
                     "situate.situate_slice": contextualize_slice}
for _old, _task in LEGACY_TASK_NAMES.items():
    app.task(name=_old, base=PipelineTask)(_task.__wrapped__)
