"""Bundles of one-chunk documents (``pipeline/bundling.py``) under faults, with real workers, Redis
and OpenSearch: a poison document inside a bundle fails alone, a worker killed in the middle of
a bundle (its embedding, or its documents' calls) loses nothing and indexes nothing twice, a call
the provider refuses fails its document alone, and a bulk write that OpenSearch half refuses
writes the rest."""

from __future__ import annotations

import time

import numpy as np

import tests.faults.plugins  # noqa: F401 - the embedding faults the workers load
from tests.faults.conftest import audit, audit_poisoned, documents, expected_of, report, submit, wait_done
from tests.faults.plugins import EMBEDDING_FAULTS, SLOW_EMBED
from tests.support import TEST_MODEL, wait_until

OFFLINE_CONTEXTS = {"contextualizer": "keywords", "embedder": "voyage"}  # the stand-in embeds: fast
CLAUDE_CONTEXTS = {"contextualizer": "anthropic", "model": TEST_MODEL, "embedder": "local"}  # its requests: calls alone


def _notes(n: int, tag: str, marker: dict[int, str] | None = None) -> list[dict]:
    return documents(n, chunks=1, words=12, tag=tag, marker=marker)


def test_a_poison_document_in_a_bundle_fails_alone(standin, fleet, collection_name):
    """A one-chunk document whose embedding kills its process (SIGSEGV) shares a bundle with 39
    others: the bundle, delivered again after the death, is split into its documents; the poison
    one dies SITUATE_MAX_DELIVERIES times alone and fails with the signal; the rest are indexed."""
    standin.configure()
    worker = fleet(SITUATE_RECOVERY_S="20", **{EMBEDDING_FAULTS: "1"}).start(1).workers[0]
    docs = _notes(40, "poison", marker={7: " POISON-SEGV"})
    submit(collection_name, docs, **OFFLINE_CONTEXTS)
    result = audit_poisoned("a poison document in a bundle (SIGSEGV while embedding)", collection_name, docs, standin)
    assert result.indexed == 39 and result.lost == 0 and not result.failed
    assert result.duplicate_ids == 0 and result.stale_chunks == 0
    log = worker.log.read_text(errors="replace")
    assert "its worker died while running it" in log and "sent on alone" in log  # the bundle was split


def _kill_mid_bundle(standin, fleet, collection_name: str, docs: list[dict], settings: dict, task: str,
                     slow_env: dict | None = None, survivor_env: dict | None = None):
    """``docs`` submitted to one worker, killed -9 a second after it received a ``task`` bundle;
    a new worker then takes the work up. The audit once every document is done, the seconds that
    took, and the new worker."""
    slow = fleet(SITUATE_RECOVERY_S="12", **(slow_env or {})).start(1).workers[0]
    submit(collection_name, docs, **settings)
    wait_until(lambda: f"Task {task}[" in slow.log.read_text(errors="replace"), 120, f"a {task} received by the worker")
    time.sleep(1.0)  # inside the bundle's slow part: its embedding, or its calls
    slow.kill()
    survivor = fleet(SITUATE_RECOVERY_S="12", **(survivor_env or {})).start(1).workers[0]
    took = wait_done(collection_name, [d["id"] for d in docs], timeout=240)
    return audit(collection_name, expected_of(docs), standin), took, survivor


def test_a_worker_killed_in_the_middle_of_a_bundle_loses_nothing(standin, fleet, collection_name):
    """kill -9 of the only worker while it embeds a bundle; a new worker takes the bundle up
    (split into its documents, as its worker died) and every document is indexed once."""
    standin.configure()
    docs = _notes(20, "killed")
    result, took, survivor = _kill_mid_bundle(
        standin, fleet, collection_name, docs, OFFLINE_CONTEXTS, "situate.index_bundle",
        slow_env={EMBEDDING_FAULTS: "1", SLOW_EMBED: "30"}, survivor_env={EMBEDDING_FAULTS: "1"})
    report("kill -9 of the worker in the middle of a bundle", result, in_flight=0, seconds=round(took, 1))
    assert result.indexed == len(docs) and result.lost == 0 and not result.failed
    assert result.duplicate_ids == 0 and result.stale_chunks == 0
    wait_until(lambda: "its worker died while running it" in survivor.log.read_text(errors="replace"), 60,
               "the killed worker's bundle split by the survivor")


def test_a_call_the_provider_refuses_fails_its_document_alone_in_its_bundle(standin, fleet, collection_name):
    """Twelve one-chunk notes situated by Claude in bundles; the provider refuses one note's call
    (HTTP 400). That note fails with the provider's reason after its one request; the eleven
    others are indexed; no call is made twice."""
    standin.configure(fail_marker="QUOKKA-REFUSE")
    worker = fleet().start(1).workers[0]
    docs = _notes(12, "refused", marker={5: " QUOKKA-REFUSE"})
    submit(collection_name, docs, **CLAUDE_CONTEXTS)
    took = wait_done(collection_name, [d["id"] for d in docs], timeout=240)
    result = audit(collection_name, expected_of(docs), standin)
    stats = standin.stats()
    requests, refused = stats["requests"], stats["http_400_refused"]
    report("a call refused (HTTP 400) in a bundle of Claude's calls", result, requests=requests, refused=refused,
           seconds=round(took, 1))
    assert result.indexed == 11 and list(result.failed) == ["doc-005"] and result.lost == 0, result
    assert "refused" in result.failed["doc-005"], result.failed
    assert requests == 11 and refused == 1 and result.paid_twice == 0
    log = worker.log.read_text(errors="replace")
    assert "Task situate.contextualize_bundle[" in log and "Task situate.contextualize[" not in log
    # `situate retry` of that one document, the provider willing now: one call, and it is indexed.
    from producers.ingest.submit import retry_failed
    from workers.storage import catalog

    standin.configure()
    assert [r.outcome for r in retry_failed(catalog.load(collection_name), ["doc-005"])] == ["queued"]
    wait_done(collection_name, ["doc-005"], timeout=120)
    again = audit(collection_name, expected_of(docs), standin)
    assert again.indexed == 12 and not again.failed and standin.stats()["requests"] == 1, again


def test_a_worker_killed_while_its_bundle_waits_for_its_calls_loses_nothing(standin, fleet, collection_name):
    """kill -9 of the only worker while a bundle's calls are in flight (each answer takes 4 s); a
    new worker takes the bundle up (split into its documents, as its worker died): every document
    is indexed once, and the calls paid twice are at most the ones in flight at the kill."""
    standin.configure(base_latency_s=4.0)
    docs = _notes(20, "killed-calls")
    result, took, survivor = _kill_mid_bundle(standin, fleet, collection_name, docs, CLAUDE_CONTEXTS,
                                              "situate.contextualize_bundle")
    report("kill -9 of the worker while a bundle's calls are in flight", result, seconds=round(took, 1))
    assert result.indexed == len(docs) and result.lost == 0 and not result.failed
    assert result.duplicate_ids == 0 and result.stale_chunks == 0
    assert result.paid_twice <= len(docs)
    wait_until(lambda: "its worker died while running it" in survivor.log.read_text(errors="replace"), 60,
               "the killed worker's bundle split by the survivor")


def test_a_bulk_write_opensearch_half_refuses_writes_the_rest_whole(collection_name):
    """Two documents in one bulk request, one of them with a vector OpenSearch refuses: that one
    is reported refused, and none of its chunks stays; the other is written whole."""
    from workers import lifecycle
    from workers.storage import chunk_index
    from workers.storage.chunk_index import VersionWrite

    config = lifecycle.ensure(collection_name, contextualizer="keywords")
    chunk_index.ensure_index(config)

    def rows(n: int, dimension: int) -> list[dict]:
        return [{"n": i, "text": f"chunk {i}", "start": 0, "end": 7, "context": "", "pages": None, "section": None,
                 "title": None, "vector": np.ones(dimension, dtype=np.float32) / np.sqrt(dimension)} for i in range(n)]

    good, bad = rows(3, 384), rows(3, 384)
    bad[1]["vector"] = np.ones(7, dtype=np.float32)  # the wrong dimension: refused by the mapping
    refused = chunk_index.write_versions(config, [VersionWrite("good", "v1", 1, good, {}),
                                                  VersionWrite("bad", "v1", 2, bad, {})])
    assert list(refused) == ["bad"] and "1 of 3" in str(refused["bad"])
    chunk_index.refresh(config)
    assert chunk_index.count(config, "good") == 3 and chunk_index.count(config, "bad") == 0
