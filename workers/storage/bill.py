"""The LLM bill's running totals in Redis: per collection, per run, and for the whole account,
with the runs of each collection in order. ``contextualizers.llm.usage`` says what goes in
(each call, fault and document) and what the totals mean; this module only keeps them: a total
that cannot be written now (Redis away) waits in memory and goes with the next write that can.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, cast

from workers import keys, metrics
from workers.connections import REDIS_NOT_NOW, redis_client
from workers.storage.scripts import in_pipeline, run_loaded

log = logging.getLogger("situate.usage")


def _keys(collection: str, run: str | None) -> list[str]:
    targets = [keys.usage(collection), keys.USAGE_ALL]
    if run:
        targets.append(keys.usage(collection, run))
    return targets


# Writes that could not be made (Redis unreachable, or no reply), made again with the next write
# that can: an answer already paid for is never dropped because its bill could not be recorded.
# Each carries its number in this process's stream of writes, and the script that applies it
# sets that number's bit first (``lua/bill_add.lua``): a write whose reply was lost after Redis
# applied it is sent again and adds nothing. A bit a write: a million writes are 125 kB.
_pending: list[tuple[int, str, str | None, dict[str, float]]] = []
_pending_lock = threading.Lock()
_numbers = itertools.count(1)
_writer = ("", 0)  # (this process's id, its pid): a forked child takes an id of its own
WRITTEN_TTL_S = 7 * 86400  # longer than any outage a pending write waits through


def _writer_id() -> str:
    global _writer, _numbers
    if _writer[1] != os.getpid():
        _writer, _numbers = (uuid.uuid4().hex, os.getpid()), itertools.count(1)
        _pending.clear()  # a forked child's copy of its parent's pending writes: the parent sends them
    return _writer[0]


def add(collection: str, run: str | None, fields: dict[str, float], counts: metrics.Batch | None = None) -> None:
    """``counts``: the same call's metrics, sent in the same round trip (lost, not kept, if Redis
    does not answer: a sample is not worth holding a bill back)."""
    with _pending_lock:
        writer = _writer_id()
        batch = _pending[:] + [(next(_numbers), collection, run, fields)]
        _pending.clear()
    sent: list[Callable[[], None]] = []

    def build(pipe: Any) -> None:  # may run twice (a NOSCRIPT): each write applies once anyway
        for number, c, r, f in batch:
            figures: list[str | int] = []
            for name, value in f.items():
                if value:
                    # A float field stays a float (a dollar cost of exactly 1.0 would go to HINCRBY on a
                    # field holding "0.3", which Redis refuses): counts are ints, sums floats.
                    figures += [name, repr(value), "f"] if isinstance(value, float) else [name, int(value), "i"]
            targets = _keys(c, r)
            in_pipeline(pipe, "bill_add", [keys.usage_written(writer), *targets, *([keys.runs(c)] if r else [])],
                        [number, WRITTEN_TTL_S, len(targets), r or "", time.time(), *figures])
        if counts is not None and not sent:  # once: a first run that met a NOSCRIPT sent them already
            sent.append(counts.queue_on(pipe))

    try:
        run_loaded(build, ["bill_add"])
        for done in sent:
            done()
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
