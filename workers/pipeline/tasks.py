"""The pipeline's Celery tasks: thin shells over the stages (``stages``), one per message kind.
Each takes only a reference — (collection, doc_id, version) — and runs its stage with the
deployment's stores (``STORES``: Redis, S3 if configured, OpenSearch).

    chunk                (chunk)            body -> chunks, checkpointed; hands off to the document's shard
    contextualize        (contextualize.N)  chunks -> contexts, each checkpointed as it arrives
    contextualize_slice  (contextualize.N)  a big document's chunks after its warm-up call, any worker
    tend_batches         (contextualize.0)  Message Batches mode: batches cut from the pool, ended ones collected
    poll_batch           (contextualize.N)  0.2's batches of one document, still running after an upgrade
    index                (index)            contexts -> vectors -> OpenSearch; older versions removed after
    collect_bundle       (index)            one-chunk documents taken from a pool as a bundle (``bundling``)
    contextualize_bundle (contextualize.N)  ``contextualize`` for a bundle's documents, their calls together
    index_bundle         (index)            ``index`` for a bundle's documents together

What is Celery's own stays here: the task base that guards deliveries (``guard``), the Message
Batch poll scheduled with a countdown, a reindex's advance once its document lands, and the
names of 0.1's tasks, still answered.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, cast

from workers import keys, metrics
from workers.chunks.splitting import Chunk
from workers.contextualizers import registry, reuse
from workers.contextualizers.base import SourceDocument
from workers.contextualizers.llm import batches as batches_module
from workers.pipeline import bundle_stages, bundling, delivery, fair, rebuild, reconcile, stages, stores  # noqa: F401 - reconcile: a heartbeat duty of every worker
from workers.pipeline.app import app
from workers.pipeline.guard import PipelineTask
from workers.pipeline.routing import contextualize_queue, document_queue
from workers.pipeline.sending import (
    CHUNK_TASK,
    COLLECT_BUNDLE_TASK,
    CONTEXTUALIZE_BUNDLE_TASK,
    CONTEXTUALIZE_TASK,
    INDEX_BUNDLE_TASK,
    INDEX_TASK,
    POLL_BATCH_TASK,
    SLICE_TASK,
    TEND_BATCHES_TASK,
)
from workers.settings import get_settings
from workers.storage import batch_pool, bundle_pool, capacity, catalog, checkpoints, chunk_index, deliveries, states, working_set
from workers.storage.bodies import body_store

if TYPE_CHECKING:
    from workers.contextualizers.base import Contextualizer
    from workers.contextualizers.llm.scheduler import LLMContextualizer

STORES = stores.Stores(states=states, catalog=catalog, checkpoints=checkpoints, bodies=body_store, index=chunk_index,
                       gate=fair, capacity=capacity, metrics=metrics, working=working_set, bundles=bundle_pool)


@app.task(name=CHUNK_TASK, base=PipelineTask)
def chunk(collection: str, doc_id: str, version: str) -> None:
    stages.chunk(STORES, collection, doc_id, version)


@app.task(name=CONTEXTUALIZE_TASK, base=PipelineTask)
def contextualize(collection: str, doc_id: str, version: str) -> None:
    stages.contextualize(STORES, collection, doc_id, version, submit_batch=_submit_batch, reuse=_reused)


def _submit_batch(contextualizer: Contextualizer, doc: SourceDocument, missing: list[Chunk]) -> None:
    """Message Batches mode: the document's next step into the pool, which the tender cuts
    batches from (``tend_batches``; the reconciler leaves a document waiting there alone)."""
    from workers.contextualizers.llm import batches

    batches.enqueue(cast("LLMContextualizer", contextualizer), doc, missing)
    schedule_tend(pool_due_in())


def _reused(config: catalog.CollectionConfig, doc_id: str, version: str, chunks: list[Chunk], done: set[int]) -> int:
    """Contexts the live generation holds for these very chunks, checkpointed for this one."""
    live = catalog.find(config.rebuilds) if config.rebuilds else None
    if live is None or config.rebuilds is None:
        return 0
    count = reuse.fill(live, config, doc_id, version, chunks, done)
    if count:
        metrics.count("contexts_reused", count, collection=config.rebuilds)
    return count


@app.task(name=SLICE_TASK, base=PipelineTask)
def contextualize_slice(collection: str, doc_id: str, version: str, numbers: list[int]) -> None:
    stages.contextualize_slice(STORES, collection, doc_id, version, numbers)


@app.task(name=POLL_BATCH_TASK, base=PipelineTask)
def poll_batch(collection: str, doc_id: str, version: str, batch_id: str) -> None:
    """A batch of one document, as 0.2 submitted them: its results collected when it has ended,
    then the document's next step goes to the pool as any other's (``tend_batches``)."""
    from workers.contextualizers.llm import batches

    if not stores.pending(STORES, collection, doc_id, version, states.SITUATED):
        return
    contextualizer, doc = _batch_document(collection, doc_id, version)
    if not batches.collect_legacy(contextualizer, doc, batch_id):
        poll_batch.apply_async((collection, doc_id, version, batch_id), queue=document_queue(collection, doc_id),
                               countdown=get_settings().batch_poll_s)
        return
    done = checkpoints.load_contexts(collection, doc_id, version)
    missing = [c for c in doc.chunks if c.n not in done]
    if missing:
        batches.enqueue(contextualizer, doc, missing)
        schedule_tend(pool_due_in())
    else:
        stages.hand_to_index(STORES, collection, doc_id, version, len(doc.chunks))


def _batch_document(collection: str, doc_id: str, version: str) -> tuple[LLMContextualizer, SourceDocument]:
    config, chunks, language, metadata = stores.load(STORES, collection, doc_id, version)
    doc = stages.source(STORES, collection, doc_id, version, chunks, language, metadata)
    return cast("LLMContextualizer", registry.for_collection(config)), doc


def _batch_source() -> batches_module.Source:
    def fail(collection: str, doc_id: str, version: str, reason: str) -> None:
        states.set_state(collection, doc_id, version, states.FAILED, error=reason[:2000])

    return batches_module.Source(
        pending=lambda c, d, v: stores.pending(STORES, c, d, v, states.SITUATED) is not None,
        load=_batch_document,
        complete=lambda c, d, v, total: stages.hand_to_index(STORES, c, d, v, total),
        fail=fail)


@app.task(name=TEND_BATCHES_TASK, base=PipelineTask)
def tend_batches() -> None:
    """The fleet's Message Batches, one worker at a time: the batches that ended collected, the
    pool cut into new ones (``contextualizers.llm.batches``); then the next tend scheduled, for
    the next poll or when the pool is next due."""
    lock = deliveries.duty_lock(keys.BATCH_TENDER, timeout_s=TEND_LOCK_S)
    if not lock.acquire():
        return  # another worker tends them now, and schedules the next
    try:
        batch_pool.scheduled_done()
        outcome = batches_module.Tender(_batch_source(), keep=lambda: lock.extend(TEND_LOCK_S, replace_ttl=True)).tend()
        if outcome.created or outcome.collected:
            metrics.count("batches_created", outcome.created)
            metrics.count("batches_collected", outcome.collected)
    finally:
        try:
            lock.release()
        except Exception:  # noqa: BLE001 - lost after its timeout: the next tender takes it
            pass
    if batch_pool.open_batches():
        schedule_tend(min(get_settings().batch_poll_s, pool_due_in()), force=True)
    elif batch_pool.size()[0]:
        schedule_tend(pool_due_in(), force=True)


def pool_due_in() -> float:
    """Seconds until the pool's oldest step has waited ``SITUATE_BATCH_WAIT_S`` (0: due now, or full)."""
    s = get_settings()
    _, requests, nbytes, oldest = batch_pool.size()
    if oldest is None:
        return s.batch_wait_s
    if requests >= s.batch_max_requests or nbytes >= s.batch_max_bytes:
        return 0.0
    return max(0.0, oldest + s.batch_wait_s - time.time())


# The tender's lock lasts this long past its last renewal (a pass renews it as it goes): a worker
# lost in the middle of a pass holds batch work up this long at most.
TEND_LOCK_S = 120


def schedule_tend(delay_s: float, force: bool = False) -> None:
    """A ``tend_batches`` in ``delay_s``, unless one is already due sooner (``force``: the tender's
    successor)."""
    if batch_pool.schedule(time.time() + delay_s, lost_after_s=max(get_settings().batch_poll_s, 10.0), force=force):
        tend_batches.apply_async((), queue=contextualize_queue(0), countdown=max(0.0, delay_s))


_last_tend = 0.0


def maybe_tend_batches() -> None:
    """A heartbeat duty, the net under the schedule: a tend when batch work waits and none has
    been scheduled (its message lost), at most every ``SITUATE_BATCH_POLL_S`` in the fleet."""
    global _last_tend
    every = get_settings().batch_poll_s
    if time.monotonic() - _last_tend < max(every, 10.0):
        return
    _last_tend = time.monotonic()
    if not batch_pool.size()[0] and not batch_pool.open_batches() and batch_pool.creating() is None:
        return
    if batch_pool.overdue(grace_s=every):
        schedule_tend(0.0, force=True)


delivery.on_heartbeat.append(maybe_tend_batches)


@app.task(name=INDEX_TASK, base=PipelineTask)
def index(collection: str, doc_id: str, version: str) -> None:
    config = stages.index(STORES, collection, doc_id, version)
    if config is not None and config.rebuilds:
        rebuild.advance()  # a reindex's document landed: the reindex may be ready to move on now


@app.task(name=COLLECT_BUNDLE_TASK, base=PipelineTask)
def collect_bundle(collection: str, bundle_id: str, stage: str = bundle_pool.INDEX) -> None:
    bundling.collect(STORES, collection, bundle_id, stage)


@app.task(name=CONTEXTUALIZE_BUNDLE_TASK, base=PipelineTask, bind=True)
def contextualize_bundle(self: PipelineTask, collection: str, bundle_id: str, members: list[list[str]]) -> None:
    bundle_stages.contextualize_bundle(STORES, collection, bundling.members_of((collection, bundle_id, members)),
                                       task_id=self.request.id)


@app.task(name=INDEX_BUNDLE_TASK, base=PipelineTask)
def index_bundle(collection: str, bundle_id: str, members: list[list[str]]) -> None:
    config = bundle_stages.index_bundle(STORES, collection, bundling.members_of((collection, bundle_id, members)))
    if config is not None and config.rebuilds:
        rebuild.advance()


# Messages queued by 0.1 carry the old task names: the same code answers to them, so a backlog
# left in Redis across an upgrade is processed, not dropped as unknown.
LEGACY_TASK_NAMES = {"situate.ingest": chunk, "situate.situate": contextualize,
                     "situate.situate_slice": contextualize_slice}
for _old, _task in LEGACY_TASK_NAMES.items():
    app.task(name=_old, base=PipelineTask)(_task.__wrapped__)
