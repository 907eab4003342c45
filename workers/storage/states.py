"""Per-document state in Redis: what a producer, the API and ``situate status`` read, and what
makes a redelivered task a no-op.

A hash per document — ``state``, the ``version`` being processed and its ``seq`` (a number
that grows with every submission of the document: newer wins), the ``indexed_version`` and its
``chunks`` count, ``error`` — plus per-collection counts by state, kept in step by Lua scripts
so that ``situate status`` is O(1) at a million documents — and one sorted set of the
documents in flight (``MOVING``), by when each last moved, which the same scripts keep: the
reconciler (``pipeline.reconcile``) reads the oldest of it to find documents that stopped moving,
at any number of documents finished.

The rules, enforced in the scripts, not by callers:

- a state only moves forward for a version: queued → chunked → situated → indexed. A stage
  delivered again after its document moved on is told no, and does nothing;
- ``failed`` ends a version, and never overwrites ``indexed`` (a late duplicate that fails
  cannot un-index a document);
- every write names its version: a stage still working on a superseded version changes nothing;
- a submission of the version already in flight is not queued twice.
"""

from __future__ import annotations

import time
from typing import Any, cast

from redis.lock import Lock

from workers import keys
from workers.connections import redis_client
from workers.storage import scripts

QUEUED, CHUNKED, SITUATED, INDEXED, FAILED = "queued", "chunked", "situated", "indexed", "failed"
TERMINAL = (INDEXED, FAILED)
IN_FLIGHT = (QUEUED, CHUNKED, SITUATED)
RANK = {QUEUED: 0, CHUNKED: 1, SITUATED: 2, INDEXED: 3}

MOVING = keys.MOVING  # member: collection \x1f doc id; score: when it last moved (s)
SEPARATOR = "\x1f"

def _doc_key(collection: str, doc_id: str) -> str:
    return keys.doc(collection, doc_id)


def _keys(collection: str, doc_id: str) -> list[str]:
    return [_doc_key(collection, doc_id), keys.counts(collection), keys.docs(collection)]


def member(collection: str, doc_id: str) -> str:
    return f"{collection}{SEPARATOR}{doc_id}"


def _run(name: str, collection: str, doc_id: str, args: list[Any], seq_key: bool = False) -> Any:
    """Run the state script ``lua/state_<script>.lua`` on a document: KEYS its hash, the
    collection's counts and documents (and its seq counter), the backlog's bytes, its failed index,
    then the in-flight index; ARGV the document id, ``args``, then its in-flight member and the time
    (``state_moves.lua``)."""
    targets = _keys(collection, doc_id) + ([keys.seq(collection)] if seq_key else []) \
        + [keys.BACKLOG, keys.failed(collection), MOVING]
    return scripts.script(f"state_{name}")(
        keys=targets, args=[doc_id, *args, member(collection, doc_id), f"{time.time():.3f}"])


def set_state(collection: str, doc_id: str, version: str, state: str, **fields: Any) -> bool:
    """Move a document's ``version`` forward to ``state`` (or to ``failed``). False when the
    document is at another version, gone, or already there or past it: the caller's work is moot."""
    args: list[Any] = [doc_id, version, state]
    for k, v in {**fields, "updated": f"{time.time():.3f}"}.items():
        args += [k, "" if v is None else str(v)]
    return bool(_run("advance", collection, doc_id, args[1:]))


def submit(collection: str, doc_id: str, version: str, meta_hash: str, stale_s: float,
           seq: int | None = None, nbytes: int = 0) -> tuple[bool, int]:
    """Record a submission: (True, seq) when it is to be queued; (False, seq) when this very
    version is already in flight (moved within ``stale_s``), so one message runs, not two.
    ``seq``: the number to take instead of the next one (a rebuild's copy of a live document);
    ``nbytes``: what it weighs in the backlog until it is indexed or failed (``backlog``)."""
    status, seq = _run("submit", collection, doc_id,
                       [version, meta_hash, f"{time.time():.3f}", stale_s, "" if seq is None else str(seq), nbytes],
                       seq_key=True)
    return status == "queued", int(seq)


def backlog() -> int:
    """Bytes of the documents submitted and not yet indexed or failed, every collection's."""
    return int(redis_client().get(keys.BACKLOG) or 0)


def rejected(collection: str, doc_id: str, reason: str) -> None:
    _run("reject", collection, doc_id, [reason, f"{time.time():.3f}"])


def forget(collection: str, doc_id: str) -> str | None:
    """Remove a document's state (it was deleted); returns the state it had."""
    return _run("forget", collection, doc_id, [""])


def forget_if(collection: str, doc_id: str, seq: int) -> bool:
    """Remove a document's state if it is still submission ``seq``: a delete removes what it saw."""
    return bool(_run("forget", collection, doc_id, [str(seq)]))


def retry(collection: str, doc_id: str, version: str, seq: int) -> tuple[bool, int]:
    """Queue failed submission ``seq`` (at ``version``) again: (True, new seq); (False, seq now)
    when the document has moved on since (a newer version, a retry already queued)."""
    status, new_seq = _run("retry", collection, doc_id, [version, str(seq), f"{time.time():.3f}"], seq_key=True)
    return status == "queued", int(new_seq)


LOCK_TIMEOUT_S = 60


def document_lock(collection: str, doc_id: str) -> Lock:
    """One producer at a time on a document's multi-step changes (submit: body then state;
    delete: state, chunks, body). The body's key is the content's version, so without it a
    delete racing a re-submission of the same content deletes the new body. A holder that dies
    lets go after ``LOCK_TIMEOUT_S``."""
    return redis_client().lock(keys.doc_lock(collection, doc_id), timeout=LOCK_TIMEOUT_S,
                               blocking_timeout=LOCK_TIMEOUT_S)


def get(collection: str, doc_id: str) -> dict[str, Any] | None:
    return decode(doc_id, cast("dict[str, str]", redis_client().hgetall(_doc_key(collection, doc_id))))


def decode(doc_id: str, raw: dict[str, str]) -> dict[str, Any] | None:
    """A document's state as ``get`` returns it, from its hash as Redis returns it."""
    if not raw:
        return None
    out: dict[str, Any] = {"doc_id": doc_id, **raw}
    for k in ("chunks", "chunks_total", "seq"):
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


def annotate(collection: str, doc_id: str, **fields: str) -> None:
    """Facts about where a document came from (an S3 object's ETag), kept and forgotten with
    its state; nothing is written for a document that has no state."""
    key = _doc_key(collection, doc_id)
    scripts.script("state_annotate")(keys=[key], args=[x for kv in fields.items() for x in kv])


def fields_of(collection: str, doc_ids: list[str], *names: str) -> list[tuple[str | None, ...]]:
    """The named fields of many documents at once (None where absent), in one round trip."""
    return fields_of_many([(collection, doc_id) for doc_id in doc_ids], *names)


def counts(collection: str) -> dict[str, int]:
    raw = cast("dict[str, str]", redis_client().hgetall(keys.counts(collection)))
    return {k: int(v) for k, v in raw.items() if int(v)}


def is_unchanged(collection: str, doc_id: str, version: str, meta_hash: str) -> bool:
    """True when this exact content and metadata is already indexed: nothing to do, no LLM call."""
    state, indexed_version, stored_meta = redis_client().hmget(
        _doc_key(collection, doc_id), "state", "indexed_version", "meta_hash")
    return state == INDEXED and indexed_version == version and stored_meta == meta_hash


def failed_ids(collection: str, offset: int = 0, limit: int = 100) -> tuple[list[str], int]:
    """A page of the collection's failed documents, newest first, and how many failed in all:
    read from the failed index (O(log N + page)), never by looking at every document."""
    r = redis_client()
    if not r.exists(keys.failed_indexed(collection)):
        _index_failed(collection)
    page = cast("list[str]", r.zrevrange(keys.failed(collection), offset, offset + limit - 1))
    return page, int(r.zcard(keys.failed(collection)))


def _index_failed(collection: str) -> None:
    """A collection whose documents failed before the failed index existed: scanned once."""
    r = redis_client()
    if int(r.hget(keys.counts(collection), FAILED) or 0) > int(r.zcard(keys.failed(collection))):
        for doc_id in r.sscan_iter(keys.docs(collection), count=1000):
            state, updated = r.hmget(_doc_key(collection, doc_id), "state", "updated")
            if state == FAILED:
                r.zadd(keys.failed(collection), {doc_id: float(updated or 0)}, nx=True)
    r.set(keys.failed_indexed(collection), "1")


def doc_ids(collection: str, state: str | None = None, limit: int | None = None) -> list[str]:
    """Documents of a collection (in ``state`` if given), at most ``limit``: the failed ones from
    their index, any other state by a scan of the collection's documents (a sync, a reindex)."""
    if state == FAILED:
        return sorted(failed_ids(collection, 0, limit if limit is not None else 10 ** 12)[0])
    r, out = redis_client(), []
    for doc_id in r.sscan_iter(keys.docs(collection), count=1000):
        if state is None or r.hget(_doc_key(collection, doc_id), "state") == state:
            out.append(doc_id)
            if limit is not None and len(out) >= limit:
                break
    return sorted(out)


def scan_ids(collection: str, cursor: int, count: int) -> tuple[int, list[str]]:
    """One step of a cursor over a collection's documents (``SSCAN``: every document present
    throughout is seen once, in no order); cursor 0 starts, and is returned at the end."""
    after, found = redis_client().sscan(keys.docs(collection), cursor, count=count)
    return int(after), cast("list[str]", found)


def touch(members: list[str]) -> None:
    """Documents a live worker holds moved just now (its heartbeat): not stalled, however long
    their stage runs. Only those still in flight (``XX``)."""
    if members:
        scripts.script("touch_scores")(keys=[MOVING], args=[f"{time.time():.3f}", *members])  # allowed when Redis is full


def stalled(before: float, limit: int) -> list[tuple[str, str, float]]:
    """The in-flight documents that last moved before ``before``, oldest first, at most
    ``limit``: (collection, doc id, when). O(log N + limit) at any number of documents."""
    rows = cast("list[tuple[str, float]]",
                redis_client().zrangebyscore(MOVING, "-inf", before, start=0, num=limit, withscores=True))
    out = []
    for m, at in rows:
        collection, _, doc_id = m.partition(SEPARATOR)
        out.append((collection, doc_id, at))
    return out


def fields_of_many(documents: list[tuple[str, str]], *names: str) -> list[tuple[str | None, ...]]:
    """``fields_of`` for documents of any collections: (collection, doc id) pairs."""
    pipe = redis_client().pipeline(transaction=False)
    for collection, doc_id in documents:
        pipe.hmget(_doc_key(collection, doc_id), *names)
    return [tuple(row) for row in pipe.execute()]


def untrack(member_: str, stale_before: float) -> None:
    """Out of the in-flight index: a member whose document is no longer in flight (forgotten,
    say) — unless it moved since ``stale_before`` (submitted again meanwhile)."""
    scripts.script("untrack_if_stale")(keys=[MOVING], args=[member_, f"{stale_before:.3f}"])


def forget_collection(collection: str) -> None:
    r = redis_client()
    gone = [m for m, _ in r.zscan_iter(MOVING, match=f"{collection}{SEPARATOR}*", count=1000)]
    for i in range(0, len(gone), 1000):
        r.zrem(MOVING, *gone[i:i + 1000])
    docs_key = keys.docs(collection)
    batch: list[str] = []

    def drop(hashes: list[str]) -> None:  # what their documents in flight reserved goes back first
        pipe = r.pipeline(transaction=False)
        for key in hashes:
            pipe.hget(key, "backlog")
        held = sum(int(x) for x in pipe.execute() if x)
        if held:
            r.decrby(keys.BACKLOG, held)
        r.delete(*hashes)

    for doc_id in r.sscan_iter(docs_key, count=1000):
        batch.append(_doc_key(collection, doc_id))
        if len(batch) >= 1000:
            drop(batch)
            batch.clear()
    if batch:
        drop(batch)
    r.delete(docs_key, keys.counts(collection), keys.seq(collection), keys.failed(collection),
             keys.failed_indexed(collection))
