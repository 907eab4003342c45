"""A three-node OpenSearch cluster on this machine (``ops/opensearch/cluster``), a node killed
with -9 in the middle of an ingest: nothing is lost and search keeps answering."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from ops.harness import OpenSearchNodes, RedisServer, Worker
from tests.support import cookbook_docs, use_services, wait_until


@pytest.fixture(scope="module")
def on_cluster(tmp_path_factory):
    """Three nodes on ports 9250-9252, and a Redis of the test's own: this process's clients,
    and the worker it starts, use both until the end."""
    nodes = OpenSearchNodes(f"t3-{uuid.uuid4().hex[:6]}", 3)
    redis = RedisServer(tmp_path_factory.mktemp("cluster-redis"))
    try:
        with use_services(redis_url=redis.url(), opensearch_url=nodes.urls):
            yield nodes
    finally:
        redis.stop()
        nodes.purge()


def test_a_node_killed_mid_ingest_loses_nothing_and_search_keeps_answering(on_cluster):
    from producers.ingest.submit import submit, wait
    from producers.retrieval.search import search
    from workers import lifecycle
    from workers.connections import opensearch_client
    from workers.documents.validation import RawDocument
    from workers.storage import chunk_index, states

    client = opensearch_client()
    assert len(client.cat.nodes(format="json")) == 3
    name = f"c-{uuid.uuid4().hex[:8]}"
    config = lifecycle.ensure(name, index_shards=3)  # replicas: the default 0-1, so one copy each here
    health = client.cluster.health(index=config.index_name, wait_for_status="green")
    assert health["status"] == "green" and health["active_shards"] == 6

    worker = Worker(2, name=f"cluster-{uuid.uuid4().hex[:6]}")
    docs = cookbook_docs()[:40]
    answered, failed, stop = [], [], threading.Event()

    def searching():
        while not stop.is_set():
            try:
                search(config, "error handling in the request parser", 5)
                answered.append(time.monotonic())
            except Exception as e:  # counted: the assertion below says how many and why
                failed.append(f"{type(e).__name__}: {e}"[:300])
            time.sleep(0.3)

    searcher = threading.Thread(target=searching, daemon=True)
    try:
        submissions = submit(config, [RawDocument(d["original_uuid"], d["content"], {},
                                                  [{"n": c["original_index"], "text": c["content"]} for c in d["chunks"]])
                                      for d in docs])
        searcher.start()
        wait_until(lambda: states.counts(name).get("indexed", 0) >= 10, 300, "a quarter indexed")  # then the node goes
        killed_at = time.monotonic()
        on_cluster.kill(2)
        final = wait(config, submissions, timeout=600)
        done_at = time.monotonic()
        time.sleep(3)  # search on, after the run too
        stop.set()
        searcher.join(timeout=30)
    finally:
        stop.set()
        worker.stop()
    assert {d["state"] for d in final.values()} == {"indexed"}, {k: v for k, v in final.items() if v["state"] != "indexed"}
    expected = sum(len(d["chunks"]) for d in docs)
    chunk_index.refresh(config)
    assert chunk_index.count(config) == expected  # every chunk, once
    assert failed == [], failed[:5]
    during = [t for t in answered if t >= killed_at]
    print(f"\nnode 2 of 3 killed with {len(docs) - 10} of {len(docs)} documents to go: all {expected} chunks "
          f"indexed {done_at - killed_at:.1f} s later; {len(answered)} searches answered "
          f"({len(during)} after the kill), {len(failed)} failed; cluster "
          f"{client.cluster.health()['status']} on {len(client.cat.nodes(format='json'))} nodes")
    assert len(during) >= 5
    lifecycle.delete(name)
