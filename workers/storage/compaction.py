"""A collection's index merged into few segments once writing has stopped, because a search pays
for every segment.

Ingestion leaves an index in many segments: each refresh writes one, and Lucene's tiered merge
policy keeps about ten a tier. A query walks every segment's own HNSW graph (at ``ef_search``
500, ``producers.retrieval.search``) and reads every segment's BM25 terms, so a query over many
segments costs more than over one (``ops/bench clients``: docs/benchmarks.md). Merging while
documents still arrive would rewrite the index over and over; merging once the index is idle
rewrites it once.

So, a heartbeat duty (one worker at a time, by a lease that also spaces the passes): every
``SITUATE_COMPACT_IDLE_S`` it reads one ``_stats`` of the collections' live indices, and merges
(``_forcemerge``, not waited for) an index that

- took no write since the previous pass (idle for at least that long),
- has more segments than its size needs (``target_segments``: one per 5 GB, Lucene's largest
  merged segment, so a merged index can still take part in ordinary merges), and
- was never merged, or took at least ``RESTLESS_SHARE`` of its documents in writes since it was
  last merged, so a trickle into a large index does not rewrite it each time a document lands
  (an extra small segment costs a search little).

``situate compact`` merges one collection now, waiting for it. The trade-off: a merge takes CPU
and disk while it runs (the HNSW graph is built again), on an index nobody is writing to.
"""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
from dataclasses import dataclass
from typing import Any

from workers import keys
from workers.connections import opensearch_client, redis_client
from workers.settings import get_settings
from workers.storage import catalog, deliveries

log = logging.getLogger("situate.compaction")

SEGMENT_BYTES = 5 * 1024**3  # Lucene's max_merged_segment: merges make nothing larger
# What share of an index's documents must have been written since it was last merged (or ever)
# before an idle pass merges it again.
RESTLESS_SHARE = 0.05
# A pass runs on a worker's heartbeat, which keeps its messages alive: it waits on OpenSearch no
# longer than this (a slow node's pass is the next turn's).
PASS_TIMEOUT_S = 5
_HOLDER = uuid.uuid4().hex
_last_pass = 0.0


@dataclass(frozen=True)
class IndexShape:
    """What a pass reads of one index (its primaries)."""

    index: str
    segments: int
    store_bytes: int
    documents: int
    writes: int  # documents indexed and deleted since its shards opened (OpenSearch counts from a node's start)
    merging: int  # merges running now

    @property
    def target(self) -> int:
        return target_segments(self.store_bytes)


def target_segments(store_bytes: int) -> int:
    """As few segments as Lucene's own merges would keep: one per ``SEGMENT_BYTES``."""
    return max(1, math.ceil(store_bytes / SEGMENT_BYTES))


def shapes(indices: list[str]) -> dict[str, IndexShape]:
    """One ``_stats`` request for all of ``indices`` (missing ones left out)."""
    if not indices:
        return {}
    stats = opensearch_client().indices.stats(index=",".join(indices), metric="docs,store,indexing,segments,merge",
                                              params={"ignore_unavailable": "true"}, request_timeout=PASS_TIMEOUT_S)
    found: dict[str, IndexShape] = {}
    for name, entry in stats.get("indices", {}).items():
        p = entry["primaries"]
        found[name] = IndexShape(index=name, segments=int(p["segments"]["count"]),
                                 store_bytes=int(p["store"]["size_in_bytes"]), documents=int(p["docs"]["count"]),
                                 writes=int(p["indexing"]["index_total"]) + int(p["indexing"]["delete_total"]),
                                 merging=int(p["merges"]["current"]))
    return found


def compact(index: str) -> tuple[IndexShape, IndexShape] | None:
    """Merge ``index`` into ``target_segments`` and wait: its shape before and after (None for a
    missing index). Recorded, so the idle passes count writes from here."""
    before = shapes([index]).get(index)
    if before is None:
        return None
    _merge(before, wait=True)
    opensearch_client().indices.refresh(index=index)  # the merged segment searched, the old ones let go
    after = shapes([index]).get(index)
    return None if after is None else (before, after)


def _merge(shape: IndexShape, wait: bool) -> None:
    log.info("compaction: merging %s from %d segments into %d", shape.index, shape.segments, shape.target)
    opensearch_client().indices.forcemerge(index=shape.index, max_num_segments=shape.target,
                                           params={"wait_for_completion": "true" if wait else "false"},
                                           request_timeout=24 * 3600 if wait else PASS_TIMEOUT_S)
    # Recorded once OpenSearch took it: a merge refused is tried again at the next idle pass.
    redis_client().hset(keys.COMPACTED, shape.index, json.dumps({"writes": shape.writes, "at": time.time()}))


def due(shape: IndexShape, seen_writes: int | None, merged_writes: int | None) -> bool:
    """Whether an idle pass merges ``shape``: see the module's rules. ``seen_writes``: its writes
    at the previous pass (None: not seen yet); ``merged_writes``: at its last merge (None: never).
    A count lower than the one recorded means the node restarted (its counts start again): the
    record no longer says how much was written since, so it is read as never merged."""
    if seen_writes != shape.writes or shape.merging or shape.segments <= shape.target:
        return False
    if merged_writes is None or merged_writes > shape.writes:
        return True
    return shape.writes - merged_writes >= max(1, RESTLESS_SHARE * shape.documents)


def compact_idle() -> list[str]:
    """One pass: merge each live collection index that is ``due``. Returns what it merged."""
    live = {config.index_name for config in map(catalog.find, catalog.list_names()) if config is not None}
    # One pattern, not the names: a URL naming a thousand indices is longer than OpenSearch reads.
    found = {index: shape for index, shape in shapes(["situate-*"]).items() if index in live} if live else {}
    r = redis_client()
    seen = {k: int(v) for k, v in r.hgetall(keys.COMPACTION_SEEN).items()}
    merged = {k: json.loads(v)["writes"] for k, v in r.hgetall(keys.COMPACTED).items()}
    started = []
    for index, shape in found.items():
        if due(shape, seen.get(index), merged.get(index)):
            _merge(shape, wait=False)
            started.append(index)
    pipe = r.pipeline(transaction=False)
    pipe.delete(keys.COMPACTION_SEEN)  # dropped collections leave with it
    if found:
        pipe.hset(keys.COMPACTION_SEEN, mapping={index: shape.writes for index, shape in found.items()})
    gone = set(merged) - set(found)
    if gone:
        pipe.hdel(keys.COMPACTED, *gone)
    pipe.execute()
    return started


def maybe_compact_idle() -> list[str] | None:
    """A heartbeat duty: a pass if this worker takes the turn (at most one per
    ``SITUATE_COMPACT_IDLE_S`` in the fleet). An unreachable OpenSearch is the heartbeat's warning,
    and the next turn tries again."""
    global _last_pass
    every = get_settings().compact_idle_s
    if every <= 0 or time.monotonic() - _last_pass < every:
        return None
    _last_pass = time.monotonic()
    if not deliveries.take_turn(keys.COMPACTOR, _HOLDER, int(every * 1000)):
        return None
    return compact_idle()


def describe(shape: IndexShape) -> dict[str, Any]:
    return {"index": shape.index, "segments": shape.segments, "target_segments": shape.target,
            "documents": shape.documents, "store_bytes": shape.store_bytes}
