"""Collections that evolve: ``situate reindex`` builds the next generation behind the name (real
workers, the stand-in for Claude), searches answer throughout, contexts are reused, nothing is
lost; ``ingest --sync`` follows a folder; retired models are flagged."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from producers.retrieval.search import search
from tests.support import TEST_MODEL, ingest, run_cli, running_api, wait_until
from workers import lifecycle
from workers.connections import opensearch_client
from workers.contextualizers.llm import usage
from workers.storage import bodies, catalog, chunk_index, states

ADMIN = "reindex-admin-token-0123456789"


def paragraph_doc(doc_id: str, n: int, words: int = 140) -> dict:
    """A document of ``n`` given chunks, long enough together to be cached (above 512 tokens)."""
    chunks = [f"Part {i} of {doc_id}. " + " ".join(f"w{doc_id}{i}x{j}" for j in range(words)) + "." for i in range(n)]
    return {"id": doc_id, "text": "\n\n".join(chunks), "chunks": chunks}


def contexts_of(config) -> dict[tuple[str, int], str]:
    hits = opensearch_client().search(index=config.index_name, body={"size": 1000, "_source": ["doc_id", "chunk", "context"],
                                                                      "query": {"match_all": {}}})["hits"]["hits"]
    return {(h["_source"]["doc_id"], h["_source"]["chunk"]): h["_source"]["context"] for h in hits}


def test_another_embedder_makes_no_llm_call_and_searches_answer_throughout(worker, standin, collection_name):
    docs = [paragraph_doc(f"d{i}", 3) for i in range(8)]
    final = ingest(collection_name, docs, contextualizer="anthropic", model=TEST_MODEL, embedder="local")
    assert len(final) == 8 and all(d["state"] == "indexed" for d in final.values())
    before = catalog.load(collection_name)
    old_contexts = contexts_of(before)
    calls = standin.stats()["requests"]

    searched, failed, stop = [], [], threading.Event()

    def search_loop() -> None:
        while not stop.is_set():
            try:
                hits = search(catalog.load(collection_name), "wd3" + "1x5", k=5)
                searched.append(bool(hits))
            except Exception as e:  # counted: the point is that there are none
                failed.append(repr(e))
            time.sleep(0.2)

    loop = threading.Thread(target=search_loop)
    started = time.monotonic()
    loop.start()
    try:
        result = run_cli("reindex", "-c", collection_name, "--embedder", "local-multilingual", "--json", timeout=300)
    finally:
        stop.set()
        loop.join()
    took = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["phase"] == "live"

    after = catalog.load(collection_name)
    assert (after.embedder, after.index_generation, after.index_name) == ("local-multilingual", 2,
                                                                        f"situate-{collection_name}.g2")
    assert after.generation == before.generation, "the collection's tokens and tasks stay valid"
    assert standin.stats()["requests"] == calls, "an embedder-only change must make no LLM call"
    assert contexts_of(after) == old_contexts, "every context came across as it was paid for"
    assert chunk_index.count(after) == 24 and sorted(states.doc_ids(collection_name)) == sorted(final)
    assert failed == [] and len(searched) / took >= 2 and all(searched), (failed, len(searched), took)
    # The previous generation stays for a rollback until --finish; then the alias takes its name.
    assert opensearch_client().indices.exists(index=f"situate-{collection_name}")
    finished = run_cli("reindex", "-c", collection_name, "--finish", "--json")
    assert finished.returncode == 0, finished.stderr
    aliases = opensearch_client().indices.get_alias(name=f"situate-{collection_name}")
    assert list(aliases) == [f"situate-{collection_name}.g2"]
    assert search(catalog.load(collection_name), "wd31x5", k=1)[0].doc_id == "d3"


def test_another_model_pays_one_call_per_chunk_read_from_the_cache(worker, standin, collection_name):
    docs = [paragraph_doc(f"m{i}", 4) for i in range(3)]
    final = ingest(collection_name, docs, contextualizer="anthropic", model=TEST_MODEL)
    assert all(d["state"] == "indexed" for d in final.values())
    estimate = run_cli("reindex", "-c", collection_name, "--model", "claude-opus-5-5", "--estimate", "--json")
    assert estimate.returncode == 0, estimate.stderr
    planned = json.loads(estimate.stdout)
    assert (planned["calls"], planned["reused"]) == (12, 0)
    calls = standin.stats()["requests"]
    result = run_cli("reindex", "-c", collection_name, "--model", "claude-opus-5-5", "--json", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert standin.stats()["requests"] - calls == 12, "one call per chunk"
    config = catalog.load(collection_name)
    assert config.model == "claude-opus-5-5"
    t = usage.totals(collection_name)  # the new generation's bill is the collection's
    assert t["calls"] == 24
    assert t["cache_read_ratio"] == pytest.approx(t["best_read_ratio"], rel=0.02) and t["cache_read_ratio"] > 0.5
    rollback = run_cli("reindex", "-c", collection_name, "--rollback", "--json")
    assert rollback.returncode == 0, rollback.stderr
    assert catalog.load(collection_name).model == TEST_MODEL


def test_changes_during_a_reindex_land_in_the_new_generation_and_a_rollback_keeps_them(worker, collection_name):
    docs = [{"id": f"n{i}", "text": f"# Note {i}\n\nOtter note number {i} on tools and shells."} for i in range(30)]
    ingest(collection_name, docs, contextualizer="keywords")
    started = run_cli("reindex", "-c", collection_name, "--chunk-tokens", "64", "--vectors", "byte", "--no-wait",
                      "--json")
    assert started.returncode == 0, started.stderr
    # Meanwhile: one document changed, one deleted, one new (submissions wait out a switch).
    changed = ingest(collection_name, [{"id": "n1", "text": "# Note 1\n\nPangolin scales instead."},
                                       {"id": "fresh", "text": "# Fresh\n\nA walrus arrives."}])
    assert all(d["state"] == "indexed" for d in changed.values())
    delete_began = time.time()
    deleted = run_cli("delete", "-c", collection_name, "n2")
    assert deleted.returncode == 0, deleted.stderr
    delete_ended = time.time()
    wait_until(lambda: (catalog.reindex_record(collection_name) or {}).get("phase") == "live", 120, "the switch")
    # 30 short notes may be rebuilt before the delete lands: then it is a change since the switch
    # too. A switch while the delete command ran may have come before or after it landed.
    swapped = catalog.reindex_record(collection_name)["swapped"]
    brought_back = {2} if swapped < delete_began else {1} if swapped > delete_ended else {1, 2}
    config = catalog.load(collection_name)
    assert (config.chunk_tokens, config.vectors, config.index_generation) == (64, "byte", 2)
    chunk_index.refresh(config)
    top = {q: search(config, q, k=1)[0].doc_id for q in ("pangolin scales", "walrus arrives", "otter note 7")}
    assert top == {"pangolin scales": "n1", "walrus arrives": "fresh", "otter note 7": "n7"}
    assert chunk_index.count(config, "n2") == 0 and chunk_index.count(config, "n1") >= 1
    assert sorted(states.doc_ids(collection_name)) == sorted({d["id"] for d in docs} - {"n2"} | {"fresh"})
    # After the switch, a change; then back to the previous generation: the change comes along.
    ingest(collection_name, [{"id": "n3", "text": "# Note 3\n\nA narwhal tusk."}])
    back = run_cli("reindex", "-c", collection_name, "--rollback", "--json")
    assert back.returncode == 0, back.stderr
    assert json.loads(back.stdout)["documents_brought_back"] in brought_back
    previous = catalog.load(collection_name)
    assert (previous.index_generation, previous.vectors) == (1, "float")
    wait_until(lambda: states.get(collection_name, "n3")["state"] == "indexed", 60, "n3 in the previous generation")
    chunk_index.refresh(previous)
    assert search(previous, "narwhal tusk", k=1)[0].doc_id == "n3"
    assert not opensearch_client().indices.exists(index=f"situate-{collection_name}.g2")


def test_a_document_without_a_kept_body_is_rebuilt_from_its_chunks(worker, collection_name):
    ingest(collection_name, [{"id": f"k{i}", "text": f"Kiwi fact {i}: they are nocturnal birds."} for i in range(4)],
           contextualizer="keywords")
    bodies.body_store().forget_kept(collection_name, "k0")  # as if indexed before bodies were kept
    result = run_cli("reindex", "-c", collection_name, "--embedder", "local-multilingual", "--json", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["from_chunks"] == 1
    config = catalog.load(collection_name)
    assert sorted(h["doc_id"] for h in chunk_index.read(config, "k0")) == ["k0"]


def test_submissions_wait_while_the_collection_switches(collection_name):
    from workers import lifecycle

    lifecycle.ensure(collection_name, contextualizer="none")
    catalog.store_reindex(collection_name, {"phase": "draining", "shadow": "", "to": 2})
    try:
        with running_api({"SITUATE_API_TOKEN": ADMIN}, secret=ADMIN) as api:
            r = httpx.post(f"{api.url}/v1/collections/{collection_name}/documents", json={"id": "a", "text": "x y"},
                           headers={"Authorization": f"Bearer {ADMIN}"})
            assert r.status_code == 503 and r.headers["retry-after"] == "2", r.text
            assert states.get(collection_name, "a") is None
    finally:
        catalog.clear_reindex(collection_name)


def test_submissions_are_held_only_for_the_last_seconds_of_a_reindex(collection_name):
    """A small collection that embeds slowly: 90 documents are few, but held from the start they
    kept submissions out for SITUATE_REINDEX_PAUSE_S at a time (four times in ``ops/bench reindex``)."""
    from workers import keys
    from workers.connections import redis_client
    from workers.pipeline import rebuild
    from workers.storage.catalog import CollectionConfig

    live, shadow = CollectionConfig(name=collection_name), CollectionConfig(name=f"{collection_name}~g2")
    r = redis_client()

    def nearly_ready(in_flight: int, indexed: int, started_s_ago: float) -> bool:
        r.delete(keys.counts(shadow.name))
        r.hset(keys.counts(shadow.name), mapping={states.QUEUED: in_flight, states.INDEXED: indexed})
        return rebuild._nearly_ready(live, shadow, {"started": time.time() - started_s_ago})

    try:
        assert not nearly_ready(90, 0, 2), "nothing landed yet: no pace, so 90 to go is not little"
        assert not nearly_ready(60, 30, 100), "0.3 documents/s: 60 to go are 200 s, not the last seconds"
        assert nearly_ready(2, 88, 100), "0.88 documents/s: 2 to go are ~2 s"
        assert nearly_ready(0, 0, 1), "nothing to land"
        assert not nearly_ready(150, 10_000, 10), "fast, but above the backlog's cap"
    finally:
        r.delete(keys.counts(shadow.name))


def test_sync_deletes_exactly_the_files_gone_and_refuses_to_empty_a_source(worker, collection_name, tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(8):
        (folder / f"note{i}.md").write_text(f"# Note {i}\n\nBadger fact {i}.")
    assert run_cli("ingest", str(folder), "-c", collection_name, "--sync").returncode == 0
    for i in (1, 4, 6):
        (folder / f"note{i}.md").unlink()
    dry = run_cli("ingest", str(folder), "-c", collection_name, "--sync", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["sync"][0]["gone"] == ["note1.md", "note4.md", "note6.md"]
    assert len(states.doc_ids(collection_name)) == 8, "a dry run changes nothing"
    synced = run_cli("ingest", str(folder), "-c", collection_name, "--sync")
    assert synced.returncode == 0, synced.stdout + synced.stderr
    assert sorted(states.doc_ids(collection_name)) == [f"note{i}.md" for i in (0, 2, 3, 5, 7)]
    config = catalog.load(collection_name)
    chunk_index.refresh(config)
    assert chunk_index.count(config, "note4.md") == 0 and chunk_index.count(config, "note5.md") >= 1
    for path in folder.iterdir():  # an emptied (or unmounted) folder
        path.unlink()
    refused = run_cli("ingest", str(folder), "-c", collection_name, "--sync")
    assert refused.returncode == 1 and "--force" in refused.stderr, refused.stdout + refused.stderr
    assert len(states.doc_ids(collection_name)) == 5
    forced = run_cli("ingest", str(folder), "-c", collection_name, "--sync", "--force")
    assert forced.returncode == 0 and states.doc_ids(collection_name) == []


def test_retired_and_deprecated_models_are_flagged_with_the_move(worker, standin, collection_name):
    docs = [paragraph_doc(f"r{i}", 2) for i in range(2)]
    ingest(collection_name, docs, contextualizer="anthropic", model="claude-opus-4-5")  # deprecated, served
    status = run_cli("status", "-c", collection_name)
    assert status.returncode == 0, status.stderr
    text = " ".join(status.stdout.split())
    assert "deprecated model" in text and f"situate reindex -c {collection_name} --model claude-haiku-5-5" in text
    assert "about $" in text
    # A collection made before its model retired (claude-sonnet-4-5, 2026-11-30): flagged as retired.
    config = catalog.load(collection_name)
    catalog.store(config.model_copy(update={"model": "claude-sonnet-4-5"}))
    with running_api({"SITUATE_API_TOKEN": ADMIN}, secret=ADMIN) as api:
        metrics = httpx.get(f"{api.url}/metrics", headers={"Authorization": f"Bearer {ADMIN}"}).text
    flagged = [line for line in metrics.splitlines() if line.startswith("situate_collection_model_end_of_life{")
               and f'collection="{collection_name}"' in line]
    assert len(flagged) == 1 and 'status="retired"' in flagged[0] and 'target="claude-haiku-5-5"' in flagged[0]
    assert any(line.startswith("situate_collection_reindex_estimate_usd{") and collection_name in line
               for line in metrics.splitlines())


def test_the_api_starts_and_watches_a_reindex_for_admins_only(worker, collection_name):
    ingest(collection_name, [{"id": "a", "text": "Axolotls regrow their limbs."}], contextualizer="keywords")
    read = run_cli("token", "create", "--collection", collection_name, "--scope", "read")
    assert read.returncode == 0, read.stderr
    reader = {"Authorization": f"Bearer {read.stdout.strip().splitlines()[-1]}"}
    admin = {"Authorization": f"Bearer {ADMIN}"}
    with running_api({"SITUATE_API_TOKEN": ADMIN}, secret=ADMIN) as api:
        base = f"{api.url}/v1/collections/{collection_name}/reindex"
        assert httpx.post(base, json={"embedder": "local-multilingual"}, headers=reader).status_code == 403
        assert httpx.get(base, headers=admin).status_code == 404
        bill = httpx.post(base, json={"chunk_tokens": 64, "estimate": True}, headers=admin)
        assert bill.status_code == 202 and bill.json()["calls"] == 0 and bill.json()["chunks"] == 1, bill.text
        assert catalog.reindex_record(collection_name) is None, "an estimate starts nothing"
        started = httpx.post(base, json={"embedder": "local-multilingual"}, headers=admin)
        assert started.status_code == 202 and started.json()["to"] == 2, started.text
        assert httpx.post(base, json={"embedder": "local"}, headers=admin).status_code == 409
        wait_until(lambda: httpx.get(base, headers=admin).json()["phase"] == "live", 120, "the switch")
        done = httpx.post(f"{base}/finish", headers=admin)
        assert done.status_code == 200 and done.json()["alias"] == f"situate-{collection_name}", done.text


def _index_settings(config) -> dict:
    found = opensearch_client().indices.get_settings(index=config.index_name)
    return next(iter(found.values()))["settings"]["index"]


def test_shards_follow_the_expected_size_and_a_reindex_changes_shards_and_replicas(worker, collection_name):
    sized = lifecycle.ensure(f"{collection_name}-big", expected_chunks=5_000_000, contextualizer="none")
    try:
        assert sized.index_shards >= 2 and _index_settings(sized)["number_of_shards"] == str(sized.index_shards)
    finally:
        lifecycle.delete(sized.name)
    docs = [{"id": f"s{i}", "text": f"# Shard note {i}\n\nA heron number {i} stands in the reeds."} for i in range(12)]
    ingest(collection_name, docs, contextualizer="keywords")
    config = catalog.load(collection_name)
    assert config.index_shards == 1
    # Replicas alone: in place, no new generation.
    replicas = run_cli("reindex", "-c", collection_name, "--index-replicas", "0", "--json")
    assert replicas.returncode == 0, replicas.stderr
    assert json.loads(replicas.stdout)["in_place"] is True
    config = catalog.load(collection_name)
    assert (config.index_replicas, config.index_generation) == ("0", 1)
    assert _index_settings(config)["auto_expand_replicas"] == "false"
    # Shards: a new generation holding every document.
    shards = run_cli("reindex", "-c", collection_name, "--index-shards", "3", "--json", timeout=300)
    assert shards.returncode == 0, shards.stdout + shards.stderr
    config = catalog.load(collection_name)
    assert (config.index_shards, config.index_generation) == (3, 2)
    assert _index_settings(config)["number_of_shards"] == "3"
    chunk_index.refresh(config)
    assert {h.doc_id for h in search(config, "heron number 7 reeds", k=3)} >= {"s7"}
    assert chunk_index.count(config) == len(docs)
