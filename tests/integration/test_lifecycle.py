"""Deleting a document and dropping a collection, through the API, the client and the CLI: gone
from the index, and nothing of them left in Redis."""

from __future__ import annotations

import pytest

from ops.harness import Api
from situate import SituateClient
from tests.support import ingest, run_cli
from workers.connections import redis_client
from workers.storage import catalog, chunk_index, states

TOKEN = "lifecycle-admin-token"


def redis_keys_of(collection: str) -> list[str]:
    r = redis_client()
    return sorted(k for k in r.scan_iter(f"*{collection}*", count=1000))


def test_delete_documents_and_drop_the_collection(worker, collection_name):
    docs = [{"id": f"d{i}", "text": f"# Note {i}\n\nOtter fact number {i}: they use tools."} for i in range(4)]
    final = ingest(collection_name, docs, contextualizer="keywords")
    assert len(final) == 4 and all(d["state"] == "indexed" for d in final.values())
    config = catalog.load(collection_name)
    assert chunk_index.count(config) == 4

    api = Api(env={"SITUATE_API_TOKEN": TOKEN})
    try:
        with SituateClient(api.url, token=TOKEN) as client:
            assert client.delete_document(collection_name, "d0") == {"deleted": "d0"}
            chunk_index.refresh(config)
            assert chunk_index.count(config, "d0") == 0 and states.get(collection_name, "d0") is None
            hits = client.search(collection_name, "otter fact number 0", k=10)
            assert hits and all(h["doc_id"] != "d0" for h in hits), hits  # the other three still answer

            result = run_cli("delete", "-c", collection_name, "d1", "d2")
            assert result.returncode == 0, result.stderr
            chunk_index.refresh(config)
            assert chunk_index.count(config) == 1 and states.counts(collection_name) == {"indexed": 1}

            assert client.delete_collection(collection_name) == {"deleted": collection_name}
    finally:
        api.stop()
    from workers.connections import opensearch_client

    assert not opensearch_client().indices.exists(index=config.index_name)
    assert not catalog.exists(collection_name)
    assert redis_keys_of(collection_name) == []


def test_dropping_from_the_cli_leaves_nothing_behind(worker, collection_name):
    ingest(collection_name, [{"id": "a", "text": "Kelp forests shelter otters."}], contextualizer="none")
    assert redis_keys_of(collection_name)
    result = run_cli("drop", "-c", collection_name, "--yes")
    assert result.returncode == 0, result.stderr
    assert redis_keys_of(collection_name) == [] and not catalog.exists(collection_name)


def test_an_index_left_behind_by_a_lost_catalog_is_dropped_by_name(collection_name):
    """Redis flushed: the collection is not listed, its index still is, and making the collection
    again finds its index taken. ``situate drop`` names and deletes that index, and no other."""
    from workers import lifecycle
    from workers.connections import opensearch_client
    from workers.errors import Conflict

    lost, neighbour = lifecycle.ensure(collection_name), lifecycle.ensure(collection_name + "-b")
    try:
        redis_client().delete(*[k for k in redis_keys_of(collection_name) if collection_name + "-b" not in k])
        assert not catalog.exists(collection_name) and opensearch_client().indices.exists(index=lost.index_name)
        with pytest.raises(Conflict, match=f"situate drop -c {collection_name}"):
            lifecycle.ensure(collection_name)
        assert lifecycle.delete_left_behind(collection_name + "-b") == [], "a listed collection's index is not left behind"

        result = run_cli("drop", "-c", collection_name, "--yes")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "left behind" in result.stdout and lost.index_name in result.stdout
        assert not opensearch_client().indices.exists(index=lost.index_name)
        assert opensearch_client().indices.exists(index=neighbour.index_name), "another collection's index is kept"
        assert lifecycle.ensure(collection_name).index_name == lost.index_name  # made again
        assert run_cli("drop", "-c", collection_name + "-none", "--yes").returncode != 0, "nothing to drop: an error"
    finally:
        for name in (collection_name, collection_name + "-b"):
            if catalog.exists(name):
                lifecycle.delete(name)


def test_index_shards_and_replicas_are_per_collection(collection_name):
    """Default: one shard, replicas 0-1 (green on one node, a copy once a second joins)."""
    from workers import lifecycle
    from workers.connections import opensearch_client
    from workers.errors import CollectionError

    client = opensearch_client()
    default = lifecycle.ensure(collection_name)
    index = client.indices.get_settings(index=default.index_name)[default.index_name]["settings"]["index"]
    assert (index["number_of_shards"], index["auto_expand_replicas"]) == ("1", "0-1")
    assert client.cluster.health(index=default.index_name, wait_for_status="green")["status"] == "green"

    wide = lifecycle.ensure(collection_name + "-w", index_shards=3, index_replicas="2")
    try:
        index = client.indices.get_settings(index=wide.index_name)[wide.index_name]["settings"]["index"]
        assert (index["number_of_shards"], index["number_of_replicas"]) == ("3", "2")
        with pytest.raises(CollectionError, match="index_shards"):
            lifecycle.ensure(wide.name, index_shards=1)  # shards shape the index: fixed at creation
    finally:
        lifecycle.delete(wide.name)
    with pytest.raises(ValueError, match="index_replicas"):
        lifecycle.ensure(collection_name + "-x", index_replicas="many")


@pytest.mark.parametrize("page", [1000, 2])
def test_a_documents_older_chunks_are_removed_whole_past_one_page(collection_name, monkeypatch, page):
    """``delete_older`` reads the chunks to remove in one plain search, and by a scroll only when
    that search came back full: with a page smaller than the older version (2 of 5 chunks),
    every one of them still goes, and the newer version stays."""
    from workers import lifecycle
    from workers.embedding import registry as embedders

    monkeypatch.setattr(chunk_index, "SCAN_PAGE", page)
    config = lifecycle.ensure(collection_name)
    dims = embedders.dimension(config.embedder, config.embed_model)
    rows = [{"n": n, "text": f"chunk {n}", "context": "", "vector": [0.1] * dims} for n in range(5)]
    chunk_index.write_version(config, "doc", "v1", 1, rows, {})
    chunk_index.write_version(config, "doc", "v2", 2, rows[:1], {})
    chunk_index.write_version(config, "other", "v1", 1, rows[:3], {})
    chunk_index.refresh(config)
    assert chunk_index.delete_older(config, "doc", 2) == 5
    chunk_index.refresh(config)
    assert (chunk_index.count(config, "doc"), chunk_index.count(config, "other")) == (1, 3)
