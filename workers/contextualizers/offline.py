"""The offline contextualizers: free, instant, no model. ``keywords`` is the default.

- ``none``: no context (plain chunks; the baseline every evaluation compares with).
- ``structural``: ``<title> > <section or definition path>``, what a reader sees in a table
  of contents (``structure``).
- ``keywords``: the structural path, then the document's key terms, then its outline
  (``keywords``): the words that name a file's subject, which a chunk cut from it has lost.

An extracted document (PDF, Office, HTML) has more to give than a title: whose it is, what and
when, and the chunk's section (``header``). Both contextualizers then begin with that header,
and the part of it the collection's ``embed_header`` names is embedded with the chunk
(``Context.embed``, ``Header.for_vector``).
"""

from __future__ import annotations

from collections.abc import Iterator

from workers.chunks import sections
from workers.chunks.splitting import Chunk
from workers.contextualizers import header, keywords
from workers.contextualizers.base import Context, SourceDocument


class NoContext:
    name = "none"

    def contextualize(self, doc: SourceDocument, chunks: list[Chunk]) -> Iterator[tuple[Chunk, Context]]:
        for chunk in chunks:
            yield chunk, Context("")


class StructuralContext:
    name = "structural"

    def __init__(self, embed_header: str = "cover"):
        self.embed_header = embed_header  # the collection's: what of the header its vectors read

    def contextualize(self, doc: SourceDocument, chunks: list[Chunk]) -> Iterator[tuple[Chunk, Context]]:
        if doc.structure:
            lines = header.Header(doc)
            for chunk in chunks:
                yield chunk, Context(lines.of(chunk), embed=lines.for_vector(chunk, self.embed_header))
            return
        title = sections.title_of(doc.text, doc.metadata)
        for chunk, path in zip(chunks, sections.paths(doc.text, doc.language, chunks)):
            parts = [title] + [p for p in path if p != title]
            yield chunk, Context(" > ".join(p for p in parts if p))


class KeywordContext:
    """Key terms on every chunk: they help BM25 find the right file, and within a long extracted
    document the right section (weighted below the chunk's own text, see the read path); they are
    kept out of the chunk's vector by default. A text's terms are its whole document's. An
    extracted document's are half its whole document's (which file) and half its section's
    (where in it, ``keywords.section_terms``): each kind alone lost on one of the two PDF
    corpora with BM25 alone, both kept most of each (``ops/bench corpora``; docs/decisions.md)."""

    name = "keywords"

    def __init__(self, embed_header: str = "cover"):
        self.embed_header = embed_header

    def contextualize(self, doc: SourceDocument, chunks: list[Chunk]) -> Iterator[tuple[Chunk, Context]]:
        every = doc.chunks or chunks
        if doc.structure:  # a long extracted document's outline is its contents page: in the header already
            half = (keywords.KEY_TERMS + 1) // 2
            whole = keywords.key_terms(doc.text, every, half)
            by_section = {name: [t for t in found if t not in whole][:half]
                          for name, found in keywords.section_terms(every, keywords.KEY_TERMS + half).items()}
            names = ""
        else:  # one section, the whole document
            whole, by_section = keywords.key_terms(doc.text, every), {}
            names = " ".join(keywords.outline(doc.text, doc.language))
        for chunk, context in StructuralContext(self.embed_header).contextualize(doc, chunks):
            about = " ".join(whole + by_section.get(chunk.section or "", []))
            yield chunk, Context("\n".join(p for p in (context.text, about, names) if p), embed=context.embed)
