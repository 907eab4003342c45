"""The ``openai`` contextualizer through the real ``openai`` SDK, real workers and a fleet of
stand-in replicas (``ops/standins/openai_fleet.py``), each with its own prefix cache: every call
of a document on one replica, what they read in the bill and per replica, a replica killed mid-run,
and a server that says nothing of its cache.

The module runs on a Redis of its own: its workers must take no other test's documents (nor the
other tests' workers, which know no replicas, take these)."""

from __future__ import annotations

import json
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
