"""End to end through the real CLI, Redis, Celery worker processes and OpenSearch."""

from __future__ import annotations

import json

import pytest

from producers.evaluation.evaluate import load_queries
from producers.retrieval import search
from tests.support import COOKBOOK, cookbook_docs, round_trips, run_cli
from workers.storage import catalog, chunk_index, states

SUBSET = 15  # documents of the cookbook corpus: ~100 chunks, quick to embed on 2 cores


@pytest.fixture(scope="module")
def cookbook_subset(tmp_path_factory):
    docs = cookbook_docs()[:SUBSET]
    path = tmp_path_factory.mktemp("cookbook") / "subset.json"
    path.write_text(json.dumps(docs))
    return docs, path


def test_cookbook_ingest_then_search_finds_golden_chunks(worker, collection_name, cookbook_subset):
    docs, path = cookbook_subset
    result = run_cli("ingest", "--collection", collection_name, "--format", "cookbook", str(path), "--json")
    assert result.returncode == 0, result.stderr + result.stdout
    summary = json.loads(result.stdout)
    assert summary["indexed"] == SUBSET and not summary["failed"]

    config = catalog.load(collection_name)
    # The worker's own environment says contextualizer=none, 40-token chunks, german: the
    # collection's stored settings won.
    assert (config.contextualizer, config.chunk_tokens, config.language) == ("keywords", 300, "english")
    assert chunk_index.count(config) == sum(len(d["chunks"]) for d in docs)

    # Pre-made chunks are kept exactly: numbers and text as labelled.
    first = docs[0]
    hits = search.search(config, first["chunks"][1]["content"][:200], k=50, filters={"doc_id": first["original_uuid"]})
    by_n = {h.chunk: h for h in hits}
    for chunk in first["chunks"]:
        if chunk["original_index"] in by_n:
            assert by_n[chunk["original_index"]].text == chunk["content"]
    assert by_n and all(h.context for h in hits), "keyword contexts should be stored beside the chunk"

    ids = {d["original_uuid"] for d in docs}
    labelled = [(q.query, {(g.doc_id, g.chunk) for g in q.gold}) for q in load_queries(COOKBOOK / "evaluation_set.jsonl")
                if all(g.doc_id in ids for g in q.gold)]
    assert len(labelled) >= 20
    found = []
    for query, gold in labelled:
        top = {(h.doc_id, h.chunk) for h in search.search(config, query, k=10)}
        found.append(len(gold & top) / len(gold))
    pass_at_10 = sum(found) / len(found)
    # On the full corpus hybrid search reaches ~0.89; a 15-document subset is easier.
    assert pass_at_10 >= 0.80, f"Pass@10 on the subset is {pass_at_10:.2f}"


def test_reingest_unchanged_is_free_and_changed_document_replaces_old_chunks(worker, collection_name, cookbook_subset, tmp_path):
    docs, path = cookbook_subset
    assert run_cli("ingest", "-c", collection_name, "--format", "cookbook", str(path)).returncode == 0

    config = catalog.load(collection_name)
    before = chunk_index.count(config)

    again = run_cli("ingest", "-c", collection_name, "--format", "cookbook", str(path), "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["unchanged"] == SUBSET
    chunk_index.refresh(config)
    assert chunk_index.count(config) == before

    # Change one document: drop its last two chunks. Its old chunks must go, nothing else moves.
    changed = json.loads(json.dumps(docs))
    target = changed[2]
    kept = target["chunks"][:-2]
    target["chunks"] = kept
    target["content"] = "".join(c["content"] for c in kept)
    changed_path = tmp_path / "changed.json"
    changed_path.write_text(json.dumps(changed))
    result = run_cli("ingest", "-c", collection_name, "--format", "cookbook", str(changed_path), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["unchanged"] == SUBSET - 1 and summary["indexed"] == SUBSET
    chunk_index.refresh(config)
    assert chunk_index.count(config, target["original_uuid"]) == len(kept)
    assert chunk_index.count(config) == before - 2
    doc = states.get(collection_name, target["original_uuid"])
    assert doc["state"] == "indexed" and doc["chunks"] == len(kept)


def test_bad_documents_fail_alone_with_a_reason(worker, collection_name, tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "good.md").write_text("# Quokkas\n\nThe quokka is a small marsupial living on Rottnest Island.\n")
    (folder / "also-good.py").write_text(
        "def pangolin_scales():\n    '''Pangolins are covered in keratin scales.'''\n    return 42\n")
    (folder / "empty.txt").write_text("   \n\n")
    (folder / "binary.dat").write_bytes(bytes(range(256)) * 8)
    (folder / "latin1.txt").write_bytes("Größe und Übermaß".encode("latin-1"))
    (folder / "huge.txt").write_text("word " * 30_000)  # 150 kB, over the limit set below
    jsonl = tmp_path / "batch.jsonl"
    jsonl.write_text(json.dumps({"id": "j-good", "text": "Axolotls regrow their limbs."}) + "\n"
                     + "{not json\n"
                     + json.dumps({"id": "j-empty", "text": ""}) + "\n")

    result = run_cli("ingest", "-c", collection_name, str(folder), str(jsonl), "--json",
                     env={"SITUATE_MAX_DOCUMENT_BYTES": "100000"})
    assert result.returncode == 1, "a failed document must make the command exit non-zero"
    summary = json.loads(result.stdout)
    reasons = {f["doc_id"]: f["error"] for f in summary["failed"]}
    assert set(reasons) == {"empty.txt", "binary.dat", "latin1.txt", "huge.txt", "batch.jsonl:2", "j-empty"}
    assert "empty" in reasons["empty.txt"]
    assert "binary" in reasons["binary.dat"]
    assert "UTF-8" in reasons["latin1.txt"]
    assert "over the limit" in reasons["huge.txt"]
    assert "invalid JSON" in reasons["batch.jsonl:2"]
    assert summary["indexed"] == 3

    config = catalog.load(collection_name)
    assert states.get(collection_name, "binary.dat")["state"] == "failed"
    assert states.counts(collection_name) == {"indexed": 3, "failed": 6}
    for query, doc_id in [("quokka marsupial", "good.md"), ("pangolin keratin", "also-good.py"),
                          ("axolotl limbs", "j-good")]:
        assert search.search(config, query, k=1)[0].doc_id == doc_id


def test_a_stage_opens_a_document_in_one_round_trip_reading_what_the_single_reads_read(collection_name):
    """``working_set.open_document``: the state, config, chunks, contexts and body a stage starts
    from, in one pipeline (on a network each round trip is ~10 ms a stage), decoded as each
    store's own read decodes them; and a document not there reads as not there."""
    from workers import lifecycle
    from workers.chunks.splitting import Chunk
    from workers.connections import redis_bytes_client
    from workers.storage import bodies, checkpoints, working_set

    lifecycle.ensure(collection_name, contextualizer="none")
    doc_id, version = "d-é", "v1"
    states.submit(collection_name, doc_id, version, "meta", 60.0)
    chunks = [Chunk(0, "first chunk", 0, 11, pages=(1, 1), section="A › B"), Chunk(1, "second — ü", 12, 22)]
    checkpoints.save_chunks(collection_name, doc_id, version, chunks, "en", {"title": "T"})
    checkpoints.save_context(collection_name, doc_id, version, 1, {"text": "ctx", "usage": {"input_tokens": 3}})
    bodies.body_store().put(collection_name, doc_id, version, {"text": "first chunk second — ü", "metadata": {}})

    with round_trips(redis_bytes_client()) as sent:
        opened = working_set.open_document(collection_name, doc_id, version, contexts=True, body=True)
    assert len(sent) == 1, f"{len(sent)} round trips"
    assert opened.state == states.get(collection_name, doc_id)
    assert opened.config == catalog.load(collection_name)
    assert opened.chunks == checkpoints.load_chunks(collection_name, doc_id, version)
    assert opened.chunks is not None and opened.chunks[0] == chunks
    assert opened.contexts == checkpoints.load_contexts(collection_name, doc_id, version) == {
        1: {"text": "ctx", "usage": {"input_tokens": 3}}}
    assert opened.body_read and opened.body == bodies.body_store().get(collection_name, doc_id, version)

    missing = working_set.open_document(collection_name, "nobody", version, contexts=True, body=True)
    assert (missing.state, missing.chunks, missing.contexts, missing.body) == (None, None, {}, None)
    assert working_set.open_document("t-no-such-collection", doc_id, version).config is None
