"""The pipeline's Celery tasks: thin shells over the stages (``stages``), one per message kind.
Each takes only a reference — (collection, doc_id, version) — and runs its stage with the
deployment's stores (``STORES``: Redis, S3 if configured, OpenSearch).

    chunk                (chunk)            body -> chunks, checkpointed; hands off to the document's shard
    contextualize        (contextualize.N)  chunks -> contexts, each checkpointed as it arrives
    contextualize_slice  (contextualize.N)  a big document's chunks after its warm-up call, any worker
    poll_batch           (contextualize.N)  Message Batches mode: collect results, submit the next step
    index                (index)            contexts -> vectors -> OpenSearch; older versions removed after

What is Celery's own stays here: the task base that guards deliveries (``guard``), the Message
Batch poll scheduled with a countdown, a reindex's advance once its document lands, and the
names of 0.1's tasks, still answered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from workers import metrics
from workers.chunks.splitting import Chunk
from workers.contextualizers import registry, reuse
from workers.contextualizers.base import SourceDocument
from workers.pipeline import fair, rebuild, reconcile, stages  # noqa: F401 - reconcile: a heartbeat duty of every worker
from workers.pipeline.app import app
from workers.pipeline.guard import PipelineTask
from workers.pipeline.routing import document_queue
from workers.pipeline.sending import CHUNK_TASK, CONTEXTUALIZE_TASK, INDEX_TASK, POLL_BATCH_TASK, SLICE_TASK
from workers.settings import get_settings
from workers.storage import capacity, catalog, checkpoints, chunk_index, states
from workers.storage.bodies import body_store

if TYPE_CHECKING:
    from workers.contextualizers.base import Contextualizer
    from workers.contextualizers.claude.scheduler import LLMContextualizer

STORES = stages.Stores(states=states, catalog=catalog, checkpoints=checkpoints, bodies=body_store, index=chunk_index,
                       gate=fair, capacity=capacity, metrics=metrics)


@app.task(name=CHUNK_TASK, base=PipelineTask)
def chunk(collection: str, doc_id: str, version: str) -> None:
    stages.chunk(STORES, collection, doc_id, version)


@app.task(name=CONTEXTUALIZE_TASK, base=PipelineTask)
def contextualize(collection: str, doc_id: str, version: str) -> None:
    stages.contextualize(STORES, collection, doc_id, version, submit_batch=_submit_batch, reuse=_reused)


def _submit_batch(contextualizer: Contextualizer, doc: SourceDocument, missing: list[Chunk]) -> None:
    """Message Batches mode: the missing chunks as one batch, polled later (by the reconciler too
    if this poll is lost)."""
    from workers.contextualizers.claude import batches

    batch_id, _ = batches.submit(cast("LLMContextualizer", contextualizer), doc, missing)
    states.annotate(doc.collection, doc.doc_id, batch=f"{doc.version}:{batch_id}")
    poll_batch.apply_async((doc.collection, doc.doc_id, doc.version, batch_id),
                           queue=document_queue(doc.collection, doc.doc_id), countdown=get_settings().batch_poll_s)


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
    """Collect an ended Message Batch, then submit the document's next step or index it."""
    from workers.contextualizers.claude import batches

    if not stages.pending(STORES, collection, doc_id, version, states.SITUATED):
        return
    config, chunks, language, metadata = stages.load(STORES, collection, doc_id, version)
    contextualizer = registry.for_collection(config)
    doc = stages.source(STORES, collection, doc_id, version, chunks, language, metadata)
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
    stages.hand_to_index(STORES, collection, doc_id, version, len(chunks))


@app.task(name=INDEX_TASK, base=PipelineTask)
def index(collection: str, doc_id: str, version: str) -> None:
    config = stages.index(STORES, collection, doc_id, version)
    if config is not None and config.rebuilds:
        rebuild.advance()  # a reindex's document landed: the reindex may be ready to move on now


# Messages queued by 0.1 carry the old task names: the same code answers to them, so a backlog
# left in Redis across an upgrade is processed, not dropped as unknown.
LEGACY_TASK_NAMES = {"situate.ingest": chunk, "situate.situate": contextualize,
                     "situate.situate_slice": contextualize_slice}
for _old, _task in LEGACY_TASK_NAMES.items():
    app.task(name=_old, base=PipelineTask)(_task.__wrapped__)
