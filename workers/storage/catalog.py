"""The catalog of collections: each one's configuration, frozen at creation, stored in Redis.

Why frozen: a BM25 analyzer, an embedding model or a chunk size cannot change under an index
without making old and new chunks incomparable. So the producer that creates a collection
fixes them (from CLI flags, falling back to its ``SITUATE_*`` environment), they are stored
here, and every worker reads the stored copy.

Collections are listed from a set of their names (``keys.COLLECTIONS``), kept beside each entry
in the same transaction, so that listing them costs one read per collection, not a scan of the
whole database (a deployment's Redis holds millions of keys). A Redis written before the set
existed is scanned once, by the first process that lists it (``_indexed``).

Names are ``[a-z0-9][a-z0-9_-]{0,62}``, matched whole. A collection's first index is
``situate-<name>``; the next generations' are ``situate-<name>.g<n>``: a dot no name may hold,
so no collection's index can be another's generation (``acme-g2`` and generation 2 of ``acme``
once shared ``situate-acme-g2``). A configuration records the index it was made with, and the id
of the collection it belongs to, which the index's ``_meta`` carries (``chunk_index``): an index
is only ever written, changed or deleted by its owner.

This module is the plain data type and its storage only. Checking a new configuration
against the providers (is the model known, does the GGUF file exist) and creating its index
is ``workers.lifecycle``'s job: kept apart so that everything which merely *reads* a
configuration — contextualizers, embedders, the index mapping — can import it without
importing all of them in turn.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, cast

from pydantic import BaseModel, Field

from workers import keys
from workers.connections import redis_client
from workers.errors import BadName, NoSuchCollection
from workers.storage.scripts import script

NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
# A collection's next generation while a reindex builds it: "<name>~g<n>", never a user's name.
SHADOW_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}~g[0-9]{1,6}")
VECTORS = ("float", "lucene-sq", "byte")
LANGUAGES = ("english", "french", "german")
FUSIONS = ("rrf", "weighted")


class CollectionConfig(BaseModel):
    name: str
    contextualizer: str = "keywords"
    model: str = ""
    embedder: str = "local"  # at creation, chosen by language unless named (see lifecycle)
    embed_model: str = ""  # the embedder's model (API embedders); "" = its default
    # How much of a paged document's chunk past a local embedder's 256 tokens counts in its vector,
    # against the head's 1 (``LocalEncoder``, ``stages.tail_weight``); 0, cut there, for the
    # collections stored before the field existed.
    embed_tail: float = Field(0.0, ge=0, le=1)
    # What of an extracted document's offline header its chunks' vectors read (``contextualizers.
    # header``): "cover" (its place, and the document line when read from a filing's or a
    # release's cover), "all", "none"; "all" for the collections stored before the field existed.
    embed_header: str = Field("all", pattern="^(cover|all|none)$")
    language: str = "english"
    chunk_tokens: int = Field(300, ge=16, le=8192)
    chunk_overlap: int = Field(0, ge=0)
    # Replaces the provider's default prompt for this collection (LLM contextualizers only).
    prompt: str | None = None
    # Terms the collection's documents use, sent before every document as a block of its own,
    # cached across the collection's documents (LLM contextualizers only: ``prompts.glossary_block``).
    glossary: str | None = None
    # Whether the embedder sees context + chunk (True) or the chunk alone. None at creation
    # means: yes for LLM contexts (what Contextual Retrieval is), no for the offline ones,
    # whose terms help BM25 but blur a chunk's vector (``ops/bench corpora``).
    embed_context: bool | None = None
    # Search defaults, overridable per query: the BM25 weight of the context field against
    # the chunk's text; fusion "rrf" (ranks, with its k) or "weighted" (min-max scores); the
    # dense side's weight against BM25's 1.0.
    context_weight: float = Field(1.0, ge=0)
    fusion: str = "rrf"
    # None: chosen at query time by what the collection holds (see the read path's
    # ``auto_dense_weight``): code leans on BM25, prose on the vectors.
    dense_weight: float | None = Field(None, ge=0)
    # None: chosen at query time by what the collection holds (``auto_rrf_k``): text sharp,
    # paged documents flatter. 60 for collections stored before the field existed.
    rrf_k: int | None = Field(60, ge=1, le=1000)
    # None: the server's SITUATE_RERANKER; "none": no reranking (``situate tune`` may set it).
    reranker: str | None = None
    # The OpenSearch index: primary shards (fixed at creation: a collection past ~50 GB, or
    # one to spread over several nodes, wants more), and replicas, a count ("1") or a range
    # OpenSearch keeps to the nodes there are ("0-1": none on one node, so it stays green;
    # a copy once a second node joins, so losing a node loses nothing).
    index_shards: int = Field(1, ge=1, le=64)
    index_replicas: str = Field("0-1", pattern=r"^(\d{1,2}|\d{1,2}-(\d{1,2}|all))$")
    # Which life of the name this is: set at creation, new after a drop and a re-creation.
    # Tasks and tokens made for one generation do nothing to the next ("" before it existed).
    generation: str = ""
    created: float = 0.0
    # How vectors are stored (storage/chunk_index.py's ``vector_field``): exact floats, Lucene's
    # scalar quantisation (int7, floats kept on disk), or bytes we quantise (4x smaller everywhere).
    vectors: str = "float"
    # Which build of the index this is: 1, the index ``situate-<name>`` it was made with; each
    # ``situate reindex`` makes the next, ``situate-<name>.g<n>``, behind the alias ``situate-<name>``.
    index_generation: int = Field(1, ge=1)
    # Set on a generation being built (a "<name>~g<n>" collection): the live collection it rebuilds.
    rebuilds: str = ""
    # The OpenSearch index this build was made with (``index_for``); "" in one made before it was
    # recorded, whose index is named by the rule of its day (``index_name``).
    index: str = ""
    # The id of the collection this configuration belongs to: its generation id, which a
    # generation being built carries over from the live one ("": its own ``generation``).
    collection_id: str = ""

    @property
    def base_name(self) -> str:
        return self.rebuilds or self.name

    @property
    def index_name(self) -> str:
        if self.index:
            return self.index
        if self.index_generation == 1:
            return f"situate-{self.base_name}"
        return f"situate-{self.base_name}-g{self.index_generation}"  # the rule before 0.3: kept by old builds

    @property
    def owner_id(self) -> str:
        return self.collection_id or self.generation

    @property
    def alias(self) -> str:
        """The name outside readers may search by, whichever generation is live."""
        return f"situate-{self.base_name}"


SHAPING_FIELDS = ("contextualizer", "model", "embedder", "embed_model", "embed_tail", "embed_header", "language",
                  "chunk_tokens", "chunk_overlap", "prompt", "glossary", "embed_context", "index_shards", "index_replicas",
                  "vectors")
# Fixed at creation too, so that every search of a collection agrees by default, but a query
# may override them (they shape no stored data).
SEARCH_FIELDS = ("context_weight", "fusion", "dense_weight", "rrf_k", "reranker")


def index_for(name: str, generation: int) -> str:
    """The index of a collection's ``generation``: ``situate-acme``, then ``situate-acme.g2``."""
    return f"situate-{name}" if generation == 1 else f"situate-{name}.g{generation}"


def _key(name: str) -> str:
    return keys.collection(name)


def _tombstone_key(name: str) -> str:
    return keys.dropping(name)


def shadow_name(name: str, generation: int) -> str:
    return f"{name}~g{generation}"


def validate_name(name: str) -> str:
    if not isinstance(name, str) or not (NAME_RE.fullmatch(name) or SHADOW_RE.fullmatch(name)):
        raise BadName(
            f"invalid collection name {name!r}: use 1-63 lowercase letters, digits, '-' or '_'"
        )
    return name


def load(name: str) -> CollectionConfig:
    raw = redis_client().get(_key(validate_name(name)))
    if raw is None:
        raise NoSuchCollection(f"collection {name!r} does not exist")
    return CollectionConfig.model_validate_json(raw)


def find(name: str) -> CollectionConfig | None:
    raw = redis_client().get(_key(validate_name(name)))
    return None if raw is None else CollectionConfig.model_validate_json(raw)


def exists(name: str) -> bool:
    return bool(redis_client().exists(_key(validate_name(name))))


def _indexed() -> None:
    """The name sets exist: a Redis written before them is scanned once (a marker says it was)."""
    global _names_ready
    r = redis_client()
    if _names_ready == id(r):
        return
    if not r.exists(keys.CATALOG_INDEXED):
        found = [k.split(":", 2)[2] for k in r.scan_iter(keys.collection("*"), count=1000)]
        gone = [k.split(":", 2)[2] for k in r.scan_iter(keys.dropping("*"), count=1000)]
        pipe = r.pipeline(transaction=True)
        if found:
            pipe.sadd(keys.COLLECTIONS, *found)
        if gone:
            pipe.sadd(keys.DROPPING, *gone)
        pipe.set(keys.CATALOG_INDEXED, "1")
        pipe.execute()
    _names_ready = id(r)


_names_ready: int | None = None  # the client (so: the Redis) this process has seen the sets in


def _members(set_key: str, key_of: Any) -> list[str]:
    """The names in a set whose entries exist: one that a drop removed while the set was first
    filled (``_indexed``) is left out, and taken out."""
    _indexed()
    r = redis_client()
    names = sorted(cast("set[str]", r.smembers(set_key)))
    pipe = r.pipeline(transaction=False)
    for name in names:
        pipe.exists(key_of(name))
    there = pipe.execute()
    stale = [n for n, ok in zip(names, there) if not ok]
    if stale:
        r.srem(set_key, *stale)
    return [n for n, ok in zip(names, there) if ok]


def shadows_of(name: str) -> list[str]:
    """The generations of ``name`` being built (or left by a reindex cut short)."""
    return [n for n in _members(keys.COLLECTIONS, keys.collection) if SHADOW_RE.fullmatch(n) and n.split("~", 1)[0] == name]


def list_names() -> list[str]:
    """The collections, without the generations being built."""
    return [n for n in _members(keys.COLLECTIONS, keys.collection) if "~" not in n]


def store_new(config: CollectionConfig) -> bool:
    """SET NX: two producers creating the same collection at once agree on the first one."""
    _indexed()
    created = script("catalog_add")(keys=[_key(config.name), keys.COLLECTIONS], args=[config.name, config.model_dump_json()])
    return bool(created)


def forget(name: str) -> None:
    """The entry alone (a rebuilt generation's, once the collection has taken its settings)."""
    pipe = redis_client().pipeline(transaction=True)
    pipe.delete(_key(name))
    pipe.srem(keys.COLLECTIONS, name)
    pipe.execute()


def store(config: CollectionConfig) -> None:
    """Overwrite a collection's stored settings (its search defaults only: see lifecycle)."""
    pipe = redis_client().pipeline(transaction=True)
    pipe.set(_key(config.name), config.model_dump_json())
    pipe.sadd(keys.COLLECTIONS, config.name)
    pipe.execute()


def is_current(config: CollectionConfig) -> bool:
    """Whether ``config`` is still the collection's live generation: not dropped, not dropped and
    made again. A task that loaded its collection before a drop checks this before it creates or
    writes anything, so it cannot bring back a dropped index (with the old mapping)."""
    raw = redis_client().get(_key(config.name))
    return raw is not None and CollectionConfig.model_validate_json(raw).generation == config.generation


# -- dropping: a tombstone first, then the parts, so that a drop cut short is finished later -------

def mark_dropping(config: CollectionConfig) -> None:
    """The collection leaves the catalog and a tombstone takes its place, in one step: nothing
    new reaches it from now on, and a drop interrupted after this (OpenSearch down) is resumed by
    the next one, which finds the tombstone."""
    _indexed()
    pipe = redis_client().pipeline(transaction=True)
    pipe.set(_tombstone_key(config.name), config.model_dump_json())
    pipe.sadd(keys.DROPPING, config.name)
    pipe.delete(_key(config.name))
    pipe.srem(keys.COLLECTIONS, config.name)
    pipe.execute()


def dropping(name: str) -> CollectionConfig | None:
    raw = redis_client().get(_tombstone_key(validate_name(name)))
    return None if raw is None else CollectionConfig.model_validate_json(raw)


def dropped(name: str) -> None:
    """The drop finished: its tombstone and the collection's last records go."""
    pipe = redis_client().pipeline(transaction=True)
    pipe.delete(_tombstone_key(name), keys.mix(name))
    pipe.srem(keys.DROPPING, name)
    pipe.execute()


def list_dropping() -> list[str]:
    return _members(keys.DROPPING, keys.dropping)


def move_mix(source: str, target: str) -> None:
    """A reindex's generation takes its collection's name: the counts behind the fusion's
    defaults go with it, measured on the new generation's chunks."""
    r = redis_client()
    mix = cast("dict[str, str]", r.hgetall(keys.mix(source)))
    pipe = r.pipeline(transaction=True)
    pipe.delete(keys.mix(target))
    if mix:
        pipe.hset(keys.mix(target), mapping=cast(Any, mix))  # redis-py types keys as a union
    pipe.delete(keys.mix(source))
    pipe.execute()


def record_mix(name: str, code_chunks: int, prose_chunks: int, paged_chunks: int = 0) -> None:
    """What a collection holds, counted as documents are chunked: the read path leans on BM25
    for code and on the vectors for prose, and fuses pages of documents (``paged``, a part of the
    prose) more flatly than text."""
    pipe = redis_client().pipeline(transaction=False)
    for field, count in (("code", code_chunks), ("prose", prose_chunks), ("paged", paged_chunks)):
        if count:
            pipe.hincrby(keys.mix(name), field, count)
    pipe.execute()


@dataclass(frozen=True)
class Mix:
    """Shares of a collection's chunks: cut from code, and cut from paged documents (PDF pages,
    slides); None before anything was chunked."""

    code: float | None
    paged: float | None


def mix(name: str) -> Mix:
    found = redis_client().hgetall(keys.mix(name))
    code, prose, paged = (int(found.get(f, 0)) for f in ("code", "prose", "paged"))
    total = code + prose
    return Mix(code / total, paged / total) if total else Mix(None, None)


def describe(config: CollectionConfig) -> dict[str, Any]:
    settings: dict[str, Any] = json.loads(config.model_dump_json())
    return settings


# -- a reindex in progress, or the previous generation kept for a rollback ---------------------

def reindex_record(name: str) -> dict[str, Any] | None:
    raw = redis_client().get(keys.reindex(name))
    return None if raw is None else cast("dict[str, Any]", json.loads(raw))


def store_reindex(name: str, record: dict[str, Any]) -> None:
    redis_client().set(keys.reindex(name), json.dumps(record))


def clear_reindex(name: str) -> None:
    redis_client().delete(keys.reindex(name), keys.reindex_touched(name))


def is_draining(name: str) -> bool:
    """A reindex is switching the collection to its new generation: submissions wait seconds."""
    record = reindex_record(name)
    return record is not None and record.get("phase") == "draining"


def touched(name: str, doc_id: str) -> None:
    """A document changed (submitted, retried, deleted): a reindex under way brings it across
    again; a rollback of one brings it back. One read when no reindex is there."""
    if redis_client().exists(keys.reindex(name)):
        redis_client().sadd(keys.reindex_touched(name), doc_id)


def take_touched(name: str, count: int) -> list[str]:
    return cast("list[str]", redis_client().spop(keys.reindex_touched(name), count) or [])


def put_back_touched(name: str, doc_ids: list[str]) -> None:
    if doc_ids:
        redis_client().sadd(keys.reindex_touched(name), *doc_ids)


def touched_count(name: str) -> int:
    return int(redis_client().scard(keys.reindex_touched(name)))
