"""The reconciler: a document that stopped moving is found and sent on again, from its last
checkpoint, with no operator action.

Messages can be lost in ways no single part of the pipeline sees: a queue purged by hand, an
operator's ``FLUSHDB`` of the broker's database, writes a Redis failover did not replicate, a
Kombu bug. Then a document sits in ``queued``, ``chunked`` or ``situated`` with no message
anywhere. The fair gate resends what it admitted and nobody received, and Kombu gives back a dead
worker's messages; this is the net under both.

How it knows, cheaply at 10M documents: ``states.MOVING`` holds every in-flight document by when
it last moved — each state move sets it, and every worker heartbeat touches the documents whose
messages that worker holds (running, waiting for a slot or for a countdown). A pass reads only
the oldest of it (``ZRANGEBYSCORE … LIMIT``: O(log N + batch)), and for each document older than
``SITUATE_RECONCILE_AFTER_S`` asks: is its work waiting in the fair gate (``fairqueue.WAITING``,
one HMGET), or for a Message Batch (``batch_pool.waiting``: it may wait a day), or in a bundle's
pool (``bundle_pool.waiting``), or in Celery's
queues or delivered-but-unacknowledged lists (read whole: the fair gate
keeps the queues a few messages deep)? If neither, it is stalled: the task of its state is sent
again — chunk, contextualize (or the Message Batch poll it was waiting on), index — which resumes
from the checkpoints, so nothing already paid is paid again. What it resumed is counted
(``situate_reconciled_total``) and logged. A document found waiting is touched, so each pass
moves on to the next oldest instead of reading the same backlog again.

One worker at a time runs a pass, by a lease in Redis that also spaces the passes
(``SITUATE_RECONCILE_EVERY_S``); any worker's heartbeat may take it.
"""

from __future__ import annotations

import base64
import itertools
import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

from workers import keys, metrics
from workers.contextualizers.llm.batches import GROUPED
from workers.pipeline import bundling, delivery, fair
from workers.pipeline.routing import (
    CHUNK_PRIORITY,
    CHUNK_QUEUE,
    INDEX_QUEUE,
    all_queues,
    contextualize_priority,
    document_queue,
    sublists,
)
from workers.pipeline.sending import CHUNK_TASK, CONTEXTUALIZE_TASK, INDEX_TASK, POLL_BATCH_TASK, send_task
from workers.settings import get_settings
from workers.storage import batch_pool, broker, bundle_pool, deliveries, fairqueue, states

log = logging.getLogger("situate.reconcile")

LEASE = keys.RECONCILER
BATCH = 1000
MAX_BATCHES = 10  # a pass looks at no more than this many batches: bounded, whatever the backlog
_HOLDER = uuid.uuid4().hex
_last_pass = 0.0


def in_celery() -> set[str]:
    """The documents (``states.member``) of the messages in Celery's queues and in its
    delivered-but-unacknowledged hash."""
    found: set[str] = set()
    lists = [key for queue in all_queues() for key in sublists(queue)]
    for raw in itertools.chain(broker.waiting(lists, 10_000), broker.unacked()):
        args = _args_of(raw)
        if args and (bundled := bundling.members_of(args)):  # a bundle: its documents
            found.update(states.member(str(args[0]), m.doc_id) for m in bundled)
        elif args and len(args) >= 2:
            found.add(states.member(str(args[0]), str(args[1])))
    return found


def _args_of(raw: Any) -> list[Any] | None:
    """A Kombu message's task arguments (protocol 2: the body is base64 JSON ``[args, kwargs, embed]``)."""
    try:
        message = json.loads(raw) if isinstance(raw, (str, bytes)) else raw
        body = message["body"]
        if message.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        decoded = json.loads(body)
        return list(decoded[0]) if isinstance(decoded, list) else None
    except (ValueError, KeyError, TypeError, IndexError):
        return None


GONE, WAITING = "gone", "waiting"


def decide(state: str | None, version: str | None, batch: str | None, waiting: Callable[[], bool]) -> tuple[str, str]:
    """What a pass does with a document that has not moved, from its state alone: (``gone``:
    finished or forgotten meanwhile, not in flight; ``waiting``: its work is parked or in Celery,
    asked only when needed, as it costs a read of the queues; else the stage to send again:
    ``chunk``, ``contextualize``, ``poll_batch`` or ``index``) and the Message Batch to poll.
    A batch id is kept with the version it was submitted for: never another version's."""
    if state not in states.IN_FLIGHT or not version:
        return GONE, ""
    if waiting():
        return WAITING, ""
    if state == states.QUEUED:
        return "chunk", ""
    if state == states.CHUNKED:
        batch_version, _, batch_id = (batch or "").partition(":")
        # 0.2's batch of one document: poll it, never submit a new one. A grouped batch's document
        # not waiting in the pool or a batch (``waiting`` said so) lost its step: contextualize
        # puts it back, paying nothing twice.
        if batch_id and batch_version == version and not batch_id.startswith(GROUPED):
            return "poll_batch", batch_id
        return "contextualize", ""
    return "index", ""


def resume(collection: str, doc_id: str, version: str, stage: str, batch_id: str = "", chunks_total: int = 0) -> None:
    """Send ``stage``'s task again (parked in the fair gate; the caller admits)."""
    if stage == "chunk":
        fair.send(CHUNK_TASK, (collection, doc_id, version), queue=CHUNK_QUEUE, priority=CHUNK_PRIORITY,
                  admit_now=False)
    elif stage == "poll_batch":
        send_task(POLL_BATCH_TASK, [collection, doc_id, version, batch_id], queue=document_queue(collection, doc_id))
    elif stage == "contextualize":
        fair.send(CONTEXTUALIZE_TASK, (collection, doc_id, version), queue=document_queue(collection, doc_id),
                  priority=contextualize_priority(chunks_total), admit_now=False)
    elif stage == "index":
        fair.send(INDEX_TASK, (collection, doc_id, version), queue=INDEX_QUEUE, admit_now=False)


def _waits(parked: int, member: str, in_queues: Callable[[str], bool]) -> Callable[[], bool]:
    return lambda: parked > 0 or in_queues(member)


def reconcile_once(now: float | None = None) -> Counter[str]:
    """One pass (the caller holds the lease): what was resumed, by stage, and how many were
    found waiting (``waiting``) or not in flight any more (``gone``)."""
    s = get_settings()
    now = now or time.time()
    before = now - s.reconcile_after_s
    outcome: Counter[str] = Counter()
    if fairqueue.recount_if_drifted(all_queues()):
        log.warning("reconciler: the fair gate's waiting counts did not match its lines (lines lost?): recounted")
        outcome["recounted"] += 1
    queued: set[str] | None = None  # read once per pass, only if some document needs it

    def in_queues(member: str) -> bool:
        nonlocal queued
        queued = in_celery() if queued is None else queued
        return member in queued

    for _ in range(MAX_BATCHES):
        rows = states.stalled(before, BATCH)
        if not rows:
            break
        members = [states.member(c, d) for c, d, _ in rows]
        pooled = bundle_pool.waiting(members)
        waiting = [n or int(b) or int(p) for n, b, p in zip(fairqueue.waiting(members), batch_pool.waiting(members), pooled)]
        # A pool whose documents have waited this long lost its collector (failed, or purged):
        # another one, which takes what is there (or nothing: a busy index queue only delays it).
        for collection in {c for (c, _, _), p in zip(rows, pooled) if p}:
            bundling.nudge(fair, collection)
            outcome["bundles_nudged"] += 1
        looked = states.fields_of_many([(c, d) for c, d, _ in rows], "state", "version", "batch", "chunks_total")
        touch: list[str] = []
        for (collection, doc_id, at), m, n, (state, version, batch, chunks_total) in zip(rows, members, waiting, looked):
            stage, batch_id = decide(state, version, batch, _waits(n, m, in_queues))
            outcome[stage] += 1
            if stage == GONE:
                states.untrack(m, before)
                continue
            touch.append(m)
            if stage == WAITING:
                continue
            resume(collection, doc_id, version or "", stage, batch_id, int(chunks_total or 0))
            metrics.count("reconciled", stage=stage)
            log.warning("reconciler: %s/%s had not moved for %.0f s (%s, no message anywhere): %s sent again",
                        collection, doc_id, now - at, state, stage)
        states.touch(touch)
        if len(rows) < BATCH:
            break
    if sum(outcome[k] for k in ("chunk", "contextualize", "index", "bundles_nudged")):
        fair.admit()  # once for all it parked
    return outcome


def maybe_reconcile() -> Counter[str] | None:
    """A heartbeat duty: a pass if this worker takes the lease (at most one per
    ``SITUATE_RECONCILE_EVERY_S`` in the fleet)."""
    global _last_pass
    s = get_settings()
    if s.reconcile_every_s <= 0 or time.monotonic() - _last_pass < s.reconcile_every_s:
        return None
    _last_pass = time.monotonic()
    if not deliveries.take_turn(LEASE, _HOLDER, int(s.reconcile_every_s * 1000)):
        return None
    return reconcile_once()


delivery.on_heartbeat.append(maybe_reconcile)
