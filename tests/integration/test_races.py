"""Races read in the code, each forced to happen: a hook at the exact point between two steps
runs the other party there (in a thread, as another producer or worker would), then the step
goes on. Real Redis, OpenSearch and workers; only the moment is chosen.

- a DELETE racing a re-submission of the same content;
- a retry of a failed version racing a newer version;
- an index task whose collection is dropped while it embeds;
- a drop cut short by OpenSearch being down, finished by the next one."""

from __future__ import annotations

import threading
import uuid

import opensearchpy
import pytest

from ops.harness import free_port
from tests.support import ingest, round_trips, run_cli, use_services, wait_for


def in_a_thread(work) -> threading.Thread:
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(timeout=3)  # the other party gets its chance; under a lock it waits instead
    return thread


def test_a_delete_racing_a_resubmission_of_the_same_content_keeps_the_new_one(worker, collection_name, monkeypatch):
    from producers.ingest.submit import submit_one
    from workers import lifecycle
    from workers.documents.validation import RawDocument
    from workers.storage import chunk_index, states

    text = "Otters keep a favourite stone in a pocket of loose skin under each forearm."
    assert ingest(collection_name, [{"id": "d", "text": text}], contextualizer="none")["d"]["state"] == "indexed"
    config = lifecycle.ensure(collection_name)
    real = chunk_index.delete_document
    threads = []

    def racing(*args, **kwargs):  # the same content submitted again, between the state and the chunks
        monkeypatch.setattr(chunk_index, "delete_document", real)
        threads.append(in_a_thread(lambda: submit_one(config, RawDocument("d", text, {}))))
        return real(*args, **kwargs)

    monkeypatch.setattr(chunk_index, "delete_document", racing)
    assert lifecycle.delete_document(collection_name, "d")
    threads[0].join(timeout=60)
    final = wait_for(lambda: (d := states.get(collection_name, "d")) and d["state"] in ("indexed", "failed") and d)
    assert final and final["state"] == "indexed", f"the re-submission was lost: {final}"
    chunk_index.refresh(config)
    assert chunk_index.count(config, "d") == final["chunks"] > 0, "the new submission's chunks were deleted"


def test_a_retry_never_replaces_a_newer_version(worker, collection_name, monkeypatch):
    from producers.ingest import submit
    from producers.ingest.submit import retry_failed, submit_one
    from workers import lifecycle
    from workers.documents.identity import content_version, metadata_hash
    from workers.documents.validation import RawDocument
    from workers.storage import states
    from workers.storage.bodies import body_store

    config = lifecycle.ensure(collection_name, contextualizer="none")
    old_text, new_text = "The old text of the otter guide.", "The new text of the otter guide, revised."
    v1 = content_version(old_text)
    # v1 failed (recorded by hand: no worker must take it before the race is set up)
    body_store().put(collection_name, "d", v1, {"text": old_text, "metadata": {}, "chunks": None})
    states.submit(collection_name, "d", v1, metadata_hash({}), 3600)
    states.set_state(collection_name, "d", v1, states.FAILED, error="a failure, for the test")

    class RacingStore:  # a newer version arrives while the retry looks at the failed one
        def __init__(self, inner):
            self.inner, self.raced = inner, False

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def get(self, *args):
            if not self.raced:
                self.raced = True
                self.thread = in_a_thread(lambda: submit_one(config, RawDocument("d", new_text, {})))
            return self.inner.get(*args)

    store = RacingStore(body_store())
    monkeypatch.setattr(submit, "body_store", lambda: store)
    retry_failed(config, ["d"])
    monkeypatch.undo()
    store.thread.join(timeout=60)
    assert states.get(collection_name, "d")["version"] == content_version(new_text), "the retry replaced v2 by v1"
    final = wait_for(lambda: (d := states.get(collection_name, "d")) and d["state"] == "indexed" and d)
    assert final and final["version"] == content_version(new_text)


def test_an_index_task_whose_collection_is_dropped_meanwhile_writes_nothing(collection_name, monkeypatch):
    from workers import lifecycle
    from workers.chunks.splitting import split
    from workers.connections import opensearch_client
    from workers.contextualizers.base import Context
    from workers.documents.identity import content_version, metadata_hash
    from workers.pipeline import stages, tasks
    from workers.storage import checkpoints, states
    from workers.storage.bodies import body_store

    config = lifecycle.ensure(collection_name, contextualizer="none")
    text = "Sea otters have the densest fur of any animal: about a million hairs per square inch."
    version = content_version(text)
    # A document situated and waiting to be indexed, as the stages before would leave it.
    body_store().put(collection_name, "d", version, {"text": text, "metadata": {}, "chunks": None})
    states.submit(collection_name, "d", version, metadata_hash({}), 3600)
    chunks = split(text, "text", 300, 0)
    checkpoints.save_chunks(collection_name, "d", version, chunks, "text", {})
    for c in chunks:
        checkpoints.save_context(collection_name, "d", version, c.n, Context("").to_json())
    checkpoints.flush(collection_name, "d", version)
    states.set_state(collection_name, "d", version, states.CHUNKED, chunks_total=len(chunks))
    states.set_state(collection_name, "d", version, states.SITUATED)

    class DroppingEmbedder:  # the collection is dropped while the task embeds
        def embed_documents(self, texts):
            lifecycle.delete(collection_name)
            return [[1.0] + [0.0] * 383 for _ in texts]

    monkeypatch.setattr(stages.embedders, "get", lambda *a: DroppingEmbedder())
    tasks.index.run(collection_name, "d", version)
    assert not opensearch_client().indices.exists(index=config.index_name), \
        "the index task brought the dropped collection's index back"


def test_a_drop_cut_short_by_opensearch_is_finished_by_the_next(worker, collection_name):
    import httpx

    from ops.harness import Api
    from workers import lifecycle
    from workers.connections import opensearch_client
    from workers.errors import Conflict, NoSuchCollection
    from workers.storage import catalog, states

    assert ingest(collection_name, [{"id": "a", "text": "Otters float on their backs."}],
                  contextualizer="none")["a"]["state"] == "indexed"
    index = catalog.load(collection_name).index_name
    dead = f"http://127.0.0.1:{free_port()}"
    api = Api(env={"SITUATE_API_TOKEN": "drop-admin", "SITUATE_OPENSEARCH_URL": dead})
    try:
        r = httpx.delete(f"{api.url}/v1/collections/{collection_name}", headers={"Authorization": "Bearer drop-admin"},
                         timeout=120)
        assert r.status_code == 503 and "again" in r.json()["detail"]
    finally:
        api.stop()
    # Cut short: gone from the catalog (nothing new reaches it), not re-creatable, the rest still there.
    assert not catalog.exists(collection_name) and catalog.dropping(collection_name) is not None
    assert opensearch_client().indices.exists(index=index) and states.counts(collection_name)
    with pytest.raises(Conflict):
        lifecycle.ensure(collection_name, contextualizer="none")
    with use_services(opensearch_url=dead):  # and again with OpenSearch down: still resumable
        with pytest.raises(opensearchpy.exceptions.ConnectionError):
            lifecycle.delete(collection_name)
    result = run_cli("drop", "-c", collection_name, "--yes")
    assert result.returncode == 0, result.stderr
    assert not opensearch_client().indices.exists(index=index)
    assert catalog.dropping(collection_name) is None and not states.counts(collection_name)
    with pytest.raises(NoSuchCollection):
        lifecycle.delete(collection_name)


def test_a_delivery_begins_in_one_round_trip_and_counts_only_when_it_takes_the_lease():
    """Confirmed, leased and counted at once (a worker's main process waits on each round trip in
    turn); a delivery that finds the unit held is not counted (it would bring the poison limit
    nearer without running)."""
    from workers.connections import redis_client
    from workers.storage import deliveries

    unit, task = f"situate:lease:test:{uuid.uuid4().hex}", uuid.uuid4().hex
    client = redis_client()
    queue = f"test-begin-{uuid.uuid4().hex[:6]}"
    admit = (8, 60.0)  # the room it leaves in its queue is filled in the same round trip
    scripts_ready, _ = deliveries.begin(task + "-warm", 0, unit + "-warm", "w", queue, admit)  # scripts loaded once
    assert scripts_ready == 1
    with round_trips(client) as sent:
        assert deliveries.begin(task, 0, unit, "first", queue, admit) == (1, [])
    assert len(sent) == 1, f"{len(sent)} round trips"
    assert deliveries.begin(task, 0, unit, "second")[0] == 0, "held: not taken, not counted"
    deliveries.release_lease(unit, "first")
    assert deliveries.begin(task, 0, unit, "third")[0] == 2
    deliveries.release_lease(unit, "third")
    client.script_flush()  # as after a Redis restart: the pipeline loads its scripts and runs again
    assert deliveries.begin(task, 0, unit, "fourth", queue, admit)[0] == 3
    deliveries.release_lease(unit, "fourth")
