"""Work already done for a document version, kept so that no stage pays for it twice.

Chunks are stored once by the chunk stage and read by the next two. Contexts are written one
by one as each arrives — before anything is indexed — so a task redelivered after a crash, or
retried after a failure, resumes with only the missing chunks: a context already paid for is
never bought again. Keys carry the content version: a changed document starts afresh. JSON is
stored in UTF-8 as it is, not ASCII-escaped (an emoji is 4 bytes, not 12).

Where Redis has replicas, a context is confirmed on one (``WAIT 1``) before the call that paid for
it is counted done: replication is asynchronous, and a master killed a moment after it acknowledged
a checkpoint may not have passed it on, so the replica promoted in its place would not have it and
the context would be bought again (the failover fault test paid for more calls twice than were in
flight before this wait).
It costs a replica's round trip per context (``ops/bench checkpoints``), next to a call of a
second or more; without replicas there is nothing to wait for.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, cast

from workers import keys, metrics, models
from workers.chunks.splitting import Chunk
from workers.connections import REDIS_NOT_NOW, redis_client

# Intermediate state must outlive any realistic queue backlog, but not forever.
TTL_S = 14 * 24 * 3600


def _chunks_key(collection: str, doc_id: str, version: str) -> str:
    return keys.chunks(collection, version, doc_id)


def _contexts_key(collection: str, doc_id: str, version: str) -> str:
    return keys.contexts(collection, version, doc_id)


def save_chunks(collection: str, doc_id: str, version: str, chunks: list[Chunk], language: str,
                metadata: dict[str, Any]) -> None:
    payload = {"language": language, "metadata": metadata, "chunks": [c.to_json() for c in chunks]}
    redis_client().set(_chunks_key(collection, doc_id, version), json.dumps(payload, ensure_ascii=False), ex=TTL_S)


def load_chunks(collection: str, doc_id: str, version: str) -> tuple[list[Chunk], str, dict[str, Any]] | None:
    raw = redis_client().get(_chunks_key(collection, doc_id, version))
    return None if raw is None else decode_chunks(raw)


def decode_chunks(raw: str | bytes) -> tuple[list[Chunk], str, dict[str, Any]]:
    payload = json.loads(raw)
    return [Chunk.from_json(c) for c in payload["chunks"]], payload["language"], payload["metadata"]


# Contexts paid for that could not be written (Redis unreachable): kept in this process until
# the next attempt at the same document writes them, so a Redis restart does not make the
# calls that were in flight be paid again. Lost with the process, which is then no worse.
_unsaved: dict[str, dict[str, str]] = {}
_unsaved_lock = threading.Lock()


REPLICA_WAIT_MS = 1000  # past it the context is left on the master alone (counted), not refused
REPLICAS_RECHECK_S = 10.0
_replicas: tuple[float, int] = (-REPLICAS_RECHECK_S, 0)  # (when looked at, how many the master has)


def _replica_count() -> int:
    global _replicas
    checked, count = _replicas
    if time.monotonic() - checked > REPLICAS_RECHECK_S:
        count = int(redis_client().info("replication").get("connected_slaves") or 0)
        _replicas = (time.monotonic(), count)
    return count


# The context hashes this process has set to expire: an EXPIRE once per document version, not one per
# context (the key keeps its TTL through HSET). Forgotten in bulk past a bound: at worst, one more.
_expiring: set[str] = set()
EXPIRING_KEPT = 10_000


def _write(key: str, fields: dict[str, str]) -> None:
    """The fields, then (with replicas) ``WAIT`` on the same connection: WAIT counts the replicas
    that have this client's writes, so it must follow them on one connection (a pipeline, not a
    MULTI: WAIT is refused inside one; none is needed either, an HSET that lands without its
    EXPIRE is released with the document anyway)."""
    replicas = _replica_count()
    pipe = redis_client().pipeline(transaction=False)
    pipe.hset(key, mapping=cast(Any, fields))  # redis-py types its keys as a union: a dict[str, str] is one
    if key not in _expiring:
        pipe.expire(key, TTL_S)
    if replicas:
        pipe.wait(1, REPLICA_WAIT_MS)
    acknowledged = pipe.execute()
    if len(_expiring) > EXPIRING_KEPT:
        _expiring.clear()
    _expiring.add(key)
    if replicas and not acknowledged[-1]:
        metrics.count("checkpoints_unconfirmed", 1)


def save_context(collection: str, doc_id: str, version: str, n: int, context: dict[str, Any]) -> None:
    """Checkpoint one context as it arrives when it was paid for (a model's: its ``usage``); an
    offline one, free to write again, waits for ``flush`` with the rest of its document (one write
    for all). If Redis is unreachable it is kept in memory instead (see ``_unsaved``) and ``flush``
    raises later, once the document's other answers are in."""
    key = _contexts_key(collection, doc_id, version)
    if not context.get("usage"):
        with _unsaved_lock:
            _unsaved.setdefault(key, {})[str(n)] = json.dumps(context, ensure_ascii=False)
        return
    try:
        _write(key, {str(n): json.dumps(context, ensure_ascii=False)})
    except REDIS_NOT_NOW:
        with _unsaved_lock:
            _unsaved.setdefault(key, {})[str(n)] = json.dumps(context, ensure_ascii=False)


def flush(collection: str, doc_id: str, version: str) -> None:
    """Write the contexts kept in memory for this document; raises while Redis is unreachable."""
    key = _contexts_key(collection, doc_id, version)
    with _unsaved_lock:
        pending = _unsaved.pop(key, None)
    if pending:
        try:
            _write(key, pending)
        except REDIS_NOT_NOW:
            with _unsaved_lock:
                _unsaved.setdefault(key, {}).update(pending)
            raise


def load_contexts(collection: str, doc_id: str, version: str) -> dict[int, dict[str, Any]]:
    flush(collection, doc_id, version)
    return decode_contexts(cast("dict[str, str]", redis_client().hgetall(_contexts_key(collection, doc_id, version))))


def decode_contexts(raw: dict[str, str] | dict[bytes, bytes]) -> dict[int, dict[str, Any]]:
    return {int(n): json.loads(v) for n, v in raw.items()}


def release(collection: str, doc_id: str, version: str) -> None:
    """After indexing: chunks and contexts are in OpenSearch now, and the bill in the usage
    totals (``contextualizers.llm.usage``); Redis keeps only what in-flight work needs."""
    release_on(redis_client(), collection, doc_id, version)


def release_on(pipe: Any, collection: str, doc_id: str, version: str) -> None:
    """``release`` as a command on a pipeline the caller runs (``working_set.close_indexed``), or
    at once on a client."""
    key = _contexts_key(collection, doc_id, version)
    _expiring.discard(key)
    pipe.delete(_chunks_key(collection, doc_id, version), key)


def forget_collection(collection: str) -> None:
    r = redis_client()
    for pattern in (keys.chunks(collection, "*", "*"), keys.contexts(collection, "*", "*")):
        for key in r.scan_iter(pattern, count=1000):
            r.delete(key)


def mark_warm(collection: str, doc_id: str, version: str) -> None:
    """The document's prompt prefix was just read from or written to the provider's cache (each
    hit refreshes its TTL): a slice that starts while this lasts can count on reading it."""
    redis_client().set(keys.warm(collection, version, doc_id), "1", ex=models.CACHE_TRUST_S)


def still_warm(collection: str, doc_id: str, version: str) -> bool:
    return bool(redis_client().exists(keys.warm(collection, version, doc_id)))
