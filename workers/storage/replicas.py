"""Replicas of the openai contextualizer's servers, as the whole fleet sees them: which replica
each document's calls go to, the calls in flight on each (waiting for a slot, or in one), which
replicas are down, and how many documents moved away from each.

Kept in Redis because the routing is only as good as the fleet's agreement: ten workers on four
hosts must send a document to one replica, share each replica's slots, and skip the same dead
one. Each step is one script (``lua/replica_*.lua``), so a call costs one round trip to take
its place and one to give it back. The policy — the order of preference, when to probe — is
``contextualizers.llm.replicas``'; this module keeps the state.

Calls are entries in sorted sets scored by when they lapse (a call's longest life), so a worker
lost mid-call frees its replica's slots by itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from workers import keys
from workers.connections import redis_client
from workers.storage.scripts import script


@dataclass(frozen=True)
class Place:
    replica: int        # the index of the chosen replica in the order given; -1: none is up
    slot: bool          # the call holds one of its slots
    moved_from: str     # the label the document moved away from ("" if it did not move)


def take(document: str, labels: list[str], call: str, *, slots: int, margin: int, lease_s: float, keep_s: int,
         routing: str, held: int = -1) -> Place:
    """A place for ``call`` of ``document`` among ``labels`` (in the document's order of
    preference); ``held``: the replica the call already waits on."""
    n = len(labels)
    keys_ = [keys.replica_of(document), keys.REPLICAS_DOWN, keys.REPLICAS_MOVES, keys.REPLICAS_TURN,
             *(keys.replica_load(label) for label in labels), *(keys.replica_slots(label) for label in labels)]
    chosen, slot, moved = script("replica_take")(
        keys=keys_, args=[n, call, slots, margin, lease_s, keep_s, routing, held + 1, *labels])
    return Place(int(chosen) - 1, bool(slot), moved or "")


def give_back(label: str, call: str) -> None:
    pipe = redis_client().pipeline(transaction=False)
    pipe.zrem(keys.replica_load(label), call)
    pipe.zrem(keys.replica_slots(label), call)
    pipe.execute()


def mark_down(label: str, seconds: float, most_s: float) -> float:
    """Left alone for ``seconds`` (doubled per failure in a row); 0 if it was down already."""
    return float(script("replica_down")(keys=[keys.REPLICAS_DOWN], args=[label, seconds, most_s]))


def due_for_probe(claim_s: float) -> list[str]:
    """The replicas left alone long enough, each claimed by this caller for ``claim_s``."""
    return list(script("replica_due")(keys=[keys.REPLICAS_DOWN], args=[claim_s, keys.REPLICA_PROBE]))


def back_up(label: str) -> None:
    redis_client().hdel(keys.REPLICAS_DOWN, label)


def announce(labels: list[str]) -> None:
    """The replicas a worker routes to, for the readers of the fleet's state (``/metrics``)."""
    if labels:
        redis_client().sadd(keys.REPLICAS_KNOWN, *labels)


def snapshot() -> dict[str, dict[str, float | int | None]]:
    """Per known replica: calls in flight, of which in a slot, documents moved away, and when it
    comes back if it is down (Redis's clock), in one round trip."""
    r = redis_client()
    labels = sorted(cast(set[str], r.smembers(keys.REPLICAS_KNOWN)))
    if not labels:
        return {}
    seconds, micros = r.time()
    now = seconds + micros / 1e6
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
    labels = list(cast(set[str], r.smembers(keys.REPLICAS_KNOWN)))
    r.delete(keys.REPLICAS_KNOWN, keys.REPLICAS_DOWN, keys.REPLICAS_MOVES, keys.REPLICAS_TURN,
             *(keys.replica_load(label) for label in labels), *(keys.replica_slots(label) for label in labels))
