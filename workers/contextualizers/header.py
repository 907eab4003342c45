"""What an offline context says of an extracted document (a PDF, an Office file, a web page):
whose it is, what and when, and where in it the chunk sits. A chunk cut from page 60 of a
filing has lost exactly that — "revenue grew 3%": whose? which year? which statement?

The document line is the cover's profile (``extraction.cover``: the issuer, the form, the
period), the fiscal year as filings and their readers write it (``FY2019``), and the words of
the file's name (users name their files: ``JOHNSON_JOHNSON_2022Q4_EARNINGS.pdf``); then the
chunk's section path. Measured on the FinanceBench filings (README): in the BM25 context and
embedded with the chunk, page@10 of hybrid search rose from 34.4 to 43.8 with the document line
and section alone.
"""

from __future__ import annotations

from workers.chunking import Chunk
from workers.contextualizers.base import SourceDocument
from workers.extraction import cover


def document_line(doc: SourceDocument) -> str:
    """``ACTIVISION BLIZZARD, INC · Form 10-K · fiscal year ended December 31, 2019 · FY2019 ·
    ACTIVISIONBLIZZARD 2019 10K``; "" for a document that was not extracted."""
    if not doc.structure:
        return ""
    profile = doc.structure.get("profile") or {}
    name = str(doc.metadata.get("path") or doc.doc_id)
    parts = [cover.describe(profile, name)]
    title = doc.structure.get("title") or ""
    if title and title.lower() not in parts[0].lower():
        parts.append(title)
    year = profile.get("year")
    if year:
        fiscal = any(word in profile.get("period", "") for word in ("fiscal", "year"))
        parts.append(f"FY{year}" if fiscal else year)
    words = " ".join(cover.file_words(name))
    if words and words.lower() not in parts[0].lower():
        parts.append(words)
    return " · ".join(p for p in parts if p)


def of(doc: SourceDocument, chunk: Chunk) -> str:
    """The document line, then the chunk's section path."""
    return "\n".join(p for p in (document_line(doc), chunk.section or "") if p)
