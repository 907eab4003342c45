"""Submitting documents and waiting for them: the one code path the CLI and the API share.

Validation happens here, before anything is queued, so that a bad document (empty, binary,
invalid UTF-8, too large, malformed line) is recorded as failed with its reason and the rest
of the batch goes on. Unchanged content (same text, same metadata, already indexed) is not
queued at all: re-ingesting a corpus costs nothing but the hashing.

A file that needs extracting (PDF, Office, HTML, CSV: ``extraction.detect``, by content) is not
parsed here: its original bytes are stored (``bodies.put_original``), within
``SITUATE_MAX_DOCUMENT_BYTES``, and a worker extracts it, in a sandbox, under limits.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from workers import errors
from workers.documents import (
    ChunkInput,
    check_doc_id,
    check_metadata,
    check_text,
    check_unicode,
    content_version,
    decode_body,
    metadata_hash,
    original_version,
)
from workers.errors import BadDocument
from workers.extraction import detect
from workers.pipeline import fair
from workers.pipeline.routing import CHUNK_PRIORITY, CHUNK_QUEUE
from workers.pipeline.sending import CHUNK_TASK
from workers.settings import get_settings
from workers.storage import catalog, states
from workers.storage.bodies import body_store
from workers.storage.catalog import CollectionConfig


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
class Submission:
    doc_id: str
    state: str  # queued | unchanged | failed
    version: str | None = None
    error: str | None = None


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


def validate(raw: RawDocument, max_bytes: int) -> tuple[str | Original, list[ChunkInput] | None]:
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


def new_run() -> str:
    """A run groups one ingest command's (or one API request's) documents on the bill."""
    return time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]


def submit_one(config: CollectionConfig, raw: RawDocument, run: str | None = None, batch: bool = False) -> Submission:
    """Validate, store and queue one document; ``errors.Busy`` for a few seconds while its
    collection switches to a new generation (``situate reindex``), so that none is lost."""
    if catalog.is_draining(config.name):
        raise errors.Busy(f"collection {config.name!r} is switching to its new generation (situate reindex): "
                          "try again in a few seconds")
    try:
        text, chunks = validate(raw, get_settings().max_document_bytes)
    except BadDocument as e:
        try:  # recorded against a valid id only: a bad id must not become a key
            states.rejected(config.name, check_doc_id(raw.doc_id), str(e))
        except BadDocument:
            pass
        return Submission(raw.doc_id, states.FAILED, error=str(e))
    if isinstance(text, Original):
        original, version = text, original_version(text.data)
    else:
        original, version = None, content_version(text, chunks)
    meta = metadata_hash(raw.metadata)
    if states.is_unchanged(config.name, raw.doc_id, version, meta):
        return Submission(raw.doc_id, "unchanged", version)
    payload = {"text": None if original else text, "metadata": raw.metadata, "run": run, "batch": batch,
               "chunks": None if chunks is None else [c.model_dump() for c in chunks]}
    if original:
        payload["original"] = {"media_type": original.media_type, "name": raw.name or raw.doc_id,
                               "bytes": len(original.data)}
    with states.document_lock(config.name, raw.doc_id):  # a delete of this document waits, or we do
        # The body first: a worker never finds a document's state without its body.
        if original:
            body_store().put_original(config.name, raw.doc_id, version, original.data)
        body_store().put(config.name, raw.doc_id, version, payload)
        queued, _ = states.submit(config.name, raw.doc_id, version, meta, get_settings().stale_after_s)
        if queued:  # else this very version is in flight already: one message, not two
            _send_to_chunk(config.name, raw.doc_id, version)
        catalog.touched(config.name, raw.doc_id)
    return Submission(raw.doc_id, states.QUEUED, version)


def submit_when_free(config: CollectionConfig, raw: RawDocument, run: str | None = None, batch: bool = False,
                     on_wait: Callable[[], None] | None = None, poll_s: float = 1.0) -> Submission:
    """``submit_one``, waiting out the seconds a reindex takes to switch generations (in this
    process: the HTTP API answers 503 + Retry-After instead, and its callers wait)."""
    while True:
        try:
            return submit_one(config, raw, run, batch)
        except errors.Busy:
            if on_wait is not None:
                on_wait()
            time.sleep(poll_s)


def _send_to_chunk(collection: str, doc_id: str, version: str) -> None:
    # By name, through the fair gate: a producer never imports the pipeline's tasks (nor the
    # models they load), and one collection's backlog does not hold back another's documents.
    fair.send(CHUNK_TASK, (collection, doc_id, version), queue=CHUNK_QUEUE, priority=CHUNK_PRIORITY)


def submit(config: CollectionConfig, docs: Iterable[RawDocument], run: str | None = None) -> list[Submission]:
    run = run or new_run()
    return [submit_one(config, d, run) for d in docs]


def wait(config: CollectionConfig, submissions: list[Submission], timeout: float | None = None,
         on_progress: Callable[[int, int], None] | None = None, poll_s: float = 0.5) -> dict[str, dict[str, Any]]:
    """Block until every queued submission is indexed or failed (at its submitted version).

    Returns the final state per doc_id; the ones still pending at ``timeout`` keep their
    current state. ``on_progress(done, total)`` is called after each poll.
    """
    final: dict[str, dict[str, Any]] = {}
    pending: dict[str, str] = {}
    for s in submissions:
        if s.state == states.QUEUED:
            pending[s.doc_id] = s.version or ""
        else:
            final[s.doc_id] = {"doc_id": s.doc_id, "state": "indexed" if s.state == "unchanged" else s.state,
                               "error": s.error, "unchanged": s.state == "unchanged"}
    total = len(submissions)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        ids = list(pending)
        for i in range(0, len(ids), 1000):
            for doc in states.get_many(config.name, ids[i:i + 1000]):
                if doc is None:
                    continue
                superseded = doc["version"] != pending[doc["doc_id"]]
                if doc["state"] in states.TERMINAL or superseded:
                    final[doc["doc_id"]] = doc
                    del pending[doc["doc_id"]]
        if on_progress:
            on_progress(total - len(pending), total)
        if not pending or (deadline is not None and time.monotonic() > deadline):
            break
        time.sleep(poll_s)
    for doc_id in pending:
        final[doc_id] = states.get(config.name, doc_id) or {"doc_id": doc_id, "state": "unknown"}
    return final


@dataclass
class Retry:
    doc_id: str
    outcome: str  # queued | not failed | body gone | no document
    error: str | None = None


def retry_failed(config: CollectionConfig, doc_ids: list[str] | None = None) -> list[Retry]:
    """Queue failed documents again from the body they were submitted with (kept while they
    are failed): contexts already paid for are checkpointed, so a retry pays only for the rest.
    A retry is of the failed submission it read, and of nothing newer: a document submitted again
    since (another version, or a retry already under way) is left alone."""
    return [_retry_one(config, doc_id)
            for doc_id in (doc_ids if doc_ids is not None else states.doc_ids(config.name, states.FAILED))]


def _retry_one(config: CollectionConfig, doc_id: str) -> Retry:
    with states.document_lock(config.name, doc_id):
        doc = states.get(config.name, doc_id)
        if doc is None:
            return Retry(doc_id, "no document")
        if doc["state"] != states.FAILED:
            return Retry(doc_id, "not failed")
        if not doc.get("version") or body_store().get(config.name, doc_id, doc["version"]) is None:
            return Retry(doc_id, "body gone", "submit the document again")
        queued, _ = states.retry(config.name, doc_id, doc["version"], doc["seq"])
        if not queued:
            return Retry(doc_id, "not failed")
        _send_to_chunk(config.name, doc_id, doc["version"])
        catalog.touched(config.name, doc_id)
        return Retry(doc_id, "queued", doc.get("error"))
