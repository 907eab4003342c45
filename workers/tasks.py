"""The three pipeline tasks. Each takes only a reference — (collection, doc_id, version) — and
reads what it needs from the body store and the checkpoints.

    ingest         (ingest)      body -> chunks, checkpointed; hands off to the document's shard
    situate        (situate.N)   chunks -> contexts, each checkpointed as it arrives
    situate_slice  (situate.N)   a big document's chunks after its warm-up call, any worker
    poll_batch     (situate.N)   Message Batches mode: collect results, submit the next step
    index          (index)       contexts -> vectors -> OpenSearch; old versions removed after

Every task is safe to run twice (at-least-once delivery): it does nothing for a version that
has been superseded, skips work already checkpointed, and writes with deterministic ids.
Transient faults (Redis/OpenSearch unreachable) are retried with backoff; anything else marks
the document failed with the reason, and the document alone.
"""

from __future__ import annotations

import logging

from celery import Task
from opensearchpy.exceptions import ConnectionError as OpenSearchConnectionError
from redis.exceptions import ConnectionError as RedisConnectionError, TimeoutError as RedisTimeoutError

from workers import batches, checkpoints, collections, contextualizers, embedders, index, models, status
from workers.app import INDEX_QUEUE, app, situate_priority, situate_queue
from workers.bodies import body_store
from workers.connections import redis_client
from workers.chunking import guess_language, locate, split
from workers.documents import BadDocument, shard_for
from workers.settings import get_settings

log = logging.getLogger("situate.tasks")

TRANSIENT = (RedisConnectionError, RedisTimeoutError, OpenSearchConnectionError, TimeoutError, ConnectionError)


class PipelineTask(Task):
    """Retries transient faults; on a final failure records it on the document, visibly."""

    autoretry_for = TRANSIENT
    retry_backoff = 2
    retry_backoff_max = 120
    retry_jitter = True
    max_retries = 8

    def on_failure(self, exc, task_id, args, kwargs, einfo):
        collection, doc_id, version = args[:3]
        stage = self.name.split(".")[-1]
        reason = str(exc) if isinstance(exc, BadDocument) else f"{stage} failed: {type(exc).__name__}: {exc}"
        log.error("document %s/%s failed: %s", collection, doc_id, reason)
        try:
            status.set_state(collection, doc_id, version, status.FAILED, error=reason[:2000])
        except Exception:  # Redis itself gone: the message is re-delivered later anyway
            log.exception("could not record failure of %s/%s", collection, doc_id)


def _load(collection: str, doc_id: str, version: str):
    """The collection's config and the document's checkpointed chunks, language, metadata."""
    loaded = checkpoints.load_chunks(collection, doc_id, version)
    if loaded is None:
        raise BadDocument("chunks are gone from the checkpoint store; submit the document again")
    return (collections.load(collection), *loaded)


def _shard_queue(collection: str, doc_id: str) -> str:
    return situate_queue(shard_for(collection, doc_id, get_settings().shards))


def _current(collection: str, doc_id: str, version: str) -> bool:
    """False when a newer version was submitted since: this run's work is moot."""
    doc = status.get(collection, doc_id)
    return doc is not None and doc.get("version") == version


@app.task(name="situate.ingest", base=PipelineTask)
def ingest(collection: str, doc_id: str, version: str) -> None:
    if not _current(collection, doc_id, version):
        return
    config = collections.load(collection)
    payload = body_store().get(collection, doc_id, version)
    if payload is None:  # redelivered after the body was released: the chunks are checkpointed
        loaded = checkpoints.load_chunks(collection, doc_id, version)
        if loaded is None:
            raise BadDocument("document body is gone from the body store (expired before a worker took it)")
        chunks = loaded[0]
    else:
        text, metadata = payload["text"], payload.get("metadata") or {}
        language = guess_language(text, metadata)
        if payload.get("chunks") is not None:
            chunks = locate(text, [(c["n"], c["text"]) for c in payload["chunks"]])
        else:
            chunks = split(text, language, config.chunk_tokens, config.chunk_overlap)
        if not chunks:
            raise BadDocument("chunking produced no chunk (no text content)")
        limit = get_settings().max_chunks_per_document
        if len(chunks) > limit:
            raise BadDocument(f"document has {len(chunks):,} chunks, over the limit of {limit:,} "
                              "(SITUATE_MAX_CHUNKS_PER_DOCUMENT)")
        checkpoints.save_chunks(collection, doc_id, version, chunks, language, metadata)
        status.set_state(collection, doc_id, version, status.CHUNKED, chunks_total=len(chunks))
    situate.apply_async((collection, doc_id, version), queue=_shard_queue(collection, doc_id),
                        priority=situate_priority(len(chunks)))


@app.task(name="situate.situate", base=PipelineTask)
def situate(collection: str, doc_id: str, version: str) -> None:
    if not _current(collection, doc_id, version):
        return
    config, chunks, language, metadata = _load(collection, doc_id, version)
    done = checkpoints.load_contexts(collection, doc_id, version)
    missing = [c for c in chunks if c.n not in done]
    if missing:
        doc = _source(collection, doc_id, version, chunks, language, metadata)
        contextualizer = contextualizers.for_collection(config)
        if doc.batch and config.contextualizer == "anthropic":
            batch_id, _ = batches.submit(contextualizer, doc, missing)
            poll_batch.apply_async((collection, doc_id, version, batch_id), queue=_shard_queue(collection, doc_id),
                                   countdown=get_settings().batch_poll_s)
            return
        slice_size = get_settings().llm_document_concurrency
        if config.contextualizer in contextualizers.LLM_PROVIDERS and len(missing) > slice_size:
            # A big document: warm its cache here, then let any idle worker take a slice of the
            # rest (the provider's cache is per account, not per process), instead of one
            # worker's bound setting the pace of the whole run.
            for chunk, context in contextualizer.contextualize(doc, missing[:1]):
                checkpoints.save_context(collection, doc_id, version, chunk.n, context.to_json())
            _mark_warm(collection, doc_id, version)
            rest = missing[1:]
            queue = _shard_queue(collection, doc_id)
            for i in range(0, len(rest), slice_size):
                situate_slice.apply_async((collection, doc_id, version, [c.n for c in rest[i:i + slice_size]]),
                                          queue=queue, priority=0)
            return
        for chunk, context in contextualizer.contextualize(doc, missing):
            checkpoints.save_context(collection, doc_id, version, chunk.n, context.to_json())
    _situated(collection, doc_id, version, len(chunks))


def _situated(collection: str, doc_id: str, version: str, total: int) -> None:
    """Hand the document to the index queue once every chunk has its context — exactly once,
    whichever slice finishes last (SET NX), redeliveries included."""
    if len(checkpoints.load_contexts(collection, doc_id, version)) < total:
        return
    # One marker per submission: a document submitted again (say after an indexing failure)
    # must be handed over again.
    submitted = (status.get(collection, doc_id) or {}).get("submitted", "")
    if redis_client().set(f"situate:situated:{collection}:{version}:{doc_id}:{submitted}", "1", nx=True, ex=86400):
        status.set_state(collection, doc_id, version, status.SITUATED)
        index_document.apply_async((collection, doc_id, version), queue=INDEX_QUEUE)


@app.task(name="situate.situate_slice", base=PipelineTask)
def situate_slice(collection: str, doc_id: str, version: str, numbers: list[int]) -> None:
    """Part of a big document, after its warm-up call: reads the cached document block."""
    if not _current(collection, doc_id, version):
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
        for chunk, context in contextualizers.for_collection(config).contextualize(doc, todo):
            checkpoints.save_context(collection, doc_id, version, chunk.n, context.to_json())
        _mark_warm(collection, doc_id, version)
    _situated(collection, doc_id, version, len(chunks))


def _warm_key(collection: str, doc_id: str, version: str) -> str:
    return f"situate:warm:{collection}:{version}:{doc_id}"


def _mark_warm(collection: str, doc_id: str, version: str) -> None:
    """The document's cache entry was just read or written (each hit refreshes its TTL)."""
    redis_client().set(_warm_key(collection, doc_id, version), "1", ex=models.CACHE_TRUST_S)


def _still_warm(collection: str, doc_id: str, version: str) -> bool:
    return bool(redis_client().exists(_warm_key(collection, doc_id, version)))


def _source(collection, doc_id, version, chunks, language, metadata) -> contextualizers.SourceDocument:
    payload = body_store().get(collection, doc_id, version)
    if payload is None:
        raise BadDocument("document body is gone from the body store; submit the document again")
    return contextualizers.SourceDocument(collection, doc_id, version, payload["text"], language, metadata,
                                          chunks, payload.get("run"), bool(payload.get("batch")))


@app.task(name="situate.poll_batch", base=PipelineTask)
def poll_batch(collection: str, doc_id: str, version: str, batch_id: str) -> None:
    """Collect an ended Message Batch, then submit the document's next step or index it."""
    if not _current(collection, doc_id, version):
        return
    config, chunks, language, metadata = _load(collection, doc_id, version)
    contextualizer = contextualizers.for_collection(config)
    doc = _source(collection, doc_id, version, chunks, language, metadata)
    queue = _shard_queue(collection, doc_id)
    if not batches.collect(contextualizer, doc, batch_id):
        poll_batch.apply_async((collection, doc_id, version, batch_id), queue=queue,
                               countdown=get_settings().batch_poll_s)
        return
    done = checkpoints.load_contexts(collection, doc_id, version)
    missing = [c for c in chunks if c.n not in done]
    if missing:  # the seed has ended: now the rest, reading the seed's cache entry
        next_id, _ = batches.submit(contextualizer, doc, missing)
        poll_batch.apply_async((collection, doc_id, version, next_id), queue=queue,
                               countdown=get_settings().batch_poll_s)
        return
    _situated(collection, doc_id, version, len(chunks))


@app.task(name="situate.index", base=PipelineTask)
def index_document(collection: str, doc_id: str, version: str) -> None:
    if not _current(collection, doc_id, version):
        return
    config, chunks, _, metadata = _load(collection, doc_id, version)
    contexts = checkpoints.load_contexts(collection, doc_id, version)
    lacking = [c.n for c in chunks if c.n not in contexts]
    if lacking:
        raise RuntimeError(f"refusing to index half-situated: no context for chunks {lacking[:20]}")
    rows = []
    for c in chunks:
        context = contexts[c.n]["text"]
        rows.append({"n": c.n, "text": c.text, "start": c.start, "end": c.end, "context": context})
    # One document's chunks, in order: a contextual embedder (voyage-context) needs them together.
    vectors = embedders.get(config.embedder, config.embed_model).embed_documents(
        [contextualizers.contextualized_text(r["context"], r["text"]) if config.embed_context else r["text"]
         for r in rows])
    for row, vector in zip(rows, vectors):
        row["vector"] = vector
    previous = status.get(collection, doc_id) or {}
    index.ensure_index(config)
    index.write_chunks(config, doc_id, version, rows, metadata)
    removed = index.delete_stale(config, doc_id, version, {r["n"] for r in rows}, previous.get("chunks", 0))
    if status.set_state(collection, doc_id, version, status.INDEXED, indexed_version=version,
                        chunks=len(rows), chunks_total=len(rows), error=""):
        body_store().delete(collection, doc_id, version)
        checkpoints.release(collection, doc_id, version)
    log.info("indexed %s/%s v%s: %d chunks, %d stale removed", collection, doc_id, version, len(rows), removed)
