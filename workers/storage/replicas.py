"""Replicas of the openai contextualizer's servers, as the whole fleet sees them: which replica
each document's calls go to, the calls in flight on each (waiting for a slot, or in one), which
replicas are down, and how many documents moved away from each.

Kept in Redis because the routing is only as good as the fleet's agreement: ten workers on four
hosts must send a document to one replica, share each replica's slots, and skip the same dead
one. Each step is one script (``lua/replica_*.lua``), so a call costs one round trip to take
its place and one to give it back. The policy — the order of preference, when to probe — is
``contextualizers.llm.replicas``'; this module keeps the state.

Calls are entries in sorted sets scored by when their lease lapses. A lease is short and the
worker making the call renews it while the call runs (``renew``), so a worker lost mid-call frees
its replica's slots within a lease, not after the longest a call may take.

Each worker lists the fleet from its own settings; ``announce`` records the list's fingerprint so
that lists that differ are seen (and said) instead of quietly splitting the fleet, and keeps the
time each replica was last listed: one no worker lists any more leaves the fleet's views a day later.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import cast

from workers import keys, metrics
from workers.connections import redis_client
from workers.storage.scripts import script

LISTED_FOR_S = 86400   # a replica no worker has listed for this long leaves the fleet's views
LISTS_RECENT_S = 300   # lists announced within this are the fleet's lists now


@dataclass(frozen=True)
class Place:
    replica: int        # the index of the chosen replica in the order given; -1: none is up
    slot: bool          # the call holds one of its slots
    moved_from: str     # the label the document moved away from ("" if it did not move)
    around: str = ""    # the document's replica, up on another worker's list and not on this one's


def take(document: str, labels: list[str], call: str, *, slots: int, margin: int, lease_s: float, keep_s: int,
         routing: str, held: int = -1, leave: bool = False) -> Place:
    """A place for ``call`` of ``document`` among ``labels`` (in the document's order of
    preference): a slot if one is free and no call waits ahead of it, else a place in the
    replica's line. ``held``: the replica the call already waits on; ``leave``: it has waited its
    deadline there, and the document may move to a replica with a free slot."""
    n = len(labels)
    keys_ = [keys.replica_of(document), keys.REPLICAS_DOWN, keys.REPLICAS_MOVES, keys.REPLICAS_TURN,
             keys.REPLICAS_LISTED, *(keys.replica_load(label) for label in labels),
             *(keys.replica_slots(label) for label in labels), *(keys.replica_line(label) for label in labels)]
    chosen, slot, moved, around = script("replica_take")(
        keys=keys_, args=[n, call, slots, margin, lease_s, keep_s, routing, held + 1, LISTS_RECENT_S,
                          int(leave), *labels])
    return Place(int(chosen) - 1, bool(slot), moved or "", around or "")


def give_back(label: str, call: str, slots: int) -> None:
    """The call's place on ``label`` (of ``slots`` slots) given back; the calls first in its
    line, one per free slot, are woken."""
    script("replica_give_back")(keys=[keys.replica_load(label), keys.replica_slots(label), keys.replica_line(label)],
                                args=[call, keys.REPLICA_WAKE, slots])


def wait_turn(call: str, most_s: float) -> bool:
    """Wait until a slot this call waits for is given back (True), or ``most_s`` (False)."""
    return redis_client().blpop([keys.REPLICA_WAKE + call], timeout=most_s) is not None


def renew(calls: list[tuple[str, str]], lease_s: float) -> list[tuple[str, str]]:
    """Push back the lease of each (label, call) still held, in one round trip; those whose
    entry is gone (lapsed and taken back) are returned: their slot may be another call's now."""
    if not calls:
        return []
    seconds, micros = redis_client().time()
    until = seconds + micros / 1e6 + lease_s
    pipe = redis_client().pipeline(transaction=False)
    for label, call in calls:
        pipe.zadd(keys.replica_load(label), {call: until}, xx=True, ch=True)
        pipe.zadd(keys.replica_slots(label), {call: until}, xx=True, ch=True)
    replies = pipe.execute()
    # A call waiting for a slot has no slot entry to renew; one whose load entry is gone lost its place.
    return [c for i, c in enumerate(calls) if not replies[2 * i]]
def mark_down(label: str, seconds: float, most_s: float) -> float:
    """Left alone for ``seconds`` (doubled per failure in a row); 0 if it was down already."""
    return float(script("replica_down")(keys=[keys.REPLICAS_DOWN], args=[label, seconds, most_s]))


def due_for_probe(claim_s: float) -> list[str]:
    """The replicas left alone long enough, each claimed by this caller for ``claim_s``."""
    return list(script("replica_due")(keys=[keys.REPLICAS_DOWN], args=[claim_s, keys.REPLICA_PROBE]))


def back_up(label: str) -> None:
    redis_client().hdel(keys.REPLICAS_DOWN, label)


def fingerprint(labels: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(labels)).encode()).hexdigest()[:12]


def announce(labels: list[str]) -> dict[str, list[str]]:
    """The replicas a worker routes to, for the readers of the fleet's state (``/metrics``), and
    its list's fingerprint. Returns the lists announced lately (fingerprint -> labels), this one
    among them: more than one means the workers do not agree on the fleet."""
    if not labels:
        return {}
    r = redis_client()
    seconds, _ = r.time()
    mine = fingerprint(labels)
    pipe = r.pipeline(transaction=False)
    pipe.zadd(keys.REPLICAS_LISTED, dict.fromkeys(labels, seconds))
    pipe.zadd(keys.REPLICAS_LISTS, {mine: seconds})
    pipe.hset(keys.REPLICAS_LIST, mine, json.dumps(sorted(labels)))
    pipe.execute()
    return lists()


def lists() -> dict[str, list[str]]:
    """The fleet lists workers announced lately (fingerprint -> labels)."""
    r = redis_client()
    seconds, _ = r.time()
    recent = cast("list[str]", r.zrangebyscore(keys.REPLICAS_LISTS, seconds - LISTS_RECENT_S, "+inf"))
    found = cast("list[str | None]", r.hmget(keys.REPLICAS_LIST, recent)) if recent else []
    return {fp: json.loads(raw) for fp, raw in zip(recent, found) if raw}


def retire_unlisted(older_than_s: float = LISTED_FOR_S) -> list[str]:
    """The replicas no worker has listed for ``older_than_s``: their state and their counters
    removed, so that ``/metrics`` and the dashboard show the fleet as it is. Returns them."""
    r = redis_client()
    seconds, _ = r.time()
    cutoff = seconds - older_than_s
    gone = cast("list[str]", r.zrangebyscore(keys.REPLICAS_LISTED, "-inf", cutoff))
    old_lists = cast("list[str]", r.zrangebyscore(keys.REPLICAS_LISTS, "-inf", cutoff))
    pipe = r.pipeline(transaction=False)
    pipe.delete(keys.REPLICAS_KNOWN_BEFORE)
    if old_lists:
        pipe.zrem(keys.REPLICAS_LISTS, *old_lists)
        pipe.hdel(keys.REPLICAS_LIST, *old_lists)
    if gone:
        pipe.zrem(keys.REPLICAS_LISTED, *gone)
        pipe.hdel(keys.REPLICAS_DOWN, *gone)
        pipe.hdel(keys.REPLICAS_MOVES, *gone)
        pipe.delete(*(keys.replica_load(label) for label in gone), *(keys.replica_slots(label) for label in gone),
                    *(keys.replica_line(label) for label in gone))
    pipe.execute()
    if gone:
        metrics.forget_series("replica", set(gone))
    return gone


def snapshot() -> dict[str, dict[str, float | int | None]]:
    """Per known replica: calls in flight, of which in a slot, documents moved away, and when it
    comes back if it is down (Redis's clock), in one round trip."""
    r = redis_client()
    seconds, micros = r.time()
    now = seconds + micros / 1e6
    labels = sorted(cast("list[str]", r.zrangebyscore(keys.REPLICAS_LISTED, now - LISTED_FOR_S, "+inf")))
    if not labels:
        return {}
    pipe = r.pipeline(transaction=False)
    for label in labels:
        pipe.zcount(keys.replica_load(label), now, "+inf")
        pipe.zcount(keys.replica_slots(label), now, "+inf")
    pipe.hgetall(keys.REPLICAS_MOVES)
    pipe.hgetall(keys.REPLICAS_DOWN)
    *counts, moved, downs = pipe.execute()
    moves = {str(k): int(v) for k, v in moved.items()}
    down = {str(k): float(v.split("|")[0]) for k, v in downs.items()}
    return {label: {"in_flight": int(counts[2 * i]), "in_slots": int(counts[2 * i + 1]),
                    "moved_away": moves.get(label, 0), "down_until": down.get(label)}
            for i, label in enumerate(labels)}


def forget() -> None:
    """Every replica's state (tests and benchmarks start clean)."""
    r = redis_client()
    labels = cast("list[str]", r.zrange(keys.REPLICAS_LISTED, 0, -1))
    r.delete(keys.REPLICAS_LISTED, keys.REPLICAS_LISTS, keys.REPLICAS_LIST, keys.REPLICAS_KNOWN_BEFORE,
             keys.REPLICAS_DOWN, keys.REPLICAS_MOVES, keys.REPLICAS_TURN,
             *(keys.replica_load(label) for label in labels), *(keys.replica_slots(label) for label in labels),
             *(keys.replica_line(label) for label in labels))
