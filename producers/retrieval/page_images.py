"""The page a hit cites, as an image, its chunk's text marked: for the search page and for agents
(the MCP ``read`` tool), so that a person or a model with vision can check a citation — a table
the text layer garbled included.

The page is drawn from the file's original bytes, kept in the body store when the file was
extracted (``bodies.keep_original``), of the version the index holds (a page of another version
would cite what the index does not say). Drawing runs in a sandbox child, under the extraction
limits, never in this process (``extraction.sandbox.render``). Images are cached in this process,
within ``CACHE_BYTES``, least recently used first out: a page asked for twice is drawn once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from workers.errors import ExtractionError, PublicError
from workers.extraction import sandbox
from workers.extraction.limits import Limits
from workers.storage import chunk_index, states
from workers.storage.bodies import body_store
from workers.storage.catalog import CollectionConfig

PDF = "application/pdf"
DPI = 150
CACHE_BYTES = 16 * 1024 * 1024  # ~50 pages at 150 dpi: within the API's 50 MB for page images


class NoPageImage(PublicError):
    """Why a hit's page cannot be shown (not a PDF, its original not kept, another version)."""


@dataclass(frozen=True)
class PageImage:
    png: bytes
    page: int
    marked: int  # lines of the chunk found and marked on the page


class _Cache:
    def __init__(self, budget: int):
        self.budget, self.used = budget, 0
        self.items: OrderedDict[tuple[str, ...], PageImage] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: tuple[str, ...]) -> PageImage | None:
        with self.lock:
            found = self.items.get(key)
            if found is not None:
                self.items.move_to_end(key)
            return found

    def put(self, key: tuple[str, ...], image: PageImage) -> None:
        with self.lock:
            if key in self.items or len(image.png) > self.budget:
                return
            self.items[key] = image
            self.used += len(image.png)
            while self.used > self.budget:
                _, dropped = self.items.popitem(last=False)
                self.used -= len(dropped.png)


_cache = _Cache(CACHE_BYTES)


def original_of(config: CollectionConfig, doc_id: str) -> tuple[str, bytes]:
    """The kept original of the document's indexed version (its media type, its bytes)."""
    media_type, kept_or_why, indexed = states.fields_of(config.name, [doc_id], "media_type", "original",
                                                        "indexed_version")[0]
    if media_type != PDF:
        raise NoPageImage("pages are drawn for PDF files only")
    kept = body_store().kept_original(config.name, doc_id)
    if kept is None:
        reason = kept_or_why or ""
        raise NoPageImage(f"its original is {reason}" if reason.startswith("not kept") else "its original is not kept")
    version, data = kept
    if version != indexed:
        raise NoPageImage("the original kept is another version's than the one indexed")
    return PDF, data


def image(config: CollectionConfig, doc_id: str, chunk: int, page: int | None = None, dpi: int = DPI) -> PageImage:
    """Page ``page`` (default: the chunk's first) with chunk ``chunk``'s lines marked."""
    found = chunk_index.read(config, doc_id, chunks=(chunk, chunk), limit=1)
    if not found or not found[0].get("pages"):
        raise NoPageImage("this chunk has no page")
    pages = found[0]["pages"]
    page = page if page is not None and pages[0] <= page <= pages[-1] else pages[0]
    indexed = states.fields_of(config.name, [doc_id], "indexed_version")[0][0]
    key = (config.name, config.generation, doc_id, str(indexed), str(chunk), str(page), str(dpi))
    cached = _cache.get(key)
    if cached is not None:
        return cached
    _, data = original_of(config, doc_id)
    try:
        png, marked = sandbox.render(data, page, dpi, found[0].get("text", "").splitlines(), Limits.from_settings())
    except ExtractionError as e:
        raise NoPageImage(f"page {page} could not be drawn: {e}") from None
    drawn = PageImage(png, page, marked)
    _cache.put(key, drawn)
    return drawn
