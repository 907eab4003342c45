"""Token buckets shared by every worker, in Redis: the rate limiter's store
(``contextualizers.llm.ratelimit`` decides what to reserve and settle; this keeps the
buckets). Each bucket is refilled continuously at ``rate`` per second up to ``capacity``; one
Lua script per operation makes check-and-take atomic, and every script reads the time from Redis
itself (``lua/ratelimit_now.lua``): one clock for all workers.
"""

from __future__ import annotations

from workers.storage.scripts import script

Bucket = tuple[float, float]  # (capacity, refill per second)


def take(keys: list[str], buckets: list[Bucket], needs: tuple[int, ...]) -> float:
    """Take ``needs`` from each bucket, all or none: 0 if taken, else the seconds to wait before
    they could be (a need larger than its bucket takes all of it)."""
    args: list[float] = []
    for (capacity, rate), need in zip(buckets, needs):
        args += [capacity, rate, need]
    return float(script("ratelimit_acquire")(keys=keys, args=args))


def adjust(keys: list[str], buckets: list[Bucket], deltas: list[int]) -> None:
    """Take ``delta`` more from each bucket (a negative one gives back)."""
    args: list[float] = []
    for (capacity, rate), delta in zip(buckets, deltas):
        args += [capacity, rate, delta]
    script("ratelimit_settle")(keys=keys, args=args)


def empty_for(key: str, bucket: Bucket, seconds: float) -> None:
    """Empty the bucket and hold it empty for ``seconds`` (a provider's 429)."""
    capacity, rate = bucket
    script("ratelimit_penalize")(keys=[key], args=[capacity, rate, seconds])
