"""``situate ingest --estimate`` cuts documents as the chunk stage will (``recipe.chunks_of``):
an extracted file by its layout, with its pages and language; Markdown text with its headings as
sections; code by its definitions; pre-made chunks as given. The estimate once had a recipe of
its own that did neither; the last test runs the stage itself beside it."""

from __future__ import annotations

import pytest

from producers.ingest import estimate
from tests.memory import Memory
from tests.unit.test_extraction import report_pdf
from workers.documents.validation import Original, RawDocument, valid
from workers.pipeline import stages
from workers.storage.catalog import CollectionConfig

CONFIG = CollectionConfig(name="estimate-chunks", contextualizer="keywords", chunk_tokens=120)
MARKDOWN = ("# Keys\n\n" + "Rotate the signing key every ninety days, and log who did it. " * 12 +
            "\n\n## Revoking\n\n" + "Revoke a key at once when it leaks, then rotate the others. " * 12)


def test_text_is_cut_with_its_markdown_sections_as_the_stage_cuts_it():
    prepared = estimate._prepared(CONFIG, RawDocument("keys.md", MARKDOWN))
    assert prepared is not None and len(prepared.chunks) >= 2
    assert prepared.chunks[0].section == "Keys" and prepared.chunks[-1].section == "Keys › Revoking"


def test_an_extracted_file_is_cut_by_its_pages_as_the_stage_cuts_it():
    prepared = estimate._prepared(CONFIG, RawDocument("otterworks-2024-10k.pdf", report_pdf()))
    assert prepared is not None and prepared.language == "text"
    assert all(c.pages for c in prepared.chunks) and prepared.chunks[-1].pages[0] == 6
    balance = next(c for c in prepared.chunks if "CONSOLIDATED BALANCE SHEETS" in c.text)
    assert balance.section.endswith("Consolidated Balance Sheets") and balance.pages == (5, 5)


CODE = "\n\n".join(f"class Store{i}:\n    def put(self, key, value):\n        self.items[key] = value  # store {i}\n"
                   f"\n    def get(self, key):\n        return self.items.get(key)\n" for i in range(12))


@pytest.mark.parametrize("raw", [
    RawDocument("otterworks-2024-10k.pdf", report_pdf()),
    RawDocument("keys.md", MARKDOWN),
    RawDocument("store.py", CODE, {"path": "store.py"}),
    RawDocument("given", "First part of the text. Second part of it.", chunks=[
        {"n": 0, "text": "First part of the text."}, {"n": 1, "text": "Second part of it."}]),
], ids=["pdf", "markdown", "code", "pre-made chunks"])
def test_the_estimate_plans_exactly_the_chunks_the_stage_makes(raw):
    """The stage run on in-memory stores from what ``submit`` stores, beside the estimate of the
    same raw document: the same chunks, texts, offsets, pages and sections."""
    doc = valid(raw, 10_000_000)
    memory = Memory()
    memory.catalog.configs[CONFIG.name] = CONFIG
    payload = {"text": None if isinstance(doc.body, Original) else doc.body, "metadata": raw.metadata,
               "chunks": None if doc.chunks is None else [c.model_dump() for c in doc.chunks]}
    if isinstance(doc.body, Original):
        payload["original"] = {"media_type": doc.body.media_type, "name": raw.doc_id, "bytes": len(doc.body.data)}
        memory.bodies.put_original(CONFIG.name, raw.doc_id, doc.version, doc.body.data)
    memory.bodies.put(CONFIG.name, raw.doc_id, doc.version, payload)
    memory.states.submit(CONFIG.name, raw.doc_id, doc.version)
    stages.chunk(memory.stores, CONFIG.name, raw.doc_id, doc.version)
    made, language, _ = memory.checkpoints.load_chunks(CONFIG.name, raw.doc_id, doc.version)

    planned = estimate._prepared(CONFIG, raw)
    assert planned is not None and len(made) >= 2
    assert planned.chunks == made and planned.language == language
