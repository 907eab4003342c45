"""Sending a stage's work through the fair gate (``storage.fairqueue``) instead of straight to
Celery: every stage of every collection gets its turn, whatever another collection's backlog.

``send`` parks the work in its collection's line and admits what fits; ``admit`` runs after every
task a worker finishes (``task_postrun``, in the process that ran it) and on every worker
heartbeat (both hooked in ``app``), so a queue is topped up as fast as its workers take from it. What is admitted is sent
as an ordinary Celery message, with the entry's id as its task id (sent twice after a crash, it
is the same task).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from workers.pipeline import sending
from workers.pipeline.routing import all_queues
from workers.settings import get_settings
from workers.storage import fairqueue

log = logging.getLogger("situate.fair")


def send(task: str, args: tuple[Any, ...] | list[Any], queue: str, priority: int = 0, front: bool = False,
         admit_now: bool = True) -> None:
    """Queue ``task(*args)`` (args[0] is the collection, args[1] the document) on ``queue``, in
    its collection's turn. ``admit_now`` False: the caller admits once after sending many."""
    entry = {"id": str(uuid.uuid4()), "task": task, "args": list(args), "priority": priority, "at": round(time.time(), 3)}
    if not admit_now:
        fairqueue.park(queue, args[0], entry, front=front)
        return
    now = fairqueue.send(queue, args[0], entry, get_settings().queue_ahead, front=front)
    if now is not None:
        send_admitted([now])
    else:
        admit([queue])  # parked: others wait their turn before it, and there may be room for them


def send_later(task: str, args: tuple[Any, ...] | list[Any], queue: str, delay_s: float) -> None:
    """``task(*args)`` in ``delay_s``, straight to Celery: a timer (a bundle's wait), not a
    collection's work, so it takes no turn in the gate."""
    sending.send_task(task, list(args), queue=queue, countdown=delay_s)


def admit(queues: list[str] | None = None, sweep: bool = False) -> int:
    """Let parked work into ``queues`` (default: all) as far as they have room; how many sent.
    The worker that receives each message confirms it (``delivery``). ``sweep``: also park again
    what was admitted and never received (the heartbeat's)."""
    entries = fairqueue.admit(queues or all_queues(), get_settings().queue_ahead, stale_s(), sweep=sweep)
    send_admitted(entries)
    return len(entries)


def admit_and_sweep() -> int:
    """The heartbeat's admission: every queue, and what was admitted but never received."""
    return admit(sweep=True)


def send_admitted(entries: list[dict[str, Any]]) -> None:
    for e in entries:
        sending.send_task(e["task"], args=e["args"], queue=e["queue"], priority=e["priority"], task_id=e["id"])


def charge(queue: str, collection: str, turns: float) -> None:
    """The work a collection just had done on ``queue`` was worth ``turns`` more than one turn:
    it gives that many up (``fairqueue.charge``). Never fails the work it accounts for."""
    try:
        fairqueue.charge(queue, collection, turns)
    except Exception as e:  # noqa: BLE001 - Redis away: the accounting is lost, nothing else
        log.warning("charging %s for its turns on %s: %s: %s", collection, queue, type(e).__name__, e)


def stale_s() -> float:
    """How long an admitted message may go unreceived before it is parked again: longer than a
    message waits in a queue only a few deep, on the scale of the recovery promise."""
    return max(5.0, 3 * get_settings().recovery_s)
