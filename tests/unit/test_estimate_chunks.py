"""``situate ingest --estimate`` cuts documents as the chunk stage will (``recipe.chunks_of``):
an extracted file by its layout, with its pages and language; Markdown text with its headings as
sections. The estimate once had a recipe of its own that did neither."""

from __future__ import annotations

from producers.ingest import estimate
from tests.unit.test_extraction import report_pdf
from workers.documents.validation import RawDocument
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
