"""What an offline context says of an extracted document (a PDF, an Office file, a web page):
whose it is, what and when, and where in it the chunk sits. A chunk cut from page 60 of a
filing has lost exactly that — "revenue grew 3%": whose? which year? which statement? which
column?

- **The document line** (``document_line``): what its cover says (``extraction.cover``: a
  filing's issuer, form and period; a press release's issuer and date; any other document's
  title and date), the fiscal year as filings and their readers write it (``FY2019``, for a
  filing's period only), and the words of the file's name (users name their files:
  ``JOHNSON_JOHNSON_2022Q4_EARNINGS.pdf``) when they add anything.
- **Where the chunk is** (``where``): its section path, then its page's own title when the path
  does not already say it (``Consolidated Statements of Cash Flows``, a slide's title), then the
  header of the table it was cut from when the chunk does not hold it (``Years ended December
  31, 2018 2017 2016``): a chunk of figures from the middle of a statement then says which
  statement and which years its columns are (``extraction.pages``).

Both lines go into the BM25 context. **What goes into the chunk's vector** is the collection's
``embed_header`` (``for_vector``), decided by what each line tells apart:

- ``cover`` (the default): the chunk's place always — it tells the pages of one document apart
  (which statement, which section, which table's columns). The document line only when the
  document's cover was read as a cover: a filing's or a release's, whose issuer, form and period
  are the one thing that tells its chunks from the same page of another company's or another
  year's filing of the same form — and what a question about it names. Any other document (a
  paper, a manual, a report) is alone of its kind: its own words already say which document it
  is, and a title guessed from its first page, repeated before every chunk, only pulls all its
  pages toward one point in the embedding space. There the title stays in BM25, where a name
  counts as the words it is.
- ``all``: both lines for every document (collections made before ``embed_header`` existed).
- ``none``: the chunk alone.

``ops/bench corpora`` measures the three on the public corpora; docs/decisions.md has what was
tried before this rule.
"""

from __future__ import annotations

from workers.chunks.splitting import Chunk
from workers.contextualizers.base import SourceDocument
from workers.extraction import cover
from workers.extraction.pages import PageIndex

EMBED_HEADERS = ("cover", "all", "none")


class Header:
    """The header lines of one document's chunks: the document line and its page index, read once."""

    def __init__(self, doc: SourceDocument):
        self.structure = doc.structure or {}
        starts = list(self.structure.get("pages") or [])
        self.pages = PageIndex.of(doc.text, starts) if starts else None
        profile = document_profile(doc, self.pages.titles[0] if self.pages and self.pages.titles else "")
        self.line = document_line(doc, profile)
        # A filing's or a release's cover, read as one (``extraction.cover``): issuer or form found.
        self.from_cover = bool(profile.get("organisation") or profile.get("form"))

    def where(self, chunk: Chunk) -> str:
        """``Item 8 › Consolidated Statements of Cash Flows › Years ended December 31, 2018 2017``."""
        where = [chunk.section or ""]
        if self.pages is not None and chunk.start is not None:
            title = self.pages.title_at(chunk.start)
            if title and title.lower() not in where[0].lower():
                where.append(title)
            table = self.pages.table_header_at(chunk.start, chunk.end or chunk.start)
            if table and table not in chunk.text:
                where.append(table)
        return " › ".join(w for w in where if w)

    def of(self, chunk: Chunk) -> str:
        """Both lines: the header of the chunk's BM25 context."""
        return "\n".join(p for p in (self.line, self.where(chunk)) if p)

    def for_vector(self, chunk: Chunk, embed_header: str) -> str:
        """What of the header goes into the chunk's vector (the module's docstring says why)."""
        if embed_header == "none":
            return ""
        line = self.line if embed_header == "all" or self.from_cover else ""
        return "\n".join(p for p in (line, self.where(chunk)) if p)


def document_profile(doc: SourceDocument, first_page_title: str = "") -> dict[str, str]:
    """What the document's first pages say it is (``cover.of``), a title found elsewhere when they
    name no issuer and no title; {} for a document that was not extracted."""
    if not doc.structure:
        return {}
    structure = doc.structure
    name = str(doc.metadata.get("path") or doc.doc_id)
    starts = structure.get("pages") or []
    first_pages = doc.text[:starts[3]] if len(starts) > 3 else doc.text[:20_000]
    profile = cover.of(first_pages, structure.get("properties") or {}, name)
    if "organisation" not in profile and "title" not in profile:
        title = str(structure.get("title") or first_page_title or first_heading(structure) or "")
        if title:
            profile["title"] = title
    return profile


def document_line(doc: SourceDocument, profile: dict[str, str]) -> str:
    """``ACTIVISION BLIZZARD, INC · Form 10-K · fiscal year ended December 31, 2019 · FY2019 ·
    ACTIVISIONBLIZZARD 2019 10K``; ``Retrieval-Augmented Generation for Large Language Models: A
    Survey · 2312 10997 v5``; "" for a document that was not extracted."""
    if not doc.structure:
        return ""
    name = str(doc.metadata.get("path") or doc.doc_id)
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
