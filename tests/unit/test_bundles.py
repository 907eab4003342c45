"""Bundles of one-chunk documents (``pipeline/bundling.py``, ``pipeline/bundle_stages.py``) on
in-memory stores: how a pool is cut into bundles, that a bundle's calls go out together, and that
a document still fails alone inside one. The
same rules with Redis, OpenSearch and worker processes (a worker killed mid-bundle, a poison
document) are in ``tests/faults/test_bundles.py``."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tests.memory import Memory, MemoryBundles
from workers.chunks.splitting import Chunk
from workers.contextualizers import registry
from workers.contextualizers.base import Context, SourceDocument
from workers.documents.identity import content_version
from workers.pipeline import bundle_stages, bundling, stages
from workers.pipeline.sending import (
    COLLECT_BUNDLE_TASK,
    CONTEXTUALIZE_BUNDLE_TASK,
    CONTEXTUALIZE_TASK,
    INDEX_BUNDLE_TASK,
    INDEX_TASK,
)
from workers.settings import get_settings
from workers.storage.catalog import CollectionConfig

CONFIG = CollectionConfig(name="notes", contextualizer="plain-notes", chunk_tokens=200, generation="g1")
LONG = "\n\n".join(f"Section {i}. " + f"The heron number {i} stands still in the shallows. " * 12 for i in range(6))


class Plain:
    name = "plain-notes"

    def contextualize(self, doc: SourceDocument, chunks: list[Chunk]) -> Iterator[tuple[Chunk, Context]]:
        for c in chunks:
            yield c, Context(f"a note of {doc.doc_id}")


registry.register("plain-notes", lambda config: Plain())


@pytest.fixture
def memory(monkeypatch) -> Iterator[Memory]:
    monkeypatch.setenv("SITUATE_BUNDLE_MAX_DOCUMENTS", "4")
    get_settings.cache_clear()
    yield Memory(bundles=MemoryBundles())
    get_settings.cache_clear()


@pytest.fixture
def embed_calls(monkeypatch) -> list[int]:
    """Texts per embedding request, as the index stage makes them."""
    calls: list[int] = []
    real = stages.embedders.get

    class Counted:
        def __init__(self, inner):
            self.inner = inner

        def embed_documents(self, texts):
            calls.append(len(texts))
            return self.inner.embed_documents(texts)

    monkeypatch.setattr(stages.embedders, "get", lambda *a: Counted(real(*a)))
    return calls


def _note(memory: Memory, i: int, text: str | None = None) -> tuple[str, str]:
    doc_id, text = f"note-{i}", text or f"Note {i}: the heron came back to the pond at dawn."
    version = content_version(text)
    memory.submit(CONFIG, doc_id, text, version)
    return doc_id, version


def _situated(memory: Memory, n: int) -> list[tuple[str, str]]:
    """``n`` notes chunked, then each contextualized alone (as a slice's last, a Message Batch's
    are): each in the index's pool now. The contextualize stage's pool and collectors are left
    out of it (``_chunked`` has them)."""
    s = memory.stores
    notes = _chunked(memory, n)
    assert memory.bundles is not None
    memory.bundles.pools.pop(("contextualize", "notes"), None)
    memory.gate.sent.clear()
    memory.gate.delays.clear()
    for doc_id, version in notes:
        stages.contextualize(s, "notes", doc_id, version)
    return notes


def _chunked(memory: Memory, n: int) -> list[tuple[str, str]]:
    """``n`` notes chunked: each in the contextualize stage's pool now."""
    notes = [_note(memory, i) for i in range(n)]
    for doc_id, version in notes:
        stages.chunk(memory.stores, "notes", doc_id, version)
    return notes


def _run_collectors(memory: Memory) -> list[tuple[object, ...]]:
    """Every collector sent so far run once: the bundles they sent."""
    for task, args, _ in list(memory.gate.sent):
        if task == COLLECT_BUNDLE_TASK:
            bundling.collect(memory.stores, *map(str, args))
    return [args for task, args, _ in memory.gate.sent if task in (INDEX_BUNDLE_TASK, CONTEXTUALIZE_BUNDLE_TASK)]


def test_one_chunk_documents_are_indexed_in_bundles_with_one_embedding_request_each(memory, embed_calls):
    notes = _situated(memory, 10)
    assert INDEX_TASK not in memory.gate.tasks()
    assert memory.gate.tasks().count(COLLECT_BUNDLE_TASK) == 3  # at the 1st, 5th and 9th: one per bundle of 4
    bundles = _run_collectors(memory)
    assert [len(b[2]) for b in bundles] == [4, 4, 2]  # type: ignore[arg-type]
    for args in bundles:
        bundle_stages.index_bundle(memory.stores, "notes", bundling.members_of(args))
    assert embed_calls == [4, 4, 2]
    for doc_id, version in notes:
        assert memory.states.get("notes", doc_id)["state"] == "indexed"
        assert memory.index.versions("notes", doc_id) == [version]
    assert memory.metrics.counts["documents_indexed"] == 10
    assert INDEX_TASK not in memory.gate.tasks()  # nobody was sent on alone


def test_a_document_of_several_chunks_is_never_bundled(memory):
    doc_id, version = _note(memory, 0, LONG)
    s = memory.stores
    stages.chunk(s, "notes", doc_id, version)
    stages.contextualize(s, "notes", doc_id, version)
    assert memory.gate.tasks() == [CONTEXTUALIZE_TASK, INDEX_TASK]


def test_a_collector_delivered_again_sends_the_same_bundle(memory):
    _situated(memory, 3)
    (task, args, _), = [m for m in memory.gate.sent if m[0] == COLLECT_BUNDLE_TASK]
    memory.bundles.taken["kept"] = []  # another bundle's record does not matter
    bundling.collect(memory.stores, "notes", str(args[1]))
    first = [a for t, a, _ in memory.gate.sent if t == INDEX_BUNDLE_TASK]
    memory.bundles.taken[str(args[1])] = bundling.members_of(first[0])  # its worker died before it said "sent"
    bundling.collect(memory.stores, "notes", str(args[1]))
    again = [a for t, a, _ in memory.gate.sent if t == INDEX_BUNDLE_TASK]
    assert len(again) == 2 and again[0] == again[1] and len(again[0][2]) == 3  # type: ignore[arg-type]


def test_a_bundle_cut_short_by_its_bytes_sends_a_collector_for_the_rest(memory, monkeypatch):
    monkeypatch.setenv("SITUATE_BUNDLE_MAX_BYTES", "100")  # each note weighs ~50 bytes: two a bundle
    get_settings.cache_clear()
    _situated(memory, 3)
    bundles = _run_collectors(memory)
    assert [len(b[2]) for b in bundles[:1]] == [2]  # type: ignore[arg-type]
    bundles = _run_collectors(memory)  # the successor's
    assert sorted(m.doc_id for b in bundles for m in bundling.members_of(b)) == ["note-0", "note-1", "note-2"]


def test_a_refused_write_sends_that_document_on_alone_and_its_neighbours_finish(memory):
    notes = _situated(memory, 4)
    memory.index.refuse = {"note-2"}
    bundle, = _run_collectors(memory)
    bundle_stages.index_bundle(memory.stores, "notes", bundling.members_of(bundle))
    assert [(t, a) for t, a, _ in memory.gate.sent if t == INDEX_TASK] == [(INDEX_TASK, ("notes", *notes[2]))]
    assert [memory.states.get("notes", d)["state"] for d, _ in notes] == ["indexed", "indexed", "situated", "indexed"]
    from workers.errors import WriteRefused

    with pytest.raises(WriteRefused, match="mapper_parsing_exception"):  # alone, its own message fails it
        stages.index(memory.stores, "notes", *notes[2])


def test_a_document_whose_chunks_are_gone_is_sent_on_alone(memory):
    notes = _situated(memory, 3)
    del memory.checkpoints.chunks[("notes", *notes[1])]
    bundle, = _run_collectors(memory)
    bundle_stages.index_bundle(memory.stores, "notes", bundling.members_of(bundle))
    assert [a for t, a, _ in memory.gate.sent if t == INDEX_TASK] == [("notes", *notes[1])]
    assert [memory.states.get("notes", d)["state"] for d, _ in notes] == ["indexed", "situated", "indexed"]


def test_a_document_submitted_again_while_bundled_keeps_only_its_new_version(memory):
    notes = _situated(memory, 2)
    bundle, = _run_collectors(memory)
    doc_id, new = _note(memory, 1, "Note 1, corrected: the heron left the pond at noon.")
    bundle_stages.index_bundle(memory.stores, "notes", bundling.members_of(bundle))
    assert memory.states.get("notes", "note-0")["state"] == "indexed"
    assert memory.states.get("notes", doc_id)["version"] == new and memory.index.versions("notes", doc_id) == []
    s = memory.stores
    stages.chunk(s, "notes", doc_id, new)
    stages.contextualize(s, "notes", doc_id, new)
    for args in _run_collectors(memory)[1:]:
        bundle_stages.index_bundle(s, "notes", bundling.members_of(args))
    assert memory.index.versions("notes", doc_id) == [new] and notes[1][1] != new


def test_a_bundle_delivered_again_after_it_finished_does_nothing(memory, embed_calls):
    _situated(memory, 3)
    bundle, = _run_collectors(memory)
    bundle_stages.index_bundle(memory.stores, "notes", bundling.members_of(bundle))
    bundle_stages.index_bundle(memory.stores, "notes", bundling.members_of(bundle))
    assert embed_calls == [3] and memory.metrics.counts["documents_indexed"] == 3


def test_a_bundle_leaves_after_the_wait_or_as_soon_as_it_is_full(memory):
    _situated(memory, 5)
    collectors = [m for m in memory.gate.sent if m[0] == COLLECT_BUNDLE_TASK]
    assert len(collectors) == 2  # the first document's, due after the wait; the 4th's, at once
    assert memory.gate.delays == [get_settings().bundle_wait_s] and get_settings().bundle_wait_s > 0


def test_a_write_opensearch_cannot_take_now_holds_the_whole_bundle_for_another_try(memory, monkeypatch):
    """A refusal worth another try (overloaded, blocked for writes) is the bundle's store fault:
    it is raised, so the task waits it out in place as a document alone would; nobody is sent on
    alone, nothing is recorded indexed, and the next try writes them all."""
    from workers.errors import WriteNotNow

    notes = _situated(memory, 3)
    bundle, = _run_collectors(memory)
    real = memory.index.write_versions
    monkeypatch.setattr(memory.index, "write_versions", lambda config, writes: {
        writes[1].doc_id: WriteNotNow("OpenSearch refused 1 of 1 chunk(s): cluster_block_exception")})
    with pytest.raises(WriteNotNow):
        bundle_stages.index_bundle(memory.stores, "notes", bundling.members_of(bundle))
    assert INDEX_TASK not in memory.gate.tasks()
    assert [memory.states.get("notes", d)["state"] for d, _ in notes] == ["situated"] * 3
    monkeypatch.setattr(memory.index, "write_versions", real)
    bundle_stages.index_bundle(memory.stores, "notes", bundling.members_of(bundle))
    assert [memory.states.get("notes", d)["state"] for d, _ in notes] == ["indexed"] * 3


def test_a_lone_document_does_not_wait_for_a_bundle_that_nothing_else_will_join(memory):
    memory.bundles.flying = 1  # its collection has nothing else in flight
    doc_id, version = _note(memory, 0)
    stages.chunk(memory.stores, "notes", doc_id, version)
    assert memory.gate.tasks() == [COLLECT_BUNDLE_TASK] and memory.gate.delays == []
    stages.contextualize(memory.stores, "notes", doc_id, version)
    assert memory.gate.tasks() == [COLLECT_BUNDLE_TASK] * 2 and memory.gate.delays == []


# ---- the contextualize stage's bundles ------------------------------------------------------

class Together:
    """A contextualizer whose calls for ``parties`` documents return only once all of them are
    in flight together (a barrier): called one after another, the first would time out. It fails
    the documents named in ``failing``, and counts its calls."""

    name = "together-notes"

    def __init__(self, parties: int, failing: dict[str, BaseException] | None = None):
        self.barrier = threading.Barrier(parties, timeout=10)
        self.failing = failing or {}
        self.calls: list[str] = []

    def contextualize(self, doc: SourceDocument, chunks: list[Chunk]) -> Iterator[tuple[Chunk, Context]]:
        self.calls.append(doc.doc_id)
        self.barrier.wait()
        if (error := self.failing.pop(doc.doc_id, None)) is not None:
            raise error
        for c in chunks:
            yield c, Context(f"a note of {doc.doc_id}")


@pytest.fixture
def together(memory, monkeypatch) -> Iterator[list[Together]]:
    """The collection situated by ``Together`` (the test sets it up in ``made[0]``)."""
    made: list[Together] = []
    registry.register("together-notes", lambda config: made[0])
    monkeypatch.setattr(registry, "_cache", {})  # each test its own
    monkeypatch.setattr(registry, "LLM_PROVIDERS", (*registry.LLM_PROVIDERS, "together-notes"))  # its calls together
    memory.catalog.configs["notes"] = CONFIG.model_copy(update={"contextualizer": "together-notes"})
    yield made


def _contextualize_bundles(memory: Memory) -> list[tuple[object, ...]]:
    bundles = [b for b in _run_collectors(memory) if len(b) == 3]
    sent = [args for task, args, _ in memory.gate.sent if task == CONTEXTUALIZE_BUNDLE_TASK]
    return [b for b in bundles if b in sent]


def test_one_chunk_documents_are_contextualized_in_bundles_their_calls_together(memory, together, embed_calls):
    together.append(Together(parties=4))
    notes = _chunked(memory, 8)
    assert CONTEXTUALIZE_TASK not in memory.gate.tasks()
    bundles = _contextualize_bundles(memory)
    assert [len(b[2]) for b in bundles] == [4, 4]  # type: ignore[arg-type]
    for args in bundles:
        bundle_stages.contextualize_bundle(memory.stores, "notes", bundling.members_of(args))
    assert sorted(together[0].calls) == sorted(d for d, _ in notes)  # one call each, four at a time
    assert [memory.states.get("notes", d)["state"] for d, _ in notes] == ["situated"] * 8
    index_bundles = [a for t, a, _ in memory.gate.sent if t == INDEX_BUNDLE_TASK]
    assert [bundling.members_of(a) for a in index_bundles] == [bundling.members_of(b) for b in bundles]
    for args in index_bundles:
        bundle_stages.index_bundle(memory.stores, "notes", bundling.members_of(args))
    assert embed_calls == [4, 4]
    assert [memory.states.get("notes", d)["state"] for d, _ in notes] == ["indexed"] * 8
    assert CONTEXTUALIZE_TASK not in memory.gate.tasks() and INDEX_TASK not in memory.gate.tasks()


def test_a_call_that_fails_fails_its_document_alone_with_its_reason_and_no_second_call(memory, together):
    from workers.errors import ProviderRefused

    together.append(Together(parties=3, failing={"note-1": ProviderRefused("HTTP 400: prompt is too long")}))
    notes = _chunked(memory, 3)
    bundle, = _contextualize_bundles(memory)
    bundle_stages.contextualize_bundle(memory.stores, "notes", bundling.members_of(bundle), task_id="t-1")
    failed = memory.states.get("notes", "note-1")
    assert failed["state"] == "failed" and failed["error"] == "contextualize failed: HTTP 400: prompt is too long"
    assert [memory.states.get("notes", d)["state"] for d, _ in notes] == ["situated", "failed", "situated"]
    index_bundle, = [a for t, a, _ in memory.gate.sent if t == INDEX_BUNDLE_TASK]
    assert [m.doc_id for m in bundling.members_of(index_bundle)] == ["note-0", "note-2"]
    assert sorted(together[0].calls) == ["note-0", "note-1", "note-2"]  # nothing sent again, nothing called twice
    assert CONTEXTUALIZE_TASK not in memory.gate.tasks()


def test_a_store_away_holds_the_whole_bundle_and_no_context_is_asked_for_twice(memory, together):
    import redis

    together.append(Together(parties=3, failing={"note-2": redis.ConnectionError("Redis went away")}))
    notes = _chunked(memory, 3)
    bundle, = _contextualize_bundles(memory)
    with pytest.raises(redis.ConnectionError):  # the task waits it out in place, then runs again
        bundle_stages.contextualize_bundle(memory.stores, "notes", bundling.members_of(bundle))
    assert INDEX_BUNDLE_TASK not in memory.gate.tasks()
    together[0].barrier = threading.Barrier(1)  # the second run calls one document alone
    bundle_stages.contextualize_bundle(memory.stores, "notes", bundling.members_of(bundle))
    assert sorted(together[0].calls) == ["note-0", "note-1", "note-2", "note-2"]
    assert [memory.states.get("notes", d)["state"] for d, _ in notes] == ["situated"] * 3
    index_bundle, = [a for t, a, _ in memory.gate.sent if t == INDEX_BUNDLE_TASK]
    assert len(bundling.members_of(index_bundle)) == 3
    # Delivered again once done: no call, no second index bundle.
    bundle_stages.contextualize_bundle(memory.stores, "notes", bundling.members_of(bundle))
    assert len(together[0].calls) == 4 and memory.gate.tasks().count(INDEX_BUNDLE_TASK) == 1


def test_a_contextualize_bundle_split_sends_each_document_its_own_message_on_its_shard(memory):
    from workers.pipeline.routing import document_queue

    notes = _chunked(memory, 3)
    bundle, = _contextualize_bundles(memory)
    memory.gate.sent.clear()
    bundling.split(memory.gate, CONTEXTUALIZE_BUNDLE_TASK, bundle)
    assert memory.gate.sent == [(CONTEXTUALIZE_TASK, ("notes", d, v), document_queue("notes", d)) for d, v in notes]


def test_documents_bound_for_message_batches_or_of_several_chunks_are_not_bundled(memory):
    s = memory.stores
    version = content_version("Note for the batch.")
    memory.submit(CONFIG, "batched", "Note for the batch.", version, batch=True)
    stages.chunk(s, "notes", "batched", version)
    doc_id, long_version = _note(memory, 1, LONG)
    stages.chunk(s, "notes", doc_id, long_version)
    assert memory.gate.tasks() == [CONTEXTUALIZE_TASK, CONTEXTUALIZE_TASK]


def test_bundles_off_each_document_sends_its_own_messages(monkeypatch):
    monkeypatch.setenv("SITUATE_BUNDLE_MAX_DOCUMENTS", "1")
    get_settings.cache_clear()
    try:
        memory = Memory(bundles=MemoryBundles())
        notes = _chunked(memory, 3)
        assert memory.gate.tasks() == [CONTEXTUALIZE_TASK] * 3
        for doc_id, version in notes:
            stages.contextualize(memory.stores, "notes", doc_id, version)
        assert memory.gate.tasks().count(INDEX_TASK) == 3 and COLLECT_BUNDLE_TASK not in memory.gate.tasks()
    finally:
        get_settings.cache_clear()


def test_a_model_in_the_worker_or_a_plugin_is_called_one_document_after_another(memory, together, monkeypatch):
    """Not a provider's: a bundle calls it as a prefork worker would, one document at a time (a
    barrier of two would never open: both documents fail, by the barrier's own error)."""
    monkeypatch.setattr(registry, "LLM_PROVIDERS", ("anthropic", "bedrock", "openai"))
    together.append(Together(parties=2))
    together[0].barrier = threading.Barrier(2, timeout=0.5)
    _chunked(memory, 2)
    bundle, = _contextualize_bundles(memory)
    bundle_stages.contextualize_bundle(memory.stores, "notes", bundling.members_of(bundle))
    assert [memory.states.get("notes", f"note-{i}")["state"] for i in range(2)] == ["failed"] * 2
