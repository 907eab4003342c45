"""Connections cut as networks and busy providers cut them, on a share of every kind of call out
of the process: closed without an answer (a peer dropping an idle keep-alive connection), reset
once the provider has done the work, or stalled past the client's read timeout
(``ops/fleet/faultproxy.py``, in front of the stand-in and of an S3 server). Per provider family — the
LLM (Anthropic, Bedrock), the embedders (Voyage, Bedrock), the rerankers (Voyage, Bedrock,
Cohere), S3 — the run ends with no document failed, and no more calls paid twice than were cut
after the work was done. Before ``workers.faults``, one dropped connection to Voyage failed a
document (``APIConnectionError: Remote end closed connection without response``)."""

from __future__ import annotations

import time
import uuid

import pytest

from ops.harness import FaultyProxy, free_port
from tests.faults.conftest import audit, documents, expected_of, report, submit, wait_done
from tests.support import SECRET_KEY, TEST_MODEL, reread_environment

# A fifth of the calls cut: 8% dropped, 8% reset after the answer began, 4% stalled 5 s — past
# the 2 s read timeouts the workers are given here.
CUTS = {"p_drop": 0.08, "p_reset": 0.08, "p_stall": 0.04, "stall_s": 5}
SHORT_TIMEOUTS = {"SITUATE_LLM_TIMEOUT_S": "2", "SITUATE_PROVIDER_TIMEOUT_S": "2"}


def _aws(url: str) -> dict[str, str]:
    return {"AWS_ACCESS_KEY_ID": "AKIATESTSTANDIN", "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": url}


def _names() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"f-cut-{tag}-a", f"f-cut-{tag}-b"


def _drop(*names: str) -> None:
    from workers import lifecycle
    from workers.storage import catalog

    for name in names:
        if catalog.exists(name):
            lifecycle.delete(name)


def _billed_then_cut(standin) -> int:
    cut = standin.stats()["cut"]
    return cut.get("reset", 0) + cut.get("stall", 0)


def test_llm_calls_cut_on_the_way_fail_no_document(standin, fleet):
    standin.configure(**CUTS)
    fleet(**SHORT_TIMEOUTS, **_aws(standin.url)).start(2)
    anthropic, bedrock = _names()
    docs = {anthropic: documents(20, tag="cut-anthropic"), bedrock: documents(20, tag="cut-bedrock")}
    try:
        submit(anthropic, docs[anthropic], contextualizer="anthropic", model=TEST_MODEL, embedder="local")
        submit(bedrock, docs[bedrock], contextualizer="bedrock", model=TEST_MODEL, embedder="local")
        for name, batch in docs.items():
            wait_done(name, [d["id"] for d in batch], timeout=600)
        results = {name: audit(name, expected_of(batch), standin) for name, batch in docs.items()}
        cut = standin.stats()["cut"]
        report("LLM connections cut (20% of calls; Anthropic + Bedrock)", results[anthropic], cut=cut,
               bedrock_indexed=results[bedrock].indexed)
        for result in results.values():
            assert result.indexed == 20 and not result.failed and result.lost == 0, result
            assert result.duplicate_ids == 0 and result.stale_chunks == 0
        assert cut.get("drop") and cut.get("reset") and cut.get("stall"), cut  # each kind of cut happened
        assert standin.stats()["paid_twice"] <= _billed_then_cut(standin)
    finally:
        _drop(anthropic, bedrock)


def test_embedder_calls_cut_on_the_way_fail_no_document(standin, fleet):
    standin.configure(**CUTS)
    fleet(**SHORT_TIMEOUTS, **_aws(standin.url)).start(2)
    voyage, bedrock = _names()
    docs = {voyage: documents(30, tag="cut-voyage"), bedrock: documents(30, tag="cut-bedrock")}
    try:
        submit(voyage, docs[voyage], contextualizer="none", embedder="voyage")
        submit(bedrock, docs[bedrock], contextualizer="none", embedder="bedrock", embed_model="cohere.embed-english-v3")
        for name, batch in docs.items():
            wait_done(name, [d["id"] for d in batch], timeout=600)
        results = {name: audit(name, expected_of(batch)) for name, batch in docs.items()}
        vectors, cut = standin.stats()["vectors"], standin.stats()["cut"]
        report("embedder connections cut (20% of calls; Voyage + Bedrock)", results[voyage], cut=cut,
               paid_twice_vectors=vectors["paid_twice"], bedrock_indexed=results[bedrock].indexed)
        for result in results.values():
            assert result.indexed == 30 and not result.failed and result.lost == 0, result
        assert cut.get("drop") and cut.get("reset") and cut.get("stall"), cut
        assert vectors["paid_twice"] <= _billed_then_cut(standin)
    finally:
        _drop(voyage, bedrock)


def test_reranker_calls_cut_on_the_way_fail_no_search(standin, fleet, monkeypatch):
    from producers.retrieval import rerankers
    from producers.retrieval.search import SearchOptions, search
    from workers.storage import catalog, chunk_index

    env = {**SHORT_TIMEOUTS, **_aws(standin.url), "SITUATE_COHERE_URL": standin.url, "CO_API_KEY": SECRET_KEY}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    reread_environment()
    rerankers.get.cache_clear()
    standin.configure()
    fleet().start(1)
    name, _ = _names()
    docs = documents(12, tag="rerank")
    try:
        submit(name, docs, contextualizer="none", embedder="local")
        wait_done(name, [d["id"] for d in docs], timeout=300)
        config = catalog.load(name)
        chunk_index.refresh(config)  # every chunk searchable before the uncut order is taken
        queries = [f"Document {d} part {p}" for d in range(12) for p in range(2)]
        order = {r: [[h.id for h in search(config, q, 5, options=SearchOptions(reranker=r))] for q in queries]
                 for r in ("voyage", "bedrock", "cohere")}
        standin.update(**CUTS)
        for reranker in ("voyage", "bedrock", "cohere"):
            again = [[h.id for h in search(config, q, 5, options=SearchOptions(reranker=reranker))] for q in queries]
            assert again == order[reranker], reranker  # every search answered, as it did uncut
        cut, vectors = standin.stats()["cut"], standin.stats()["vectors"]
        report("reranker connections cut (20% of calls; Voyage + Bedrock + Cohere)",
               audit(name, expected_of(docs)), cut=cut, searches=3 * len(queries), paid_twice_vectors=vectors["paid_twice"])
        assert cut.get("drop") and cut.get("reset") and cut.get("stall"), cut
        assert vectors["paid_twice"] <= _billed_then_cut(standin)
    finally:
        rerankers.get.cache_clear()
        _drop(name)


@pytest.fixture
def s3_behind_cuts(monkeypatch):
    """moto's S3 server, reached through a proxy that cuts a fifth of the calls."""
    import boto3
    from moto.server import ThreadedMotoServer

    from workers import connections
    from workers.storage import bodies

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    proxy = FaultyProxy(f"http://127.0.0.1:{port}", CUTS)
    bucket = f"bodies-{uuid.uuid4().hex[:6]}"
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL_S3": proxy.url, "SITUATE_BODY_STORE": f"s3://{bucket}/situate",
           "SITUATE_PROVIDER_TIMEOUT_S": "2"}
    boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id="testing",
                 aws_secret_access_key="testing", region_name="us-east-1").create_bucket(Bucket=bucket)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    reread_environment()
    connections.s3_client.cache_clear()
    bodies._store = None
    yield env, proxy
    monkeypatch.undo()
    reread_environment()
    connections.s3_client.cache_clear()
    bodies._store = None
    proxy.close()
    server.stop()


def test_s3_calls_cut_on_the_way_fail_no_document(standin, fleet, s3_behind_cuts):
    env, proxy = s3_behind_cuts
    standin.configure()
    fleet(**env).start(2)
    name, _ = _names()
    docs = documents(30, tag="s3")
    try:
        submit(name, docs, contextualizer="none", embedder="local")  # this process writes the bodies: through the cuts
        wait_done(name, [d["id"] for d in docs], timeout=600)
        result = audit(name, expected_of(docs))
        cut = proxy.stats()
        report("S3 body store behind cut connections (20% of calls)", result, cut=cut)
        assert result.indexed == len(docs) and not result.failed and result.lost == 0, result
        assert cut.get("drop") and cut.get("reset") and cut.get("stall"), cut
    finally:
        _drop(name)


def test_a_provider_that_answers_529_for_ever_costs_one_calls_tries_and_no_more(standin, fleet):
    """One retry policy (``workers.faults``): a failing call is tried SITUATE_PROVIDER_MAX_ATTEMPTS
    times, waiting 0.5 s then 1 s (times a jitter in [0.5, 1.5)), and its document fails with the
    reason. Before, the stage guard ran the whole stage again on top of the call's own tries until
    its patience (SITUATE_TRANSIENT_PATIENCE_S, 900 s): the tries multiplied and the document
    waited a quarter of an hour. Each document's first call is alone (it warms the cache), so the
    stand-in sees exactly three requests a document."""
    standin.configure(p_529=1.0)
    fleet(SITUATE_PROVIDER_MAX_ATTEMPTS="3").start(1, concurrency=2)
    name, _ = _names()
    docs = documents(2, tag="always-529")
    before = standin.stats()["requests"]
    try:
        started = time.monotonic()
        submit(name, docs, contextualizer="anthropic", model=TEST_MODEL, embedder="local")
        seconds = wait_done(name, [d["id"] for d in docs], timeout=120)
        result = audit(name, expected_of(docs))
        tries = standin.stats()["requests"] - before
        report("a provider answering 529 for ever (3 tries a call)", result, tries=tries, seconds=round(seconds, 1))
        assert len(result.failed) == 2, result
        for reason in result.failed.values():
            assert "gave up after 3 tries" in reason and "http_529" in reason, reason
        assert tries == 2 * 3, tries
        assert time.monotonic() - started >= 0.75  # the two waits, at their shortest
    finally:
        standin.configure()
        _drop(name)
