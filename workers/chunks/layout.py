"""Chunks of an extracted document (PDF, HTML, Office, CSV) that keep its layout: a page is never
split across chunks with another one (a citation names a page), a heading starts a chunk, a
table stays whole with its caption when it fits and is otherwise cut by rows, each piece with the
caption and the header repeated. Each chunk records its pages and its section path.

The unit of packing is a block (text between blank lines: a Markdown paragraph, heading, list or
table) or, inside a page of a PDF that has no blank lines, a line; one longer than a chunk goes
through ``chunking``'s text splitter. Token counts are the embedder's, as everywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from workers.chunks.splitting import Chunk, split, tokenizer
from workers.extraction.document import Extracted
from workers.extraction.headings import path_at

SECTION_SEPARATOR = " › "
MAJOR_LEVEL = 2
CAPTION_TOKENS = 60  # a paragraph this short just above a table is its caption
_HEADING_LINE = re.compile(r"^#{1,6} ")


@dataclass
class _Unit:
    text: str
    start: int
    end: int
    tokens: int
    kind: str  # heading | table | caption | text


def chunks_of(doc: Extracted, chunk_tokens: int) -> list[Chunk]:
    units = _units(doc, chunk_tokens)
    heading_starts = {at for at, _, _ in doc.headings}
    # A part, a chapter, a sheet (levels 1-2) always starts a chunk; a lower heading only once
    # the chunk has some content (a quarter of its size): no chunk of a heading alone.
    major = {at for at, level, _ in doc.headings if level <= MAJOR_LEVEL}
    page_starts = set(doc.pages)
    out: list[list[_Unit]] = []
    current: list[_Unit] = []
    size = 0

    def flush() -> None:
        nonlocal current, size
        if current:
            out.append(current)
        current, size = [], 0

    for unit in units:
        starts_page = unit.start in page_starts or unit.start in major
        starts_section = unit.kind == "heading" or unit.start in heading_starts
        if current and (starts_page or (starts_section and size >= chunk_tokens // 4)):
            flush()
        if unit.kind == "table" and current and size + unit.tokens > chunk_tokens:
            caption = current.pop() if current[-1].kind in ("caption", "heading") else None
            flush()
            if caption:
                current, size = [caption], caption.tokens
        elif current and size + unit.tokens > chunk_tokens:
            flush()
        current.append(unit)
        size += unit.tokens
    flush()
    return [_chunk(n, group, doc, heading_starts) for n, group in enumerate(out)]


def _chunk(n: int, group: list[_Unit], doc: Extracted, heading_starts: set[int]) -> Chunk:
    start, end = group[0].start, group[-1].end
    # The section is the one its content is under: "Item 8" then "Balance sheets" then figures
    # is in "Item 8 › Balance sheets".
    content = next((u.start for u in group if u.kind != "heading" and u.start not in heading_starts), start)
    parts = [group[0].text]
    for before, unit in zip(group, group[1:]):  # the document's own line breaks between units
        gap = doc.text[before.end:unit.start]
        parts.append(gap if 0 < len(gap) <= 4 and not gap.strip() else "\n\n")
        parts.append(unit.text)
    text = "".join(parts)
    first, last = doc.page_of(start), doc.page_of(max(start, end - 1))
    path = path_at(doc.headings, content)
    return Chunk(n, text, start, end, (first, last or first) if first else None, SECTION_SEPARATOR.join(path) or None)


def _units(doc: Extracted, chunk_tokens: int) -> list[_Unit]:
    """The document as packing units, in order, each within a chunk's size."""
    pieces: list[tuple[str, int, str]] = []  # (text, offset, kind)
    offset = 0
    text = doc.text
    for block in re.split(r"(\n\s*\n)", text):
        at = offset
        offset += len(block)
        if not block.strip() or block.isspace():
            continue
        lines = block.split("\n")
        if all(line.lstrip().startswith("|") for line in lines if line.strip()):
            pieces.append((block, at, "table"))
        elif len(lines) == 1 and _HEADING_LINE.match(block):
            pieces.append((block, at, "heading"))
        elif len(lines) == 1 or "\n" not in block.strip():
            pieces.append((block, at, "text"))
        else:  # a PDF page, or a multi-line paragraph: its lines, each a unit
            line_at = at
            for line in lines:
                if line.strip():
                    pieces.append((line, line_at, "text"))
                line_at += len(line) + 1
    counts = [len(e.ids) for e in tokenizer().encode_batch([p[0] for p in pieces], add_special_tokens=False)]
    units: list[_Unit] = []
    for (piece, at, kind), tokens in zip(pieces, counts):
        if kind == "text" and tokens <= CAPTION_TOKENS and not piece.startswith(("-", "*")):
            kind = "caption"  # short enough to be a table's caption, if a table follows
        if tokens <= chunk_tokens:
            units.append(_Unit(piece, at, at + len(piece), tokens, kind))
        elif kind == "table":
            caption = units.pop() if units and units[-1].kind in ("caption", "heading") else None
            units.extend(_table_pieces(piece, at, chunk_tokens, caption))
        else:
            for c in split(piece, "text", chunk_tokens, 0):
                units.append(_Unit(c.text, at + (c.start or 0), at + (c.end or 0), chunk_tokens, "text"))
    return units


def _table_pieces(table: str, at: int, chunk_tokens: int, caption: _Unit | None) -> list[_Unit]:
    """A table too long for one chunk: groups of rows, each with the header rows repeated (and
    the caption, which then leaves the chunk before: it is in every piece)."""
    lines = table.split("\n")
    header = lines[:2] if len(lines) > 1 and set(lines[1].replace("|", "").strip()) <= set("-: ") else lines[:1]
    rows = lines[len(header):]
    prefix = ([caption.text] if caption else []) + header
    budget = chunk_tokens - sum(len(e.ids) for e in tokenizer().encode_batch(prefix, add_special_tokens=False))
    budget = max(budget, chunk_tokens // 4)
    counts = [len(e.ids) for e in tokenizer().encode_batch(rows, add_special_tokens=False)] if rows else []
    out: list[_Unit] = []
    group: list[str] = []
    size, row_at = 0, at + sum(len(h) + 1 for h in header)
    group_start = row_at
    for row, tokens in zip(rows, counts):
        if group and size + tokens > budget:
            out.append(_Unit("\n".join(prefix + group), group_start, row_at - 1, chunk_tokens, "table"))
            group, size, group_start = [], 0, row_at
        group.append(row)
        size += tokens
        row_at += len(row) + 1
    if group:
        out.append(_Unit("\n".join(prefix + group), group_start, row_at - 1, chunk_tokens, "table"))
    return out


def with_sections(chunks: list[Chunk], paths: list[list[str]]) -> list[Chunk]:
    """Chunks of a text document (Markdown) given the heading path each starts under
    (``chunks.sections.markdown_paths``): their citations name a section too."""
    return [replace(c, section=SECTION_SEPARATOR.join(p)[:500] or None) for c, p in zip(chunks, paths)]
