"""Creating and dropping collections, and deleting documents.

Creating a collection is the one place that checks its settings against every provider (is
the contextualizer known, the model in the table, the GGUF file there, the embedder and its
model real), stores them in the catalog and creates the index. Dropping a collection or
deleting a document removes it from the index and from Redis.

It sits above everything it checks, which is why it is not in ``storage.catalog``: the
catalog is read by contextualizers, embedders and the index mapping, and must not import
them back.
"""

from __future__ import annotations

from typing import Any

from workers import models
from workers.contextualizers import prompts, registry
from workers.contextualizers.claude import usage
from workers.embedding import registry as embedders
from workers.settings import get_settings
from workers.storage import bodies, catalog, checkpoints, chunk_index, states
from workers.storage.catalog import (FUSIONS, LANGUAGES, SEARCH_FIELDS, SHAPING_FIELDS, CollectionConfig, CollectionError,
                                     Conflict, NotAllowed)


# The offline embedder a collection gets when none is named: MiniLM reads English only (on
# the French corpus its dense Pass@10 is 55.6, multilingual-e5's 75.2).
EMBEDDER_FOR_LANGUAGE = {"english": "local", "french": "local-multilingual", "german": "local-multilingual"}


def ensure(name: str, **requested: Any) -> CollectionConfig:
    """Return the collection, creating it with ``requested`` values over the environment's.

    ``requested`` holds only what the caller asked for explicitly (None = not asked). For an
    existing collection, an explicit value that differs from the stored one is an error that
    names the remedy, never a silent mix.
    """
    catalog.validate_name(name)
    requested = {k: v for k, v in requested.items() if v is not None}
    unknown = set(requested) - set(SHAPING_FIELDS) - set(SEARCH_FIELDS)
    if unknown:
        raise CollectionError(f"unknown collection settings: {sorted(unknown)}")
    existing = catalog.find(name)
    if existing is not None:
        _check_same(existing, requested)
        chunk_index.ensure_index(existing)
        return existing
    config = _new_config(name, requested)
    if not catalog.store_new(config):  # created meanwhile by another producer: check against it
        return ensure(name, **requested)
    chunk_index.ensure_index(config)
    return config


def planned(name: str, **requested: Any) -> CollectionConfig:
    """The collection as ``ensure`` would return it, stored and created nowhere (an estimate)."""
    catalog.validate_name(name)
    requested = {k: v for k, v in requested.items() if v is not None}
    existing = catalog.find(name)
    if existing is not None:
        _check_same(existing, requested)
        return existing
    return _new_config(name, requested)


def _check_same(config: CollectionConfig, requested: dict[str, Any]) -> None:
    conflicts = {k: (getattr(config, k), v) for k, v in requested.items() if getattr(config, k) != v}
    if not conflicts:
        return
    detail = ", ".join(f"{k}: stored {old!r}, asked {new!r}" for k, (old, new) in conflicts.items())
    if set(conflicts) <= set(SEARCH_FIELDS):
        raise Conflict(
            f"collection {config.name!r} has other search defaults ({detail}): pass them per query "
            "(situate search --fusion/--dense-weight/--context-weight/--rrf-k, or the same fields in the API's "
            "search body), or change the defaults with situate tune --apply"
        )
    raise Conflict(
        f"collection {config.name!r} was created with other settings ({detail}); "
        "these shape its index and cannot change: ingest into a new collection instead"
    )


def _new_config(name: str, requested: dict[str, Any]) -> CollectionConfig:
    s = get_settings()
    # The environment's defaults for a new collection; its reranker stays None (the server's,
    # SITUATE_RERANKER, at query time) unless asked.
    values = {f: getattr(s, f) for f in SHAPING_FIELDS + SEARCH_FIELDS if hasattr(s, f) and f != "reranker"}
    values.update(requested)
    config = CollectionConfig(name=name, **values)
    if config.fusion not in FUSIONS:
        raise CollectionError(f"fusion must be one of {FUSIONS}, not {config.fusion!r}")
    if config.language not in LANGUAGES:
        raise CollectionError(f"language must be one of {LANGUAGES}, not {config.language!r}")
    if config.chunk_overlap >= config.chunk_tokens:
        raise CollectionError("chunk_overlap must be smaller than chunk_tokens")
    if not config.embedder:  # not named: the local model that reads the collection's language
        config.embedder = EMBEDDER_FOR_LANGUAGE[config.language]
    embedders.check(config.embedder, config.embed_model)
    registry.check_name(config.contextualizer)
    if config.embed_context is None:
        config.embed_context = registry.is_model_written(config.contextualizer)
    if config.contextualizer in registry.LLM_PROVIDERS:
        if not config.model:
            config.model = models.DEFAULT_MODEL
        status, note = models.lifecycle_note(models.get(config.model))  # unknown: an error now, not at the first call
        if status == "retired":
            raise NotAllowed(note)
    check_allowed(config.contextualizer, config.model)
    if config.contextualizer == "llama":
        from workers.contextualizers import llama

        try:
            llama.model_path(config)  # a missing file: an error now, not on every worker
        except llama.LocalLLMError as e:
            raise CollectionError(str(e)) from None
    if config.prompt and registry.is_model_written(config.contextualizer):
        prompts.check_template(config.prompt)
    return config


def model_warning(config: CollectionConfig) -> str:
    """A sentence for the operator when the collection's model is deprecated or retired."""
    if config.contextualizer not in registry.LLM_PROVIDERS or not config.model:
        return ""
    try:
        return models.lifecycle_note(models.get(config.model))[1]
    except ValueError:
        return f"{config.model} is no longer in the model table (add it with SITUATE_MODELS)"


def set_search_defaults(name: str, **fields: Any) -> CollectionConfig:
    """Change a collection's search defaults (``situate tune --apply``): they shape no stored
    data, so unlike the other settings they may change after creation."""
    unknown = set(fields) - set(SEARCH_FIELDS)
    if unknown:
        raise CollectionError(f"not search settings: {sorted(unknown)}")
    config = catalog.load(name)
    updated = CollectionConfig.model_validate({**config.model_dump(), **fields})
    if updated.fusion not in FUSIONS:
        raise CollectionError(f"fusion must be one of {FUSIONS}, not {updated.fusion!r}")
    catalog.store(updated)
    return updated


def check_allowed(contextualizer: str, model: str) -> None:
    """The deployment's allowlist (``SITUATE_ALLOWED_MODELS``): which contextualizers, and which
    of their models, a collection may use. A caller cannot pick a costlier model than allowed."""
    allowed = [a.strip() for a in get_settings().allowed_models.split(",") if a.strip()]
    wanted = f"{contextualizer}:{model}" if model and contextualizer in registry.LLM_PROVIDERS else contextualizer
    for rule in allowed:
        if rule == "*" or rule == wanted or rule == contextualizer or rule == f"{contextualizer}:*":
            return
    raise NotAllowed(f"{wanted!r} is not allowed here (SITUATE_ALLOWED_MODELS: {', '.join(allowed)}); "
                          "the operator can allow it")


def delete(name: str) -> None:
    """Drop a collection: its index, settings, per-document state, bodies, checkpoints and bill."""
    config = catalog.load(name)
    catalog.forget(name)  # first: producers can no longer submit to it, workers find it gone
    chunk_index.delete_index(config)
    states.forget_collection(name)
    checkpoints.forget_collection(name)
    bodies.body_store().forget_collection(name)
    usage.forget_collection(name)


def delete_document(name: str, doc_id: str) -> bool:
    """Remove a document from the index and from Redis; False if the collection never had it.

    Its state goes first: stages still in flight for it then find nothing to do, and an index
    task that was writing at that moment finds its document gone and removes what it wrote."""
    config = catalog.load(name)
    doc = states.get(name, doc_id)
    states.forget(name, doc_id)
    removed = chunk_index.delete_document(config, doc_id)
    if doc and doc.get("version"):
        bodies.body_store().delete(name, doc_id, doc["version"])
        checkpoints.release(name, doc_id, doc["version"])
    return doc is not None or removed > 0
