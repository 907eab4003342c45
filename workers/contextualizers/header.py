"""What an offline context says of an extracted document (a PDF, an Office file, a web page):
whose it is, what and when, and where in it the chunk sits. A chunk cut from page 60 of a
filing has lost exactly that — "revenue grew 3%": whose? which year? which statement? which
column?

- **The document line** (``document_line``): what its cover says (``extraction.cover``: a
  filing's issuer, form and period; a press release's issuer and date; any other document's
  title and date), the fiscal year as filings and their readers write it (``FY2019``, for a
  filing's period only), and the words of the file's name (users name their files:
  ``JOHNSON_JOHNSON_2022Q4_EARNINGS.pdf``) when they add anything.
- **Where the chunk is**: its section path, then its page's own title when the path does not
  already say it (``Consolidated Statements of Cash Flows``, a slide's title), then the header
  of the table it was cut from when the chunk does not hold it (``Years ended December 31, 2018
  2017 2016``): a chunk of figures from the middle of a statement then says which statement
  and which years its columns are (``extraction.pages``).

Measured on the FinanceBench filings (README): in the BM25 context and embedded with the chunk,
page@10 of hybrid search rose from 34.4 to 43.8 with the document line and section alone.
"""

from __future__ import annotations

from workers.chunks.splitting import Chunk
from workers.contextualizers.base import SourceDocument
from workers.extraction import cover
from workers.extraction.pages import PageIndex


class Header:
    """The header lines of one document's chunks: the document line and its page index, read once."""

    def __init__(self, doc: SourceDocument):
        self.structure = doc.structure or {}
        starts = list(self.structure.get("pages") or [])
        self.pages = PageIndex.of(doc.text, starts) if starts else None
        self.line = document_line(doc, self.pages.titles[0] if self.pages and self.pages.titles else "")

    def of(self, chunk: Chunk) -> str:
        where = [chunk.section or ""]
        if self.pages is not None and chunk.start is not None:
            title = self.pages.title_at(chunk.start)
            if title and title.lower() not in where[0].lower():
                where.append(title)
            table = self.pages.table_header_at(chunk.start, chunk.end or chunk.start)
            if table and table not in chunk.text:
                where.append(table)
        return "\n".join(p for p in (self.line, " › ".join(w for w in where if w)) if p)


def document_line(doc: SourceDocument, first_page_title: str = "") -> str:
    """``ACTIVISION BLIZZARD, INC · Form 10-K · fiscal year ended December 31, 2019 · FY2019 ·
    ACTIVISIONBLIZZARD 2019 10K``; ``Retrieval-Augmented Generation for Large Language Models: A
    Survey · 2312 10997 v5``; "" for a document that was not extracted."""
    if not doc.structure:
        return ""
    structure = doc.structure
    name = str(doc.metadata.get("path") or doc.doc_id)
    starts = structure.get("pages") or []
    first_pages = doc.text[:starts[3]] if len(starts) > 3 else doc.text[:20_000]
    profile = cover.of(first_pages, structure.get("properties") or {}, name)
    if "organisation" not in profile and "title" not in profile:
        title = str(structure.get("title") or first_page_title or first_heading(structure) or "")
        if title:
            profile["title"] = title
    parts = [cover.describe(profile, name)]
    year = profile.get("year")
    if year and "period" in profile:
        parts.append(f"FY{year}" if any(word in profile["period"] for word in ("fiscal", "year")) else year)
    words = " ".join(cover.file_words(name))
    if words and words.lower() not in parts[0].lower():
        parts.append(words)
    return " · ".join(p for p in parts if p)


def first_heading(structure: dict[str, object]) -> str:
    """The document's first heading, as its title when it has no other (a web page, a Word file)."""
    headings = structure.get("headings") or []
    return str(headings[0][2]) if isinstance(headings, list) and headings else ""
