"""Submitting documents and waiting for them: the one code path the CLI and the API share.

Each document is made valid (``workers.documents.validation``) before anything is queued, so a
bad one (empty, binary, invalid UTF-8, too large, malformed line) is recorded as failed with its
reason and the rest of the batch goes on. Unchanged content (same text, same metadata, already
indexed) is not queued at all: re-ingesting a corpus costs nothing but the hashing. A file to
extract is stored as its original bytes (``bodies.put_original``) for a worker to extract.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from workers import errors
from workers.documents.validation import Original, RawDocument, check_doc_id, valid
from workers.errors import BadDocument
from workers.pipeline import fair
from workers.pipeline.routing import CHUNK_PRIORITY, CHUNK_QUEUE
from workers.pipeline.sending import CHUNK_TASK
from workers.settings import get_settings
from workers.storage import catalog, states
from workers.storage.bodies import body_store
from workers.storage.catalog import CollectionConfig


@dataclass
class Submission:
    doc_id: str
    state: str  # queued | unchanged | failed
    version: str | None = None
    error: str | None = None


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
        doc = valid(raw, get_settings().max_document_bytes)
    except BadDocument as e:
        try:  # recorded against a valid id only: a bad id must not become a key
            states.rejected(config.name, check_doc_id(raw.doc_id), str(e))
        except BadDocument:
            pass
        return Submission(raw.doc_id, states.FAILED, error=str(e))
    original = doc.body if isinstance(doc.body, Original) else None
    version, meta, chunks = doc.version, doc.metadata_hash, doc.chunks
    if states.is_unchanged(config.name, raw.doc_id, version, meta):
        return Submission(raw.doc_id, "unchanged", version)
    nbytes = len(original.data) if original else len(str(doc.body).encode("utf-8"))
    _admit(nbytes)
    payload = {"text": None if original else doc.body, "metadata": raw.metadata, "run": run, "batch": batch,
               "chunks": None if chunks is None else [c.model_dump() for c in chunks]}
    if original:
        payload["original"] = {"media_type": original.media_type, "name": raw.name or raw.doc_id,
                               "bytes": len(original.data)}
    with states.document_lock(config.name, raw.doc_id):  # a delete of this document waits, or we do
        # The body first: a worker never finds a document's state without its body.
        if original:
            body_store().put_original(config.name, raw.doc_id, version, original.data)
        body_store().put(config.name, raw.doc_id, version, payload)
        queued, _ = states.submit(config.name, raw.doc_id, version, meta, get_settings().stale_after_s, nbytes=nbytes)
        if queued:  # else this very version is in flight already: one message, not two
            _send_to_chunk(config.name, raw.doc_id, version)
        catalog.touched(config.name, raw.doc_id)
    return Submission(raw.doc_id, states.QUEUED, version)


def _admit(nbytes: int) -> None:
    """Room in the backlog for a document of ``nbytes``, or ``BacklogFull``: the documents in flight
    (submitted, not yet indexed or failed) weigh ``SITUATE_BACKLOG_MB`` at most, so that a million
    documents wait where they are — in their folder, file or bucket — and not in Redis. One
    document always passes when nothing is in flight, whatever it weighs."""
    budget = get_settings().backlog_mb * 1_000_000
    held = states.backlog()
    if held and held + nbytes > budget:
        raise errors.BacklogFull(f"the pipeline's backlog is full ({held / 1e6:,.0f} MB of documents in flight, "
                                 f"SITUATE_BACKLOG_MB={budget // 1_000_000:,}): waiting for the workers to make room")


def submit_when_free(config: CollectionConfig, raw: RawDocument, run: str | None = None, batch: bool = False,
                     on_wait: Callable[[errors.Busy], None] | None = None, poll_s: float = 1.0) -> Submission:
    """``submit_one``, waiting out the seconds a reindex takes to switch generations and a full
    backlog (in this process: the HTTP API answers 503 + Retry-After instead, and its callers wait)."""
    while True:
        try:
            return submit_one(config, raw, run, batch)
        except errors.Busy as busy:
            if on_wait is not None:
                on_wait(busy)
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


class Tracker:
    """An ingest followed as it goes, in memory that does not grow with the corpus: only the
    documents still in flight are held (the backlog bounds them), the rest are counts — and the
    failed ones, with their reasons (``situate failed`` pages them too). ``poll`` moves what ended
    out; ``rate`` is documents ended per second over the last half minute: the pipeline's pace,
    not the producer's."""

    WINDOW_S = 30.0
    SCAN_EVERY_S = 2.0  # the documents in flight are looked at one by one at most this often

    def __init__(self, config: CollectionConfig):
        self.config = config
        self.pending: dict[str, str] = {}  # doc id -> the version submitted
        self.counts: dict[str, int] = {"submitted": 0, "indexed": 0, "unchanged": 0, "failed": 0, "queued": 0}
        self.failed: list[dict[str, Any]] = []
        self._ended: list[tuple[float, int]] = [(time.monotonic(), 0)]
        self._settled = -1  # the collection's documents indexed or failed, at the last look
        self._scanned = 0.0

    def add(self, s: Submission) -> None:
        self.counts["submitted"] += 1
        if s.state == states.QUEUED:
            self.pending[s.doc_id] = s.version or ""
            self.counts["queued"] += 1
        elif s.state == "unchanged":
            self.counts["unchanged"] += 1
        else:
            self.counts["failed"] += 1
            self.failed.append({"doc_id": s.doc_id, "state": states.FAILED, "error": s.error})

    @property
    def ended(self) -> int:
        return self.counts["indexed"] + self.counts["unchanged"] + self.counts["failed"]

    def poll(self) -> None:
        """Move what ended out of ``pending``. The collection's counts are read first (one
        command): while no document of it has ended since the last look, nothing of ours has, and
        the documents in flight are not read one by one (every half second, for every document,
        that was the most Redis work of an ingest)."""
        counts = states.counts(self.config.name)
        settled = counts.get(states.INDEXED, 0) + counts.get(states.FAILED, 0)
        now = time.monotonic()
        if self.pending and self._settled >= 0 and (
                settled == self._settled
                or (now - self._scanned < self.SCAN_EVERY_S and settled - self._settled < len(self.pending))):
            self._ended.append((now, self.ended))
            return
        self._settled, self._scanned = settled, now
        ids = list(self.pending)
        for i in range(0, len(ids), 1000):
            for doc in states.get_many(self.config.name, ids[i:i + 1000]):
                if doc is None:
                    continue
                submitted = self.pending[doc["doc_id"]]
                if doc["state"] not in states.TERMINAL and doc["version"] == submitted:
                    continue
                del self.pending[doc["doc_id"]]
                if doc["state"] == states.FAILED and doc["version"] == submitted:
                    self.counts["failed"] += 1
                    self.failed.append(doc)
                else:  # indexed, or superseded by a newer submission (its own run follows it)
                    self.counts["indexed"] += 1
        now = time.monotonic()
        self._ended.append((now, self.ended))
        while len(self._ended) > 2 and now - self._ended[1][0] > self.WINDOW_S:
            self._ended.pop(0)

    def rate(self) -> float:
        (t0, n0), (t1, n1) = self._ended[0], self._ended[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0

    def follow(self, timeout: float | None, on_progress: Callable[[Tracker], None], poll_s: float = 0.5) -> None:
        """Until nothing is in flight (or ``timeout``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.pending and (deadline is None or time.monotonic() < deadline):
            self.poll()
            on_progress(self)
            if self.pending:
                time.sleep(poll_s)


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
