"""The records that make a delivery safe to repeat: a lease per unit of work (one delivery at
a time runs it, renewed by the worker's heartbeat), how many deliveries of a message started
work (past ``SITUATE_MAX_DELIVERIES`` it is poison), and how the last one died (a signal, for
the document's error). ``pipeline.guard`` says what a unit of work is; ``pipeline.delivery``
takes, renews and releases these on the worker's side.

Beside them, the turns of the fleet-wide duties one worker at a time runs from its heartbeat:
the reconciler's pass (a turn that also spaces the passes) and a reindex's step (a lock).
"""

from __future__ import annotations

from typing import Any, cast

from redis.lock import Lock

from workers import keys
from workers.connections import redis_client
from workers.settings import get_settings
from workers.storage import fairqueue, scripts

RECORD_TTL_S = 7 * 24 * 3600


def lease_ms() -> int:
    return int(get_settings().lease_s * 1000)


def take_lease(key: str, holder: str) -> bool:
    return bool(scripts.script("lease_take")(keys=[key], args=[holder, lease_ms()]))


def begin(task_id: str, retries: int, unit: str | None, holder: str, queue: str | None = None,
          admit: tuple[int, float] | None = None, document: str = "") -> tuple[int | None, list[dict[str, Any]]]:
    """A delivery of message ``task_id`` as it begins, in one round trip: the message received
    (the fair gate's record of it confirmed), the room it left in ``queue`` filled from the gate
    (``admit``: how many it holds ahead, and the stale time), then, for a unit of work, its lease
    taken for ``holder`` and the delivery counted. The count of deliveries that started work, this
    one included (0 if the lease is held; None without a unit), and the entries admitted, to send.
    ``document``: the message's (``states.member``), for the gate's count of its waiting work."""
    def build(pipe: Any) -> None:
        fairqueue.confirm([(task_id, queue or "", document)], pipe)
        if queue and admit:
            fairqueue.admit([queue], admit[0], admit[1], pipe)
        if unit is not None:
            scripts.in_pipeline(pipe, "lease_take_counted", [unit, keys.deliveries(task_id, retries)],
                                [holder, lease_ms(), RECORD_TTL_S])

    # All may run twice (after a NOSCRIPT): a confirm again is a no-op, an admission again admits
    # nothing more than there is room for, and the lease script answers its own holder the same.
    answers = scripts.run_loaded(build, ["fair_confirm", "fair_admit", "lease_take_counted"])
    entries = fairqueue.admitted(answers[1]) if queue and admit else []
    return (int(answers[-1]) if unit is not None else None), entries


def renew_leases(held: dict[str, str]) -> None:
    """``{lease key: holder}`` for the tasks a worker runs: keep them alive."""
    if held:
        scripts.script("lease_renew")(keys=list(held), args=[*held.values(), lease_ms()])


def release_lease(key: str, holder: str) -> None:
    scripts.script("lease_release")(keys=[key], args=[holder])


def record_death(task_id: str, retries: int, how: str) -> None:
    redis_client().set(keys.death(task_id, retries), how[:300], ex=RECORD_TTL_S)


def uncount(task_id: str, retries: int) -> None:
    """A delivery that must not count against its document (its process was stopped from outside)."""
    redis_client().decr(keys.deliveries(task_id, retries))


def last_death(task_id: str, retries: int) -> str | None:
    return cast("str | None", redis_client().get(keys.death(task_id, retries)))


def take_turn(key: str, holder: str, ms: int) -> bool:
    """This worker's turn at a duty for ``ms``, if no one else's runs: no one else gets it
    before then, even if the holder ends sooner (the turn spaces the duty too)."""
    return bool(redis_client().set(key, holder, nx=True, px=ms))


def duty_lock(key: str, timeout_s: float, wait_s: float | None = None) -> Lock:
    """A lock on a duty: held while it runs, let go by ``release``, or lost after ``timeout_s``
    by a holder that died. ``wait_s``: how long ``acquire`` waits (None: not at all)."""
    if wait_s is None:
        return redis_client().lock(key, timeout=timeout_s, blocking=False)
    return redis_client().lock(key, timeout=timeout_s, blocking_timeout=wait_s)
