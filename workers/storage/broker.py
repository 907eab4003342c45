"""What Kombu keeps in Redis for Celery, read here (and its delivery times moved): the list of
each queue and priority level, and the hash of messages delivered and not yet acknowledged with
its index of delivery times. The names are Kombu's (``keys.KOMBU_*``; a queue's lists are
``pipeline.routing.sublists``): this module only reads them, and moves a held message's
time to now for the heartbeat (``touch_scores.lua``). Celery itself sends and takes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any, cast

from workers import keys
from workers.connections import redis_client
from workers.storage.scripts import script


def lengths(lists: list[str]) -> list[int]:
    """Messages waiting in each of Kombu's lists, in one round trip."""
    pipe = redis_client().pipeline(transaction=False)
    for name in lists:
        pipe.llen(name)
    return [int(n) for n in pipe.execute()]


def oldest(lists: list[str]) -> list[Any]:
    """The oldest message of each list, or None (Kombu pushes on the left, takes from the right)."""
    pipe = redis_client().pipeline(transaction=False)
    for name in lists:
        pipe.lindex(name, -1)
    return list(pipe.execute())


def waiting(lists: list[str], limit: int) -> Iterator[Any]:
    """Up to ``limit`` messages of each list, raw."""
    r = redis_client()
    for name in lists:
        yield from r.lrange(name, 0, limit - 1)


def unacked() -> Iterator[Any]:
    """Each message delivered and not yet acknowledged, raw (Kombu keeps ``[message, exchange,
    routing key]`` per delivery tag)."""
    for _, value in redis_client().hscan_iter(keys.KOMBU_UNACKED, count=1000):
        yield json.loads(value)[0]


def unacked_by_queue() -> dict[str, int]:
    """Deliveries held by workers, per queue (the routing key Kombu keeps beside each message).
    Prefetched messages are among them: a worker that took them has not done them."""
    counts: dict[str, int] = {}
    for _, value in redis_client().hscan_iter(keys.KOMBU_UNACKED, count=1000):
        try:
            queue = json.loads(value)[2]
        except (ValueError, IndexError, TypeError):
            continue
        if isinstance(queue, str):
            counts[queue] = counts.get(queue, 0) + 1
    return counts


def unacked_summary(now: float | None = None) -> dict[str, Any]:
    """How many deliveries workers hold, and how long ago the oldest one's holder last moved it."""
    r, now = redis_client(), now or time.time()
    first = cast("list[tuple[str, float]]", r.zrange(keys.KOMBU_UNACKED_INDEX, 0, 0, withscores=True))
    return {"count": r.hlen(keys.KOMBU_UNACKED), "oldest_heartbeat_s": round(now - first[0][1], 1) if first else None}


def touch_unacked(tags: list[str], now: float) -> None:
    """The heartbeat: the messages a live worker holds are not a dead one's (their time is now)."""
    if tags:
        script("touch_scores")(keys=[keys.KOMBU_UNACKED_INDEX], args=[now, *tags])
