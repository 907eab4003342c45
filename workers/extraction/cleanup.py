"""Running headers and footers: the lines a paged document repeats at the top or the bottom of
its pages — a title, a "Table of Contents" link, a page number. Kept, they are in every chunk's
text (BM25 terms that say nothing) and tie chunks of unrelated pages together.

A line is running when, digits aside (``Page 12 of 40`` = ``Page 3 of 40``), it appears among
the first or last ``EDGE`` lines of at least a fifth of the pages (three at least); page numbers
alone (``12``, ``F-4``, ``- 7 -``, ``Page 3``) at a page's edge go too. Only the edges are
touched: the same words in the middle of a page stay.
"""

from __future__ import annotations

import re
from collections import Counter

EDGE = 3
SHARE = 0.2
_DIGITS = re.compile(r"\d+")
_PAGE_NUMBER = re.compile(r"^(page\s*)?[-–—(\s]*([a-z]{0,2}-?#|[ivxlc]{1,6})[-–—)\s]*(of\s*#)?$")


def _key(line: str) -> str:
    return _DIGITS.sub("#", " ".join(line.lower().split()))


def _edges(lines: list[str]) -> list[int]:
    """Indexes of the first and last EDGE non-empty lines."""
    filled = [i for i, line in enumerate(lines) if line.strip()]
    return sorted(set(filled[:EDGE] + filled[-EDGE:]))


def remove_running_lines(pages: list[str]) -> tuple[list[str], int]:
    """The pages without their running headers and footers; how many lines went."""
    split = [page.splitlines() for page in pages]
    counts: Counter[str] = Counter()
    for lines in split:
        counts.update({_key(lines[i]) for i in _edges(lines)})
    threshold = max(3, SHARE * len(pages))
    running = {k for k, n in counts.items() if n >= threshold and len(pages) >= 4}
    removed = 0
    out = []
    for lines in split:
        drop = {i for i in _edges(lines) if _key(lines[i]) in running or _PAGE_NUMBER.match(_key(lines[i]))}
        removed += len(drop)
        out.append("\n".join(line for i, line in enumerate(lines) if i not in drop))
    return out, removed
