"""Documents as they enter the pipeline: validation, version, and the ids of their chunks.

Validation happens once, at submission, so a bad document fails alone and visibly (its state
says why) instead of poisoning a batch or a queue. The version is a hash of the text: it is
what makes re-ingesting unchanged content free and a changed document re-situated in full.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from pydantic import BaseModel, Field

from workers.errors import BadDocument

DOC_ID_MAX = 512


class ChunkInput(BaseModel):
    """A chunk supplied by the producer (pre-chunked input is kept exactly as given)."""

    n: int = Field(ge=0, le=10_000_000)
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


def original_version(data: bytes | bytearray) -> str:
    """The version of a file kept as its original bytes (a PDF, an Office file): their hash."""
    return hashlib.sha256(data).hexdigest()[:20]


def metadata_hash(metadata: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(metadata, sort_keys=True, default=str).encode()).hexdigest()[:16]


def decode_body(raw: bytes | bytearray, max_bytes: int) -> str:
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
        raise BadDocument(f"not valid UTF-8 (byte {e.start}: {bytes(raw[e.start:e.start + 4])!r})") from None
    return check_text(text, max_bytes)


def check_text(text: str, max_bytes: int) -> str:
    """The checks that also apply to text that arrived already decoded (JSON)."""
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > max_bytes:
        raise BadDocument(f"document is {size:,} bytes, over the limit of {max_bytes:,} (SITUATE_MAX_DOCUMENT_BYTES)")
    if "\x00" in text:
        raise BadDocument("binary content (NUL characters): not a text document")
    check_unicode(text, "text")
    if not text.strip():
        raise BadDocument("empty document (no text)")
    control = sum(1 for ch in text[:65536] if ord(ch) < 32 and ch not in "\n\r\t\f\v")
    if control > 0.05 * min(len(text), 65536):
        raise BadDocument("binary content (mostly control characters): not a text document")
    return text


def check_unicode(text: str, what: str) -> None:
    """Text that UTF-8 can hold: a lone surrogate (JSON may carry ``\\ud800``) cannot be stored."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadDocument(f"{what} contains unpaired surrogates: not valid Unicode") from None


def check_doc_id(doc_id: str) -> str:
    """1-512 printable characters. A relative path is a fine id (``docs/guide.md``: folders are
    ingested so), but not one that climbs or starts at the root, nor a Windows separator."""
    if not isinstance(doc_id, str) or not doc_id or len(doc_id) > DOC_ID_MAX \
            or any(ord(c) < 32 or ord(c) == 127 for c in doc_id):
        raise BadDocument(f"invalid doc_id {str(doc_id)[:80]!r}: 1-{DOC_ID_MAX} printable characters")
    if "\\" in doc_id or doc_id.startswith("/") or ".." in doc_id.split("/"):
        raise BadDocument(f"invalid doc_id {doc_id[:80]!r}: no '\\', no leading '/', no '..' segment")
    return doc_id


METADATA_KEYS = 64
METADATA_DEPTH = 3
METADATA_BYTES = 16_384


def check_metadata(metadata: Any) -> dict[str, Any]:
    """A document's metadata: a JSON object of at most 64 keys, 3 levels deep and 16 kB, with
    keys of 1-128 printable characters. It is filterable in search and stored with every chunk,
    so one document must not be able to bloat a whole collection."""
    if not isinstance(metadata, dict):
        raise BadDocument("metadata must be a JSON object")

    def walk(value: Any, depth: int, keys: list[int]) -> None:
        if isinstance(value, dict):
            if depth > METADATA_DEPTH:
                raise BadDocument(f"metadata is nested more than {METADATA_DEPTH} levels deep")
            keys[0] += len(value)
            for key, inner in value.items():
                if not isinstance(key, str) or not 1 <= len(key) <= 128 or any(ord(c) < 32 for c in key):
                    raise BadDocument(f"metadata key {str(key)[:40]!r}: 1-128 printable characters")
                walk(inner, depth + 1, keys)
        elif isinstance(value, list):
            for inner in value:
                if isinstance(inner, (dict, list)):
                    raise BadDocument("metadata lists hold plain values (strings, numbers, booleans)")
                walk(inner, depth, keys)
        elif isinstance(value, float) and not math.isfinite(value):
            raise BadDocument(f"metadata value {value} is not a JSON number")
        elif not (value is None or isinstance(value, (str, int, float, bool))):
            raise BadDocument(f"metadata value of type {type(value).__name__} is not JSON")

    keys = [0]
    walk(metadata, 1, keys)
    check_unicode(json.dumps(metadata, ensure_ascii=False, default=str), "metadata")
    if keys[0] > METADATA_KEYS:
        raise BadDocument(f"metadata has {keys[0]} keys, over the limit of {METADATA_KEYS}")
    size = len(json.dumps(metadata, default=str))
    if size > METADATA_BYTES:
        raise BadDocument(f"metadata is {size:,} bytes as JSON, over the limit of {METADATA_BYTES:,}")
    return metadata


def chunk_id(collection: str, doc_id: str, version: str, n: int) -> str:
    """Deterministic OpenSearch ``_id``: a redelivery overwrites, never duplicates; another
    version of the document gets other ids, so an older one never overwrites a newer one."""
    return hashlib.sha256(f"{collection}\x00{doc_id}\x00{version}\x00{n}".encode()).hexdigest()[:32]
