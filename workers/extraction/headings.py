"""Section titles in text that carries no markup (a PDF's text layer): what a reader of a report
or a filing uses to know where they are — "PART II", "Item 8. Financial Statements",
"CONSOLIDATED STATEMENTS OF CASH FLOWS", "Note 7 — Debt".

Three kinds of line, by level: a *part* (1), a numbered *item* (2, the sections every SEC filing
has, and many reports copy), and a *title* (3): a short line in capitals near the top of a page,
or a numbered note. Parts and items are a filing's: in a document that is not one (a manual's
"Item 3: the filter", a report's "Part I of the survey") they are ordinary lines. A table of
contents lists the same lines with page numbers: a page with four items or more, or a line
ending in a page number, is not taken for a heading. Used only when the file has no outline
(bookmarks) of its own.
"""

from __future__ import annotations

import re

_PART = re.compile(r"^\s*part\s+(iv|v|i{1,3})\b[.:\s—–-]*(.{0,100})$", re.I)
_ITEM = re.compile(r"^\s*item\s+(\d{1,2}[a-c]?)\s*[.:—–-]\s*(.{2,150})$", re.I)
_NOTE = re.compile(r"^\s*note\s+\d{1,2}\s*[.:—–-]\s*(.{3,100})$", re.I)
_ENDS_IN_PAGE = re.compile(r"(\.{3,}|\s)\s*\d{1,3}\s*$")
TOP_LINES = 6


def is_title(line: str) -> bool:
    """A short line in capitals, of words: ``CONSOLIDATED BALANCE SHEETS``, not ``$ 1,234 5,678``."""
    stripped = line.strip()
    letters = [c for c in stripped if c.isalpha()]
    words = stripped.split()
    if not 2 <= len(words) <= 12 or not 6 <= len(stripped) <= 100 or len(letters) < 0.6 * len(stripped.replace(" ", "")):
        return False
    return sum(c.isupper() for c in letters) >= 0.9 * len(letters)


def find(pages: list[str], starts: list[int], filing: bool = True) -> list[tuple[int, int, str]]:
    """(offset, level, title) of each heading, offsets into the text the pages were joined into
    (page ``i`` starts at ``starts[i]``); parts and items only in a ``filing``."""
    out: list[tuple[int, int, str]] = []
    for page, start in zip(pages, starts):
        lines = page.splitlines(keepends=True)
        items = sum(1 for line in lines if _ITEM.match(line.strip()))
        if items >= 4:  # a table of contents
            continue
        offset, filled = start, 0
        for line in lines:
            text = " ".join(line.split())
            if text:
                filled += 1
                heading = _heading(text, filled, filing)
                if heading:
                    out.append((offset, *heading))
            offset += len(line)
    return out


def _heading(text: str, nth_line: int, filing: bool = True) -> tuple[int, str] | None:
    if _ENDS_IN_PAGE.search(text) and (_ITEM.match(text) or _PART.match(text) or _NOTE.match(text)):
        return None  # "Item 7. Management's Discussion ... 35", "Note 24 - Quarterly Data 113": contents lines
    if filing and _PART.match(text):
        return 1, text[:100]
    if filing and _ITEM.match(text):
        return 2, text[:150]
    if _NOTE.match(text):
        return 3, text[:100]
    if nth_line <= TOP_LINES and is_title(text):
        return 3, title_case(text) if text.isupper() else text
    return None


_SMALL = {"a", "an", "and", "as", "at", "by", "for", "in", "of", "on", "or", "the", "to", "with"}


def title_case(text: str) -> str:
    """``CONSOLIDATED STATEMENTS OF CASH FLOWS`` -> ``Consolidated Statements of Cash Flows``."""
    words = text.lower().split()
    return " ".join(w if i and w in _SMALL else w[:1].upper() + w[1:] for i, w in enumerate(words))


def path_at(headings: list[tuple[int, int, str]], offset: int) -> list[str]:
    """The section path in force at ``offset``: the last heading of each level before it, each
    level's title cleared by a heading of a higher level."""
    path: dict[int, str] = {}
    for at, level, title in headings:
        if at > offset:
            break
        path = {lv: t for lv, t in path.items() if lv < level}
        path[level] = title
    return [path[lv] for lv in sorted(path)]
