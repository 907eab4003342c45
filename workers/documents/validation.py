"""A document as a producer found it, made valid: the one place that decides what enters.

Validation happens once, at submission (and the same way for an estimate), so a bad document
fails alone and visibly (its state says why) instead of poisoning a batch or a queue: empty,
binary, invalid UTF-8, too large, a bad id, metadata that would bloat every chunk, pre-made
chunks that do not hold together. A file that needs extracting (PDF, Office, HTML, CSV:
``extraction.detect``, by content) is not parsed here: it is passed on as its original bytes,
within ``SITUATE_MAX_DOCUMENT_BYTES``, for a worker to extract in a sandbox, under limits.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from workers import errors
from workers.documents.identity import ChunkInput, content_version, metadata_hash, original_version
from workers.errors import BadDocument
from workers.extraction import detect
from workers.settings import get_settings

DOC_ID_MAX = 512


@dataclass
class RawDocument:
    """A document as a producer found it: text or bytes not yet validated, or a load error."""

    doc_id: str
    body: bytes | bytearray | str | None  # a bytearray: an upload as it was read, not copied
    metadata: dict[str, Any] = field(default_factory=dict)
    chunks: list[dict[str, Any]] | None = None
    error: str | None = None  # set by a loader that could not read it at all
    name: str = ""  # the file's name, to tell its format by (default: the doc_id)
    media_type: str | None = None  # as declared by the sender (an upload's Content-Type)


@dataclass
class Original:
    """A file a worker is to extract (detected by content): its bytes and media type."""

    data: bytes | bytearray
    media_type: str


@dataclass
class ValidDocument:
    """What a valid document is made of: its text (or its original, to extract), its pre-made
    chunks if any, its version and the hash of its metadata."""

    doc_id: str
    body: str | Original
    chunks: list[ChunkInput] | None
    metadata: dict[str, Any]
    version: str
    metadata_hash: str


def valid(raw: RawDocument, max_bytes: int) -> ValidDocument:
    """``raw`` made valid, or ``BadDocument`` with the reason."""
    body, chunks = _body_and_chunks(raw, max_bytes)
    version = original_version(body.data) if isinstance(body, Original) else content_version(body, chunks)
    return ValidDocument(raw.doc_id, body, chunks, raw.metadata, version, metadata_hash(raw.metadata))


def original_of(raw: RawDocument, max_bytes: int) -> Original | None:
    """The file as an original to extract in a worker, or None when it is text (read as before)."""
    if not isinstance(raw.body, (bytes, bytearray)):
        return None
    if not raw.body or raw.body.isspace():  # before the format: an empty report.pdf is empty, not a broken PDF
        raise BadDocument("empty document (no text)")
    try:
        media_type = detect.media_type(raw.body, raw.name or raw.doc_id, raw.media_type)
    except errors.Unsupported as e:
        raise BadDocument(str(e)) from None
    if media_type not in detect.EXTRACTED:
        return None
    if len(raw.body) > max_bytes:
        raise BadDocument(f"file is {len(raw.body):,} bytes, over the limit of {max_bytes:,} (SITUATE_MAX_DOCUMENT_BYTES)")
    if raw.chunks is not None:
        raise BadDocument("pre-made chunks go with text, not with a file to extract")
    return Original(raw.body, media_type)


def _body_and_chunks(raw: RawDocument, max_bytes: int) -> tuple[str | Original, list[ChunkInput] | None]:
    """The document's text (or its original, to extract) and its pre-made chunks, if any."""
    if raw.error:
        raise BadDocument(raw.error)
    check_doc_id(raw.doc_id)
    if raw.body is None:
        raise BadDocument("document has no text")
    if not isinstance(raw.body, (str, bytes, bytearray)):
        raise BadDocument(f"text must be a string, not {type(raw.body).__name__}")
    original = original_of(raw, max_bytes)
    if original is not None:
        check_metadata(raw.metadata)
        return original, None
    text = decode_body(raw.body, max_bytes) if isinstance(raw.body, (bytes, bytearray)) else check_text(raw.body, max_bytes)
    check_metadata(raw.metadata)
    chunks = None
    if raw.chunks is not None:
        s = get_settings()
        if not isinstance(raw.chunks, list) or len(raw.chunks) > s.max_chunks_per_document:
            raise BadDocument(f"chunks must be a list of at most {s.max_chunks_per_document:,} "
                              "(SITUATE_MAX_CHUNKS_PER_DOCUMENT)")
        try:
            chunks = [ChunkInput.model_validate(c) for c in raw.chunks]
        except Exception as e:
            raise BadDocument(f"invalid chunks: {str(e).splitlines()[0][:200]}") from None
        if not chunks or len({c.n for c in chunks}) != len(chunks):
            raise BadDocument("chunks must be a non-empty list with distinct chunk numbers")
        if any(not c.text.strip() for c in chunks):
            raise BadDocument("a pre-made chunk is empty")
        for c in chunks:
            check_unicode(c.text, f"pre-made chunk {c.n}")
        size = sum(len(c.text.encode("utf-8", errors="surrogatepass")) for c in chunks)
        if size > max_bytes:  # the chunks are stored and embedded too: the same limit as the text
            raise BadDocument(f"pre-made chunks are {size:,} bytes, over the limit of {max_bytes:,} "
                              "(SITUATE_MAX_DOCUMENT_BYTES)")
    return text, chunks


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


