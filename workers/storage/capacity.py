"""Is Redis close to full? Producers ask before queueing more.

Redis is the broker and holds every in-flight document's body, chunks and contexts. At
``maxmemory`` with ``noeviction`` it refuses writes — the broker included, so the whole pipeline
stalls. Well before that (``SITUATE_REDIS_MEMORY_HIGH_WATER``, 85% of maxmemory) producers are
told to come back later (HTTP 503 with Retry-After; the CLI waits), while the workers drain what
is in flight and free its memory. Without a maxmemory there is no line to stay under.
"""

from __future__ import annotations

import time

from workers.connections import redis_client
from workers.settings import get_settings

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
