"""A collection's configuration: the settings that shape its index, frozen at creation.

Why frozen: a BM25 analyzer, an embedding model or a chunk size cannot change under an index
without making old and new chunks incomparable. So the producer that creates a collection
fixes them (from CLI flags, falling back to its ``SITUATE_*`` environment), they are stored in
Redis, and every worker reads the stored copy. Asking for a different value later is an error
that names the remedy (a new collection), never a silent mix.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, Field

from workers.connections import redis_client
from workers.settings import get_settings

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
LANGUAGES = ("english", "french", "german")


class CollectionError(ValueError):
    pass


class CollectionConfig(BaseModel):
    name: str
    contextualizer: str = "keywords"
    model: str = ""
    embedder: str = "local"
    embed_model: str = ""  # the embedder's model (API embedders); "" = its default
    language: str = "english"
    chunk_tokens: int = Field(300, ge=16, le=8192)
    chunk_overlap: int = Field(0, ge=0)
    # Replaces the provider's default prompt for this collection (LLM contextualizers only).
    prompt: str | None = None
    # Whether the embedder sees context + chunk (True) or the chunk alone. None at creation
    # means: yes for LLM contexts (what Contextual Retrieval is), no for the offline ones,
    # whose terms help BM25 but blur a chunk's vector (measured: see README).
    embed_context: bool | None = None
    # Search defaults, overridable per query. BM25 weight of the context field against the
    # chunk's text (1.0); fusion "rrf" (ranks) or "weighted" (min-max scores); the dense
    # side's weight against BM25's 1.0. None at creation: 0.5 when the collection has
    # contexts its vectors don't see (BM25 is then the only side that carries them), else 1.0.
    context_weight: float = Field(1.0, ge=0)
    fusion: str = "rrf"
    dense_weight: float | None = Field(None, ge=0)

    @property
    def index_name(self) -> str:
        return f"situate-{self.name}"


SHAPING_FIELDS = ("contextualizer", "model", "embedder", "embed_model", "language", "chunk_tokens", "chunk_overlap", "prompt",
                  "embed_context")
# Fixed at creation too, so that every search of a collection agrees by default, but a query
# may override them (they shape no stored data).
SEARCH_FIELDS = ("context_weight", "fusion", "dense_weight")
FUSIONS = ("rrf", "weighted")


def _key(name: str) -> str:
    return f"situate:collection:{name}"


def validate_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise CollectionError(
            f"invalid collection name {name!r}: use 1-63 lowercase letters, digits, '-' or '_'"
        )
    return name


def load(name: str) -> CollectionConfig:
    raw = redis_client().get(_key(validate_name(name)))
    if raw is None:
        raise CollectionError(f"collection {name!r} does not exist")
    return CollectionConfig.model_validate_json(raw)


def exists(name: str) -> bool:
    return bool(redis_client().exists(_key(validate_name(name))))


def list_names() -> list[str]:
    return sorted(k.split(":", 2)[2] for k in redis_client().scan_iter("situate:collection:*"))


def ensure(name: str, **requested: Any) -> CollectionConfig:
    """Return the collection, creating it with ``requested`` values over the environment's.

    ``requested`` holds only what the caller asked for explicitly (None = not asked). For an
    existing collection, an explicit value that differs from the stored one is an error.
    """
    from workers import embedders, contextualizers, index  # late: heavy imports

    validate_name(name)
    requested = {k: v for k, v in requested.items() if v is not None}
    unknown = set(requested) - set(SHAPING_FIELDS) - set(SEARCH_FIELDS)
    if unknown:
        raise CollectionError(f"unknown collection settings: {sorted(unknown)}")
    raw = redis_client().get(_key(name))
    if raw is not None:
        config = CollectionConfig.model_validate_json(raw)
        conflicts = {k: (getattr(config, k), v) for k, v in requested.items() if getattr(config, k) != v}
        detail = ", ".join(f"{k}: stored {old!r}, asked {new!r}" for k, (old, new) in conflicts.items())
        if conflicts and set(conflicts) <= set(SEARCH_FIELDS):
            raise CollectionError(
                f"collection {name!r} has other search defaults ({detail}); they are fixed at creation: "
                "pass them per query instead (situate search --fusion/--dense-weight/--context-weight, "
                "or the same fields in the API's search body)"
            )
        if conflicts:
            raise CollectionError(
                f"collection {name!r} was created with other settings ({detail}); "
                "these shape its index and cannot change: ingest into a new collection instead"
            )
        index.ensure_index(config)
        return config

    s = get_settings()
    values = {f: getattr(s, f) for f in SHAPING_FIELDS + SEARCH_FIELDS if hasattr(s, f)}
    values.update(requested)
    config = CollectionConfig(name=name, **values)
    if config.fusion not in FUSIONS:
        raise CollectionError(f"fusion must be one of {FUSIONS}, not {config.fusion!r}")
    if config.language not in LANGUAGES:
        raise CollectionError(f"language must be one of {LANGUAGES}, not {config.language!r}")
    if config.chunk_overlap >= config.chunk_tokens:
        raise CollectionError("chunk_overlap must be smaller than chunk_tokens")
    embedders.check(config.embedder, config.embed_model)
    contextualizers.check_name(config.contextualizer)
    if config.embed_context is None:
        config.embed_context = config.contextualizer in contextualizers.MODEL_WRITTEN
    if config.dense_weight is None:
        unseen_context = config.contextualizer != "none" and not config.embed_context
        config.dense_weight = 0.5 if unseen_context else 1.0
    if config.contextualizer in contextualizers.LLM_PROVIDERS:
        from workers import models, prompts

        if not config.model:
            config.model = models.DEFAULT_MODEL
        models.get(config.model)  # unknown model: an error now, not at the first call
        if config.prompt:
            prompts.check_template(config.prompt)
    if config.contextualizer == "llama":
        from workers import llm_local, prompts

        try:
            llm_local.model_path(config)  # a missing file: an error now, not on every worker
        except llm_local.LocalLLMError as e:
            raise CollectionError(str(e)) from None
        if config.prompt:
            prompts.check_template(config.prompt)
    # SET NX: two producers creating the same collection at once agree on the first one.
    if not redis_client().set(_key(name), config.model_dump_json(), nx=True):
        return ensure(name, **requested)
    index.ensure_index(config)
    return config


def delete(name: str) -> None:
    """Drop a collection: its index, its config and its per-document state."""
    from workers import index, status

    config = load(name)
    index.delete_index(config)
    status.forget_collection(name)
    redis_client().delete(_key(name))


def describe(config: CollectionConfig) -> dict[str, Any]:
    return json.loads(config.model_dump_json())
