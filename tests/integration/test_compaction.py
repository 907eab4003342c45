"""An index merged into few segments: by ``situate compact`` at once, and by the workers once it
has gone unwritten; searches answer the same after."""

from __future__ import annotations

import json

from ops.harness import Worker
from tests.support import cookbook_docs, ingest, run_cli, wait_for


def _segments(index: str) -> int:
    from workers.storage import compaction

    return compaction.shapes([index])[index].segments


def _in_rounds(collection: str, cookbook: list[dict], rounds: int) -> None:
    """Each round written and refreshed on its own: a segment each, at least."""
    docs = [{"id": d["doc_id"], "text": d["content"]} for d in cookbook]
    size = len(docs) // rounds
    for r in range(rounds):
        ingest(collection, docs[r * size:(r + 1) * size], contextualizer="keywords")


def _top(collection: str, query: str) -> list[dict[str, float]]:
    """Each side's top 10 as OpenSearch scores them, above the 10th score (a tie there may fall
    either way), and the 10 scores: a chunk's BM25 score and its vector's similarity do not
    depend on the segment it sits in (nothing deleted here), while the order of equal ones does."""
    from producers.retrieval.search import bm25_body, knn_body
    from workers.connections import opensearch_client
    from workers.embedding import registry as embedders
    from workers.storage import catalog

    config = catalog.load(collection)
    vector = [float(x) for x in embedders.get(config.embedder, config.embed_model).embed_query(query)]
    sides = []
    for body in (bm25_body(query, [], 10, 1.0), knn_body(vector, [], 10)):
        hits = opensearch_client().search(index=config.index_name, body=body)["hits"]["hits"]
        scores = sorted((round(h["_score"], 4) for h in hits), reverse=True)
        sides.append({h["_id"]: round(h["_score"], 4) for h in hits if round(h["_score"], 4) > scores[-1]}
                     | {f"#{n}": score for n, score in enumerate(scores)})
    return sides


def test_compact_merges_the_index_and_searches_answer_the_same(worker, collection_name):
    from workers.storage import catalog

    _in_rounds(collection_name, cookbook_docs()[:6], rounds=3)
    index = catalog.load(collection_name).index_name
    assert _segments(index) >= 3
    queries = ["parse the command line arguments", "how are errors reported", "hash of a file"]
    before = [_top(collection_name, q) for q in queries]

    done = run_cli("compact", "-c", collection_name, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["segments_before"] >= 3 and result["segments"] == 1 == result["target_segments"]
    assert _segments(index) == 1
    assert [_top(collection_name, q) for q in queries] == before

    missing = run_cli("compact", "-c", "no-such-collection")
    assert missing.returncode == 2 and "no-such-collection" in missing.stderr


def test_the_workers_merge_an_index_once_it_stops_being_written(worker, collection_name):
    from workers import keys
    from workers.connections import redis_client
    from workers.storage import catalog

    _in_rounds(collection_name, cookbook_docs()[6:12], rounds=3)
    index = catalog.load(collection_name).index_name
    assert _segments(index) >= 3
    compactor = Worker(1, name="test-compactor", env={"SITUATE_COMPACT_IDLE_S": "1"})
    try:
        assert wait_for(lambda: _segments(index) == 1, timeout=90), f"{_segments(index)} segments"
        merged = json.loads(redis_client().hget(keys.COMPACTED, index) or "{}")
        assert merged.get("writes", 0) > 0
    finally:
        compactor.stop()
