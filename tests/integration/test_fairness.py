"""Fair shares between collections (``storage.fairqueue``): a 90-document backlog in one
collection, on one worker with one process, and then a single document sent to another
collection — which is indexed while most of the backlog still waits, not after all of it.
A Redis of its own, so no other test's work is in the queues; the wait is printed at the end."""

from __future__ import annotations

import time
import uuid

from ops.harness import RedisServer, Worker
from tests.faults import figures
from tests.support import use_services

BACKLOG = 90


def test_a_backlog_in_one_collection_does_not_hold_back_another(tmp_path):
    from producers.ingest.submit import submit
    from workers import lifecycle
    from workers.documents.validation import RawDocument
    from workers.storage import states

    redis = RedisServer(tmp_path / "redis")
    busy, quiet = f"t-busy-{uuid.uuid4().hex[:6]}", f"t-quiet-{uuid.uuid4().hex[:6]}"
    try:
        with use_services(redis_url=redis.url()):
            worker = Worker(1, env={"SITUATE_REDIS_URL": redis.url()}, name=f"fair-{uuid.uuid4().hex[:6]}")
            try:
                busy_config = lifecycle.ensure(busy, contextualizer="none")
                quiet_config = lifecycle.ensure(quiet, contextualizer="none")
                started = time.monotonic()
                submit(busy_config, [RawDocument(f"d{i}", f"Report {i}: otters counted along the coast, "
                                                          f"sector {i}, morning and evening.", {})
                                     for i in range(BACKLOG)])
                sent = time.monotonic()
                submit(quiet_config, [RawDocument("only", "A single note about sea lions on the pier.", {})])
                deadline = sent + 300
                while (states.get(quiet, "only") or {}).get("state") != states.INDEXED:
                    assert time.monotonic() < deadline, "the quiet collection's document was never indexed"
                    time.sleep(0.05)
                waited = time.monotonic() - sent
                ahead = states.counts(busy).get(states.INDEXED, 0)
                while states.counts(busy).get(states.INDEXED, 0) < BACKLOG:
                    assert time.monotonic() < deadline, "the backlog did not drain"
                    time.sleep(0.2)
                drained = time.monotonic() - started
            finally:
                worker.stop()
                for name in (busy, quiet):
                    lifecycle.delete(name)
    finally:
        redis.stop()
    figures.note("fairness between collections",
                 f"1 document sent to a second collection behind {BACKLOG} queued in another (1 worker process): "
                 f"indexed after {waited:.1f} s, when {ahead} of the {BACKLOG} were; the {BACKLOG} took {drained:.1f} s")
    assert ahead < BACKLOG / 2, f"{ahead} of the {BACKLOG} backlogged documents went first"


def test_the_gate_admits_round_robin_up_to_its_bound_and_sends_again_what_nobody_received(tmp_path):
    """The gate's mechanics on a Redis of its own: collections take turns, a queue holds at most
    ``ahead`` messages, an admission no worker confirmed is parked again (at the front)."""
    from workers.connections import redis_client
    from workers.storage import fairqueue

    redis = RedisServer(tmp_path / "gate")
    try:
        with use_services(redis_url=redis.url()):
            for i in range(10):
                fairqueue.park("chunk", "busy", {"id": f"b{i}", "task": "t", "args": ["busy", f"d{i}"], "priority": 9})
            fairqueue.park("chunk", "quiet", {"id": "q0", "task": "t", "args": ["quiet", "d"], "priority": 9})
            first = fairqueue.admit(["chunk"], ahead=3, stale_s=60)
            assert [e["id"] for e in first] == ["b0", "q0", "b1"]
            # The queue holds 3 no worker has received: full, without a look at Celery's lists.
            assert fairqueue.admit(["chunk"], ahead=3, stale_s=60) == []
            assert redis_client().keys("chunk*") == [], "admission reads its own count, not Kombu's lists"
            assert fairqueue.parked(["chunk"])["chunk"]["by_collection"] == {"busy": 8}
            fairqueue.confirm([fairqueue.entry_received(e) for e in first if e["id"] in ("b0", "q0")])  # b1's was lost
            again = fairqueue.admit(["chunk"], ahead=2, stale_s=0, sweep=True)
            assert [e["id"] for e in again] == ["b1", "b2"], "the unconfirmed one goes first, sent again"
    finally:
        redis.stop()


def test_a_collection_charged_for_slow_work_gives_its_turns_to_the_others():
    """Turns were counted in messages: a file that took a minute to extract cost its collection
    one turn. Charged for the turns it took, a collection is passed over that many times while
    another waits."""
    from workers.storage import fairqueue

    queue, slow, quick = f"test-fair-{uuid.uuid4().hex[:6]}", f"t-slow-{uuid.uuid4().hex[:6]}", f"t-quick-{uuid.uuid4().hex[:6]}"

    def park(collection: str, n: int) -> None:
        fairqueue.park(queue, collection, {"id": f"{collection}-{n}", "task": "t", "args": [collection, f"d{n}"],
                                           "priority": 0})

    try:
        for n in range(4):
            park(slow, n)
            park(quick, n)
        fairqueue.charge(queue, slow, 2)
        admitted = fairqueue.admit([queue], ahead=4, stale_s=60)
        assert [e["collection"] for e in admitted] == [quick, quick, slow, quick]
        fairqueue.confirm([fairqueue.entry_received(e) for e in admitted])  # received by workers: room again
        admitted += fairqueue.admit([queue], ahead=4, stale_s=60)
        assert [e["collection"] for e in admitted[4:]] == [slow, quick, slow, slow]  # debt paid: turns again
    finally:
        fairqueue.confirm([(f"{c}-{n}", queue, f"{c}\x1fd{n}") for c in (slow, quick) for n in range(4)])
        fairqueue.forget_collection(slow)
        fairqueue.forget_collection(quick)
