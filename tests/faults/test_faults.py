"""Faults in the middle of real runs: each run ends with every document indexed once (or failed
alone, with a reason), no duplicate chunk, no chunk of a stale version, and no more LLM calls
paid twice than were in flight when the fault struck. Deadlines are multiples of the pace each
run measured before its fault (``Pace``): a busy machine gets longer ones, a stalled pipeline
still misses them."""

from __future__ import annotations

import threading
import time
import uuid

import httpx
import pytest

import tests.faults.plugins  # noqa: F401 - registers anthropic-crashy here too, as the workers do
from ops import harness
from tests.faults.conftest import Fleet, Pace, audit, audit_poisoned, documents, expected_of, report, submit, wait_done
from tests.support import TEST_MODEL, cookbook_docs, use_services, wait_until

LLM = {"contextualizer": "anthropic", "model": TEST_MODEL, "embedder": "voyage"}
# A billed answer is exposed to a kill until the worker has read it and written its checkpoint:
# milliseconds on an idle machine, longer beside a busy one (an image building beside the suite:
# docs/reliability.md).
ANSWER_TO_CHECKPOINT_S = 2.0


def indexed_count(collection: str) -> int:
    from workers.storage import states

    return states.counts(collection).get("indexed", 0)


def test_a_worker_killed_mid_run_costs_seconds_not_an_hour(standin, fleet, collection_name):
    """kill -9 of one of two workers 20 s into the cookbook corpus (90 documents, 737 chunks),
    default SITUATE_RECOVERY_S (60): its documents are taken up by the other worker."""
    standin.configure(base_latency_s=0.6, uncached_s_per_ktok=0.1, read_s_per_ktok=0.005, output_s_per_tok=0.005)
    workers = fleet().start(2, concurrency=3)
    docs = [{"id": d["original_uuid"], "text": d["content"], "chunks": [c["content"] for c in d["chunks"]]}
            for d in cookbook_docs()]
    submitted = time.monotonic()
    submit(collection_name, docs, **LLM)
    pace = Pace.of_first(collection_name, submitted, n=10)
    indexed_before = indexed_count(collection_name)
    fault = time.time()
    workers.workers[0].kill()
    killed = time.time()
    in_flight = standin.in_flight_during(fault, killed)
    killed_at = time.monotonic()
    # The survivor alone (half the pace, so slack 2 x 3) finishes the rest, after the dead
    # worker's documents come back: SITUATE_RECOVERY_S, 60 s. An hour-long visibility timeout
    # (what recovery took before the heartbeat) misses this by far, on any machine.
    allowed = pace.deadline(len(docs) - indexed_before, extra_s=60, slack=6)
    wait_done(collection_name, [d["id"] for d in docs], timeout=allowed + 120)
    after_kill = time.monotonic() - killed_at
    result = audit(collection_name, expected_of(docs), standin)
    # Each call paid twice, by how long before the kill it was first billed: one in flight at the
    # kill is billed after it (a negative lead); one answered a moment before, whose answer was
    # still on its way to its checkpoint, a little before it.
    leads = [round(fault - t, 2) for t in standin.stats(times=True)["paid_twice_first_at"]]
    report("kill -9 of a worker (cookbook, 2 workers)", result, in_flight=in_flight,
           indexed_at_kill=indexed_before, all_indexed_s_after_kill=round(after_kill, 1), allowed_s=round(allowed),
           paid_twice_billed_s_before_kill=leads)
    assert result.indexed == len(docs) and not result.failed and result.lost == 0
    assert result.duplicate_ids == 0 and result.stale_chunks == 0
    assert all(lead < ANSWER_TO_CHECKPOINT_S for lead in leads), leads  # none paid again but the killed worker's
    assert result.paid_twice <= standin.in_flight_during(fault - ANSWER_TO_CHECKPOINT_S, killed)
    assert after_kill < allowed


def _redis_restarted_mid_run(label: str, standin, fleet, collection_name, private_redis, docs: list[dict],
                             down_s: float, **env: str) -> Fleet:
    """SHUTDOWN of the broker and state store once the run has its pace (it writes its
    append-only file), ``down_s`` down, started again on the same data, under two workers with
    ``SITUATE_RECOVERY_S`` = 20 and ``env``; reported as ``label`` and audited. The fleet."""
    standin.configure()
    workers = fleet(SITUATE_RECOVERY_S="20", **env).start(2)
    submitted = time.monotonic()
    submit(collection_name, docs, **LLM)
    pace = Pace.of_first(collection_name, submitted)
    fault = time.time()
    private_redis.stop()
    time.sleep(down_s)
    private_redis.start()
    in_flight = standin.in_flight_during(fault, time.time())
    # What no worker gave back at the loss comes back through the sweep: SITUATE_RECOVERY_S.
    took = wait_done(collection_name, [d["id"] for d in docs], timeout=pace.deadline(len(docs), extra_s=20 + down_s))
    result = audit(collection_name, expected_of(docs), standin)
    report(label, result, in_flight=in_flight, done_s_after_restart=round(took, 1))
    assert result.indexed == len(docs) and result.lost == 0 and not result.failed
    assert result.duplicate_ids == 0 and result.stale_chunks == 0 and result.paid_twice <= in_flight
    return workers


def test_redis_restarts_mid_run(standin, fleet, collection_name, private_redis):
    """Redis restarted mid-run, 3 s down."""
    _redis_restarted_mid_run("Redis restarted (AOF) mid-run", standin, fleet, collection_name, private_redis,
                             documents(60, tag="redis"), down_s=3)


def test_a_worker_whose_lost_broker_connection_cannot_be_tidied_up_reconnects(standin, fleet, collection_name,
                                                                             private_redis):
    """Redis restarted under workers whose clean-up of the lost connection fails, as Celery
    5.7.0's did (``plugins.UNTIDY_BROKER_LOSS``): each worker must reconnect and go on, never
    exit (the fleet fails the test on a worker that exits on its own)."""
    from tests.faults.plugins import UNTIDY_BROKER_LOSS

    workers = _redis_restarted_mid_run("Redis restarted, workers' tidy-up of the lost connection failing", standin,
                                       fleet, collection_name, private_redis, documents(30, tag="untidy"), down_s=2,
                                       **{UNTIDY_BROKER_LOSS: "1"})
    assert all(w.alive() for w in workers.workers)
    assert any("could not be tidied up" in w.log.read_text(errors="replace") for w in workers.workers)


def test_every_queue_purged_mid_run(standin, fleet, collection_name):
    """Every Celery queue emptied by hand mid-run (the messages waiting in them lost, as a
    BRPOP whose answer never arrives loses one): the fair gate sends again what no worker
    received, within three SITUATE_RECOVERY_S."""
    from workers.connections import redis_client
    from workers.pipeline.routing import all_queues, sublists

    standin.configure()
    fleet(SITUATE_RECOVERY_S="5").start(2)
    docs = documents(60, tag="purge")
    submitted = time.monotonic()
    submit(collection_name, docs, **LLM)
    pace = Pace.of_first(collection_name, submitted)
    fault = time.time()
    purged = sum(redis_client().delete(name) for q in all_queues() for name in sublists(q))
    in_flight = standin.in_flight_during(fault, time.time())
    took = wait_done(collection_name, [d["id"] for d in docs], timeout=pace.deadline(len(docs), extra_s=3 * 5))
    result = audit(collection_name, expected_of(docs), standin)
    report("every Celery queue purged mid-run", result, in_flight=in_flight, lists_purged=purged,
           done_s_after_purge=round(took, 1))
    assert purged >= 1, "nothing was waiting: the purge tested nothing"
    assert result.indexed == len(docs) and result.lost == 0 and not result.failed
    assert result.duplicate_ids == 0 and result.stale_chunks == 0 and result.paid_twice <= in_flight


def test_every_message_lost_mid_run_is_found_by_the_reconciler(standin, fleet, collection_name):
    """Every message gone at once — Celery's queues, its unacknowledged messages, the fair
    gate's lines and what it was sending (an operator's FLUSHDB of the broker's keys): the
    documents stop moving with no message anywhere, and the reconciler sends each on from its
    checkpoint, with no operator action."""
    from workers import keys, metrics
    from workers.connections import redis_client
    from workers.pipeline.routing import all_queues, sublists
    from workers.storage import fairqueue

    def reconciled() -> float:
        return sum(v for _, v in metrics.read_counters().get("reconciled", []))

    standin.configure()
    before = reconciled()
    fleet(SITUATE_RECOVERY_S="5", SITUATE_RECONCILE_AFTER_S="10", SITUATE_RECONCILE_EVERY_S="2").start(2)
    docs = documents(60, tag="lost")
    submitted = time.monotonic()
    submit(collection_name, docs, **LLM)
    pace = Pace.of_first(collection_name, submitted)
    fault = time.time()
    r = redis_client()
    kept = {fairqueue.WAITING, fairqueue.WAITING_TOTAL}  # counts left saying work waits: a drift to notice
    lost = [name for q in all_queues() for name in sublists(q)] + [keys.KOMBU_UNACKED, keys.KOMBU_UNACKED_INDEX]
    lost += [k for k in r.scan_iter(f"{keys.FAIR}*", count=1000) if k not in kept]
    deleted = r.delete(*lost)
    in_flight = standin.in_flight_during(fault, time.time())
    # Found once 10 s without moving, by a pass every 2 s, then the rest at the run's own pace.
    allowed = pace.deadline(len(docs), extra_s=10 + 2 + 5)
    took = wait_done(collection_name, [d["id"] for d in docs], timeout=allowed + 120)
    result = audit(collection_name, expected_of(docs), standin)
    resumed = reconciled() - before
    report("every message lost mid-run (queues, unacked, fair lines)", result, in_flight=in_flight,
           keys_deleted=deleted, reconciled=int(resumed), done_s_after_loss=round(took, 1))
    assert deleted >= 1 and resumed >= 1, "nothing was lost: the fault tested nothing"
    assert took < allowed  # no operator action, and no hour-long wait
    assert result.indexed == len(docs) and result.lost == 0 and not result.failed
    assert result.duplicate_ids == 0 and result.stale_chunks == 0 and result.paid_twice <= in_flight


def test_an_index_blocked_for_writes_30_seconds_mid_run(standin, fleet, collection_name):
    """The disk passes OpenSearch's flood-stage watermark: the index turns read-only
    (``read_only_allow_delete``) and every write answers 429 ``cluster_block_exception``; then,
    as an operator freeing the disk might, a ``write`` block (403) instead. 15 s each. The index
    stage waits and retries in place; no document fails; ``/metrics`` shows the block."""
    from producers.web import prometheus
    from workers import metrics
    from workers.connections import opensearch_client
    from workers.storage import catalog

    def blocked_writes() -> float:
        return sum(v for labels, v in metrics.read_counters().get("index_write_blocked", [])
                   if labels.get("collection") == collection_name)

    standin.configure()
    fleet(SITUATE_RECOVERY_S="20").start(2)
    docs = documents(60, tag="blocked")
    submitted = time.monotonic()
    submit(collection_name, docs, **LLM)
    pace = Pace.of_first(collection_name, submitted)
    index = catalog.load(collection_name).index_name
    fault = time.time()
    settings = opensearch_client().indices.put_settings
    settings(index=index, body={"index.blocks.read_only_allow_delete": True})
    try:
        time.sleep(15)
        shown = [s.labels for s in prometheus._index_blocks().samples]
        settings(index=index, body={"index.blocks.read_only_allow_delete": None})  # the only change it allows
        settings(index=index, body={"index.blocks.write": True})
        time.sleep(15)
        during = indexed_count(collection_name)
    finally:
        settings(index=index, body={"index.blocks.read_only_allow_delete": None})
        settings(index=index, body={"index.blocks.write": None})
    in_flight = standin.in_flight_during(fault, time.time())
    took = wait_done(collection_name, [d["id"] for d in docs], timeout=pace.deadline(len(docs), extra_s=60))
    result = audit(collection_name, expected_of(docs), standin)
    report("index blocked for writes 30 s (disk full, then a write block)", result, in_flight=in_flight,
           writes_blocked=int(blocked_writes()),
           indexed_when_lifted=during, done_s_after_lift=round(took, 1))
    assert {"index": index, "block": "read_only_allow_delete"} in shown
    assert blocked_writes() >= 1, "no write met the block: the fault tested nothing"
    assert result.indexed == len(docs) and result.lost == 0 and not result.failed
    assert result.duplicate_ids == 0 and result.stale_chunks == 0 and result.paid_twice <= in_flight


def test_redis_full_for_20_seconds_mid_run(private_redis, standin, fleet, collection_name):
    """Redis reaches ``maxmemory`` (noeviction): every write that would grow it is refused with
    OOM. Workers back off and retry in place, holding their messages, and never exit; a
    submission meanwhile gets 503 with Retry-After; once memory is free again the run resumes."""
    from ops.harness import Api

    standin.configure()
    workers = fleet(SITUATE_RECOVERY_S="10").start(2)
    docs = documents(60, tag="oom")
    submitted = time.monotonic()
    submit(collection_name, docs, **LLM)
    pace = Pace.of_first(collection_name, submitted)
    api = Api(env={"SITUATE_API_TOKEN": "oom-test-token"})
    try:
        fault = time.time()
        # One byte: every write that would add memory is refused, however much the pipeline frees
        # meanwhile, until the limit is lifted. (Half of what it held was not enough: the documents
        # indexed before the fault released their working data, the rest fitted under the half,
        # and a fast run indexed all 60 while "full".)
        private_redis.cli("config", "set", "maxmemory", "1")
        time.sleep(2)
        refused = httpx.post(f"{api.url}/v1/collections/{collection_name}/documents",
                             headers={"Authorization": "Bearer oom-test-token"},
                             json={"documents": [{"id": "late", "text": "submitted while Redis is full " * 50}]})
        time.sleep(18)
        during = indexed_count(collection_name)
        alive = [w.alive() for w in workers.workers]
    finally:
        private_redis.cli("config", "set", "maxmemory", "0")
        api.stop()
    in_flight = standin.in_flight_during(fault, time.time())
    took = wait_done(collection_name, [d["id"] for d in docs], timeout=pace.deadline(len(docs), extra_s=60))
    result = audit(collection_name, expected_of(docs), standin)
    report("Redis full (maxmemory) 20 s mid-run", result, in_flight=in_flight, indexed_when_freed=during,
           api_status=refused.status_code, done_s_after_free=round(took, 1))
    assert during < len(docs), "everything was indexed while Redis was full: the fault tested nothing"
    assert all(alive) and all(w.alive() for w in workers.workers), "a worker exited on OOM"
    assert refused.status_code == 503 and refused.headers.get("retry-after"), refused.text
    assert result.indexed == len(docs) and result.lost == 0 and not result.failed
    assert result.duplicate_ids == 0 and result.stale_chunks == 0 and result.paid_twice <= in_flight


@pytest.fixture
def private_opensearch():
    """A one-node OpenSearch of the test's own, so stopping it stops nobody else's searches."""
    node = harness.OpenSearchNodes(f"fault-{uuid.uuid4().hex[:6]}", 1)
    try:
        with use_services(opensearch_url=node.urls):
            yield node
    finally:
        node.purge()


def test_opensearch_stopped_for_30_seconds_mid_run(private_opensearch, standin, fleet, collection_name):
    standin.configure()
    fleet(SITUATE_RECOVERY_S="20").start(2)
    docs = documents(60, tag="opensearch")
    submitted = time.monotonic()
    submit(collection_name, docs, **LLM)
    pace = Pace.of_first(collection_name, submitted)
    fault = time.time()
    private_opensearch.stop()
    time.sleep(30)
    private_opensearch.start()
    in_flight = standin.in_flight_during(fault, time.time())
    took = wait_done(collection_name, [d["id"] for d in docs], timeout=pace.deadline(len(docs), extra_s=60))
    result = audit(collection_name, expected_of(docs), standin)
    report("OpenSearch stopped 30 s mid-run", result, in_flight=in_flight, done_s_after_restart=round(took, 1))
    assert result.indexed == len(docs) and result.lost == 0 and not result.failed
    assert result.duplicate_ids == 0 and result.stale_chunks == 0 and result.paid_twice <= in_flight


def test_provider_overloaded_rate_limited_and_slower_than_the_client_timeout(standin, fleet, collection_name):
    """20% of calls answered 529; an account limit far below what the workers believe (429s
    in bursts); 5% of answers 3 s late against a 2 s client timeout (paid, then asked again)."""
    standin.configure(p_529=0.2, p_slow=0.05, slow_s=3.0, burst_s=2.0,
                      limits={TEST_MODEL: {"rpm": 300, "itpm": 10**9, "otpm": 10**9}})
    fleet(SITUATE_LLM_TIMEOUT_S="2", SITUATE_RECOVERY_S="20").start(2)
    docs = documents(60, tag="provider")
    submit(collection_name, docs, **LLM)
    took = wait_done(collection_name, [d["id"] for d in docs], timeout=400)
    stats = standin.stats()
    result = audit(collection_name, expected_of(docs), standin)
    # Every timed-out call was in flight at its own fault: that is the bound here.
    timed_out = stats["paid_twice"]
    report("20% 529, 429 bursts, 5% answers past the timeout", result, in_flight=timed_out,
           http_529=stats["http_529"], http_429=stats["http_429"], seconds=round(took, 1))
    assert stats["http_529"] > 10 and stats["http_429"] > 10
    assert result.indexed == len(docs) and result.lost == 0 and not result.failed
    assert result.duplicate_ids == 0 and result.stale_chunks == 0
    assert result.paid_twice <= int(0.05 * stats["requests"]) + 10  # only the answers that came too late


def test_a_poison_document_fails_alone_with_the_reason(standin, fleet, collection_name):
    """A document that kills the process running it (SIGSEGV) is delivered at most
    SITUATE_MAX_DELIVERIES times, then fails with the signal; the 59 others are indexed."""
    standin.configure()
    fleet(SITUATE_RECOVERY_S="20").start(2)
    docs = documents(60, tag="poison", marker={7: " POISON-SEGV"})
    submit(collection_name, docs, contextualizer="anthropic-crashy", model=TEST_MODEL, embedder="voyage")
    result = audit_poisoned("a poison document (SIGSEGV in its worker)", collection_name, docs, standin)
    assert result.indexed == 59 and result.lost == 0 and not result.failed
    assert result.duplicate_ids == 0 and result.stale_chunks == 0 and result.paid_twice == 0


def test_a_stop_sent_to_the_whole_worker_is_not_a_poison_pill(fleet, collection_name):
    """systemd's default KillMode=control-group sends SIGTERM to a worker's parent and pool children
    at once: the children die of it mid-task ("Worker exited prematurely: signal 15"). Three such
    stops with SITUATE_MAX_DELIVERIES=2 once failed a healthy document; a stop is not a crash."""
    from workers.storage import states

    docs = documents(1, tag="sigterm")
    env = {"SITUATE_MAX_DELIVERIES": "2", "SITUATE_RECOVERY_S": "6"}
    submit(collection_name, docs, contextualizer="keywords-slow")
    for _ in range(3):
        stopping = fleet(SITUATE_TEST_SLOW_S="60", **env).start(1, concurrency=2).workers[0]
        wait_until(lambda w=stopping: any("Task situate.contextualize[" in line and line.endswith('received"}')
                                          for line in w.log.read_text(errors="replace").splitlines()),
                   60, "the document in contextualize")
        time.sleep(1.0)  # its pool child is inside the slow contextualizer
        stopping.stop()  # SIGTERM to the whole process group, as systemd sends it
        log = stopping.log.read_text(errors="replace")
        assert "signal 15" in log, log[-3000:]
    fleet(SITUATE_TEST_SLOW_S="0", **env).start(1)
    wait_done(collection_name, [d["id"] for d in docs], timeout=120)
    doc = states.get(collection_name, docs[0]["id"])
    assert doc["state"] == "indexed", doc.get("error")


def test_the_same_documents_ingested_twice_at_once(standin, fleet, collection_name):
    standin.configure()
    fleet(SITUATE_RECOVERY_S="20").start(2)
    docs = documents(60, tag="twice")
    from workers import lifecycle

    lifecycle.ensure(collection_name, **LLM)
    go = threading.Barrier(2)
    errors: list[BaseException] = []

    def producer():
        try:
            go.wait()
            submit(collection_name, docs, **LLM)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=producer) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    took = wait_done(collection_name, [d["id"] for d in docs], timeout=300)
    result = audit(collection_name, expected_of(docs), standin)
    report("the same 60 documents ingested twice at once", result, in_flight=0, seconds=round(took, 1))
    assert result.indexed == len(docs) and result.lost == 0 and not result.failed
    assert result.duplicate_ids == 0 and result.stale_chunks == 0 and result.paid_twice == 0
    assert result.requests == sum(len(d["chunks"]) for d in docs)


def test_v1_and_v2_of_the_same_documents_race(standin, fleet, collection_name):
    standin.configure()
    fleet(SITUATE_RECOVERY_S="20").start(2)
    v1, v2 = documents(60, tag="v1"), documents(60, chunks=3, tag="v2")
    submit(collection_name, v1, **LLM)
    time.sleep(1.5)  # some of v1 is chunked, some situated, some indexed
    submit(collection_name, v2, **LLM)
    took = wait_done(collection_name, [d["id"] for d in v2], timeout=300)
    time.sleep(2)  # v1 tasks still in flight find themselves superseded and clean up
    from workers.storage import states

    wait_until(lambda: all(s and s["state"] in states.TERMINAL
                           for s in states.get_many(collection_name, [d["id"] for d in v2])), 60, "v2 everywhere")
    result = audit(collection_name, expected_of(v2), standin)
    report("v1 and v2 of 60 documents racing", result, in_flight=0, seconds=round(took, 1))
    assert result.indexed == len(v2) and result.lost == 0 and not result.failed
    assert result.duplicate_ids == 0 and result.stale_chunks == 0 and result.paid_twice == 0
    from producers.retrieval.search import search
    from workers.storage import catalog

    hits = search(catalog.load(collection_name), "Document 3 part 1", k=50, filters={"doc_id": "doc-003"})
    assert {h.text.split("(")[1].split(")")[0] for h in hits} == {"v2"} and len(hits) == 3


def test_deliveries_deferred_by_a_held_lease_do_not_use_up_the_pool(standin, fleet, collection_name):
    """A delivery that finds its unit held elsewhere is deferred without reaching the pool; it
    must give its pool slot back. Four such deferrals on a worker of two pool processes, then
    other documents: they are indexed at once, not after the held ones (the worker used to
    stop taking work, its pool idle, after `concurrency` deferrals: found by ops/bench scale)."""
    from workers.connections import redis_client
    from workers.documents.validation import RawDocument, valid
    from workers.pipeline import guard
    from workers.storage import deliveries

    docs = documents(8, chunks=2, words=20)
    held, free = docs[:4], docs[4:]
    worker = fleet(SITUATE_RECOVERY_S="30").start(n=1, concurrency=2).workers[0]
    keys = []
    for d in held:  # their chunk stage's lease, taken by "another delivery"
        version = valid(RawDocument(d["id"], d["text"], {}, [{"n": i, "text": t}
                                                            for i, t in enumerate(d["chunks"])]), 10**7).version
        keys.append(guard.unit_of("situate.chunk", [collection_name, d["id"], version]))
        assert deliveries.take_lease(keys[-1], "another-delivery")
    submit(collection_name, held, contextualizer="keywords", embedder="voyage")
    wait_until(lambda: worker.log.read_text(errors="replace").count("held by another delivery") >= 4, 60,
               "four deferrals")
    submit(collection_name, free, contextualizer="keywords", embedder="voyage")
    took = wait_done(collection_name, [d["id"] for d in free], timeout=300)  # stuck, they would never be
    print(f"\nafter 4 deferrals on 2 pool processes: 4 other documents indexed in {took:.1f} s")
    redis_client().delete(*keys)
    wait_done(collection_name, [d["id"] for d in held], timeout=120)
    assert indexed_count(collection_name) == 8
