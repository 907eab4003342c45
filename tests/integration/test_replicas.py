"""The ``openai`` contextualizer through the real ``openai`` SDK, real workers and a fleet of
stand-in replicas (``ops/standins/openai_fleet.py``), each with its own prefix cache: every call
of a document on one replica, what they read in the bill and per replica, a replica killed mid-run,
and a server that says nothing of its cache.

The module runs on a Redis of its own: its workers must take no other test's documents (nor the
other tests' workers, which know no replicas, take these)."""

from __future__ import annotations

import json
import time
import uuid
from collections import defaultdict

import pytest

from ops.harness import Worker
from ops.model_servers import OpenAIFleet
from tests.support import redis_of_its_own, run_cli, wait_until, write_jsonl

MODEL = "qwen2.5-7b-instruct"  # a name situate has never heard of: the operator's
FAST = {"prefill_s_per_ktok": 0.05, "decode_s_per_tok": 0.001, "slots": 4}


@pytest.fixture(scope="module", autouse=True)
def private_redis(tmp_path_factory):
    with redis_of_its_own(tmp_path_factory, "replicas-redis") as server:
        yield server


@pytest.fixture
def collection(collection_name):
    return collection_name  # conftest's: a fresh name, the collection deleted after


def documents(n: int, chunks: int = 5, tag: str = "") -> list[dict]:
    """Documents of ``chunks`` given chunks, ~1,500 tokens each, every one its own text."""
    out = []
    for d in range(n):
        parts = [f"Part {c} of report {tag}{d}. " + " ".join(f"fact{d}x{c}x{w} holds" for w in range(90)) + ".\n\n"
                 for c in range(chunks)]
        out.append({"id": f"doc-{d:03d}", "text": "".join(parts), "chunks": parts})
    return out


def start_workers(fleet: OpenAIFleet, n: int = 1, **env: str) -> list[Worker]:
    settings = {"SITUATE_OPENAI_BASE_URLS": fleet.urls, "SITUATE_OPENAI_REPLICA_CONCURRENCY": "4",
                "SITUATE_LLM_TIMEOUT_S": "10", "SITUATE_OPENAI_DOWN_S": "2", **env}
    return [Worker(6, ["--pool", "threads"], settings, name=f"replicas-{uuid.uuid4().hex[:6]}") for _ in range(n)]


def ingest(collection: str, path: str, *extra: str):
    """As a producer runs it: its own SITUATE_OPENAI_BASE_URLS (here none reachable) does not matter,
    the workers' does; setting it allows the openai contextualizer without SITUATE_ALLOWED_MODELS."""
    return run_cli("ingest", "-c", collection, "--contextualizer", "openai", "--model", MODEL, path, "--json", *extra,
                   env={"SITUATE_OPENAI_BASE_URLS": "http://unused.example:1/v1"})


def stats(collection: str) -> dict:
    result = run_cli("stats", "-c", collection, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def replicas_by_document(fleet: OpenAIFleet) -> dict[str, set[str]]:
    found: dict[str, set[str]] = defaultdict(set)
    for x in fleet.lines():
        if x["answered"]:
            found[x["document"]].add(x["replica"])
    return found


def test_each_documents_calls_go_to_one_replica_and_read_its_prefix(collection, tmp_path):
    fleet = OpenAIFleet(3, FAST)
    workers = start_workers(fleet)
    try:
        result = ingest(collection, write_jsonl(tmp_path / "d.jsonl", documents(9)))
        assert result.returncode == 0, result.stdout + result.stderr
        assert json.loads(result.stdout)["indexed"] == 9
        on = replicas_by_document(fleet)
        assert len(on) == 9 and all(len(r) == 1 for r in on.values()), on
        assert len({next(iter(r)) for r in on.values()}) >= 2, "9 documents over 3 replicas: spread, not piled"
        report = stats(collection)
        t = report["collections"][collection]["total"]
        assert t["calls"] == 45 and t["cache_reported"] is True
        # 4 of each document's 5 calls read its ~1,000-token prefix (of a ~1,250-token prompt) from the
        # replica that computed it: about 0.8 x 0.8 of all prompt tokens
        assert t["cache_read_tokens"] > 0.55 * (t["input_tokens"] + t["cache_read_tokens"])
        assert t["of_best"] >= 0.95
        assert t["cost_usd"] == 0 and t["call_seconds"] > 0  # a model of one's own: tokens and time
        served = {label: r for label, r in report["replicas"].items() if r["calls"]}
        assert sum(r["calls"] for r in served.values()) == 45
        assert all(r["cache_read_ratio"] > 0.5 and not r["down"] for r in served.values())
        from producers.web import prometheus

        metrics = prometheus.render().decode()
        assert "situate_llm_replica_up{" in metrics and "situate_llm_replica_cache_read_ratio{" in metrics

        from producers.retrieval.search import search
        from workers.storage import catalog

        # BM25: the chunk's own word finds it, with the context the replica wrote indexed beside it.
        # Not hybrid: these look-alike documents' vectors are near ties, and the dense side (weighted
        # above BM25 here) once put another document's chunk first, on a fresh machine's CI.
        hits = search(catalog.load(collection), "fact4x2x7 holds", k=3, mode="bm25")
        assert hits and (hits[0].doc_id, hits[0].chunk) == ("doc-004", 2) and "this part covers" in hits[0].context
    finally:
        for w in workers:
            w.stop()
        fleet.close()


def test_a_replica_killed_mid_run_moves_only_its_documents_and_loses_none(collection, tmp_path):
    fleet = OpenAIFleet(3, {**FAST, "prefill_s_per_ktok": 0.4})  # slow enough to be killed mid-run
    workers = start_workers(fleet)
    docs = documents(12, tag="kill")
    try:
        from workers.storage import states

        path = write_jsonl(tmp_path / "d.jsonl", docs)
        started = ingest(collection, path, "--no-wait")
        assert started.returncode == 0, started.stderr
        wait_until(lambda: sum(1 for x in fleet.lines() if x["replica"] == "r1" and x["answered"]) >= 2, 120,
                   "replica r1 at work")
        fleet.kill(1)
        wait_until(lambda: sum(states.counts(collection).get(s, 0) for s in ("indexed", "failed")) == 12, 240,
                   "every document indexed or failed")
        assert states.counts(collection).get("indexed") == 12, states.counts(collection)
        report = stats(collection)
        down = [label for label, r in report["replicas"].items() if r["down"]]
        assert down == [fleet.url(1)]
        moved = sum(r["moved_away"] for r in report["replicas"].values())
        assert moved == report["replicas"][fleet.url(1)]["moved_away"], "only documents on the lost replica move"
        # Which documents were on r1: those that reached it before the kill, and those placed on it
        # after (it was not known to be down until a call to it failed), which rank it first.
        reached = {x["document"] for x in fleet.lines() if x["replica"] == "r1"}
        from workers.contextualizers.llm.replicas import parse, rank

        replicas = parse(fleet.urls)
        preferring = [d["id"] for d in docs if replicas[rank(f"{collection}/{d['id']}", replicas)[0]].url == fleet.url(1)]
        assert 1 <= moved <= min(len(reached) + len(preferring), len(docs) - 1), (moved, reached, preferring)
        answered: dict[tuple[str, str], int] = defaultdict(int)
        for x in fleet.lines():
            if x["answered"]:
                answered[(x["document"], x["chunk"])] += 1
        assert max(answered.values()) == 1, "no call answered twice"
    finally:
        for w in workers:
            w.stop()
        fleet.close()


def test_a_server_that_says_nothing_of_its_cache_is_not_reported_not_zero(collection, tmp_path):
    fleet = OpenAIFleet(2, {**FAST, "report_cache": False})  # as Ollama: no prompt_tokens_details
    workers = start_workers(fleet)
    try:
        result = ingest(collection, write_jsonl(tmp_path / "d.jsonl", documents(2, tag="quiet")))
        assert result.returncode == 0, result.stdout + result.stderr
        t = stats(collection)["collections"][collection]["total"]
        assert t["calls"] == 10 and t["cache_reported"] is False
        assert t["cache_read_tokens"] is None and t["cache_read_ratio"] is None
        assert t["best_read_tokens"] > 0  # what one shared cache could have served is known all the same
        table = run_cli("stats", "-c", collection)
        assert "not reported" in table.stdout
    finally:
        for w in workers:
            w.stop()
        fleet.close()


def test_the_openai_contextualizer_needs_the_servers_model(collection, tmp_path):
    result = run_cli("ingest", "-c", collection, "--contextualizer", "openai", str(tmp_path),
                     env={"SITUATE_OPENAI_BASE_URLS": "http://10.0.0.1:8000/v1"})
    assert result.returncode == 2 and "--model" in result.stderr


def test_a_new_document_takes_a_free_slot_and_one_under_way_stays_put() -> None:
    """The placement rules on the fleet's own state (the Lua script on a real Redis): a new
    document skips a full replica for one with a free slot, and past the margin for a less busy
    one; a document under way keeps its replica and waits there."""
    from workers.storage import replicas as store

    a, b, c, d = (f"http://{name}-{uuid.uuid4().hex[:6]}:8000/v1" for name in "abcd")

    def take(document: str, call: str, replicas: list[str], *, slots: int, margin: int) -> store.Place:
        return store.take(document, replicas, call, slots=slots, margin=margin, lease_s=60, keep_s=60,
                          routing="affinity")

    first = [take("one", f"one-{i}", [a, b], slots=2, margin=8) for i in range(2)]
    assert [(p.replica, p.slot) for p in first] == [(0, True), (0, True)]  # its first choice, both slots
    two = [take("two", f"two-{i}", [a, b], slots=2, margin=8).replica for i in range(2)]
    assert two == [1, 1]  # a was full: b, and it stays
    waiting = take("one", "one-2", [a, b], slots=2, margin=8)
    assert (waiting.replica, waiting.slot, waiting.moved_from) == (0, False, "")  # under way: waits on a

    for i in range(3):  # every slot taken on both: the margin decides
        assert take("three", f"three-{i}", [c, d], slots=1, margin=1).replica == 0
    assert take("four", "four-0", [c, d], slots=1, margin=1).replica == 1  # c: 3 in flight, d: 0, more than 1 apart
    assert take("five", "five-0", [c, d], slots=1, margin=5).replica == 0  # within 5 of the least: its first choice


def test_a_worker_killed_holding_slots_frees_them_within_a_lease(collection, tmp_path):
    """Four replicas, two workers at the default call timeout (a slot's lease was that plus a
    minute, 180 s); one worker is killed with calls in flight. Its slots lapse within a lease
    (SLOT_LEASE_S): no replica shows a call in flight 45 s after the run ends, and every document
    is indexed by the other worker."""
    from workers.contextualizers.llm.replicas import SLOT_LEASE_S
    from workers.storage import replicas as replica_state
    from workers.storage import states

    fleet = OpenAIFleet(4, {**FAST, "prefill_s_per_ktok": 0.4, "slots": 8})
    workers = start_workers(fleet, 2, SITUATE_LLM_TIMEOUT_S="120", SITUATE_RECOVERY_S="10")
    docs = documents(24, tag="slots")
    try:
        started = ingest(collection, write_jsonl(tmp_path / "d.jsonl", docs), "--no-wait")
        assert started.returncode == 0, started.stderr
        wait_until(lambda: sum(r["in_flight"] for r in replica_state.snapshot().values()) >= 6, 120,
                   "calls in flight on the replicas")
        workers[0].kill()
        killed = time.monotonic()
        wait_until(lambda: sum(states.counts(collection).get(s, 0) for s in ("indexed", "failed")) == len(docs), 300,
                   "every document indexed or failed")
        ended = time.monotonic()
        assert states.counts(collection).get("indexed") == len(docs), states.counts(collection)
        wait_until(lambda: not any(r["in_flight"] for r in replica_state.snapshot().values()), 45,
                   "no call in flight on any replica, 45 s after the run ended")
        cleared = time.monotonic()
        print(f"\nslots of a killed worker: the run ended {ended - killed:.1f} s after the kill; no call in flight "
              f"{cleared - ended:.1f} s after its end ({cleared - killed:.1f} s after the kill; lease {SLOT_LEASE_S:.0f} s)")
    finally:
        for w in workers:
            w.stop()
        fleet.close()


def test_workers_that_list_the_fleet_differently_never_move_a_document_back_and_forth() -> None:
    """Two workers whose SITUATE_OPENAI_BASE_URLS differ (a, b and b, c): a document placed on a
    stays there; the other worker's calls go around it, counted, not as moves; the two lists are
    seen in /metrics. A replica that is down, or that no worker lists any more, is a real move."""
    from producers.web import prometheus
    from workers import keys
    from workers.connections import redis_client
    from workers.storage import replicas as store

    store.forget()
    a, b, c = (f"http://{name}-{uuid.uuid4().hex[:6]}:8000/v1" for name in "abc")
    one, other = [a, b], [c, b]
    store.announce(one)
    seen = store.announce(other)
    assert len(seen) == 2 and sorted(map(sorted, seen.values())) == sorted([sorted(one), sorted(other)])
    assert "situate_llm_replica_lists 2.0" in prometheus.render().decode()
    status = run_cli("status", "--json")
    assert status.returncode == 0, status.stderr
    assert sorted(map(sorted, json.loads(status.stdout)["replica_lists"].values())) == sorted([sorted(one), sorted(other)])
    assert "list the replicas differently" in run_cli("status").stdout

    def take(document: str, labels: list[str], call: str) -> store.Place:
        place = store.take(document, labels, call, slots=4, margin=8, lease_s=60, keep_s=60, routing="affinity")
        store.give_back(labels[place.replica], call, 4)
        return place

    assert take("doc", one, "1").replica == 0  # on a
    for i in range(5):  # back and forth between the two lists
        around = take("doc", other, f"b{i}")
        assert (around.moved_from, around.around) == ("", a)
        assert take("doc", one, f"a{i}") == store.Place(0, True, "", "")
    assert redis_client().get(keys.replica_of("doc")) == a
    assert not redis_client().hgetall(keys.REPLICAS_MOVES)

    store.mark_down(a, 30, 60)  # down: the document moves, once
    moved = take("doc", other, "down")
    assert (moved.moved_from, moved.around) == (a, "")
    assert redis_client().hgetall(keys.REPLICAS_MOVES) == {a: "1"}

    take("gone", [c], "1")  # on c, which then no worker lists for longer than the fleet's lists count
    redis_client().zadd(keys.REPLICAS_LISTED, {c: 1.0})
    assert take("gone", one, "2").moved_from == c
    store.forget()


def test_a_replica_no_worker_lists_for_a_day_leaves_the_views() -> None:
    from producers.web import prometheus
    from workers import keys, metrics
    from workers.connections import redis_client
    from workers.contextualizers.llm import usage
    from workers.storage import replicas as store

    store.forget()
    old, live = (f"http://{name}-{uuid.uuid4().hex[:6]}:8000/v1" for name in ("old", "live"))
    store.announce([old, live])
    metrics.count("llm_replica_calls", 3, replica=old)
    metrics.count("llm_replica_calls", 2, replica=live)
    assert set(usage.replicas()) == {old, live}
    redis_client().zadd(keys.REPLICAS_LISTED, {old: time.time() - store.LISTED_FOR_S - 60})
    assert set(usage.replicas()) == {live}  # out of the views at once
    assert store.retire_unlisted() == [old]  # and its state and counters out of Redis
    rendered = prometheus.render().decode()
    assert old not in rendered and f'situate_llm_replica_calls_total{{replica="{live}"}}' in rendered
    assert all(labels.get("replica") != old for labels, _ in metrics.read_counters()["llm_replica_calls"])
    store.forget()


def test_a_call_longer_than_its_lease_keeps_its_slot_while_its_worker_renews_it() -> None:
    """A call's place is renewed while it runs: one held past several leases is still counted
    (its slot not handed to another call); one nobody renews lapses within its lease."""
    from workers.contextualizers.llm.replicas import Leases
    from workers.storage import replicas as store

    store.forget()
    label = f"http://long-{uuid.uuid4().hex[:6]}:8000/v1"
    store.announce([label])
    leases = Leases(lease_s=1.5, every_s=0.5)
    for call in ("renewed", "left"):
        assert store.take("doc", [label], call, slots=1 if call == "renewed" else 2, margin=8, lease_s=1.5,
                          keep_s=60, routing="affinity").slot
    leases.hold(label, "renewed")
    time.sleep(4.5)  # three leases
    assert store.snapshot()[label]["in_slots"] == 1  # the renewed one alone: the other lapsed
    assert not store.take("other", [label], "third", slots=1, margin=8, lease_s=1.5, keep_s=60, routing="affinity").slot
    leases.release("renewed")
    store.give_back(label, "renewed", 1)
    store.forget()


def test_calls_waiting_for_a_replica_are_served_first_come_first_served() -> None:
    """One slot: the calls that wait take it in the order they came, the first of them is woken
    when it is given back, and one whose worker is gone (its place not renewed) leaves the line."""
    from workers import keys
    from workers.connections import redis_client
    from workers.storage import replicas as store

    store.forget()
    a, document = f"http://line-{uuid.uuid4().hex[:6]}:8000/v1", uuid.uuid4().hex

    def take(call: str, held: int = -1, lease_s: float = 60) -> bool:
        return store.take(document, [a], call, slots=1, margin=8, lease_s=lease_s, keep_s=60, routing="affinity",
                          held=held).slot

    assert take(f"{document}-first")
    assert not take(f"{document}-second") and not take(f"{document}-third")  # in line, in that order
    store.give_back(a, f"{document}-first", 1)
    assert redis_client().lpop(keys.REPLICA_WAKE + f"{document}-second") == "1"  # woken
    assert not redis_client().exists(keys.REPLICA_WAKE + f"{document}-third")
    assert not take(f"{document}-third", held=0)  # the free slot is the second's: it came first
    assert take(f"{document}-second", held=0)
    assert not take(f"{document}-lost", lease_s=0.5)  # waits behind the third ...
    store.give_back(a, f"{document}-second", 1)
    time.sleep(0.8)  # ... and its worker dies: its place lapses, not renewed
    assert take(f"{document}-third", held=0)
    store.give_back(a, f"{document}-third", 1)
    assert take(f"{document}-new")  # the lost one left the line: the newcomer is first
    store.forget()


def test_a_call_that_waited_its_deadline_moves_its_document_to_a_free_replica(monkeypatch) -> None:
    """A document under way on a replica whose slots stay taken, while another replica has a
    free one: after SITUATE_OPENAI_WAIT_S its next call moves it there, once, counted."""
    import threading

    from workers import keys
    from workers.connections import redis_client
    from workers.contextualizers.llm.replicas import Replica, Router
    from workers.settings import get_settings
    from workers.storage import replicas as store

    store.forget()
    monkeypatch.setenv("SITUATE_OPENAI_REPLICA_CONCURRENCY", "1")
    monkeypatch.setenv("SITUATE_OPENAI_WAIT_S", "1")
    get_settings.cache_clear()
    try:
        tag = uuid.uuid4().hex[:6]
        router = Router([Replica(f"http://{x}-{tag}:8000/v1", f"http://{x}-{tag}:8000/v1") for x in ("p", "q")])
        went: list[str] = []
        document = uuid.uuid4().hex
        with router.slot(document) as first:  # the document's first call: its slot held throughout
            waiter = threading.Thread(target=lambda: went.append(router_call(router, document)))
            started = time.monotonic()
            waiter.start()
            waiter.join(10)
            waited = time.monotonic() - started
        assert went and went[0] != first.label, (went, first.label)
        assert waited >= 1.0  # not before its deadline
        assert redis_client().hgetall(keys.REPLICAS_MOVES) == {first.label: "1"}
        assert redis_client().get(keys.replica_of(document)) == went[0]
    finally:
        get_settings.cache_clear()
        store.forget()


def router_call(router, document: str) -> str:
    with router.slot(document) as replica:
        return replica.label


def test_a_wedged_replica_is_sent_at_most_twice_its_slots_and_every_document_is_indexed(collection, tmp_path):
    """One of four replicas lists its models but never completes a call: the client's timeout
    sets it aside (its GET /models still answers, so a probe brings it back, and it is set aside
    again); its slots' worth of calls is all it costs, and no document is lost."""
    fleet = OpenAIFleet(4, FAST)
    fleet.configure(1, stall=True)
    workers = start_workers(fleet, 1, SITUATE_LLM_TIMEOUT_S="3", SITUATE_OPENAI_DOWN_S="30")
    docs = documents(24, tag="wedged")
    try:
        result = ingest(collection, write_jsonl(tmp_path / "d.jsonl", docs))
        assert result.returncode == 0, result.stdout + result.stderr
        assert json.loads(result.stdout)["indexed"] == len(docs)
        sent = sum(1 for x in fleet.lines() if x["replica"] == "r1" and "arrived" in x)
        print(f"\nwedged replica: {sent} calls sent to it (4 slots), {len(docs)} documents indexed")
        assert 1 <= sent <= 2 * 4
    finally:
        for w in workers:
            w.stop()
        fleet.close()


def test_a_call_waiting_for_its_replica_holds_no_call_thread(monkeypatch) -> None:
    """One call thread in the process, two replicas of one slot each. A document whose replica is
    full waits for it in its own thread; another document, on the replica with room, has its
    calls made by the one call thread meanwhile (a waiting call used to hold that thread)."""
    import threading

    from workers import keys
    from workers.chunks.splitting import Chunk
    from workers.connections import redis_client
    from workers.contextualizers.base import SourceDocument
    from workers.contextualizers.llm import callpool, replicas
    from workers.contextualizers.llm.scheduler import openai_contextualizer
    from workers.settings import get_settings
    from workers.storage import replicas as store
    from workers.storage.catalog import CollectionConfig

    fleet = OpenAIFleet(2, FAST)
    store.forget()
    monkeypatch.setenv("SITUATE_OPENAI_BASE_URLS", fleet.urls)
    monkeypatch.setenv("SITUATE_OPENAI_REPLICA_CONCURRENCY", "1")
    monkeypatch.setenv("SITUATE_OPENAI_WAIT_S", "600")  # the waiting document stays in line
    get_settings.cache_clear()
    monkeypatch.setattr(replicas, "_router", None)
    monkeypatch.setattr(callpool, "_pool", callpool.CallPool(1))
    try:
        name = f"t-{uuid.uuid4().hex[:8]}"
        situating = openai_contextualizer(CollectionConfig(name=name, contextualizer="openai", model=MODEL))
        full, free = fleet.url(0), fleet.url(1)

        def document(doc_id: str, on: str) -> SourceDocument:
            redis_client().set(keys.replica_of(f"{name}/{doc_id}"), on)  # placed there already
            text = f"Report {doc_id}. " + " ".join(f"fact{doc_id}x{w} holds" for w in range(200))
            return SourceDocument(name, doc_id, "v1", text, "en", {}, [Chunk(0, text, 0, len(text))], warm=True)

        assert store.take("holder", [full], "holder", slots=1, margin=8, lease_s=600, keep_s=60, routing="affinity").slot
        done: dict[str, int] = {}

        def situate(doc: SourceDocument) -> None:
            done[doc.doc_id] = len(list(situating.contextualize(doc, doc.chunks)))

        waiting = threading.Thread(target=situate, args=(document("waits", full),))
        waiting.start()
        wait_until(lambda: redis_client().zcard(keys.replica_line(full)) == 1, 30, "a call in the full replica's line")
        flowing = threading.Thread(target=situate, args=(document("flows", free),))
        flowing.start()
        flowing.join(30)
        try:
            assert done == {"flows": 1} and waiting.is_alive(), "the other document waited for the one call thread"
        finally:
            store.give_back(full, "holder", 1)
            waiting.join(30)
            flowing.join(30)
        assert done == {"flows": 1, "waits": 1}
    finally:
        get_settings.cache_clear()
        store.forget()
        fleet.close()
