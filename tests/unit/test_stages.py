"""What each stage does to a document, run on in-memory stores (``tests/memory.py``): the whole
way to the index, a redelivery, a superseded version, a context that fails half-way, a stage
run out of turn. The Celery tasks are shells over these functions; the same rules are tested
end to end, with Redis, OpenSearch and workers, in ``tests/integration`` and ``tests/faults``."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from tests.memory import Memory
from workers.chunks.splitting import Chunk
from workers.contextualizers import registry
from workers.contextualizers.base import Context, SourceDocument
from workers.documents.identity import content_version
from workers.pipeline import stages
from workers.pipeline.sending import CONTEXTUALIZE_TASK, INDEX_TASK
from workers.storage.catalog import CollectionConfig

TEXT = "\n\n".join(f"Section {i}. " + f"The otter number {i} eats sea urchins and sleeps afloat. " * 12
                   for i in range(6))


class Counting:
    """A contextualizer that counts what it is asked for, and can fail once, at one chunk (a
    provider refusing mid-document): what was answered before stays paid for."""

    name = "counting"
    asked: list[int] = []
    fail_at: int | None = None

    def contextualize(self, doc: SourceDocument, chunks: list[Chunk]) -> Iterator[tuple[Chunk, Context]]:
        for c in chunks:
            if c.n == Counting.fail_at:
                Counting.fail_at = None
                raise RuntimeError(f"the provider refused chunk {c.n}")
            Counting.asked.append(c.n)
            yield c, Context(f"about otters, part {c.n}")


registry.register("counting", lambda config: Counting())


@pytest.fixture
def memory() -> Memory:
    Counting.asked, Counting.fail_at = [], None
    return Memory()


CONFIG = CollectionConfig(name="otters", contextualizer="counting", chunk_tokens=60, generation="g1")


def _submit(memory: Memory, text: str = TEXT) -> str:
    version = content_version(text)
    memory.submit(CONFIG, "otters.md", text, version)
    return version


def _all_stages(memory: Memory, version: str) -> None:
    s = memory.stores
    stages.chunk(s, "otters", "otters.md", version)
    stages.contextualize(s, "otters", "otters.md", version)
    stages.index(s, "otters", "otters.md", version)


def test_a_document_goes_through_every_stage_to_the_index(memory):
    version = _submit(memory)
    s = memory.stores
    stages.chunk(s, "otters", "otters.md", version)
    chunks, language, _ = memory.checkpoints.chunks[("otters", "otters.md", version)]
    assert len(chunks) >= 4 and memory.states.get("otters", "otters.md")["state"] == "chunked"
    assert memory.gate.tasks() == [CONTEXTUALIZE_TASK]

    stages.contextualize(s, "otters", "otters.md", version)
    assert sorted(Counting.asked) == [c.n for c in chunks]
    assert memory.gate.tasks() == [CONTEXTUALIZE_TASK, INDEX_TASK]
    assert memory.states.get("otters", "otters.md")["state"] == "situated"

    assert stages.index(s, "otters", "otters.md", version) == CONFIG
    doc = memory.states.get("otters", "otters.md")
    assert doc["state"] == "indexed" and doc["indexed_version"] == version and doc["chunks"] == len(chunks)
    rows = memory.index.chunks("otters", "otters.md")
    assert [r["n"] for r in rows] == [c.n for c in chunks]
    assert rows[1]["context"] == "about otters, part 1" and len(rows[1]["vector"]) == 384
    # what the document needed on its way is released; its body kept for a reindex
    assert not memory.checkpoints.chunks and not memory.checkpoints.contexts and not memory.bodies.bodies
    assert memory.bodies.kept("otters", "otters.md")["version"] == version
    assert memory.metrics.counts == {"documents_indexed": 1, "chunks_indexed": len(chunks)}


def test_each_stage_delivered_again_does_nothing_the_second_time(memory):
    version = _submit(memory)
    s = memory.stores
    for stage in (stages.chunk, stages.contextualize, stages.index):
        stage(s, "otters", "otters.md", version)
        stage(s, "otters", "otters.md", version)
    assert memory.gate.tasks() == [CONTEXTUALIZE_TASK, INDEX_TASK]
    assert len(Counting.asked) == len(set(Counting.asked)), "a context was bought twice"
    assert memory.metrics.counts["documents_indexed"] == 1


def test_a_chunk_stage_whose_state_was_lost_sends_on_from_its_checkpoint(memory):
    """A crash after the chunks were checkpointed and the next message sent, before the state
    was recorded: delivered again, the stage takes its chunks from the checkpoint (the body may
    be gone by then) and sends the same message again, which the next stage's rules make a no-op."""
    version = _submit(memory)
    s = memory.stores
    stages.chunk(s, "otters", "otters.md", version)
    memory.states.docs[("otters", "otters.md")]["state"] = "queued"  # the state write was lost
    saved = memory.bodies.bodies.pop(("otters", "otters.md", version))
    stages.chunk(s, "otters", "otters.md", version)
    assert memory.gate.tasks() == [CONTEXTUALIZE_TASK, CONTEXTUALIZE_TASK]
    assert memory.states.get("otters", "otters.md")["state"] == "chunked"
    memory.bodies.bodies[("otters", "otters.md", version)] = saved
    stages.contextualize(s, "otters", "otters.md", version)
    stages.contextualize(s, "otters", "otters.md", version)
    assert len(Counting.asked) == len(memory.checkpoints.chunks[("otters", "otters.md", version)][0])


def test_a_context_that_fails_keeps_those_paid_and_the_retry_pays_only_the_rest(memory):
    version = _submit(memory)
    s = memory.stores
    stages.chunk(s, "otters", "otters.md", version)
    Counting.fail_at = 2
    with pytest.raises(RuntimeError, match="refused chunk 2"):
        stages.contextualize(s, "otters", "otters.md", version)
    assert sorted(memory.checkpoints.load_contexts("otters", "otters.md", version)) == [0, 1]
    assert INDEX_TASK not in memory.gate.tasks() and memory.states.get("otters", "otters.md")["state"] == "chunked"
    with pytest.raises(RuntimeError, match="half-situated"):  # an index message out of turn writes nothing
        memory.states.docs[("otters", "otters.md")]["state"] = "situated"
        stages.index(s, "otters", "otters.md", version)
    memory.states.docs[("otters", "otters.md")]["state"] = "chunked"
    assert memory.index.chunks("otters", "otters.md") == []

    stages.contextualize(s, "otters", "otters.md", version)  # the retry
    chunks = memory.checkpoints.chunks[("otters", "otters.md", version)][0]
    assert sorted(Counting.asked) == [c.n for c in chunks], "each chunk paid for once, the failed one included"
    assert memory.gate.tasks()[-1] == INDEX_TASK


def test_a_changed_document_replaces_its_old_version_and_the_old_stages_do_nothing(memory):
    old = _submit(memory)
    _all_stages(memory, old)
    new_text = TEXT.replace("sea urchins", "clams and crabs")
    new = _submit(memory, new_text)
    assert new != old
    s = memory.stores
    stages.chunk(s, "otters", "otters.md", new)
    asked = len(Counting.asked)
    # a late copy of the old version's messages: superseded, it changes nothing
    stages.chunk(s, "otters", "otters.md", old)
    stages.contextualize(s, "otters", "otters.md", old)
    assert stages.index(s, "otters", "otters.md", old) is None and len(Counting.asked) == asked
    stages.contextualize(s, "otters", "otters.md", new)
    stages.index(s, "otters", "otters.md", new)
    assert memory.index.versions("otters", "otters.md") == [new]
    assert all("clams" in r["text"] or "Section" in r["text"] for r in memory.index.chunks("otters", "otters.md"))
    assert memory.states.get("otters", "otters.md")["indexed_version"] == new


def test_a_document_with_no_text_fails_at_chunking_with_its_reason(memory):
    from workers.errors import BadDocument

    version = content_version("  ")
    memory.submit(CONFIG, "blank.md", "   \n\n  ", version)
    with pytest.raises(BadDocument, match="no chunk"):
        stages.chunk(memory.stores, "otters", "blank.md", version)
    assert memory.gate.sent == [] and not memory.checkpoints.chunks


def test_a_collection_dropped_while_its_document_was_embedded_gets_nothing_written(memory, monkeypatch):
    version = _submit(memory)
    s = memory.stores
    stages.chunk(s, "otters", "otters.md", version)
    stages.contextualize(s, "otters", "otters.md", version)
    real = stages.embedders.get

    class DroppedMeanwhile:  # the real embedder; the collection is dropped and made again while it works
        def embed_documents(self, texts):
            memory.catalog.configs["otters"] = CONFIG.model_copy(update={"generation": "g2"})
            return real(CONFIG.embedder, CONFIG.embed_model).embed_documents(texts)

    monkeypatch.setattr(stages.embedders, "get", lambda *_: DroppedMeanwhile())
    assert stages.index(s, "otters", "otters.md", version) is None
    assert memory.index.chunks("otters", "otters.md") == [] and memory.states.get("otters", "otters.md")["state"] == "situated"


@pytest.mark.parametrize(("state", "batch", "expected"), [
    ("queued", None, ("chunk", "")),
    ("chunked", None, ("contextualize", "")),
    ("chunked", "v2:msgbatch_1", ("poll_batch", "msgbatch_1")),
    ("chunked", "v1:msgbatch_0", ("contextualize", "")),  # another version's batch is never polled for this one
    ("situated", None, ("index", "")),
    ("indexed", None, ("gone", "")),
    ("failed", None, ("gone", "")),
    (None, None, ("gone", "")),
])
def test_the_reconciler_sends_a_stalled_document_on_from_its_state(state, batch, expected):
    from workers.pipeline import reconcile

    asked = []
    assert reconcile.decide(state, "v2", batch, lambda: asked.append(1) or False) == expected
    if expected[0] == "gone":
        assert not asked, "the queues were read for a document not in flight"
    assert reconcile.decide("queued", "v2", None, lambda: True) == ("waiting", "")


def test_a_texts_long_chunks_are_cut_where_a_paged_documents_read_their_tail(memory):
    """``embed_tail`` weighs the tokens past the embedder's 256 in a paged document's chunks (a
    table's last rows under the page's header); a text's chunks are cut there, whatever the
    collection's weight (stages.tail_weight: the FAQs lost with the tail, the PDFs gained)."""
    from workers.embedding import registry as embedders

    config = CONFIG.model_copy(update={"embed_tail": 1.0, "chunk_tokens": 600})
    version = content_version(TEXT)
    memory.submit(config, "otters.md", TEXT, version)
    _all_stages(memory, version)
    rows = memory.index.chunks("otters", "otters.md")
    long_row = max(rows, key=lambda r: len(r["text"]))
    cut, whole = (embedders.for_documents(config.embedder, "", w).embed_documents([long_row["text"]])[0] for w in (0.0, 1.0))
    assert not np.allclose(cut, whole, atol=1e-4), "the chunk fits the window: the test shows nothing"
    assert np.allclose(long_row["vector"], cut, atol=1e-5)

    paged = [Chunk(0, "a page", 0, 6, pages=(3, 3)), Chunk(1, "its next chunk", 7, 21, pages=(3, 4))]
    assert stages.tail_weight(config, paged) == 1.0
    assert stages.tail_weight(config, [Chunk(0, "a text", 0, 6)]) == 0.0
