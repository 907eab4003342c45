"""Per-document state in Redis: what a producer, the API and ``situate status`` read.

A hash per document — ``state`` (queued → chunked → situated → indexed, or failed), the
``version`` being processed, the ``indexed_version`` and its ``chunks`` count, ``error`` —
plus per-collection counts by state, kept in step by one Lua script so that ``status`` is O(1)
at a million documents. Every write names the version it is about: a stage still working on
a superseded version cannot overwrite the newer one's state.
"""

from __future__ import annotations

import time
from typing import Any

from workers.connections import redis_client

QUEUED, CHUNKED, SITUATED, INDEXED, FAILED = "queued", "chunked", "situated", "indexed", "failed"
TERMINAL = (INDEXED, FAILED)

# KEYS: doc hash, counts hash, docs set. ARGV: doc_id, version ('' = any), new state, then
# field/value pairs. Returns 1 if written, 0 if the stored version is another one.
_SET_STATE = """
local current = redis.call('HGET', KEYS[1], 'version')
if ARGV[2] ~= '' and current and current ~= ARGV[2] then return 0 end
local old = redis.call('HGET', KEYS[1], 'state')
if old ~= ARGV[3] then
  if old then redis.call('HINCRBY', KEYS[2], old, -1) end
  redis.call('HINCRBY', KEYS[2], ARGV[3], 1)
end
redis.call('HSET', KEYS[1], 'state', ARGV[3])
for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('SADD', KEYS[3], ARGV[1])
return 1
"""


def _doc_key(collection: str, doc_id: str) -> str:
    return f"situate:doc:{collection}:{doc_id}"


def _keys(collection: str, doc_id: str) -> list[str]:
    return [_doc_key(collection, doc_id), f"situate:counts:{collection}", f"situate:docs:{collection}"]


def set_state(collection: str, doc_id: str, if_version: str | None, state: str, **fields: Any) -> bool:
    """Move a document to ``state`` if it is still at ``if_version`` (None: whatever version)."""
    args: list[Any] = [doc_id, if_version or "", state]
    for k, v in {**fields, "updated": f"{time.time():.3f}"}.items():
        args += [k, "" if v is None else str(v)]
    script = redis_client().register_script(_SET_STATE)
    return bool(script(keys=_keys(collection, doc_id), args=args))


def submitted(collection: str, doc_id: str, version: str, meta_hash: str) -> None:
    set_state(collection, doc_id, None, QUEUED, version=version, meta_hash=meta_hash, error="",
              submitted=f"{time.time():.3f}")


def rejected(collection: str, doc_id: str, reason: str) -> None:
    set_state(collection, doc_id, None, FAILED, error=reason, version="")


def get(collection: str, doc_id: str) -> dict[str, Any] | None:
    raw = redis_client().hgetall(_doc_key(collection, doc_id))
    if not raw:
        return None
    out: dict[str, Any] = {"doc_id": doc_id, **raw}
    for k in ("chunks", "chunks_total"):
        out[k] = int(out[k]) if out.get(k) else 0
    out["error"] = out.get("error") or None
    return out


def get_many(collection: str, doc_ids: list[str]) -> list[dict[str, Any] | None]:
    pipe = redis_client().pipeline(transaction=False)
    for doc_id in doc_ids:
        pipe.hmget(_doc_key(collection, doc_id), "state", "version", "error", "chunks")
    out = []
    for doc_id, (state, version, error, chunks) in zip(doc_ids, pipe.execute()):
        out.append(None if state is None else
                   {"doc_id": doc_id, "state": state, "version": version, "error": error or None,
                    "chunks": int(chunks or 0)})
    return out


def counts(collection: str) -> dict[str, int]:
    raw = redis_client().hgetall(f"situate:counts:{collection}")
    return {k: int(v) for k, v in raw.items() if int(v)}


def is_unchanged(collection: str, doc_id: str, version: str, meta_hash: str) -> bool:
    """True when this exact content and metadata is already indexed: nothing to do, no LLM call."""
    state, indexed_version, stored_meta = redis_client().hmget(
        _doc_key(collection, doc_id), "state", "indexed_version", "meta_hash")
    return state == INDEXED and indexed_version == version and stored_meta == meta_hash


def forget_collection(collection: str) -> None:
    r = redis_client()
    docs_key = f"situate:docs:{collection}"
    batch: list[str] = []
    for doc_id in r.sscan_iter(docs_key, count=1000):
        batch.append(_doc_key(collection, doc_id))
        if len(batch) >= 1000:
            r.delete(*batch)
            batch.clear()
    if batch:
        r.delete(*batch)
    r.delete(docs_key, f"situate:counts:{collection}")
    for key in r.scan_iter(f"situate:chunks:{collection}:*"):
        r.delete(key)
    for key in r.scan_iter(f"situate:ctx:{collection}:*"):
        r.delete(key)
