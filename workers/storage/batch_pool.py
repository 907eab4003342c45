"""Message Batches grouped across documents: the steps waiting for the next batch, and the
batches running (``contextualizers.llm.batches`` decides; this keeps the records).

- **The pool**: one entry per document step — its first chunk alone (the seed, whose document
  block the batch caches for an hour) or its other chunks — oldest first, with what it will
  weigh (requests, bytes). The batches are cut from its head.
- **Open batches**: per batch, what it holds (its members: the index of each request is its
  ``custom_id``) until its results are collected.
- **Waiting**: the documents in the pool or in an open batch, for the reconciler: such a
  document has not stalled, it waits for a batch (up to a day).

A batch is recorded and its entries leave the pool in one transaction, so a crash never leaves
the same steps both in the pool and in a batch (which would pay for them twice). The moment
between the API's answer to a creation and that record is covered by ``creating``: what is being
created is written first, and the next tender looks for a batch of that size created then.
"""

from __future__ import annotations

import json
import time
from typing import Any, cast

from workers import keys
from workers.connections import redis_client
from workers.storage.states import SEPARATOR, member


def add(collection: str, doc_id: str, version: str, numbers: list[int], seed: bool, requests: int, nbytes: int) -> None:
    entry = {"c": collection, "d": doc_id, "v": version, "n": numbers, "seed": seed, "at": round(time.time(), 3),
             "requests": requests, "bytes": nbytes}
    pipe = redis_client().pipeline(transaction=True)
    pipe.rpush(keys.BATCH_POOL, json.dumps(entry))
    pipe.hincrby(keys.BATCH_POOL_SIZE, "requests", requests)
    pipe.hincrby(keys.BATCH_POOL_SIZE, "bytes", nbytes)
    pipe.sadd(keys.BATCH_WAITING, member(collection, doc_id))
    pipe.execute()


def size() -> tuple[int, int, int, float | None]:
    """(entries, requests, bytes, when the oldest entry was added) of the pool."""
    r = redis_client()
    pipe = r.pipeline(transaction=False)
    pipe.llen(keys.BATCH_POOL)
    pipe.hmget(keys.BATCH_POOL_SIZE, "requests", "bytes")
    pipe.lindex(keys.BATCH_POOL, 0)
    entries, (requests, nbytes), head = pipe.execute()
    oldest = json.loads(head)["at"] if head else None
    return int(entries), int(requests or 0), int(nbytes or 0), oldest


def head(count: int) -> list[dict[str, Any]]:
    """The pool's first ``count`` entries, oldest first."""
    return [json.loads(raw) for raw in cast("list[str]", redis_client().lrange(keys.BATCH_POOL, 0, count - 1))]


def begin(entries: int, requests: int) -> float:
    """A batch of the pool's first ``entries`` (``requests`` requests) is being created now."""
    at = time.time()
    redis_client().set(keys.BATCH_CREATING, json.dumps({"entries": entries, "requests": requests, "at": at}))
    return at


def creating() -> dict[str, Any] | None:
    raw = redis_client().get(keys.BATCH_CREATING)
    return json.loads(raw) if raw else None


def record(batch_id: str, members: list[list[Any]], taken: list[dict[str, Any]]) -> None:
    """The batch created from the pool's first ``len(taken)`` entries: its members recorded, the
    entries out of the pool, the creation done — at once."""
    pipe = redis_client().pipeline(transaction=True)
    pipe.set(keys.batch_members(batch_id), json.dumps(members))
    pipe.hset(keys.BATCHES_OPEN, batch_id, json.dumps({"created": time.time(), "requests": len(members),
                                                       "polled": 0.0}))
    pipe.ltrim(keys.BATCH_POOL, len(taken), -1)
    pipe.hincrby(keys.BATCH_POOL_SIZE, "requests", -sum(e["requests"] for e in taken))
    pipe.hincrby(keys.BATCH_POOL_SIZE, "bytes", -sum(e["bytes"] for e in taken))
    pipe.delete(keys.BATCH_CREATING)
    pipe.execute()


def drop_head(taken: list[dict[str, Any]]) -> None:
    """Entries that need no batch any more (their document moved on): out of the pool."""
    pipe = redis_client().pipeline(transaction=True)
    pipe.ltrim(keys.BATCH_POOL, len(taken), -1)
    pipe.hincrby(keys.BATCH_POOL_SIZE, "requests", -sum(e["requests"] for e in taken))
    pipe.hincrby(keys.BATCH_POOL_SIZE, "bytes", -sum(e["bytes"] for e in taken))
    pipe.execute()


def abandon_creation() -> None:
    redis_client().delete(keys.BATCH_CREATING)


def schedule(at: float, lost_after_s: float, force: bool = False) -> bool:
    """A tend is to run at ``at`` (wall clock): True if none is due sooner (the caller sends it).
    One due in the past and not yet begun is waiting for a worker, or for the running tender (the
    lock): it stands, unless it is ``lost_after_s`` old (its message lost). ``force``: the tender
    itself, as it ends, schedules its successor whatever stands (a tend that met its lock ended
    without running)."""
    r = redis_client()
    due = r.get(keys.BATCH_SCHEDULED)
    if not force and due is not None and time.time() - lost_after_s <= float(due) <= at:
        return False
    r.set(keys.BATCH_SCHEDULED, f"{at:.3f}")
    return True


def scheduled_done() -> None:
    """The scheduled tend runs now: the next schedule starts afresh."""
    redis_client().delete(keys.BATCH_SCHEDULED)


def overdue(grace_s: float) -> bool:
    """No tend scheduled, or one due more than ``grace_s`` ago that never ran (its message lost)."""
    due = redis_client().get(keys.BATCH_SCHEDULED)
    return due is None or float(due) < time.time() - grace_s


def open_batches() -> dict[str, dict[str, Any]]:
    raw = cast("dict[str, str]", redis_client().hgetall(keys.BATCHES_OPEN))
    return {batch_id: json.loads(info) for batch_id, info in raw.items()}


def polled(batch_id: str, info: dict[str, Any]) -> None:
    redis_client().hset(keys.BATCHES_OPEN, batch_id, json.dumps({**info, "polled": time.time()}))


def members(batch_id: str) -> list[list[Any]]:
    raw = redis_client().get(keys.batch_members(batch_id))
    return json.loads(raw) if raw else []


def close(batch_id: str) -> None:
    pipe = redis_client().pipeline(transaction=True)
    pipe.hdel(keys.BATCHES_OPEN, batch_id)
    pipe.delete(keys.batch_members(batch_id))
    pipe.execute()


def released(collection: str, doc_id: str) -> None:
    """The document waits for no batch any more (indexed next, failed, or gone)."""
    redis_client().srem(keys.BATCH_WAITING, member(collection, doc_id))


def waiting(members_: list[str]) -> list[bool]:
    """For each document (``collection \\x1f id``): does it wait for a batch?"""
    if not members_:
        return []
    return [bool(x) for x in redis_client().smismember(keys.BATCH_WAITING, members_)]


def forget_collection(collection: str) -> None:
    """A dropped collection's steps leave the pool; its batches' results are ignored when they come."""
    r = redis_client()
    gone = [raw for raw in cast("list[str]", r.lrange(keys.BATCH_POOL, 0, -1)) if json.loads(raw)["c"] == collection]
    for raw in gone:  # one by one: an entry another producer adds meanwhile stays
        if r.lrem(keys.BATCH_POOL, 1, raw):
            entry = json.loads(raw)
            r.hincrby(keys.BATCH_POOL_SIZE, "requests", -entry["requests"])
            r.hincrby(keys.BATCH_POOL_SIZE, "bytes", -entry["bytes"])
    doomed = list(r.sscan_iter(keys.BATCH_WAITING, match=f"{collection}{SEPARATOR}*", count=1000))
    for i in range(0, len(doomed), 1000):
        r.srem(keys.BATCH_WAITING, *doomed[i:i + 1000])
