"""The offline contextualizers: free, instant, no model. ``keywords`` is the default.

- ``none``: no context (plain chunks; the baseline every evaluation compares with).
- ``structural``: ``<title> > <section or definition path>``, what a reader sees in a table
  of contents (``structure``).
- ``keywords``: the structural path, then the document's key terms, then its outline
  (``keywords``): the words that name a file's subject, which a chunk cut from it has lost.

An extracted document (PDF, Office, HTML) has more to give than a title: whose it is, what and
when, and the chunk's section (``header``). Both contextualizers then begin with that header,
and it is embedded with the chunk (``Context.embed``).
"""

from __future__ import annotations

from collections.abc import Iterator

from workers.chunking import Chunk
from workers.contextualizers import header, keywords, structure
from workers.contextualizers.base import Context, SourceDocument


class NoContext:
    name = "none"

    def contextualize(self, doc: SourceDocument, chunks: list[Chunk]) -> Iterator[tuple[Chunk, Context]]:
        for chunk in chunks:
            yield chunk, Context("")


class StructuralContext:
    name = "structural"

    def contextualize(self, doc: SourceDocument, chunks: list[Chunk]) -> Iterator[tuple[Chunk, Context]]:
        if doc.structure:
            for chunk in chunks:
                line = header.of(doc, chunk)
                yield chunk, Context(line, embed=line)
            return
        title = structure.title_of(doc.text, doc.metadata)
        for chunk, path in zip(chunks, structure.paths(doc.text, doc.language, chunks)):
            parts = [title] + [p for p in path if p != title]
            yield chunk, Context(" > ".join(p for p in parts if p))


class KeywordContext:
    """Document-level words on every chunk: they help BM25 find the right file (weighted below
    the chunk's own text, see the read path) and are kept out of the chunk's vector by default."""

    name = "keywords"

    def contextualize(self, doc: SourceDocument, chunks: list[Chunk]) -> Iterator[tuple[Chunk, Context]]:
        every = doc.chunks or chunks
        about = " ".join(keywords.key_terms(doc.text, every))
        names = " ".join(keywords.outline(doc.text, doc.language))
        if doc.structure:  # a long extracted document's outline is its contents page: in the header already
            names = ""
        for chunk, context in StructuralContext().contextualize(doc, chunks):
            yield chunk, Context("\n".join(p for p in (context.text, about, names) if p), embed=context.embed)
