"""What an LLM reads of a document too long to read whole for every chunk: its opening, then the
part of it the chunk is in — each cached once.

A 10-K is 60k–150k tokens and 200–500 chunks. Sending the whole filing before every chunk costs
cache reads that grow with the square of its length (each chunk reads the whole document), and
past 100,000 prompt tokens Claude Haiku 5.5 charges every token 5× (``workers/models.py``). The
seeds' remedy is the document's start plus the chunks just before; but those "chunks before"
differ for every chunk, so they are never cached. Here instead:

- the **opening** (``opening_tokens``: the title page, the contents) is one cached block, the
  same for every chunk: it says whose document this is, and how it is laid out;
- each **window** is a run of consecutive chunks under the same section (the first two levels of
  the heading path: "PART II › Item 8"), cut to ``window_tokens``; documents without sections
  get windows of consecutive chunks. A window is the second cached block, shared by all its
  chunks: written once, read by the others.

So a chunk's prompt is ``opening ‖ window ‖ chunk``, with a breakpoint after each of the first
two: a window's first call reads the opening and writes the window; the rest of its chunks read
both. Every prompt stays under ``opening_tokens + window_tokens``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from workers.chunks.splitting import Chunk

SECTION_LEVELS = 2
SEPARATOR = " › "


@dataclass(frozen=True)
class Window:
    title: str  # the section path the window's chunks share ("" without sections)
    text: str
    chunks: tuple[int, ...]


@dataclass(frozen=True)
class Plan:
    opening: str
    windows: tuple[Window, ...]

    def window_of(self, n: int) -> Window:
        for w in self.windows:
            if n in w.chunks:
                return w
        raise KeyError(n)


def section_key(chunk: Chunk) -> str:
    return SEPARATOR.join((chunk.section or "").split(SEPARATOR)[:SECTION_LEVELS])


def _span(text: str, chunks: list[Chunk]) -> str:
    """The document's own text from the first chunk to the last (their spans), else the chunks."""
    if chunks[0].start is not None and chunks[-1].end is not None and chunks[0].start < chunks[-1].end:
        return text[chunks[0].start:chunks[-1].end]
    return "\n\n".join(c.text for c in chunks)


def plan(text: str, chunks: list[Chunk], tokens: Callable[[str], int], opening_tokens: int,
         window_tokens: int) -> Plan:
    """The opening and the windows of a long document (``tokens`` estimates a text's tokens)."""
    sizes = [tokens(c.text) for c in chunks]
    head: list[Chunk] = []
    used = 0
    for chunk, size in zip(chunks, sizes):
        if head and used + size > opening_tokens:
            break
        head.append(chunk)
        used += size
    windows: list[Window] = []
    group: list[Chunk] = []
    group_size = 0

    def close() -> None:
        nonlocal group, group_size
        if group:
            windows.append(Window(section_key(group[0]), _span(text, group), tuple(c.n for c in group)))
        group, group_size = [], 0

    for chunk, size in zip(chunks, sizes):
        if group and (section_key(chunk) != section_key(group[0]) or group_size + size > window_tokens):
            close()
        group.append(chunk)
        group_size += size
    close()
    return Plan(_span(text, head) if head else "", tuple(windows))
