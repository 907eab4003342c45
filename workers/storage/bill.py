"""The LLM bill's running totals in Redis: per collection, per run, and for the whole account,
with the runs of each collection in order. ``contextualizers.llm.usage`` says what goes in
(each call, fault and document) and what the totals mean; this module only keeps them: a total
that cannot be written now (Redis away) waits in memory and goes with the next write that can.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import cast

from workers import keys, metrics
from workers.connections import REDIS_NOT_NOW, redis_client

log = logging.getLogger("situate.usage")


def _keys(collection: str, run: str | None) -> list[str]:
    targets = [keys.usage(collection), keys.USAGE_ALL]
    if run:
        targets.append(keys.usage(collection, run))
    return targets


# Totals that could not be written (Redis unreachable), added with the next write that can:
# an answer already paid for is never dropped because its bill could not be recorded.
_pending: list[tuple[str, str | None, dict[str, float]]] = []
_pending_lock = threading.Lock()


def add(collection: str, run: str | None, fields: dict[str, float], counts: metrics.Batch | None = None) -> None:
    """``counts``: the same call's metrics, sent in the same round trip (lost, not kept, if Redis
    does not answer: a sample is not worth holding a bill back)."""
    with _pending_lock:
        batch = _pending[:] + [(collection, run, fields)]
        _pending.clear()
    pipe = redis_client().pipeline(transaction=False)
    for c, r, f in batch:
        for key in _keys(c, r):
            for name, value in f.items():
                # A float field stays a float (a dollar cost of exactly 1.0 would go to HINCRBY on a
                # field holding "0.3", which Redis refuses): counts are ints, sums floats.
                if isinstance(value, float) and value:
                    pipe.hincrbyfloat(key, name, value)
                elif value:
                    pipe.hincrby(key, name, int(value))
        if r:
            pipe.zadd(keys.runs(c), {r: time.time()}, nx=True)
    sent = counts.queue_on(pipe) if counts is not None else None
    try:
        pipe.execute()
        if sent is not None:
            sent()
    except REDIS_NOT_NOW:
        with _pending_lock:
            _pending[:0] = batch
        log.warning("usage totals kept in memory until Redis answers (%d pending)", len(batch))


def counts(collection: str | None = None, run: str | None = None) -> dict[str, str]:
    """The raw totals of a collection (of one of its runs), or of the whole account (None)."""
    key = keys.USAGE_ALL if collection is None else keys.usage(collection, run)
    return cast("dict[str, str]", redis_client().hgetall(key))


def runs(collection: str, last: int = 10) -> list[str]:
    return list(reversed(cast("list[str]", redis_client().zrange(keys.runs(collection), -last, -1))))


def forget_collection(collection: str) -> None:
    """The collection's own totals and runs; the account-wide totals keep what it cost."""
    r = redis_client()
    for key in r.scan_iter(keys.usage(collection, "*"), count=1000):
        r.delete(key)
    r.delete(keys.usage(collection), keys.runs(collection))


def merge_into(source: str, target: str) -> None:
    """A rebuilt generation's bill becomes its collection's (totals and runs); the account-wide
    totals counted it already."""
    r = redis_client()
    runs_of = cast("list[tuple[str, float]]", r.zrange(keys.runs(source), 0, -1, withscores=True))
    pipe = r.pipeline(transaction=False)
    for source_key, target_key in [(keys.usage(source), keys.usage(target))] + [
            (keys.usage(source, run), keys.usage(target, run)) for run, _ in runs_of]:
        for name, value in cast("dict[str, str]", r.hgetall(source_key)).items():
            pipe.hincrbyfloat(target_key, name, float(value))
    for run, at in runs_of:
        pipe.zadd(keys.runs(target), {run: at}, nx=True)
    pipe.execute()
    forget_collection(source)
