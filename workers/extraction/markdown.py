"""Building the Markdown-ish text every structured extractor returns, with its headings' offsets
recorded as it is written: one place that knows how a heading, a table and a page break look."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workers.extraction.document import Extracted


def cell(value: object) -> str:
    """A table cell: one line, pipes escaped."""
    text = "" if value is None else str(value)
    return " ".join(text.split()).replace("|", "\\|")


def table(rows: Sequence[Sequence[object]]) -> str:
    """Rows as a Markdown table, the first row its header; ragged rows padded."""
    cells = [[cell(c) for c in row] for row in rows if any(str(c or "").strip() for c in row)]
    if not cells:
        return ""
    width = max(len(r) for r in cells)
    cells = [r + [""] * (width - len(r)) for r in cells]
    lines = ["| " + " | ".join(cells[0]) + " |", "|" + "---|" * width]
    lines += ["| " + " | ".join(r) + " |" for r in cells[1:]]
    return "\n".join(lines)


class Writer:
    """Appends blocks (separated by a blank line), headings (``#`` by level) and page breaks."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.size = 0
        self.headings: list[tuple[int, int, str]] = []
        self.pages: list[int] = []

    def _add(self, text: str) -> int:
        if self.parts:
            self.parts.append("\n\n")
            self.size += 2
        at = self.size
        self.parts.append(text)
        self.size += len(text)
        return at

    def block(self, text: str) -> None:
        text = text.strip("\n")
        if text.strip():
            self._add(text)

    def heading(self, level: int, title: str) -> None:
        title = " ".join(title.split())
        if title:
            level = max(1, min(level, 6))
            at = self._add("#" * level + " " + title)
            self.headings.append((at, level, title))

    def page(self) -> None:
        """The next block starts a new page."""
        self.pages.append(self.size + (2 if self.parts else 0))

    def done(self, media_type: str, **fields: Any) -> Extracted:
        return Extracted(text="".join(self.parts), media_type=media_type, pages=self.pages,
                         headings=self.headings, **fields)
