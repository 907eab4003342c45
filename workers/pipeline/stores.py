"""Where the pipeline's stages read and write (``Stores``), as small interfaces, and the reads
every stage opens a document with.

Each store is a Protocol: the modules of ``storage/`` (and ``pipeline.fair``, ``metrics``) are the
implementations the workers use (``tasks.STORES``), as they are, a module's functions satisfying a
Protocol as an object's methods do; ``tests/memory.py`` has in-memory ones for the unit tests. A
stage opens a document with one read of its state, config, chunks (contexts, body):
``storage.working_set`` in one round trip to Redis, or the single stores' reads where there is
no working set.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from workers import metrics as metrics_module
from workers.chunks.splitting import Chunk
from workers.errors import BadDocument, NoSuchCollection, WriteRefused
from workers.storage import states as state_names
from workers.storage.bodies import BodyStore
from workers.storage.bundle_pool import Member
from workers.storage.catalog import CollectionConfig
from workers.storage.chunk_index import VersionWrite
from workers.storage.working_set import Opening


class States(Protocol):
    """Each document's state: only moves forward (``storage.states``)."""

    def get(self, collection: str, doc_id: str) -> dict[str, Any] | None: ...

    def set_state(self, collection: str, doc_id: str, version: str, state: str, **fields: Any) -> bool: ...

    def annotate(self, collection: str, doc_id: str, **fields: str) -> None: ...


class Catalog(Protocol):
    """Collections' frozen settings (``storage.catalog``)."""

    def load(self, name: str) -> CollectionConfig: ...

    def is_current(self, config: CollectionConfig) -> bool: ...

    def record_mix(self, name: str, code_chunks: int, prose_chunks: int, paged_chunks: int = 0) -> None: ...


class Checkpoints(Protocol):
    """Work already done for a document version: its chunks, its paid contexts (``storage.checkpoints``)."""

    def load_chunks(self, collection: str, doc_id: str, version: str) -> tuple[list[Chunk], str, dict[str, Any]] | None: ...

    def save_chunks(self, collection: str, doc_id: str, version: str, chunks: list[Chunk], language: str,
                    metadata: dict[str, Any]) -> None: ...

    def load_contexts(self, collection: str, doc_id: str, version: str) -> dict[int, dict[str, Any]]: ...

    def save_context(self, collection: str, doc_id: str, version: str, n: int, context: dict[str, Any]) -> None: ...

    def flush(self, collection: str, doc_id: str, version: str) -> None: ...

    def mark_warm(self, collection: str, doc_id: str, version: str) -> None: ...

    def still_warm(self, collection: str, doc_id: str, version: str) -> bool: ...

    def release(self, collection: str, doc_id: str, version: str) -> None: ...


class ChunkIndex(Protocol):
    """Where indexed chunks live (``storage.chunk_index``: OpenSearch)."""

    def ensure_index(self, config: CollectionConfig) -> None: ...

    def write_version(self, config: CollectionConfig, doc_id: str, version: str, seq: int, rows: list[dict[str, Any]],
                      metadata: dict[str, Any], rollback: bool = ...) -> None: ...

    def delete_version(self, config: CollectionConfig, doc_id: str, version: str, numbers: list[int]) -> int: ...

    def delete_stray_index(self, config: CollectionConfig) -> None: ...

    def delete_older(self, config: CollectionConfig, doc_id: str, seq: int, refresh_first: bool = ...) -> int: ...

    def write_versions(self, config: CollectionConfig, writes: list[VersionWrite]) -> dict[str, WriteRefused]: ...

    def delete_older_many(self, config: CollectionConfig, seqs: dict[str, int], refresh_first: bool = ...) -> int: ...


class Bundles(Protocol):
    """One-chunk documents waiting to be contextualized, or indexed, together (``storage.bundle_pool``)."""

    def add(self, stage: str, collection: str, doc_id: str, version: str, nbytes: int) -> tuple[int, int, int]: ...

    def take(self, stage: str, collection: str, bundle_id: str, most: int, heaviest: int) -> tuple[list[Member], int]: ...

    def sent(self, bundle_id: str) -> None: ...


class Gate(Protocol):
    """The next stage's message, through the fair gate (``pipeline.fair``)."""

    def send(self, task: str, args: tuple[Any, ...] | list[Any], queue: str, priority: int = ..., front: bool = ...,
             admit_now: bool = ...) -> None: ...

    def send_later(self, task: str, args: tuple[Any, ...] | list[Any], queue: str, delay_s: float) -> None: ...

    def charge(self, queue: str, collection: str, turns: float) -> None: ...


class Capacity(Protocol):
    """Room in Redis before a stage writes what it made (``storage.capacity``)."""

    def wait_for_room(self, nbytes: int, what: str) -> None: ...


class Counter(Protocol):
    def count(self, name: str, value: float = ..., **labels: str) -> None: ...


class Metrics(Protocol):
    """Fleet counters (``metrics``)."""

    def count(self, name: str, value: float = ..., **labels: str) -> None: ...

    def batch(self) -> AbstractContextManager[Counter]: ...


class WorkingSet(Protocol):
    """The reads a stage opens a document with, and the index stage's release of it, each in one
    round trip (``storage.working_set``)."""

    def open_document(self, collection: str, doc_id: str, version: str, contexts: bool = ...,
                      body: bool = ...) -> Opening: ...

    def close_indexed(self, collection: str, doc_id: str, version: str, kept: dict[str, Any] | None,
                      counts: metrics_module.Batch) -> None: ...


@dataclass(frozen=True)
class Stores:
    """Where the stages read and write; ``bodies`` is asked for when needed (S3 or Redis, as
    configured). ``working``: the merged reads and release; without it (the in-memory stores),
    the same made of the single stores' calls."""

    states: States
    catalog: Catalog
    checkpoints: Checkpoints
    bodies: Callable[[], BodyStore]
    index: ChunkIndex
    gate: Gate
    capacity: Capacity
    metrics: Metrics
    working: WorkingSet | None = None
    bundles: Bundles | None = None  # without it (the in-memory stores), every document is indexed alone


def open_document(s: Stores, collection: str, doc_id: str, version: str, contexts: bool = False,
                  body: bool = False) -> Opening:
    """What a stage starts from (``working_set.Opening``)."""
    if s.working is not None:
        return s.working.open_document(collection, doc_id, version, contexts=contexts, body=body)
    try:
        config: CollectionConfig | None = s.catalog.load(collection)
    except NoSuchCollection:
        config = None
    return Opening(state=s.states.get(collection, doc_id), config=config,
                   chunks=s.checkpoints.load_chunks(collection, doc_id, version),
                   contexts=s.checkpoints.load_contexts(collection, doc_id, version) if contexts else {},
                   body=s.bodies().get(collection, doc_id, version) if body else None, body_read=body)


def current(doc: dict[str, Any] | None, version: str, until: str) -> dict[str, Any] | None:
    """The document's state if ``version`` is current and has not reached ``until`` yet, else
    None: superseded, deleted, failed, or this stage (or a later one) already done."""
    if doc is None or doc.get("version") != version or doc["state"] == state_names.FAILED:
        return None
    return doc if state_names.RANK.get(doc["state"], 99) < state_names.RANK[until] else None


def pending(s: Stores, collection: str, doc_id: str, version: str, until: str) -> dict[str, Any] | None:
    """``current`` of the document's state as it is now."""
    return current(s.states.get(collection, doc_id), version, until)


def config_of(collection: str, o: Opening) -> CollectionConfig:
    if o.config is None:
        raise NoSuchCollection(f"collection {collection!r} does not exist")
    return o.config


def loaded(collection: str, o: Opening) -> tuple[CollectionConfig, list[Chunk], str, dict[str, Any]]:
    """The collection's config and the document's checkpointed chunks, language, metadata."""
    config = config_of(collection, o)
    if o.chunks is None:
        raise BadDocument("chunks are gone from the checkpoint store; submit the document again")
    return (config, *o.chunks)


def load(s: Stores, collection: str, doc_id: str, version: str) -> tuple[CollectionConfig, list[Chunk], str, dict[str, Any]]:
    return loaded(collection, open_document(s, collection, doc_id, version))


def body_of(s: Stores, o: Opening, collection: str, doc_id: str, version: str) -> dict[str, Any] | None:
    """The body as opened, or from the body store (S3) when it was not read with the rest."""
    return o.body if o.body_read else s.bodies().get(collection, doc_id, version)


def close_indexed(s: Stores, collection: str, doc_id: str, version: str, kept: dict[str, Any] | None,
                  count: Callable[[Counter], None]) -> None:
    """After a version is indexed: its body kept for a rebuild (``kept``, or nothing), its working
    data released, the stage's counters (``count``) sent; in one round trip with a working set."""
    if s.working is not None:
        counts = metrics_module.Batch()
        count(counts)
        s.working.close_indexed(collection, doc_id, version, kept, counts)
        return
    if kept is not None:
        s.bodies().keep(collection, doc_id, kept)
    s.bodies().delete(collection, doc_id, version)
    s.checkpoints.release(collection, doc_id, version)
    with s.metrics.batch() as m:
        count(m)
