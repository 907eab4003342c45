"""In-memory stores for the pipeline's stages (``workers.pipeline.stores.Stores``): a stage's
logic tested without Redis, OpenSearch or a broker, as dramatiq's ``StubBroker`` lets its users
test actors without Redis.

Each keeps the one rule of its real counterpart that a stage relies on — states only move
forward for the version in flight (``storage/lua/state_advance.lua``), a checkpoint per version,
a version written whole to the index and older versions deleted after — and records what the
stage did (``gate.sent``, ``metrics.counts``) for a test to read. The rules themselves are
tested against Redis and OpenSearch in ``tests/integration``.
"""

from __future__ import annotations

import contextlib
import copy
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from workers.chunks.splitting import Chunk
from workers.errors import WriteRefused
from workers.pipeline.stores import Stores
from workers.storage.bundle_pool import Member
from workers.storage.catalog import CollectionConfig
from workers.storage.chunk_index import VersionWrite

RANK = {"queued": 0, "chunked": 1, "situated": 2, "indexed": 3}


class MemoryStates:
    def __init__(self) -> None:
        self.docs: dict[tuple[str, str], dict[str, Any]] = {}
        self.seq = 0

    def submit(self, collection: str, doc_id: str, version: str) -> None:
        """A submission, as ``states.submit`` records it (a new seq, queued)."""
        self.seq += 1
        doc = self.docs.setdefault((collection, doc_id), {"doc_id": doc_id})
        doc.update(state="queued", version=version, seq=self.seq, error=None)

    def get(self, collection: str, doc_id: str) -> dict[str, Any] | None:
        found = self.docs.get((collection, doc_id))
        return copy.deepcopy(found) if found else None

    def set_state(self, collection: str, doc_id: str, version: str, state: str, **fields: Any) -> bool:
        doc = self.docs.get((collection, doc_id))
        if doc is None or doc["version"] != version:
            return False
        old = doc["state"]
        if state == "failed":
            if old in ("indexed", "failed"):
                return False
        elif old == "failed" or RANK.get(old, -1) >= RANK[state]:
            return False
        doc.update({k: ("" if v is None else v) for k, v in fields.items()}, state=state)
        return True

    def annotate(self, collection: str, doc_id: str, **fields: str) -> None:
        if (collection, doc_id) in self.docs:
            self.docs[(collection, doc_id)].update(fields)


class MemoryCatalog:
    def __init__(self, *configs: CollectionConfig) -> None:
        self.configs = {c.name: c for c in configs}
        self.mix: Counter[str] = Counter()

    def load(self, name: str) -> CollectionConfig:
        return self.configs[name]

    def is_current(self, config: CollectionConfig) -> bool:
        return self.configs.get(config.name) == config

    def record_mix(self, name: str, code_chunks: int, prose_chunks: int, paged_chunks: int = 0) -> None:
        self.mix.update(code=code_chunks, prose=prose_chunks, paged=paged_chunks)


class MemoryCheckpoints:
    def __init__(self) -> None:
        self.chunks: dict[tuple[str, str, str], tuple[list[Chunk], str, dict[str, Any]]] = {}
        self.contexts: dict[tuple[str, str, str], dict[int, dict[str, Any]]] = {}
        self.warm: set[tuple[str, str, str]] = set()

    def load_chunks(self, collection: str, doc_id: str, version: str) -> tuple[list[Chunk], str, dict[str, Any]] | None:
        return self.chunks.get((collection, doc_id, version))

    def save_chunks(self, collection: str, doc_id: str, version: str, chunks: list[Chunk], language: str,
                    metadata: dict[str, Any]) -> None:
        self.chunks[(collection, doc_id, version)] = (list(chunks), language, metadata)

    def load_contexts(self, collection: str, doc_id: str, version: str) -> dict[int, dict[str, Any]]:
        return dict(self.contexts.get((collection, doc_id, version), {}))

    def save_context(self, collection: str, doc_id: str, version: str, n: int, context: dict[str, Any]) -> None:
        self.contexts.setdefault((collection, doc_id, version), {})[n] = context

    def flush(self, collection: str, doc_id: str, version: str) -> None:
        pass  # nothing is ever kept back: this store is never unreachable

    def mark_warm(self, collection: str, doc_id: str, version: str) -> None:
        self.warm.add((collection, doc_id, version))

    def still_warm(self, collection: str, doc_id: str, version: str) -> bool:
        return (collection, doc_id, version) in self.warm

    def release(self, collection: str, doc_id: str, version: str) -> None:
        self.chunks.pop((collection, doc_id, version), None)
        self.contexts.pop((collection, doc_id, version), None)


class MemoryBodies:
    """The body store's calls a stage makes (``storage.bodies.BodyStore``)."""

    def __init__(self) -> None:
        self.bodies: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.originals: dict[tuple[str, str, str], bytes] = {}
        self.kept_bodies: dict[tuple[str, str], dict[str, Any]] = {}
        self.kept_originals: dict[tuple[str, str], tuple[str, bytes]] = {}

    def put(self, collection: str, doc_id: str, version: str, payload: dict[str, Any]) -> None:
        self.bodies[(collection, doc_id, version)] = copy.deepcopy(payload)

    def get(self, collection: str, doc_id: str, version: str) -> dict[str, Any] | None:
        found = self.bodies.get((collection, doc_id, version))
        return copy.deepcopy(found) if found is not None else None

    def put_original(self, collection: str, doc_id: str, version: str, data: bytes | bytearray) -> None:
        self.originals[(collection, doc_id, version)] = bytes(data)

    def get_original(self, collection: str, doc_id: str, version: str) -> bytes | None:
        return self.originals.get((collection, doc_id, version))

    def delete_original(self, collection: str, doc_id: str, version: str) -> None:
        self.originals.pop((collection, doc_id, version), None)

    def delete(self, collection: str, doc_id: str, version: str) -> None:
        self.bodies.pop((collection, doc_id, version), None)

    def forget_collection(self, collection: str) -> None:
        for store in (self.bodies, self.originals, self.kept_bodies, self.kept_originals):
            for key in [k for k in store if k[0] == collection]:
                del store[key]

    def keep(self, collection: str, doc_id: str, payload: dict[str, Any]) -> None:
        self.kept_bodies[(collection, doc_id)] = copy.deepcopy(payload)

    def kept(self, collection: str, doc_id: str) -> dict[str, Any] | None:
        return self.kept_bodies.get((collection, doc_id))

    def forget_kept(self, collection: str, doc_id: str) -> None:
        self.kept_bodies.pop((collection, doc_id), None)

    def keep_original(self, collection: str, doc_id: str, version: str, budget: int) -> bool:
        data = self.originals.pop((collection, doc_id, version), None)
        if data is None or len(data) > budget:
            return False
        self.kept_originals[(collection, doc_id)] = (version, data)
        return True

    def kept_original(self, collection: str, doc_id: str) -> tuple[str, bytes] | None:
        return self.kept_originals.get((collection, doc_id))


class MemoryIndex:
    """Indexed chunks by collection: rows per (doc_id, version), with the version's seq."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[tuple[str, str], tuple[int, list[dict[str, Any]]]]] = {}
        self.refuse: set[str] = set()  # documents whose chunks the writes refuse, as OpenSearch may

    def ensure_index(self, config: CollectionConfig) -> None:
        self.rows.setdefault(config.name, {})

    def write_version(self, config: CollectionConfig, doc_id: str, version: str, seq: int, rows: list[dict[str, Any]],
                      metadata: dict[str, Any], rollback: bool = True) -> None:
        if doc_id in self.refuse:
            raise WriteRefused(f"OpenSearch refused {len(rows)} of {len(rows)} chunk(s): mapper_parsing_exception")
        self.rows[config.name][(doc_id, version)] = (seq, [{**r, "metadata": metadata} for r in rows])

    def delete_version(self, config: CollectionConfig, doc_id: str, version: str, numbers: list[int]) -> int:
        seq_rows = self.rows.get(config.name, {}).pop((doc_id, version), None)
        return len(seq_rows[1]) if seq_rows else 0

    def delete_stray_index(self, config: CollectionConfig) -> None:
        self.rows.pop(config.name, None)

    def delete_older(self, config: CollectionConfig, doc_id: str, seq: int, refresh_first: bool = False) -> int:
        docs = self.rows.get(config.name, {})
        older = [key for key, (s, _) in docs.items() if key[0] == doc_id and s < seq]
        return sum(len(docs.pop(key)[1]) for key in older)


    def write_versions(self, config: CollectionConfig, writes: list[VersionWrite]) -> dict[str, WriteRefused]:
        refused: dict[str, WriteRefused] = {}
        for w in writes:
            try:
                self.write_version(config, w.doc_id, w.version, w.seq, w.rows, w.metadata, w.rollback)
            except WriteRefused as e:
                refused[w.doc_id] = e
        return refused

    def delete_older_many(self, config: CollectionConfig, seqs: dict[str, int], refresh_first: bool = False) -> int:
        return sum(self.delete_older(config, d, seq) for d, seq in seqs.items())

    def versions(self, collection: str, doc_id: str) -> list[str]:
        return sorted(v for d, v in self.rows.get(collection, {}) if d == doc_id)

    def chunks(self, collection: str, doc_id: str) -> list[dict[str, Any]]:
        return [r for (d, _), (_, rows) in self.rows.get(collection, {}).items() if d == doc_id for r in rows]


@dataclass
class MemoryGate:
    """Messages a stage sent on (task, args, queue), in order; turns charged per collection."""

    sent: list[tuple[str, tuple[Any, ...], str]] = field(default_factory=list)
    charged: Counter[str] = field(default_factory=Counter)
    delays: list[float] = field(default_factory=list)  # of what was sent for later, in order

    def send(self, task: str, args: tuple[Any, ...] | list[Any], queue: str, priority: int = 0, front: bool = False,
             admit_now: bool = True) -> None:
        self.sent.append((task, tuple(args), queue))

    def send_later(self, task: str, args: tuple[Any, ...] | list[Any], queue: str, delay_s: float) -> None:
        self.sent.append((task, tuple(args), queue))
        self.delays.append(delay_s)

    def charge(self, queue: str, collection: str, turns: float) -> None:
        if turns >= 1:
            self.charged[collection] += turns

    def tasks(self) -> list[str]:
        return [task for task, _, _ in self.sent]


@dataclass
class MemoryBundles:
    """Collections' pools of one-chunk documents, and what each bundle took."""

    pools: dict[tuple[str, str], list[Member]] = field(default_factory=dict)  # by (stage, collection)
    taken: dict[str, list[Member]] = field(default_factory=dict)

    flying: int = 10**6  # the collection's documents in flight, as the test wants them counted

    def add(self, stage: str, collection: str, doc_id: str, version: str, nbytes: int) -> tuple[int, int, int]:
        pool = self.pools.setdefault((stage, collection), [])
        pool.append(Member(doc_id, version, nbytes))
        return len(pool), sum(m.nbytes for m in pool), self.flying

    def take(self, stage: str, collection: str, bundle_id: str, most: int, heaviest: int) -> tuple[list[Member], int]:
        pool = self.pools.setdefault((stage, collection), [])
        if bundle_id not in self.taken:
            out: list[Member] = []
            while pool and len(out) < most and (not out or sum(m.nbytes for m in out) + pool[0].nbytes <= heaviest):
                out.append(pool.pop(0))
            self.taken[bundle_id] = out
        return self.taken[bundle_id], len(pool)

    def sent(self, bundle_id: str) -> None:
        self.taken.pop(bundle_id, None)


class MemoryCapacity:
    def wait_for_room(self, nbytes: int, what: str) -> None:
        pass  # memory is never full here


@dataclass
class MemoryMetrics:
    counts: Counter[str] = field(default_factory=Counter)

    def count(self, name: str, value: float = 1, **labels: str) -> None:
        self.counts[name] += value

    @contextlib.contextmanager
    def batch(self) -> Iterator[MemoryMetrics]:
        yield self


@dataclass
class Memory:
    """All the stores, and the ``Stores`` a stage takes."""

    states: MemoryStates = field(default_factory=MemoryStates)
    catalog: MemoryCatalog = field(default_factory=MemoryCatalog)
    checkpoints: MemoryCheckpoints = field(default_factory=MemoryCheckpoints)
    bodies: MemoryBodies = field(default_factory=MemoryBodies)
    index: MemoryIndex = field(default_factory=MemoryIndex)
    gate: MemoryGate = field(default_factory=MemoryGate)
    metrics: MemoryMetrics = field(default_factory=MemoryMetrics)
    bundles: MemoryBundles | None = None  # set: one-chunk documents are bundled

    @property
    def stores(self) -> Stores:
        return Stores(states=self.states, catalog=self.catalog, checkpoints=self.checkpoints,
                      bodies=lambda: self.bodies, index=self.index, gate=self.gate,
                      capacity=MemoryCapacity(), metrics=self.metrics, bundles=self.bundles)

    def submit(self, config: CollectionConfig, doc_id: str, text: str, version: str, **payload: Any) -> None:
        """A document as ``submit`` leaves it: its body stored, its state queued."""
        self.catalog.configs.setdefault(config.name, config)
        self.bodies.put(config.name, doc_id, version, {"text": text, "metadata": {}, "chunks": None, **payload})
        self.states.submit(config.name, doc_id, version)
