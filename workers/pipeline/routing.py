"""Which queue a piece of work goes to, and in which order it is taken.

Three stages, one queue each, except the middle one, which is sharded (``all_queues`` gives
them in the order a worker takes them: downstream first):

    chunk              body -> chunks                     (CPU: tokenizers, tree-sitter)
    contextualize.N    chunks -> contexts                 (LLM calls: I/O, or a local model)
    index              contexts -> vectors -> OpenSearch  (CPU: the embedder)

A document is one message on one ``contextualize.N`` shard, chosen by a stable hash of
(collection, doc_id), so all its calls run together where its prompt cache — or a local
model's KV cache — is warm. Operators point CPU workers at ``chunk,index`` and I/O workers
(threads) at the shards.

Queue names before 0.2 were ``ingest``, ``situate.N`` and ``index``; an old name given to
``situate worker --queues`` still works (see ``expand``).
"""

from __future__ import annotations

import hashlib
import json

from workers.settings import get_settings
from workers.storage import broker

CHUNK_QUEUE = "chunk"
INDEX_QUEUE = "index"
CONTEXTUALIZE_PREFIX = "contextualize."

# Redis has no priority queue: Kombu keeps one list per priority level, "<queue>:<level>",
# level 0 (no suffix) first. Contextualize tasks use it to start big documents first.
PRIORITY_STEPS = list(range(10))
PRIORITY_SEP = ":"


def contextualize_queue(shard: int) -> str:
    return f"{CONTEXTUALIZE_PREFIX}{shard}"


def shard_for(collection: str, doc_id: str, shards: int) -> int:
    """Stable across processes and restarts (unlike ``hash()``), so all chunks of a document
    land on one queue, where its prompt cache (or a local model's KV cache) is warm."""
    digest = hashlib.sha256(f"{collection}\x00{doc_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % shards


def document_queue(collection: str, doc_id: str) -> str:
    return contextualize_queue(shard_for(collection, doc_id, get_settings().shards))


def all_queues() -> list[str]:
    """Downstream first. A worker on several queues takes the next message from the first
    non-empty one (Kombu's ``priority`` order, level by level): finishing documents before
    starting new ones keeps a backlog flowing through the stages, instead of being chunked into
    Redis whole before anything is indexed."""
    return [INDEX_QUEUE] + [contextualize_queue(i) for i in range(get_settings().shards)] + [CHUNK_QUEUE]


# Lower is sooner (Kombu on Redis serves level 0 first). Chunk tasks come last of all, so new
# documents enter the pipeline only when nothing further down is waiting.
CHUNK_PRIORITY = 9


def contextualize_priority(chunks: int) -> int:
    """Longest first: a big document started last is the straggler that sets the run's end."""
    return max(0, 9 - max(0, chunks - 1).bit_length())


QUEUED_AT_HEADER = "situate_queued_at"  # set on every message as it is sent (app.stamp_queued_time)


def sublists(queue: str) -> list[str]:
    """Kombu's lists for one queue: the queue itself (priority 0), then one per priority step."""
    return [queue] + [f"{queue}{PRIORITY_SEP}{level}" for level in PRIORITY_STEPS[1:]]


def oldest_waiting_s(queue: str, now: float) -> float | None:
    """Age of the oldest message waiting in ``queue`` (Kombu pushes on the left and takes from
    the right: the oldest of each sub-list is its last element). None: empty, or only messages
    sent before this header existed."""
    ages = []
    for raw in broker.oldest(sublists(queue)):
        if raw:
            try:
                sent = json.loads(raw)["headers"].get(QUEUED_AT_HEADER)
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
            if isinstance(sent, (int, float)):
                ages.append(max(0.0, now - sent))
    return max(ages) if ages else None


# Before 0.2: ``ingest`` and ``situate.N``. Messages queued then sit in the old lists.
LEGACY_QUEUES = {"ingest": CHUNK_QUEUE}
LEGACY_CONTEXTUALIZE_PREFIX = "situate."


def expand(queues: list[str]) -> list[str]:
    """Queue names as an operator gave them -> the lists a worker consumes. An old name
    means its new name *and* the old list, so messages queued before an upgrade drain."""
    out: list[str] = []
    for name in queues:
        new = LEGACY_QUEUES.get(name)
        if new is None and name.startswith(LEGACY_CONTEXTUALIZE_PREFIX) and name[8:].isdigit():
            new = contextualize_queue(int(name[8:]))
        for q in ([new, name] if new else [name]):
            if q not in out:
                out.append(q)
    return out
