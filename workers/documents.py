"""Documents as they enter the pipeline: validation, version, and the ids of their chunks.

Validation happens once, at submission, so a bad document fails alone and visibly (its state
says why) instead of poisoning a batch or a queue. The version is a hash of the text: it is
what makes re-ingesting unchanged content free and a changed document re-situated in full.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, Field

DOC_ID_MAX = 512


class BadDocument(ValueError):
    """A document that can never be indexed as given; the message is shown to the user."""


class ChunkInput(BaseModel):
    """A chunk supplied by the producer (pre-chunked input is kept exactly as given)."""

    n: int = Field(ge=0)
    text: str


class Document(BaseModel):
    doc_id: str
    text: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    chunks: list[ChunkInput] | None = None

    @property
    def version(self) -> str:
        return content_version(self.text, self.chunks)


def content_version(text: str, chunks: list[ChunkInput] | None = None) -> str:
    h = hashlib.sha256(text.encode("utf-8"))
    if chunks is not None:  # the same text cut differently is a different version
        h.update(json.dumps([[c.n, c.text] for c in chunks]).encode("utf-8"))
    return h.hexdigest()[:20]


def metadata_hash(metadata: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(metadata, sort_keys=True, default=str).encode()).hexdigest()[:16]


def decode_body(raw: bytes, max_bytes: int) -> str:
    """Bytes from a file or request -> text, or BadDocument with the reason."""
    if len(raw) > max_bytes:
        raise BadDocument(
            f"document is {len(raw):,} bytes, over the limit of {max_bytes:,} (SITUATE_MAX_DOCUMENT_BYTES)"
        )
    if b"\x00" in raw[:65536]:
        raise BadDocument("binary content (NUL bytes): not a text document")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadDocument(f"not valid UTF-8 (byte {e.start}: {raw[e.start:e.start + 4]!r})") from None
    return check_text(text, max_bytes)


def check_text(text: str, max_bytes: int) -> str:
    """The checks that also apply to text that arrived already decoded (JSON)."""
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > max_bytes:
        raise BadDocument(f"document is {size:,} bytes, over the limit of {max_bytes:,} (SITUATE_MAX_DOCUMENT_BYTES)")
    if "\x00" in text:
        raise BadDocument("binary content (NUL characters): not a text document")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadDocument("text contains unpaired surrogates: not valid Unicode") from None
    if not text.strip():
        raise BadDocument("empty document (no text)")
    control = sum(1 for ch in text[:65536] if ord(ch) < 32 and ch not in "\n\r\t\f\v")
    if control > 0.05 * min(len(text), 65536):
        raise BadDocument("binary content (mostly control characters): not a text document")
    return text


def check_doc_id(doc_id: str) -> str:
    if not doc_id or len(doc_id) > DOC_ID_MAX or any(ord(c) < 32 for c in doc_id):
        raise BadDocument(f"invalid doc_id {doc_id[:80]!r}: 1-{DOC_ID_MAX} printable characters")
    return doc_id


def chunk_id(collection: str, doc_id: str, version: str, n: int) -> str:
    """Deterministic OpenSearch ``_id``: a redelivery overwrites, never duplicates; another
    version of the document gets other ids, so an older one never overwrites a newer one."""
    return hashlib.sha256(f"{collection}\x00{doc_id}\x00{version}\x00{n}".encode()).hexdigest()[:32]
