"""PDF, page by page, from its text layer: pdfium (``pypdfium2``, Apache-2.0/BSD; PyMuPDF is
AGPL), many times faster than pdfplumber and pypdf for the same pages found (``ops/bench
extractors``; docs/benchmarks.md).

Each page's text is one block (pages never merge: a citation says which page); pdfium ends a
line with CR LF and separates some generators' words with a lone LF, so lone LFs become spaces.
Running headers and footers go (``cleanup``). A word drawn twice over itself (a generator's fake
bold: "NNEEBBRRAASSKKAA", "Ssuurrvveeyy") is read once. Sections come from the file's outline when it has
one, else from the text (``headings``). A page with no text is counted (a scan: OCR is not done);
a file whose pages all lack text fails with that reason.
"""

from __future__ import annotations

import re
from typing import Any

from workers.errors import ExtractionError
from workers.extraction import cleanup, cover, headings
from workers.extraction import pages as titles
from workers.extraction.document import Extracted
from workers.extraction.limits import Budget, Limits

MEDIA_TYPE = "application/pdf"
EMPTY_PAGE_CHARS = 10  # fewer non-space characters than this: a page without text


def _once(word: str) -> str:
    """``word`` read once if every letter of it was drawn twice (letters only, four or more:
    numbers like "1100" are left alone, and no common word is made of doubled letters)."""
    if len(word) < 4 or len(word) % 2 or not word.isalpha():
        return word
    pairs = zip(word[::2], word[1::2])
    return word[::2] if all(a.lower() == b.lower() for a, b in pairs) else word


def _lines(raw: str) -> str:
    text = raw.replace("\r\n", "\x00").replace("\r", "\x00").replace("\n", " ").replace("\x00", "\n")
    text = text.replace("\xa0", " ").replace("\x0c", "\n").replace("\ufffe", "").replace("\x02", "")
    return "\n".join(" ".join(_once(w) for w in line.split()) for line in text.split("\n"))


def extract(data: bytes, limits: Limits, name: str = "") -> Extracted:
    import pypdfium2 as pdfium

    budget = Budget(limits)
    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as e:
        reason = str(e)
        if "password" in reason.lower():
            raise ExtractionError("encrypted PDF: it needs a password to be read") from None
        detail = re.search(r"PDFium: ([^)]*)", reason)
        raise ExtractionError(f"not a readable PDF ({detail.group(1) if detail else reason})") from None
    try:
        total = len(pdf)
        if total > limits.max_pages:
            raise ExtractionError(f"{total:,} pages, over the limit of {limits.max_pages:,} (SITUATE_MAX_PAGES)")
        if total == 0:
            raise ExtractionError("a PDF with no pages")
        budget.expect_pages(total)
        raw_pages = []
        for i in range(total):
            page = pdf[i]
            textpage = page.get_textpage()
            text = _lines(textpage.get_text_range())
            textpage.close()
            page.close()
            budget.spend(text)
            budget.page()
            raw_pages.append(text)
        properties = {k.lower(): str(v) for k, v in pdf.get_metadata_dict().items() if v}
        outline = _outline(pdf)
    finally:
        pdf.close()
    empty = sum(1 for p in raw_pages if len("".join(p.split())) < EMPTY_PAGE_CHARS)
    if empty == total:
        raise ExtractionError(f"no text layer: none of its {total:,} pages has text (a scan? OCR is not enabled)")
    pages, _ = cleanup.remove_running_lines(raw_pages)
    starts, offset = [], 0
    for p in pages:
        starts.append(offset)
        offset += len(p) + 2
    text = "\n\n".join(pages)
    first = "\n".join(raw_pages[:3])
    filing = cover.is_filing(first)
    found = _outline_headings(outline, pages, starts) if outline else headings.find(pages, starts, filing)
    return Extracted(text=text, media_type=MEDIA_TYPE, pages=starts, headings=found,
                     title=cover.meaningful_title(properties.get("title", ""), name) or titles.title(pages[0]),
                     properties={k: properties[k] for k in ("title", "author", "subject", "creationdate", "moddate")
                                 if k in properties},
                     profile=cover.of(first, properties, name), pages_total=total, pages_without_text=empty)


def _outline(pdf: Any) -> list[tuple[int, str, int]]:
    """(level, title, page index) of each bookmark; [] without an outline or on a broken one."""
    out = []
    try:
        for bookmark in pdf.get_toc(max_depth=6):
            dest = bookmark.get_dest()
            index = dest.get_index() if dest is not None else None
            title = " ".join((bookmark.get_title() or "").split())
            if index is not None and title:
                out.append((bookmark.level, title[:200], index))
    except Exception:  # noqa: BLE001 - a malformed outline is no reason to lose the text
        return []
    return out


def _outline_headings(outline: list[tuple[int, str, int]], pages: list[str], starts: list[int]) -> list[tuple[int, int, str]]:
    """Bookmarks as headings: at the title's place in its page when it is there, else the page's start."""
    out = []
    for level, title, index in outline:
        if not 0 <= index < len(pages):
            continue
        at = pages[index].lower().find(title[:40].lower())
        out.append((starts[index] + max(0, at), level + 1, title))
    out.sort(key=lambda h: h[0])
    return out
