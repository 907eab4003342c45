"""Is Redis close to full? Producers ask before queueing more; workers before writing what no
producer saw coming.

Redis is the broker and holds every in-flight document's body, chunks and contexts. At
``maxmemory`` with ``noeviction`` it refuses writes — the broker included, so the whole pipeline
stalls. Well before that (``SITUATE_REDIS_MEMORY_HIGH_WATER``, 85% of maxmemory) producers are
told to come back later (HTTP 503 with Retry-After; the CLI waits), while the workers drain what
is in flight and free its memory. Without a maxmemory there is no line to stay under.

A producer sees a file's bytes, not what they become: a 12 KB workbook can extract to 20 MB of
text, written again as chunks and with their contexts. So the worker that extracts a file asks
``make_room`` for what it is about to write: a text that could never fit under the line fails its
document with that reason; one that does not fit *now* waits (``StoreFull`` is retried in place,
as an unreachable Redis is) while the other documents drain.
"""

from __future__ import annotations

import time

from workers import faults
from workers.connections import redis_client
from workers.errors import BadDocument, StoreFull
from workers.settings import get_settings

# A file's text is written about three times over before it is indexed: as its body, as its
# chunks' checkpoint, and in part again with each chunk's context.
WRITES = 3

_cache: tuple[float, float | None] = (0.0, None)


def memory_used() -> float | None:
    """Used memory over maxmemory (0..1+), or None when Redis has no maxmemory. Cached 1 s."""
    global _cache
    checked, ratio = _cache
    if time.monotonic() - checked < 1.0:
        return ratio
    info = redis_client().info("memory")
    limit = int(info.get("maxmemory") or 0)
    ratio = int(info["used_memory"]) / limit if limit else None
    _cache = (time.monotonic(), ratio)
    return ratio


def too_full() -> bool:
    ratio = memory_used()
    return ratio is not None and ratio >= get_settings().redis_memory_high_water


def wait_for_room(nbytes: int, what: str) -> None:
    """``make_room``, waiting here while Redis has no room yet (as ``faults`` waits out any store
    fault: up to SITUATE_TRANSIENT_PATIENCE_S), so that the work which produced ``what`` (an
    extraction) is not done again for each try."""
    for attempt in faults.retrying_stores("chunk", f"room for {what}"):
        with attempt:
            return make_room(nbytes, what)
    raise AssertionError("unreachable: tenacity returns or raises")  # pragma: no cover


def make_room(nbytes: int, what: str) -> None:
    """Before writing ``nbytes`` of ``what`` (and its copies): BadDocument if it could never fit
    under the line, StoreFull if it does not fit now."""
    info = redis_client().info("memory")
    limit = int(info.get("maxmemory") or 0)
    if not limit:
        return
    line, need = limit * get_settings().redis_memory_high_water, WRITES * nbytes
    if need > line / 2:
        raise BadDocument(f"{what} is {nbytes / 1e6:,.1f} MB, which would take about {need / 1e6:,.0f} MB of Redis "
                          f"in flight, over half of what this deployment allows it ({line / 1e6:,.0f} MB)")
    if int(info["used_memory"]) + need > line:
        raise StoreFull(f"Redis has no room for {what} ({need / 1e6:,.0f} MB) now; waiting for other documents "
                        "to drain")
