"""A document's working set in Redis, read in one round trip when a stage opens the document and
released in one when the index stage is done with it.

A stage starts by reading the document's state (is this version still wanted here?), its
collection's config, its checkpointed chunks and, for the later stages, its contexts and body:
five keys in five modules. Read one by one, that is five serial round trips a stage, each paying
the network's latency twice when the hosts are apart (``ops/bench fleet``). Here they go in one
pipeline, without a transaction: each key is read as
it stands, exactly as the separate reads would have found it, and every write that follows is
still checked by the state scripts (a version moved on meanwhile is refused there, as before).

The decoding stays with each key's module (``states.decode``, ``checkpoints.decode_chunks``, ...):
this module only knows which keys to ask for at once. A body kept in S3 is read from there, after.
The in-memory stores of the unit tests have no pipeline: ``stages`` composes their single reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from workers import keys, metrics
from workers.chunks.splitting import Chunk
from workers.connections import redis_bytes_client
from workers.storage import bodies, checkpoints, states
from workers.storage.catalog import CollectionConfig


@dataclass(frozen=True)
class Opening:
    """What a stage starts from. ``body_read``: whether ``body`` was read here (asked for, and the
    body store is Redis); if not, the stage asks the body store itself when it needs the body."""

    state: dict[str, Any] | None
    config: CollectionConfig | None
    chunks: tuple[list[Chunk], str, dict[str, Any]] | None
    contexts: dict[int, dict[str, Any]] = field(default_factory=dict)
    body: dict[str, Any] | None = None
    body_read: bool = False


def open_document(collection: str, doc_id: str, version: str, contexts: bool = False, body: bool = False) -> Opening:
    """The state, config and chunks of a document version; its contexts and body if asked."""
    if contexts:
        checkpoints.flush(collection, doc_id, version)  # contexts kept in memory while Redis was away
    store = bodies.body_store()
    in_redis = store if body and isinstance(store, bodies.RedisBodyStore) else None
    pipe = redis_bytes_client().pipeline(transaction=False)
    pipe.hgetall(keys.doc(collection, doc_id))
    pipe.get(keys.collection(collection))
    pipe.get(keys.chunks(collection, version, doc_id))
    if contexts:
        pipe.hgetall(keys.contexts(collection, version, doc_id))
    if in_redis is not None:
        in_redis.get_on(pipe, collection, doc_id, version)
    replies = pipe.execute()
    raw_state, raw_config, raw_chunks = replies[:3]
    more = iter(replies[3:])
    return Opening(
        state=states.decode(doc_id, {k.decode(): v.decode() for k, v in raw_state.items()}),
        config=None if raw_config is None else CollectionConfig.model_validate_json(raw_config),
        chunks=None if raw_chunks is None else checkpoints.decode_chunks(raw_chunks),
        contexts=checkpoints.decode_contexts(cast("dict[bytes, bytes]", next(more))) if contexts else {},
        body=in_redis.decode(next(more)) if in_redis is not None else None,
        body_read=in_redis is not None)


def close_indexed(collection: str, doc_id: str, version: str, kept: dict[str, Any] | None,
                  counts: metrics.Batch) -> None:
    """After a version is indexed, in one round trip: its body kept compressed for a rebuild
    (``kept``, or nothing), its working body and chunks and contexts released, and the stage's
    counters sent. The S3 body store keeps and deletes on its own side, after."""
    store = bodies.body_store()
    pipe = redis_bytes_client().pipeline(transaction=False)
    if isinstance(store, bodies.RedisBodyStore):
        if kept is not None:
            store.keep_on(pipe, collection, doc_id, kept)
        store.delete_on(pipe, collection, doc_id, version)
    checkpoints.release_on(pipe, collection, doc_id, version)
    sent = counts.queue_on(pipe)
    pipe.execute()
    sent()
    if not isinstance(store, bodies.RedisBodyStore):
        if kept is not None:
            store.keep(collection, doc_id, kept)
        store.delete(collection, doc_id, version)
