"""Fair shares between collections: work waits in one line per collection, and is let into
Celery's queues round robin, a few messages ahead of the workers.

Celery's queues on Redis are FIFO lists. Sent straight to them, a 10,000-document backlog in one
collection holds every other collection's single document behind it, in each stage. So each
stage's work is *parked* here first — a line per (queue, collection), and a ring of the
collections with work waiting — and *admitted* into the queue proper only while it holds fewer
than ``SITUATE_QUEUE_AHEAD`` messages not yet taken by a worker: one from each collection in
turn. A document sent to an idle collection then waits behind at most that many messages per
stage, however long the others' lines are.

Admission runs after each task a worker finishes, on each worker heartbeat, and right after
each park (``pipeline.fair``). An admitted entry is recorded as *sending* until a worker has
*received* its message (``delivery.GuardedRequest`` confirms it: Kombu has it in its ``unacked``
hash by then, and gives it back if that worker dies). An entry not confirmed within the stale
time is parked again, at the front: a sender that died before sending, or a message Kombu lost
— its Redis transport pops a message with BRPOP before recording it as unacknowledged, so a
connection that dies in between (a Redis restart) loses it (celery/kombu#1733). Sent twice at
worst, which the pipeline's leases and states make harmless.

Turns are counted in messages, but a message is not always a turn's worth of work: a file that
takes a minute to extract holds a worker as long as dozens of ordinary documents. So a stage may
``charge`` a collection for the turns its work took beyond one; admission then passes that
collection over once per turn owed (while others wait: alone, it is served anyway).

The trade-off: the queue's priorities (big documents first) now order only the few messages
admitted, and an operator's queue depth counts parked work separately (``parked``).
"""

from __future__ import annotations

import json
import time
from typing import Any, cast

from workers import keys
from workers.connections import redis_client
from workers.storage import scripts, states
from workers.storage.scripts import script

# Per document (``states.member``): its entries parked or admitted and not yet received. The
# reconciler's "is its work queued?" in one HMGET, however long the lines.
SENDING, SENDING_DATA, QUEUED = keys.FAIR_SENDING, keys.FAIR_SENDING_DATA, keys.FAIR_QUEUED
WAITING, WAITING_TOTAL = keys.FAIR_WAITING, keys.FAIR_WAITING_TOTAL  # the total: no longer kept (see recount)
_line, _ring, _debts = keys.fair_line, keys.fair_ring, keys.fair_debts


MAX_DEBT = 1000  # turns: a collection's backlog is passed over for a while, never for ever


def charge(queue: str, collection: str, turns: float) -> None:
    """``collection``'s last work on ``queue`` took ``turns`` beyond its own: it gives as many
    up to the others (``fair_admit.lua``)."""
    if turns >= 1:
        r = redis_client()
        owed = float(r.hincrbyfloat(_debts(queue), collection, turns))
        if owed > MAX_DEBT:
            r.hset(_debts(queue), collection, MAX_DEBT)


def park(queue: str, collection: str, entry: dict[str, Any], front: bool = False) -> None:
    """Put ``entry`` (it carries its ``id``) in ``collection``'s line for ``queue``; ``front``:
    ahead of that collection's other work (a big document's slices, after its warm-up call)."""
    raw = json.dumps({**entry, "queue": queue, "collection": collection})
    doc = states.member(collection, entry["args"][1])
    script("fair_park")(keys=[_line(queue, collection), _ring(queue), WAITING],
                        args=[raw, collection, "1" if front else "0", doc])


def send(queue: str, collection: str, entry: dict[str, Any], ahead: int, front: bool = False) -> dict[str, Any] | None:
    """``entry`` for ``queue``: returned to be sent now when no collection has work parked there
    and the queue has room (one script: the common case), else parked (None) for ``admit``."""
    raw = json.dumps({**entry, "queue": queue, "collection": collection})
    doc = states.member(collection, entry["args"][1])
    sent = script("fair_send")(keys=[_line(queue, collection), _ring(queue), WAITING, SENDING, SENDING_DATA, QUEUED],
                               args=[raw, collection, "1" if front else "0", doc, entry["id"], f"{time.time():.3f}",
                                     ahead, queue])
    return json.loads(sent) if sent else None


def admit(queues: list[str], ahead: int, stale_s: float, pipe: Any = None, sweep: bool = False) -> list[dict[str, Any]]:
    """Admit work into each queue until it holds ``ahead`` messages no worker has received; the
    entries to send now, each ``confirm``-ed by the worker that receives it. ``sweep``: first park
    again what was admitted and never received within ``stale_s`` (the heartbeat's admission does).
    ``pipe``: a pipeline to add it to (its answer is then ``admitted`` of that reply)."""
    args: list[Any] = [f"{time.time():.3f}", stale_s if sweep else -1, ahead, *keys.FAIR_LAYOUT, *queues]
    if pipe is not None:
        scripts.in_pipeline(pipe, "fair_admit", [SENDING, SENDING_DATA, QUEUED], args)
        return []
    return admitted(script("fair_admit")(keys=[SENDING, SENDING_DATA, QUEUED], args=args))


def admitted(reply: list[str]) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in reply]


Received = tuple[str, str, str]  # an admitted entry as its receiver knows it: id, queue, document (``states.member``)


def confirm(received: list[Received], pipe: Any = None) -> None:
    """Entries a worker received; ``pipe``: a pipeline to add it to (sent with the caller's other
    commands)."""
    if not received:
        return
    args = [x for entry in received for x in entry]
    if pipe is None:
        script("fair_confirm")(keys=[SENDING, SENDING_DATA, WAITING, QUEUED], args=args)
    else:
        scripts.in_pipeline(pipe, "fair_confirm", [SENDING, SENDING_DATA, WAITING, QUEUED], args)


def entry_received(entry: dict[str, Any]) -> Received:
    return entry["id"], entry["queue"], states.member(entry["collection"], entry["args"][1])


def recount_if_drifted(queues: list[str]) -> bool:
    """The waiting counts say other than the lines hold (lines deleted by hand, a flushed
    database): count again from the lines, atomically. Cheap when they agree (a sum of the
    waiting counts — as many as documents in the gate, which the backlog bounds — and a few LLENs
    per collection); a read of every parked entry when they do not. True if it recounted."""
    _, _, rebuilt = script("fair_recount")(keys=[WAITING, WAITING_TOTAL, SENDING_DATA, QUEUED, *map(_ring, queues)],
                                           args=[*keys.FAIR_LAYOUT, *queues])
    return bool(rebuilt)


def waiting(members: list[str]) -> list[int]:
    """How many entries of each document (``states.member``) are parked or being sent."""
    if not members:
        return []
    return [int(n or 0) for n in redis_client().hmget(WAITING, members)]


def parked(queues: list[str], now: float | None = None) -> dict[str, dict[str, Any]]:
    """Per queue: work parked in total, per collection, and the oldest entry's age."""
    r, now = redis_client(), now or time.time()
    out = {}
    for queue in queues:
        collections = cast("list[str]", r.lrange(_ring(queue), 0, -1))
        pipe = r.pipeline(transaction=False)
        for c in collections:
            pipe.llen(_line(queue, c))
            pipe.lindex(_line(queue, c), 0)
        replies = pipe.execute()
        by_collection, oldest = {}, None
        for c, n, head in zip(collections, replies[::2], replies[1::2]):
            by_collection[c] = n
            if head:
                at = json.loads(head).get("at")
                if isinstance(at, (int, float)):
                    oldest = max(oldest or 0.0, now - at)
        out[queue] = {"parked": sum(by_collection.values()), "by_collection": by_collection, "oldest_s": oldest}
    return out


def queues_with_rings() -> list[str]:
    """The queues with a ring, found by a scan (a collection's line named "ring" is not one)."""
    r = redis_client()
    return [ring[len(keys.FAIR):-len(keys.FAIR_RING)] for ring in r.scan_iter(f"{keys.FAIR}*{keys.FAIR_RING}", count=1000)
            if keys.FAIR_LINE not in ring]


def forget_collection(collection: str) -> None:
    """A dropped collection's parked work goes with it."""
    r = redis_client()
    queues = queues_with_rings()
    for queue in queues:
        r.lrem(_ring(queue), 0, collection)
        r.delete(_line(queue, collection))
        r.hdel(_debts(queue), collection)
    doomed = [entry_received(e) for e in (json.loads(raw) for _, raw in r.hscan_iter(SENDING_DATA))
              if e.get("collection") == collection]
    if doomed:
        confirm(doomed)
    recount_if_drifted(queues)  # its lines are gone: their entries no longer wait
