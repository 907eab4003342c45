"""What an extractor returns: the document's text, where each page starts in it, its headings,
and what the file says of itself. JSON in and out (it crosses a process boundary, and is kept in
the body store): never pickle.

The text is Markdown where the format has structure (``#`` headings, ``|`` tables, ``-`` lists):
the structural chunker splits on it. ``pages[i]`` is the offset in ``text`` where page ``i + 1``
starts (empty for formats without pages); ``headings`` are ``(offset, level, title)`` in order,
from the file's outline where it has one, else found in the text.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Extracted:
    text: str
    media_type: str
    pages: list[int] = field(default_factory=list)
    headings: list[tuple[int, int, str]] = field(default_factory=list)
    title: str = ""
    # What the file says of itself (PDF info, Office core properties, HTML meta): author, dates.
    properties: dict[str, str] = field(default_factory=dict)
    # Who, what, when, from the first pages (``profile``): organisation, form, period, date.
    profile: dict[str, str] = field(default_factory=dict)
    pages_total: int = 0
    pages_without_text: int = 0
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Extracted:
        d = dict(d)
        d["headings"] = [tuple(h) for h in d.get("headings") or []]
        return cls(**d)

    def page_of(self, offset: int) -> int | None:
        """The 1-based page holding ``offset``, or None without pages."""
        if not self.pages:
            return None
        lo, hi = 0, len(self.pages) - 1
        while lo < hi:  # the last page starting at or before offset
            mid = (lo + hi + 1) // 2
            if self.pages[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1
