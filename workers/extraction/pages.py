"""What a page of a paged document says of itself, read from its text alone: its title, and the
header of each table on it. A chunk cut from the middle of page 60 has lost both — that the page
is the "Consolidated Statements of Cash Flows", and that its three columns of figures are 2018,
2017 and 2016 — and a question names them ("cash flow statement", "FY2018").

- **The page's title**: its first lines while they read as a title — short, mostly words, no run
  of figures, starting as a title starts and not ending as a sentence does — as a reader of a
  statement, a slide or a manual's page sees it first (``The Boeing Company and Subsidiaries —
  Consolidated Statements of Operations``). A page that opens mid-paragraph has none.
- **Tables in the text** (a PDF's text layer has no table markup): runs of lines that end in two
  or more figures, three such rows at least; the table's header is the line above its first row
  that names two or more columns by year, quarter or month (``Years ended December 31, 2018 2017
  2016``), with the label line above that when it ends without figures.

Pure functions of the text and its page offsets: a document indexed before they existed gets
them when it is rebuilt from its kept body (``situate reindex``).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass

TITLE_LINES = 3
TITLE_WORDS = 12
TITLE_CHARS = 100
MIN_ROWS = 3

_FIGURE = re.compile(r"^[($€£¥-]*\$?\s?[-–—]?\(?\d(?:[\d,.]*\d)?\)?%?$|^[-–—]+$|^n/?m$", re.I)  # not "15," of a date
_YEAR = re.compile(r"\b(?:19|20)\d\d\b")
_COLUMN = re.compile(r"\b(?:(?:19|20)\d\d|Q[1-4]|[1-4]Q|FY\d{2,4}|(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*)\b")
_PARENTHETICAL = re.compile(r"^\(.*\)$")


@dataclass(frozen=True)
class Table:
    start: int   # where its first row of figures begins, in the document's text
    end: int     # where its last row ends
    header: str  # the line (or two) naming its columns


def figures_at_end(line: str) -> int:
    """How many figures a line ends with (``Net sales $ 3,226.8 $ 2,731.6`` -> 2)."""
    count = 0
    for token in reversed(line.split()):
        if _FIGURE.match(token):
            count += 1
        elif token != "$":
            break
    return count


def _is_row(line: str) -> bool:
    """A row of figures: two or more at its end, and not all of them years (``2024 2023 2022``
    ends a header, not a row)."""
    count = figures_at_end(line)
    return count >= 2 and not all(_YEAR.fullmatch(t) for t in line.split()[-count:])


def _is_title_line(line: str) -> bool:
    words = line.split()
    letters = sum(c.isalpha() for c in line)
    if not words or len(words) > TITLE_WORDS or len(line) > TITLE_CHARS:
        return False
    if letters < 0.6 * len(line.replace(" ", "")) or figures_at_end(line) >= 2 or len(_YEAR.findall(line)) >= 2:
        return False
    # A title starts as one (a capital, a number, a quote) and ends without a sentence's stop.
    return (line[0].isupper() or line[0].isdigit() or line[0] in "\"'“‘") and not line.endswith((",", ";", "."))


def title(page: str) -> str:
    """The page's title: its first title-like lines, a parenthetical note (``(Dollars in
    millions)``) passed over; "" for a page that opens with running text."""
    found: list[str] = []
    for raw in page.splitlines():
        line = " ".join(raw.split())
        if not line:
            continue
        if _PARENTHETICAL.match(line) and found:
            continue
        if not _is_title_line(line) or len(found) == TITLE_LINES:
            break
        found.append(line)
    return " — ".join(found)


def tables(page: str, offset: int = 0) -> list[Table]:
    """The tables of one page (``offset``: where the page starts in the document)."""
    lines: list[tuple[int, str]] = []
    at = offset
    for raw in page.split("\n"):
        lines.append((at, " ".join(raw.split())))
        at += len(raw) + 1
    out: list[Table] = []
    i = 0
    while i < len(lines):
        if not _is_row(lines[i][1]):
            i += 1
            continue
        first = i
        rows, last, gap = 0, i, 0
        while i < len(lines) and gap <= 2:  # label lines between rows ("Investing activities:") belong to it
            if _is_row(lines[i][1]):
                rows, last, gap = rows + 1, i, 0
            elif lines[i][1]:
                gap += 1
            i += 1
        if rows >= MIN_ROWS:
            header = _header(lines, first)
            if header:
                out.append(Table(lines[first][0], lines[last][0] + len(lines[last][1]), header))
        i = last + 1
    return out


def _header(lines: list[tuple[int, str]], first: int) -> str:
    """The line naming the columns, within three lines above the first row (and the label above
    it when that ends without figures: ``Years ended December 31,``)."""
    for j in range(first - 1, max(-1, first - 4), -1):
        line = lines[j][1]
        if len(_COLUMN.findall(line)) >= 2:
            above = lines[j - 1][1] if j > 0 else ""
            if above and figures_at_end(above) == 0 and above.endswith((",", ":")) and len(above) < 80:
                return f"{above} {line}"
            return line
    return ""


@dataclass
class PageIndex:
    """The titles and tables of a document's pages, looked up by offset."""

    starts: list[int]
    titles: list[str]
    tables: list[Table]

    @classmethod
    def of(cls, text: str, starts: list[int]) -> PageIndex:
        titles, found = [], []
        for i, start in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else len(text)
            page = text[start:end]
            titles.append(title(page))
            found += tables(page, start)
        return cls(starts, titles, found)

    def title_at(self, offset: int) -> str:
        page = bisect_right(self.starts, offset) - 1
        return self.titles[page] if 0 <= page < len(self.titles) else ""

    def table_header_at(self, start: int, end: int) -> str:
        """The header of a table a span of text is cut from, when the span does not hold it."""
        for table in self.tables:
            if table.start <= start < table.end or start <= table.start < end:
                return table.header
        return ""
