"""Rebuilding a collection behind its name (``situate reindex``): another model, embedder, chunk
size, language or vector storage, with searches answered throughout.

The next generation is built as a collection of its own, ``<name>~g<n>``, whose index is
``situate-<name>.g<n>``: the ordinary pipeline runs it (chunk, contextualize, index; the fair
gate, leases, the reconciler), reading each document from the body the live generation kept
when it indexed it (``bodies.keep``) — the source is not needed — and taking the live document's
version and ``seq``. Its contextualize stage takes every context the live index holds for the
same text of the same version, when the same contextualizer, model and prompt would write it
(``contextualizers.reuse``): an embedder-only change makes no LLM call.

A worker's heartbeat advances every reindex (``advance``, one worker at a time by lease):

- **building**: the live documents are fed to the new generation, at most
  ``SITUATE_REINDEX_WINDOW`` in flight; documents submitted, retried or deleted meanwhile are
  noted (``catalog.touched``) and brought across again once the live generation has them.
- **draining**, once little is left (what is still to land on either side would, at the pace
  the new generation has kept so far, land within ``DRAIN_AIM_S``): new submissions are told
  "busy, retry in 2 s" (503; the CLI and the client wait) for the seconds the last documents
  take, and the switch waits until nothing is left at all; past ``SITUATE_REINDEX_PAUSE_S`` it
  is put off, submissions flow again and building resumes.
- **live**: the catalog names the new generation (one Redis write: the next search reads it)
  and the alias ``situate-<name>`` moves to its index in one atomic call. The previous
  generation stays for ``situate reindex --rollback`` until ``--finish`` or
  ``SITUATE_REINDEX_KEEP_S``. A first generation is an index named like the alias: it can only
  be deleted, at ``--finish``, after which the alias takes its name.

A rollback before the switch drops the new generation; after it, it names the previous one again
and re-submits, from their kept bodies, the documents changed since the switch.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from redis.exceptions import LockError

from workers import keys, lifecycle, metrics
from workers.errors import CollectionError, Conflict
from workers.pipeline import fair
from workers.pipeline.routing import CHUNK_PRIORITY, CHUNK_QUEUE
from workers.pipeline.sending import CHUNK_TASK
from workers.settings import get_settings
from workers.storage import bodies, catalog, checkpoints, chunk_index, deliveries, fairqueue, states
from workers.storage.catalog import CollectionConfig

log = logging.getLogger("situate.rebuild")

# What a reindex may change: the settings that shape stored data.
CHANGEABLE = ("contextualizer", "model", "embedder", "embed_model", "embed_tail", "embed_header", "chunk_tokens",
              "chunk_overlap", "language", "vectors", "prompt", "glossary", "embed_context", "index_shards", "index_replicas")
BATCH = 200  # documents looked at per step
STEP_BUDGET_S = 1.0  # per heartbeat: a reindex must not hold the heartbeat up
DRAIN_GRACE_S = 1.0  # how long "draining" is visible before the switch
DRAIN_BACKLOG = 100  # at most this many documents still to land when new submissions start to be held
# ... and no more than these seconds' worth at the pace kept so far: a count alone held a small
# collection's submissions from the start (90 documents are "little" but take minutes to embed),
# for SITUATE_REINDEX_PAUSE_S at a time, again and again.
DRAIN_AIM_S = 10.0


def plan(name: str, **changes: Any) -> tuple[CollectionConfig, CollectionConfig]:
    """(live, next generation) for ``changes``, checked as a new collection's settings are."""
    live = catalog.load(name)
    changes = {k: v for k, v in changes.items() if v is not None}
    unknown = set(changes) - set(CHANGEABLE)
    if unknown:
        raise CollectionError(f"a reindex changes {', '.join(CHANGEABLE)}; not {sorted(unknown)}")
    if not changes or all(getattr(live, k) == v for k, v in changes.items()):
        raise CollectionError(f"collection {name!r} has these settings already: name one to change")
    return live, lifecycle.rebuilt(live, changes)


def start(name: str, **changes: Any) -> dict[str, Any]:
    """Begin building the next generation; the workers' heartbeats do the rest."""
    record = catalog.reindex_record(name)
    if record and record["phase"] in ("building", "draining"):
        raise Conflict(f"a reindex of {name!r} is under way: wait for it, or abandon it with --rollback")
    if record:
        raise Conflict(f"the previous generation of {name!r} is kept for a rollback: situate reindex --finish "
                       "(drops it) or --rollback first")
    changes = {k: v for k, v in changes.items() if v is not None}
    if set(changes) == {"index_replicas"}:  # replicas copy the primaries: changed in place, nothing rebuilt
        config = lifecycle.set_replicas(name, changes["index_replicas"])
        return {"phase": "done", "in_place": True, "changes": {"index_replicas": config.index_replicas}}
    live, target = plan(name, **changes)
    shadow = target.model_copy(update={"name": catalog.shadow_name(name, target.index_generation), "rebuilds": name,
                                       "generation": uuid.uuid4().hex[:12], "created": round(time.time(), 3)})
    if catalog.find(shadow.name) is not None:  # a start cut short before its record: start over
        lifecycle.delete(shadow.name)
    if not catalog.store_new(shadow):
        raise Conflict(f"a generation {shadow.index_generation} of {name!r} is being made by another call")
    chunk_index.ensure_index(shadow)
    record = {"phase": "building", "shadow": shadow.name, "from": live.index_generation,
              "to": shadow.index_generation, "changes": {k: getattr(target, k) for k in changes if k in CHANGEABLE},
              "started": round(time.time(), 3), "cursor": "0", "scanned": False, "fed": 0, "from_chunks": 0,
              "documents": states.counts(name).get(states.INDEXED, 0)}
    catalog.store_reindex(name, record)
    log.info("reindex of %s: building generation %d (%s)", name, shadow.index_generation, record["changes"])
    return record


def status(name: str) -> dict[str, Any] | None:
    """The record with the new generation's document counts, for the CLI, the API, /metrics."""
    record = catalog.reindex_record(name)
    if record is None:
        return None
    out = {k: v for k, v in record.items() if k not in ("previous", "cursor")}
    if record.get("shadow") and record["phase"] in ("building", "draining"):
        out["progress"] = states.counts(record["shadow"])
        out["touched"] = catalog.touched_count(name)
    return out


# -- the heartbeat's step ------------------------------------------------------------------------

def advance() -> None:
    """One step of every reindex, by whichever worker holds the lease."""
    lease = deliveries.duty_lock(keys.REBUILDER, max(5.0, get_settings().heartbeat_s * 3))
    if not lease.acquire():
        return
    try:
        deadline = time.monotonic() + STEP_BUDGET_S
        for name in catalog.list_names():
            record = catalog.reindex_record(name)
            if record is None:
                continue
            try:
                _step(name, record, deadline)
            except Exception as e:  # said in the record (situate reindex --status), tried again next beat
                log.warning("reindex of %s: %s: %s", name, type(e).__name__, e)
                now = catalog.reindex_record(name)
                if now is not None:
                    catalog.store_reindex(name, {**now, "error": f"{type(e).__name__}: {str(e)[:300]}"})
                continue
            if record.get("error"):  # a step went through: the last error is history
                now = catalog.reindex_record(name)
                if now is not None and now.get("error"):
                    catalog.store_reindex(name, {k: v for k, v in now.items() if k != "error"})
    finally:
        try:
            lease.release()
        except LockError:  # it lapsed (a long step): another worker may hold it now, fine
            pass


def _step(name: str, record: dict[str, Any], deadline: float) -> None:
    s = get_settings()
    if record["phase"] == "live":
        if time.time() - record.get("swapped", 0) > s.reindex_keep_s:
            _finish(name)
        return
    shadow = catalog.find(record["shadow"])
    if shadow is None:  # dropped under us (the collection's drop does this too)
        catalog.clear_reindex(name)
        return
    live = catalog.load(name)
    if record["phase"] == "building":
        if not record["scanned"]:
            _scan(live, shadow, record, deadline)
        if record["scanned"]:
            _bring_touched(live, shadow, deadline)
            if _nearly_ready(live, shadow, record):
                record.update(phase="draining", draining_since=round(time.time(), 3))
        catalog.store_reindex(name, record)
        if record["phase"] != "draining":
            return
        # A submission that read "not draining" just before this has milliseconds left to write
        # its state (and note itself touched): wait those out, then carry on in this same step.
        time.sleep(DRAIN_GRACE_S)
    # draining: submissions are refused; what raced the switch is brought across, then we switch
    _bring_touched(live, shadow, deadline + DRAIN_GRACE_S)
    if _ready(live, shadow) and time.time() - record["draining_since"] >= DRAIN_GRACE_S:
        _switch(live, shadow, record)
    elif time.time() - record["draining_since"] > s.reindex_pause_s:
        record.update(phase="building", put_off=record.get("put_off", 0) + 1)
        catalog.store_reindex(name, record)
        log.warning("reindex of %s: not settled within SITUATE_REINDEX_PAUSE_S; switching later", name)


def _in_flight(counts: dict[str, int]) -> int:
    return sum(counts.get(state, 0) for state in states.IN_FLIGHT)


def _left(live: CollectionConfig, shadow_counts: dict[str, int]) -> int:
    """Documents still to land: changes noted and not yet brought across, and those in flight in
    either generation."""
    return catalog.touched_count(live.name) + _in_flight(states.counts(live.name)) + _in_flight(shadow_counts)


def _nearly_ready(live: CollectionConfig, shadow: CollectionConfig, record: dict[str, Any]) -> bool:
    """Little left to bring across: time to hold new submissions while the rest lands (a
    collection under a steady ingest would otherwise never settle enough to switch).

    "Little" is in seconds: the backlog at the pace the new generation has landed documents since
    the reindex started. Before the first one lands there is no pace, and only an empty backlog
    is little."""
    shadow_counts = states.counts(shadow.name)
    if shadow_counts.get(states.FAILED, 0):
        return False
    backlog = _left(live, shadow_counts)
    if backlog > DRAIN_BACKLOG:
        return False
    landed = shadow_counts.get(states.INDEXED, 0)
    per_s = landed / max(1.0, time.time() - float(record["started"]))
    return backlog == 0 or (per_s > 0 and backlog / per_s <= DRAIN_AIM_S)


def _ready(live: CollectionConfig, shadow: CollectionConfig) -> bool:
    """Everything across: nothing left to bring, nothing in flight on either side, none failed
    in the new generation (a generation that lost documents is not switched to)."""
    shadow_counts = states.counts(shadow.name)
    return _left(live, shadow_counts) == 0 and shadow_counts.get(states.FAILED, 0) == 0


def _scan(live: CollectionConfig, shadow: CollectionConfig, record: dict[str, Any], deadline: float) -> None:
    """Feed the live documents in order (a cursor over their set), window permitting."""
    room = get_settings().reindex_window - _in_flight(states.counts(shadow.name))
    cursor = int(record["cursor"])
    while room > 0 and time.monotonic() < deadline:
        cursor, doc_ids = states.scan_ids(live.name, cursor, BATCH)
        for doc_id in doc_ids:
            outcome = _bring(live, shadow, doc_id)
            if outcome == "later":
                catalog.put_back_touched(live.name, [doc_id])
            elif outcome in ("fed", "from_chunks"):
                record["fed"] += 1
                record["from_chunks"] += outcome == "from_chunks"
                room -= 1
        if cursor == 0:
            record["scanned"] = True
            break
    record["cursor"] = str(cursor)
    fair.admit([CHUNK_QUEUE])


def _bring_touched(live: CollectionConfig, shadow: CollectionConfig, deadline: float) -> None:
    later: list[str] = []
    while time.monotonic() < deadline:
        doc_ids = catalog.take_touched(live.name, BATCH)
        if not doc_ids:
            break
        for doc_id in doc_ids:
            if _bring(live, shadow, doc_id) == "later":
                later.append(doc_id)
    catalog.put_back_touched(live.name, later)
    fair.admit([CHUNK_QUEUE])


def _bring(live: CollectionConfig, shadow: CollectionConfig, doc_id: str) -> str:
    """Make the new generation hold what the live one holds of ``doc_id``: fed | from_chunks
    (no kept body: its indexed chunks, as they are) | done | deleted | later (in flight)."""
    doc = states.get(live.name, doc_id)
    mine = states.get(shadow.name, doc_id)
    if doc is None or doc["state"] == states.FAILED:
        if mine is not None:
            lifecycle.delete_document(shadow.name, doc_id)
            return "deleted"
        return "done"
    if doc["state"] != states.INDEXED:
        return "later"
    version = doc["version"]
    if mine is not None and mine.get("version") == version and mine.get("seq") == doc["seq"] \
            and mine["state"] != states.FAILED:
        return "done"
    payload = bodies.body_store().kept(live.name, doc_id)
    outcome = "fed"
    if payload is None or payload.get("version") != version:
        payload, outcome = from_chunks(live, doc_id), "from_chunks"
        if payload is None:
            return "done"  # nothing indexed to rebuild from
    payload = {k: v for k, v in payload.items() if k != "version"}
    bodies.body_store().put(shadow.name, doc_id, version, payload)
    queued, _ = states.submit(shadow.name, doc_id, version, doc.get("meta_hash") or "", get_settings().stale_after_s,
                              seq=doc["seq"])
    if queued:
        fair.send(CHUNK_TASK, (shadow.name, doc_id, version), queue=CHUNK_QUEUE, priority=CHUNK_PRIORITY,
                  admit_now=False)
    return outcome


def from_chunks(live: CollectionConfig, doc_id: str) -> dict[str, Any] | None:
    """A document indexed before bodies were kept: its chunks as the index holds them, given as
    pre-made chunks (the new chunk size does not apply to it; contexts are reused all the same)."""
    rows = chunk_index.all_chunks(live, doc_id)
    if not rows:
        return None
    text = "\n\n".join(r["text"] for r in rows)
    return {"text": text, "metadata": rows[0].get("metadata") or {}, "run": None, "batch": False,
            "chunks": [{"n": r["chunk"], "text": r["text"]} for r in rows]}


def _switch(live: CollectionConfig, shadow: CollectionConfig, record: dict[str, Any]) -> None:
    """The new generation becomes the collection: one catalog write, one alias call."""
    new = shadow.model_copy(update={"name": live.name, "rebuilds": "", "generation": live.generation,
                                    "created": live.created, "context_weight": live.context_weight,
                                    "fusion": live.fusion, "dense_weight": live.dense_weight, "rrf_k": live.rrf_k,
                                    "reranker": live.reranker})
    catalog.move_mix(shadow.name, live.name)
    catalog.store(new)
    if live.index_generation > 1:
        chunk_index.point_alias(new.alias, new.index_name)
    record.update(phase="live", swapped=round(time.time(), 3), previous=live.model_dump())
    catalog.store_reindex(live.name, record)
    _forget_shadow(shadow)
    metrics.count("reindexes", 1, collection=live.name)
    log.info("reindex of %s: generation %d is live", live.name, new.index_generation)


def _forget_shadow(shadow: CollectionConfig) -> None:
    """The built generation's own records (its index is the collection's now); its bill is kept,
    added to the collection's."""
    from workers.storage import bill

    bill.merge_into(shadow.name, shadow.rebuilds)
    catalog.forget(shadow.name)
    fairqueue.forget_collection(shadow.name)
    states.forget_collection(shadow.name)
    checkpoints.forget_collection(shadow.name)
    bodies.body_store().forget_collection(shadow.name)


# -- the operator's calls ------------------------------------------------------------------------

def _holding_the_lease() -> Any:
    """The rebuilder's lease, for an operator's call: no heartbeat step runs meanwhile (one that
    read the record before a rollback would write it back)."""
    return deliveries.duty_lock(keys.REBUILDER, 60, wait_s=30)


def finish(name: str) -> dict[str, Any]:
    """Drop the previous generation (its rollback is gone); the alias names the live index."""
    with _holding_the_lease():
        return _finish(name)


def _finish(name: str) -> dict[str, Any]:
    record = catalog.reindex_record(name)
    if record is None or record["phase"] != "live":
        raise Conflict(f"no finished reindex of {name!r} to finish" + (
            ": it is still building (wait, or --rollback)" if record else ""))
    previous = CollectionConfig.model_validate(record["previous"])
    live = catalog.load(name)
    chunk_index.delete_index(previous)
    if previous.index_generation == 1:  # its index had the alias's name: now the alias can
        chunk_index.point_alias(live.alias, live.index_name)
    catalog.clear_reindex(name)
    log.info("reindex of %s: generation %d dropped", name, previous.index_generation)
    return {"collection": name, "dropped_generation": previous.index_generation,
            "live_generation": live.index_generation, "alias": live.alias}


def rollback(name: str) -> dict[str, Any]:
    """Abandon a reindex: before the switch, drop what was built; after it, go back to the
    previous generation and bring across the documents changed since the switch."""
    with _holding_the_lease():
        return _rollback(name)


def _rollback(name: str) -> dict[str, Any]:
    record = catalog.reindex_record(name)
    if record is None:
        raise Conflict(f"no reindex of {name!r} to roll back")
    if record["phase"] in ("building", "draining"):
        catalog.clear_reindex(name)  # first: submissions flow again, and nothing feeds the shadow
        if catalog.find(record["shadow"]) is not None:
            lifecycle.delete(record["shadow"])
        return {"collection": name, "abandoned_generation": record["to"]}
    previous = CollectionConfig.model_validate(record["previous"])
    current = catalog.load(name)
    changed = catalog.take_touched(name, 10**9)
    catalog.store(previous.model_copy(update={k: getattr(current, k) for k in catalog.SEARCH_FIELDS}))
    if previous.index_generation > 1:
        chunk_index.point_alias(previous.alias, previous.index_name)
    catalog.clear_reindex(name)
    again = sum(_restore(previous, doc_id) for doc_id in changed)
    fair.admit([CHUNK_QUEUE])
    chunk_index.delete_index(current)
    return {"collection": name, "live_generation": previous.index_generation, "documents_brought_back": again}


def _restore(previous: CollectionConfig, doc_id: str) -> int:
    """After a rollback: the previous generation gets a document changed since the switch."""
    doc = states.get(previous.name, doc_id)
    if doc is None:  # deleted since the switch
        chunk_index.delete_document(previous, doc_id)
        return 1
    payload = bodies.body_store().kept(previous.name, doc_id)
    if doc["state"] != states.INDEXED or payload is None or payload.get("version") != doc["version"]:
        return 0  # in flight: it lands in the previous generation, which is the live one again
    version = doc["version"]
    bodies.body_store().put(previous.name, doc_id, version, {k: v for k, v in payload.items() if k != "version"})
    queued, _ = states.submit(previous.name, doc_id, version, doc.get("meta_hash") or "", 0)
    if queued:
        fair.send(CHUNK_TASK, (previous.name, doc_id, version), queue=CHUNK_QUEUE, priority=CHUNK_PRIORITY,
                  admit_now=False)
    return 1
