"""The stages of a bundle (``bundling``): one task for many one-chunk documents, each document
still its own unit of state, of bill and of failure.

``contextualize_bundle`` runs its documents' calls concurrently, each context checkpointed as it
arrives, and sends the documents situated to the index as one bundle; ``index_bundle`` embeds
them in one request and writes them in one bulk request. Both share the one-document stages'
parts (``stages``), so a document in a bundle is read, situated, embedded and recorded exactly
as one alone. One of them that fails, fails alone: a context's call is the document's own, so its
failure is recorded against it with the reason its own message would give; an index write that
fails is sent on alone (``bundling.send_alone``), and its own message fails it, or succeeds.
"""

from __future__ import annotations

import contextvars
import logging
import uuid
from concurrent.futures import ThreadPoolExecutor

from workers import faults, logs
from workers.chunks.splitting import Chunk
from workers.contextualizers import registry
from workers.contextualizers.base import SourceDocument
from workers.errors import LLMError, PublicError, WriteNotNow, failure_reason
from workers.pipeline import bundling, stages, stores
from workers.pipeline.stages import Ready, embed, ready_to_index, recently_indexed, record_indexed, release_indexed
from workers.pipeline.stores import Stores
from workers.settings import get_settings
from workers.storage import states as state_names
from workers.storage.bundle_pool import INDEX, Member
from workers.storage.catalog import CollectionConfig
from workers.storage.chunk_index import VersionWrite

log = logging.getLogger("situate.tasks")


def contextualize_bundle(s: Stores, collection: str, members: list[Member], task_id: str | None = None) -> None:
    """``contextualize`` for a bundle's documents. A provider's calls go out together: each
    document's in a thread of its own, through the worker's call pool and the collection's rate
    limit, as a document's own calls do (a one-chunk document shares no prefix with another:
    nothing to warm first). The documents situated go to the index as one bundle, then are recorded situated. A
    document that cannot be read, or whose call fails (after the call's own tries), is failed
    with the reason its own message would give (``errors.failure_reason``); the others go on. A
    store away holds the whole bundle, retried in place: the contexts already in are not asked
    for again."""
    todo: list[tuple[Member, SourceDocument, list[Chunk]]] = []  # each document, its source, its chunks without context
    config: CollectionConfig | None = None
    for m in {m.doc_id: m for m in members}.values():  # a document offered twice (a chunk message delivered again): once
        try:
            opened = stores.open_document(s, collection, m.doc_id, m.version, contexts=True, body=True)
            if not stores.current(opened.state, m.version, state_names.SITUATED):
                continue
            config, chunks, _, _ = stores.loaded(collection, opened)
            todo.append((m, stages.opened_source(s, opened, collection, m.doc_id, m.version),
                         [c for c in chunks if c.n not in opened.contexts]))
        except Exception as e:  # noqa: BLE001 - any document's own error is that document's alone
            if faults.is_store_fault(e):
                raise
            _fail(s, collection, m, e, task_id)
    if config is None:
        return
    contextualizer = registry.for_collection(config)

    def situate(doc: SourceDocument, missing: list[Chunk]) -> BaseException | None:
        logs.bind(doc_id=doc.doc_id, version=doc.version)  # this call's own context: its lines say which document
        try:
            if len(stages.contexts_for(s, contextualizer, doc, missing)) < len(missing):
                raise LLMError("the provider's answer held no context")
        except Exception as e:  # noqa: BLE001 - returned: the bundle decides, once every call is back
            return e
        return None

    calling = [(doc, missing) for _, doc, missing in todo if missing]
    # A provider's calls together; a model in the worker (llama) or a plugin one after another, as
    # a prefork worker runs them for a document alone.
    together = get_settings().llm_concurrency if config.contextualizer in registry.LLM_PROVIDERS else 1
    with ThreadPoolExecutor(max_workers=max(1, min(len(calling), together))) as pool:
        # Each call in a copy of the task's context (its log fields), made here, in the task's thread.
        futures = {doc.doc_id: pool.submit(contextvars.copy_context().run, situate, doc, missing)
                   for doc, missing in calling}
        outcomes = {doc_id: f.result() for doc_id, f in futures.items()}
    if faulted := [e for e in outcomes.values() if e is not None and faults.is_store_fault(e)]:
        raise faulted[0]  # a store away: the whole bundle waits it out; what came back is checkpointed
    situated = []
    for m, doc, _ in todo:
        if (error := outcomes.get(doc.doc_id)) is not None:
            _fail(s, collection, m, error, task_id)
        else:
            situated.append(m)
    if situated:  # the index's bundle first, then the states: a crash between repeats a little, loses nothing
        bundling.send(s.gate, INDEX, collection, uuid.uuid4().hex, situated)
        for m in situated:
            s.states.set_state(collection, m.doc_id, m.version, state_names.SITUATED)
    log.info("situated a bundle of %s: %d documents, %d failed", collection, len(situated), len(todo) - len(situated))


def _fail(s: Stores, collection: str, m: Member, error: BaseException, task_id: str | None) -> None:
    reason = failure_reason("contextualize", error, task_id)
    log.error("document %s/%s failed in its bundle: %s", collection, m.doc_id, reason,
              exc_info=None if isinstance(error, PublicError) else error)
    s.states.set_state(collection, m.doc_id, m.version, state_names.FAILED, error=reason[:2000])


def index_bundle(s: Stores, collection: str, members: list[Member]) -> CollectionConfig | None:
    """``index`` for a bundle's documents: one embedding request, one bulk write, one
    search for older versions. A document that cannot be read, or whose write is refused for good,
    is sent on alone (its own message fails it with its reason, or indexes it); the others finish.
    Anything else propagates: a store's fault is retried in place, the rest splits the bundle."""
    ready: list[Ready] = []
    alone: list[Member] = []
    for m in members:
        try:
            r = ready_to_index(s, collection, m.doc_id, m.version)
        except Exception as e:  # noqa: BLE001 - any document's own error is that document's alone
            if faults.is_store_fault(e):
                raise  # a store away: the whole bundle waits it out (the task's retry in place)
            log.info("%s/%s v%s: sent on alone from its bundle: %s", collection, m.doc_id, m.version, type(e).__name__)
            alone.append(m)
            continue
        if r is not None:
            ready.append(r)
    config = ready[0].config if ready else None
    if config is not None:
        embed(config, ready)
        if not s.catalog.is_current(config):
            log.info("%s: dropped while a bundle of %d was embedded; nothing written", collection, len(ready))
            return None
        s.index.ensure_index(config)
        refused = s.index.write_versions(config, [
            VersionWrite(r.doc_id, r.version, r.doc["seq"], r.rows, r.metadata,
                         rollback=r.doc.get("indexed_version") != r.version) for r in ready])
        if busy := [e for e in refused.values() if isinstance(e, WriteNotNow)]:  # OpenSearch busy, blocked or away:
            raise busy[0]  # the whole bundle waits it out, in place, as a document alone would
        alone += [Member(r.doc_id, r.version) for r in ready if r.doc_id in refused]
        done = []
        for r in ready:  # each released and counted once recorded, as a document alone is
            if r.doc_id not in refused and record_indexed(s, config, r):
                release_indexed(s, config, r)
                done.append(r)
        removed = s.index.delete_older_many(config, {r.doc_id: r.doc["seq"] for r in done},
                                            refresh_first=any(recently_indexed(r) for r in done))
        log.info("indexed a bundle of %s: %d documents, %d older chunks removed, %d sent on alone", collection,
                 len(done), removed, len(alone))
    bundling.send_alone(s.gate, INDEX, collection, alone)
    return config
