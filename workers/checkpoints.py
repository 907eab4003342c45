"""Work already done for a document version, kept so that no stage pays for it twice.

Chunks are stored once by the ingest stage and read by the next two. Contexts are written one
by one as each arrives — before anything is indexed — so a task redelivered after a crash, or
retried after a failure, resumes with only the missing chunks: a context already paid for is
never bought again. Keys carry the content version: a changed document starts afresh.
"""

from __future__ import annotations

import json
from typing import Any

from workers.chunking import Chunk
from workers.connections import redis_client

# Intermediate state must outlive any realistic queue backlog, but not forever.
TTL_S = 14 * 24 * 3600


def _chunks_key(collection: str, doc_id: str, version: str) -> str:
    return f"situate:chunks:{collection}:{version}:{doc_id}"


def _contexts_key(collection: str, doc_id: str, version: str) -> str:
    return f"situate:ctx:{collection}:{version}:{doc_id}"


def save_chunks(collection: str, doc_id: str, version: str, chunks: list[Chunk], language: str,
                metadata: dict[str, Any]) -> None:
    payload = {"language": language, "metadata": metadata, "chunks": [c.to_json() for c in chunks]}
    redis_client().set(_chunks_key(collection, doc_id, version), json.dumps(payload), ex=TTL_S)


def load_chunks(collection: str, doc_id: str, version: str) -> tuple[list[Chunk], str, dict[str, Any]] | None:
    raw = redis_client().get(_chunks_key(collection, doc_id, version))
    if raw is None:
        return None
    payload = json.loads(raw)
    return [Chunk.from_json(c) for c in payload["chunks"]], payload["language"], payload["metadata"]


def save_context(collection: str, doc_id: str, version: str, n: int, context: dict[str, Any]) -> None:
    key = _contexts_key(collection, doc_id, version)
    pipe = redis_client().pipeline()
    pipe.hset(key, str(n), json.dumps(context))
    pipe.expire(key, TTL_S)
    pipe.execute()


def load_contexts(collection: str, doc_id: str, version: str) -> dict[int, dict[str, Any]]:
    raw = redis_client().hgetall(_contexts_key(collection, doc_id, version))
    return {int(n): json.loads(v) for n, v in raw.items()}


def release(collection: str, doc_id: str, version: str) -> None:
    """After indexing: the chunks are in OpenSearch now. Contexts stay (they carry the bill)."""
    redis_client().delete(_chunks_key(collection, doc_id, version))
