"""The reconciler's decisions, on a Redis of the test's own (no worker takes what it sends): a
stalled document with no message anywhere is sent on, one waiting in the fair gate or in a
Celery queue is left alone, one no longer in flight leaves the index, and a document that moved
meanwhile is kept."""

from __future__ import annotations

import json
import time

import pytest

from ops.harness import RedisServer
from tests.support import use_services


@pytest.fixture
def own_redis(tmp_path):
    server = RedisServer(tmp_path / "redis")
    with use_services(redis_url=server.url()):
        yield server
    server.stop()


def test_the_reconciler_resumes_only_what_has_no_message_anywhere(own_redis):
    from workers.connections import redis_client
    from workers.pipeline import fair, reconcile
    from workers.pipeline.app import app
    from workers.pipeline.routing import CHUNK_QUEUE, document_queue, sublists
    from workers.pipeline.sending import CHUNK_TASK
    from workers.storage import fairqueue, states

    r = redis_client()
    for doc in ("stalled", "parked", "in-celery", "gone", "chunked"):
        assert states.submit("c", doc, "v1", "m", stale_s=60)[0]
    states.set_state("c", "chunked", "v1", states.CHUNKED, chunks_total=3)
    fair.send(CHUNK_TASK, ("c", "parked", "v1"), queue=CHUNK_QUEUE, admit_now=False)  # waits for its turn
    app.send_task(CHUNK_TASK, args=["c", "in-celery", "v1"], queue=CHUNK_QUEUE)  # in Celery's queue
    states.forget("c", "gone")
    long_ago = time.time() - 3600
    r.zadd(states.MOVING, {states.member("c", d): long_ago for d in ("stalled", "parked", "in-celery", "gone", "chunked")})
    assert states.member("c", "gone") in r.zrange(states.MOVING, 0, -1)

    outcome = reconcile.reconcile_once()

    assert outcome == {"chunk": 1, "contextualize": 1, "waiting": 2, "gone": 1}, outcome
    assert states.member("c", "gone") not in r.zrange(states.MOVING, 0, -1)
    # The stalled ones were sent on: their messages are in Celery's queues now (admitted at once).
    queued = [args for key in sublists(CHUNK_QUEUE) + sublists(document_queue("c", "chunked"))
              for args in map(reconcile._args_of, r.lrange(key, 0, -1))]
    assert ["c", "stalled", "v1"] in queued and ["c", "chunked", "v1"] in queued
    assert queued.count(["c", "in-celery", "v1"]) == 1  # not sent twice
    assert fairqueue.waiting([states.member("c", "parked")]) == [1]  # still waiting for its turn, once
    # Each was touched: the next pass leaves them alone for SITUATE_RECONCILE_AFTER_S.
    assert reconcile.reconcile_once() == {}


def test_a_document_submitted_again_while_it_is_looked_at_stays_in_flight(own_redis):
    from workers.connections import redis_client
    from workers.storage import states

    assert states.submit("c", "doc", "v1", "m", stale_s=60)[0]
    member = states.member("c", "doc")
    seen_before = time.time() - 60
    redis_client().zadd(states.MOVING, {member: time.time()})  # it moved after the reconciler looked
    states.untrack(member, seen_before)
    assert redis_client().zscore(states.MOVING, member) is not None


def test_a_bundle_pool_that_lost_its_collector_gets_another_and_its_documents_wait(own_redis):
    """One-chunk documents in their collection's pools (to contextualize, to index) whose
    collectors were lost: the reconciler sends collectors, not each document alone; in a bundle's
    message, its documents count as waiting in Celery."""
    from workers.connections import redis_client
    from workers.pipeline import reconcile
    from workers.pipeline.app import app
    from workers.pipeline.routing import INDEX_QUEUE, contextualize_queue, sublists
    from workers.pipeline.sending import (
        COLLECT_BUNDLE_TASK,
        CONTEXTUALIZE_BUNDLE_TASK,
        CONTEXTUALIZE_TASK,
        INDEX_BUNDLE_TASK,
        INDEX_TASK,
    )
    from workers.storage import bundle_pool, states

    r = redis_client()
    docs = ("pooled-1", "pooled-2", "bundled", "chunked-1", "calling")
    for doc in docs:
        assert states.submit("c", doc, "v1", "m", stale_s=60)[0]
        chunked = doc in ("chunked-1", "calling")
        states.set_state("c", doc, "v1", states.CHUNKED if chunked else states.SITUATED, chunks_total=1)
    bundle_pool.add(bundle_pool.INDEX, "c", "pooled-1", "v1", 40)
    bundle_pool.add(bundle_pool.INDEX, "c", "pooled-2", "v1", 40)
    bundle_pool.add(bundle_pool.CONTEXTUALIZE, "c", "chunked-1", "v1", 40)
    app.send_task(INDEX_BUNDLE_TASK, args=["c", "b1", [["bundled", "v1"]]], queue=INDEX_QUEUE)
    app.send_task(CONTEXTUALIZE_BUNDLE_TASK, args=["c", "b0", [["calling", "v1"]]], queue=contextualize_queue(0))
    r.zadd(states.MOVING, {states.member("c", d): time.time() - 3600 for d in docs})

    outcome = reconcile.reconcile_once()

    assert outcome == {"waiting": 5, "bundles_nudged": 1}, outcome
    sent = [json.loads(raw)["headers"]["task"] for key in sublists(INDEX_QUEUE) for raw in r.lrange(key, 0, -1)]
    assert sent.count(COLLECT_BUNDLE_TASK) == 2 and INDEX_TASK not in sent  # a collector a pool; none sent on alone
    on_shard = [json.loads(raw)["headers"]["task"] for key in sublists(contextualize_queue(0)) for raw in r.lrange(key, 0, -1)]
    assert CONTEXTUALIZE_TASK not in on_shard
    members, left = bundle_pool.take(bundle_pool.INDEX, "c", "b2", 32, 10**6)
    assert [m.doc_id for m in members] == ["pooled-1", "pooled-2"] and left == 0
    members, left = bundle_pool.take(bundle_pool.CONTEXTUALIZE, "c", "b3", 32, 10**6)
    assert [m.doc_id for m in members] == ["chunked-1"] and left == 0
    assert bundle_pool.waiting([states.member("c", "pooled-1")]) == [False]
