"""The local embedders: one ONNX encoder recipe for MiniLM and bge-small, whose files ship in a
wheel and in a Maven Central jar (``situate models fetch``, run by ``ops/setup``)."""

from __future__ import annotations

import numpy as np
import pytest


def test_minilm_gives_the_vectors_its_collections_were_indexed_with():
    """The encoder was made one for both models: a collection made with MiniLM must get the same
    vectors as before (these are the previous code's, to six places)."""
    from workers.embedding import local

    vector = local.minilm().embed_documents(["Sea otters hold hands while they sleep."])[0]
    assert vector[:5] == pytest.approx([0.00593001, 0.06579021, 0.08543143, 0.04968154, -0.04118029], abs=1e-6)


@pytest.mark.parametrize("name, files", [("bge", "bge-small-en-v1.5-q"), ("e5", "e5-small-v2-q")])
def test_a_packaged_model_reads_its_files_from_the_pinned_jar_and_finds_what_a_query_asks(name, files):
    from workers.embedding import local, packaged

    assert packaged.installed(files), "ops/setup runs `situate models fetch`"
    encoder = getattr(local, name)()
    passages = encoder.embed_documents(["Sea otters hold hands while they sleep.",
                                        "The central bank raised interest rates by a quarter point.",
                                        "Purchases of property, plant and equipment were $1.6 billion."])
    assert passages.shape == (3, 384) and np.allclose(np.linalg.norm(passages, axis=1), 1, atol=1e-5)
    for query, best in (("how do otters sleep", 0), ("capital expenditure", 2), ("monetary policy", 1)):
        assert int(np.argmax(passages @ encoder.embed_query(query))) == best, query
    # e5 was trained with "query: " and "passage: " before each; bge's instruction is left out
    # (it scored lower here): the same words give two vectors, or one.
    same = encoder.embed_query("otters") @ encoder.embed_documents(["otters"])[0]
    assert (same > 0.9999) == (name == "bge"), same


@pytest.mark.parametrize("name", ["e5", "bge"])
def test_a_chunks_vector_does_not_depend_on_the_chunks_embedded_beside_it(name):
    """The int8 encoders scale their activations per call (MiniLM's file computes in floats): in
    batches, a chunk's vector moved with its document's other chunks (cosine ~0.996), so an edit
    elsewhere in a document changed it. One text per call (the default) gives every chunk the
    vector it would get alone."""
    from workers.embedding import local

    encoder = getattr(local, name)()
    chunk = "Purchases of property, plant and equipment were $1.6 billion in fiscal 2023."
    neighbours = ["Consolidated Statements of Cash Flows (in millions) " * 12, "Item 8.", "Note 4: Leases " * 30]
    alone = encoder.embed_documents([chunk])[0]
    among = encoder.embed_documents([neighbours[0], chunk, *neighbours[1:]])[1]
    assert np.array_equal(alone, among)


def test_a_long_chunks_tail_counts_at_its_collections_weight():
    """``embed_tail``: 0 cuts a chunk at the model's 256 tokens (what collections made before it
    keep: their vectors do not move), a weight above 0 lets the rows past it count, less than the
    head that carries the header; a chunk that fits is the same vector at any weight."""
    from workers.embedding import local, registry
    from workers.storage.catalog import CollectionConfig

    head = "Acme Corp · Form 10-K · FY2023\nConsolidated Balance Sheets\n" + "Total current assets 4,211 3,907 " * 30
    tail = " Goodwill 1,383 1,384 Operating lease assets 2,746 2,654" * 6
    short = "Purchases of property, plant and equipment were $1.6 billion in fiscal 2023."
    old = CollectionConfig.model_validate({"name": "old", "embedder": "local-e5"})  # stored before the field
    assert old.embed_tail == 0.0
    cut = registry.for_documents(old.embedder, old.embed_model, old.embed_tail)
    weighed = registry.for_documents("local-e5", "", 0.25)
    even = registry.for_documents("local-e5", "", 1.0)
    assert isinstance(weighed, local.LocalEncoder) and weighed.session is cut.session  # one model in memory

    head_alone, with_tail = cut.embed_documents([head, head + tail])
    assert np.array_equal(head_alone, with_tail)  # cut: what lies past 256 tokens is not read
    weighed_vector, even_vector = weighed.embed_documents([head + tail])[0], even.embed_documents([head + tail])[0]
    moved = [1 - float(head_alone @ v) for v in (weighed_vector, even_vector)]
    assert 0 < moved[0] < moved[1]  # the tail counts, less than when it weighs as the head does
    assert np.allclose(cut.embed_documents([short])[0], weighed.embed_documents([short])[0], atol=1e-6)


def test_a_missing_model_says_how_to_get_it(tmp_path, monkeypatch):
    from tests.support import reread_environment
    from workers.embedding import packaged
    from workers.errors import ConfigurationError

    monkeypatch.setenv("SITUATE_MODEL_FILES", str(tmp_path))
    reread_environment()
    try:
        with pytest.raises(ConfigurationError, match="situate models fetch"):
            packaged.files("bge-small-en-v1.5-q")
    finally:
        monkeypatch.undo()
        reread_environment()


def test_a_jar_that_is_not_the_pinned_one_is_refused(tmp_path, monkeypatch):
    """``fetch`` checks the jar's SHA-256 before it unpacks anything from it."""
    import threading
    from functools import partial
    from http.server import HTTPServer, SimpleHTTPRequestHandler

    from tests.support import reread_environment
    from workers.embedding import packaged
    from workers.errors import ConfigurationError

    jar = packaged.JARS["bge-small-en-v1.5-q"]
    served = tmp_path / "repo" / jar.url("x").split("/", 1)[1]
    served.parent.mkdir(parents=True)
    served.write_bytes(b"PK\x05\x06" + b"\x00" * 18)  # an empty zip, not the model
    server = HTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(tmp_path / "repo")))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("SITUATE_MODEL_FILES", str(tmp_path / "models"))
    reread_environment()
    try:
        with pytest.raises(ConfigurationError, match="not the pinned"):
            packaged.fetch("bge-small-en-v1.5-q", f"http://127.0.0.1:{server.server_port}")
        assert not packaged.installed("bge-small-en-v1.5-q")
    finally:
        server.shutdown()
        monkeypatch.undo()
        reread_environment()
