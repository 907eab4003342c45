"""Bundles: one-chunk documents contextualized and indexed together, so that a collection of small
documents (tickets, notes, FAQ entries) pays one task for many documents' calls, and one task, one
embedding request and one bulk write for many documents' index, rather than the queue's
bookkeeping for each.

How a bundle is made. A one-chunk document chunked joins its collection's pool for the
contextualize stage (``storage.bundle_pool``) instead of sending its own message (``offer``); a
bundle of them, situated, goes to the index as one bundle; a one-chunk document contextualized
alone (a reindex's, one sent on alone from its bundle) joins the pool for the index stage. The document that finds a pool empty
sends a collector (``situate.collect_bundle``) due in ``SITUATE_BUNDLE_WAIT_S``; one is sent at
once by the document that fills a bundle (``SITUATE_BUNDLE_MAX_DOCUMENTS``), and by one that finds
the pool holding every document of its collection still in flight (a lone note, the end of an
ingest: nothing is coming to wait for). A collector takes the oldest documents of the pool, up to
that count and ``SITUATE_BUNDLE_MAX_BYTES``, sends them as one message that names them all
(``situate.contextualize_bundle`` on a shard, ``situate.index_bundle``), and sends a successor if
it left any behind. So a pool that holds documents always has a collector on its way: a lone note
goes on at once, a busy collection in full bundles. A collector delivered again (its worker died)
sends the bundle it took before; should one be lost all the same (a queue purged), the reconciler
sends another for a pool whose documents have not moved for ``SITUATE_RECONCILE_AFTER_S``. The
wait is a countdown on the collector's message rather than time in the queue, because workers
take downstream queues first: without it every bundle would leave with the one document that had
arrived.

How a document still fails alone (``bundle_stages``). What a bundle cannot pin on one of its
documents, it does not fail: a document whose reading, call or write fails is sent on alone, as
an ordinary message of its stage, which fails it with its own reason or succeeds; the bundle's
others finish. A store away (Redis, or OpenSearch busy or blocked) holds the whole bundle, retried
in place like any store's fault: what it finished is not done again. An error of the whole bundle
(its embedding request) and a bundle delivered again after its worker died (``split``, from
``delivery``) send every document on alone: those done already are no-ops, and a document that
kills its worker is then found by the per-document poison rule, without its neighbours.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from workers.pipeline.routing import INDEX_QUEUE, contextualize_priority, document_queue
from workers.pipeline.sending import (
    COLLECT_BUNDLE_TASK,
    CONTEXTUALIZE_BUNDLE_TASK,
    CONTEXTUALIZE_TASK,
    INDEX_BUNDLE_TASK,
    INDEX_TASK,
)
from workers.pipeline.stores import Gate, Stores
from workers.settings import get_settings
from workers.storage.bundle_pool import CONTEXTUALIZE, INDEX, STAGES, Member

# What a bundle of each stage is sent as, and what each of its documents alone.
BUNDLE_TASK = {CONTEXTUALIZE: CONTEXTUALIZE_BUNDLE_TASK, INDEX: INDEX_BUNDLE_TASK}
STAGE_OF = {task: stage for stage, task in BUNDLE_TASK.items()}


def enabled(s: Stores) -> bool:
    return s.bundles is not None and get_settings().bundle_max_documents > 1


def offer(s: Stores, stage: str, collection: str, doc_id: str, version: str, nbytes: int) -> None:
    """A one-chunk document into its collection's pool for ``stage``; a collector sent if the pool needs one."""
    assert s.bundles is not None
    size, weight, flying = s.bundles.add(stage, collection, doc_id, version, nbytes)
    settings = get_settings()
    full = size % settings.bundle_max_documents == 0 or weight >= settings.bundle_max_bytes > weight - nbytes
    if full or size >= flying:  # a bundle is full, or nothing else of the collection is on its way: no wait
        _collector(s.gate, stage, collection, 0.0)
    elif size == 1:
        _collector(s.gate, stage, collection, settings.bundle_wait_s)


def collect(s: Stores, collection: str, bundle_id: str, stage: str = INDEX) -> None:
    """Take a bundle from the pool and send it; a successor for what it left behind."""
    assert s.bundles is not None
    settings = get_settings()
    members, left = s.bundles.take(stage, collection, bundle_id, settings.bundle_max_documents,
                                   settings.bundle_max_bytes)
    if members:  # ahead of the collection's other work: its documents waited in the pool already
        send(s.gate, stage, collection, bundle_id, members, front=True)
    if left:
        _collector(s.gate, stage, collection, 0.0 if left >= settings.bundle_max_documents else settings.bundle_wait_s)
    s.bundles.sent(bundle_id)


def send(gate: Gate, stage: str, collection: str, bundle_id: str, members: list[Member], front: bool = False) -> None:
    """A bundle's message: on the index queue, or on a contextualize shard (its documents share no
    prefix: any shard does, and bundles spread over them)."""
    args = (collection, bundle_id, [m.to_json() for m in members])
    if stage == INDEX:
        gate.send(INDEX_BUNDLE_TASK, args, queue=INDEX_QUEUE, front=front)
    else:
        gate.send(CONTEXTUALIZE_BUNDLE_TASK, args, queue=document_queue(collection, bundle_id),
                  priority=contextualize_priority(1), front=front)


def _collector(gate: Gate, stage: str, collection: str, delay_s: float, admit_now: bool = True) -> None:
    """On the index queue whatever the stage: it only moves a pool's entries, and that queue is taken first."""
    args = (collection, uuid.uuid4().hex) if stage == INDEX else (collection, uuid.uuid4().hex, stage)
    if delay_s > 0:
        gate.send_later(COLLECT_BUNDLE_TASK, args, queue=INDEX_QUEUE, delay_s=delay_s)
    else:
        gate.send(COLLECT_BUNDLE_TASK, args, queue=INDEX_QUEUE, admit_now=admit_now)


def nudge(gate: Gate, collection: str) -> None:
    """A collector for each of ``collection``'s pools, from the reconciler (parked: the caller
    admits); one finding its pool empty does nothing."""
    for stage in STAGES:
        _collector(gate, stage, collection, 0.0, admit_now=False)


def members_of(args: Sequence[Any]) -> list[Member]:
    """The documents a bundle's message names (``[collection, bundle id, [[doc id, version], ...]]``)."""
    return [Member(str(d), str(v)) for d, v in args[2]] if len(args) >= 3 and isinstance(args[2], list) else []


def send_alone(gate: Gate, stage: str, collection: str, members: list[Member]) -> None:
    """Each document its own message of ``stage``, as if it had never been bundled."""
    for m in members:
        if stage == INDEX:
            gate.send(INDEX_TASK, (collection, m.doc_id, m.version), queue=INDEX_QUEUE)
        else:
            gate.send(CONTEXTUALIZE_TASK, (collection, m.doc_id, m.version), queue=document_queue(collection, m.doc_id),
                      priority=contextualize_priority(1))


def split(gate: Gate, task_name: str, args: Sequence[Any]) -> None:
    """A bundle's message (``task_name``) undone into its documents' own messages."""
    send_alone(gate, STAGE_OF[task_name], str(args[0]), members_of(args))
