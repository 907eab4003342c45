"""What names a document version and its chunks: the version is a hash of the content, so
re-ingesting unchanged content is free and a changed document is re-situated in full; a
chunk's id is derived from its document's version, so a redelivery overwrites, never duplicates.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, Field


class ChunkInput(BaseModel):
    """A chunk supplied by the producer (pre-chunked input is kept exactly as given)."""

    n: int = Field(ge=0, le=10_000_000)
    text: str


def content_version(text: str, chunks: list[ChunkInput] | None = None) -> str:
    h = hashlib.sha256(text.encode("utf-8"))
    if chunks is not None:  # the same text cut differently is a different version
        h.update(json.dumps([[c.n, c.text] for c in chunks]).encode("utf-8"))
    return h.hexdigest()[:20]


def original_version(data: bytes | bytearray) -> str:
    """The version of a file kept as its original bytes (a PDF, an Office file): their hash."""
    return hashlib.sha256(data).hexdigest()[:20]


def metadata_hash(metadata: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(metadata, sort_keys=True, default=str).encode()).hexdigest()[:16]


def chunk_id(collection: str, doc_id: str, version: str, n: int) -> str:
    """Deterministic OpenSearch ``_id``: a redelivery overwrites, never duplicates; another
    version of the document gets other ids, so an older one never overwrites a newer one."""
    return hashlib.sha256(f"{collection}\x00{doc_id}\x00{version}\x00{n}".encode()).hexdigest()[:32]
