"""The fleet's figures, summed in Redis: what ``/metrics``, ``/dashboard`` and ``situate stats`` read.

Workers are many processes on many hosts, started and stopped by an autoscaler; scraping each
one would lose a stopped worker's counts and needs every host reachable. Instead each process
adds what it observes to a few Redis hashes (one pipelined round trip per event), and any
reader sees the fleet's sum. The price: a sample is lost if Redis is away at that moment —
never work, and the bill (``usage``) keeps its own retry.

What is kept, under ``situate:metrics:``:

- ``counters``: all-time counters, one field per (name, labels);
- ``hist``: histogram bucket counts (not cumulative; ``read_histograms`` sums them);
- ``minute:<epoch minute>`` and ``day:<YYYY-MM-DD>``: the series the dashboard charts, in time
  buckets (``PER_MINUTE``, ``PER_DAY``: only those, each written where it is read); minutes are
  kept two days, days 400.

Gauges (queue depth, documents by state, workers online) are not stored: they are read live.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, cast

from workers import keys
from workers.connections import REDIS_NOT_NOW, redis_client

log = logging.getLogger("situate.metrics")

PREFIX = keys.METRICS
COUNTERS, HISTOGRAMS = PREFIX + "counters", PREFIX + "hist"
MINUTE_TTL_S, DAY_TTL_S = 2 * 86400, 400 * 86400
# Seconds. Stage tasks run from milliseconds (an index of a small document) to minutes (a big
# document's contexts); provider calls from a fraction of a second to a timeout.
BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, math.inf)

Labels = dict[str, str]

# The counters and histograms the dashboard draws over time (``producers.web.dashboard``): kept
# per minute and per day as well. Every other figure is all-time only (``/metrics``): a time bucket
# no one reads is a write for nothing on every sample.
PER_MINUTE = frozenset({"chunks_indexed", "llm_tokens", "llm_best_read_tokens", "llm_call_seconds"})
PER_DAY = frozenset({"llm_cost_usd"})


def _field(name: str, labels: Labels) -> str:
    return json.dumps([name, dict(sorted(labels.items()))], separators=(",", ":"))


def _parse(field: str) -> tuple[str, Labels]:
    name, labels = json.loads(field)
    return name, labels


def minute_key(at: float) -> str:
    return f"{PREFIX}minute:{int(at // 60)}"


def day_key(at: float) -> str:
    return f"{PREFIX}day:{datetime.fromtimestamp(at, UTC):%Y-%m-%d}"


# The time buckets this process has given their expiry already (a key once expiring keeps its TTL
# through HINCRBY): an EXPIRE per bucket and process, not two per sample.
_expiring: set[str] = set()


class Batch:
    """Observations sent together, in one round trip: ``with metrics.batch() as m: m.count(...)``."""

    def __init__(self) -> None:
        self.counts: dict[str, float] = defaultdict(float)
        self.buckets: dict[str, int] = defaultdict(int)
        self.sums: dict[str, float] = defaultdict(float)
        self.names: dict[str, str] = {}

    def count(self, name: str, value: float = 1, **labels: str) -> None:
        if value:
            self.counts[_field(name, labels)] += value
            self.names[_field(name, labels)] = name

    def observe(self, name: str, seconds: float, **labels: str) -> None:
        index = next(i for i, le in enumerate(BUCKETS) if seconds <= le)
        field = json.dumps([name, dict(sorted(labels.items())), index], separators=(",", ":"))
        self.buckets[field] += 1
        self.names[field] = name
        self.sums[_field(name, labels)] += seconds

    def send(self) -> None:
        if not (self.counts or self.buckets):
            return
        pipe = redis_client().pipeline(transaction=False)
        sent = self.queue_on(pipe)
        try:
            pipe.execute()
            sent()
        except REDIS_NOT_NOW as e:  # a sample is not worth a task
            log.debug("metrics sample lost: %s", e)

    def queue_on(self, pipe: Any) -> Callable[[], None]:
        """These observations as commands on ``pipe`` (a stage's own last round trip carries
        them); the function returned is called once the pipeline has run."""
        now = time.time()
        minute, day = minute_key(now), day_key(now)
        touched: set[str] = set()
        for field, value in self.counts.items():
            name = self.names[field]
            for key in (COUNTERS, *((minute,) if name in PER_MINUTE else ()), *((day,) if name in PER_DAY else ())):
                pipe.hincrbyfloat(key, field, value)
                touched.add(key)
        for field, n in self.buckets.items():
            pipe.hincrby(HISTOGRAMS, field, n)
            if self.names[field] in PER_MINUTE:
                pipe.hincrby(minute, "h" + field, n)
                touched.add(minute)
        for field, total in self.sums.items():
            pipe.hincrbyfloat(HISTOGRAMS, "s" + field, total)
        for key, ttl in ((minute, MINUTE_TTL_S), (day, DAY_TTL_S)):
            if key in touched and key not in _expiring:  # once per bucket and process, not on every sample
                pipe.expire(key, ttl)

        def sent() -> None:
            _expiring.update(touched & {minute, day})
            if len(_expiring) > 64:
                _expiring.intersection_update((minute, day))
        return sent

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.send()


batch = Batch


def count(name: str, value: float = 1, **labels: str) -> None:
    with Batch() as b:
        b.count(name, value, **labels)


def observe(name: str, seconds: float, **labels: str) -> None:
    with Batch() as b:
        b.observe(name, seconds, **labels)


# -- reading -------------------------------------------------------------------------------------

def read_counters(key: str = COUNTERS) -> dict[str, list[tuple[Labels, float]]]:
    """name -> [(labels, value)] from the all-time hash, or one time bucket's."""
    out: dict[str, list[tuple[Labels, float]]] = defaultdict(list)
    raw: dict[str, str] = cast("dict[str, str]", redis_client().hgetall(key))
    for field, value in raw.items():
        if field.startswith("["):
            name, labels = _parse(field)
            out[name].append((labels, float(value)))
    return out


def _histograms(raw: dict[str, str], prefix: str = "") -> dict[str, dict[str, dict[str, Any]]]:
    out: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for field, value in raw.items():
        if not field.startswith(prefix + "["):
            continue
        name, labels, index = json.loads(field[len(prefix):])
        h = out[name].setdefault(_field(name, labels), {"labels": labels, "buckets": [0] * len(BUCKETS), "sum": 0.0})
        h["buckets"][index] += int(value)
    return out


def read_histograms() -> dict[str, list[dict[str, Any]]]:
    """name -> [{"labels", "buckets" (cumulative, one per BUCKETS bound), "sum", "count"}]."""
    raw = cast("dict[str, str]", redis_client().hgetall(HISTOGRAMS))
    out: dict[str, list[dict[str, Any]]] = {}
    for name, series in _histograms(raw).items():
        for field, h in series.items():
            h["sum"] = float(raw.get("s" + field, 0.0))
            h["buckets"] = _cumulative(h["buckets"])
            h["count"] = h["buckets"][-1]
        out[name] = list(series.values())
    return out


def _cumulative(counts: list[int]) -> list[int]:
    total, out = 0, []
    for n in counts:
        total += n
        out.append(total)
    return out


def quantile(q: float, cumulative: list[int]) -> float | None:
    """Prometheus's ``histogram_quantile``: linear within the bucket the rank falls in."""
    if not cumulative or not cumulative[-1]:
        return None
    rank = q * cumulative[-1]
    for i, upto in enumerate(cumulative):
        if upto >= rank:
            lower = BUCKETS[i - 1] if i else 0.0
            upper = BUCKETS[i] if BUCKETS[i] != math.inf else lower
            below = cumulative[i - 1] if i else 0
            inside = upto - below
            return lower + (upper - lower) * ((rank - below) / inside if inside else 1.0)
    return None


def minutes(last: int, at: float | None = None) -> Iterable[tuple[int, dict[str, list[tuple[Labels, float]]],
                                                                  dict[str, dict[str, dict[str, Any]]]]]:
    """(epoch minute, counters, histograms) for each of the ``last`` minutes, oldest first."""
    now = int((at or time.time()) // 60)
    pipe = redis_client().pipeline(transaction=False)
    span = range(now - last + 1, now + 1)
    for m in span:
        pipe.hgetall(f"{PREFIX}minute:{m}")
    for m, raw in zip(span, pipe.execute()):
        counters: dict[str, list[tuple[Labels, float]]] = defaultdict(list)
        for field, value in raw.items():
            if field.startswith("["):
                name, labels = _parse(field)
                counters[name].append((labels, float(value)))
        histograms = _histograms(raw, "h")
        for series in histograms.values():
            for h in series.values():
                h["buckets"] = _cumulative(h["buckets"])
        yield m, counters, histograms


def days(last: int, at: float | None = None) -> list[tuple[str, dict[str, list[tuple[Labels, float]]]]]:
    now = at or time.time()
    names = [day_key(now - 86400 * i) for i in reversed(range(last))]
    pipe = redis_client().pipeline(transaction=False)
    for key in names:
        pipe.hgetall(key)
    out = []
    for key, raw in zip(names, pipe.execute()):
        counters: dict[str, list[tuple[Labels, float]]] = defaultdict(list)
        for field, value in raw.items():
            name, labels = _parse(field)
            counters[name].append((labels, float(value)))
        out.append((key.rsplit(":", 1)[1], counters))
    return out


def forget() -> None:
    """Every stored figure (tests; an operator starting afresh)."""
    r = redis_client()
    for key in r.scan_iter(PREFIX + "*", count=1000):
        r.delete(key)


def forget_series(label: str, values: set[str]) -> int:
    """The all-time counters and histograms whose ``label`` is one of ``values`` (a replica no
    worker lists any more): removed, so that ``/metrics`` stops exporting them. How many."""
    r = redis_client()
    removed = 0
    for key, prefixes in ((COUNTERS, ("",)), (HISTOGRAMS, ("", "s"))):
        fields = cast("dict[str, str]", r.hgetall(key))
        doomed = []
        for field in fields:
            for prefix in prefixes:
                if field.startswith(prefix + "[") and json.loads(field[len(prefix):])[1].get(label) in values:
                    doomed.append(field)
        if doomed:
            removed += int(r.hdel(key, *doomed))
    return removed
