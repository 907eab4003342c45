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

import time
import uuid
from typing import Any

from workers import allowlist, errors, models
from workers.contextualizers import prompts, registry
from workers.embedding import registry as embedders
from workers.errors import CollectionError, Conflict, NotAllowed
from workers.settings import get_settings
from workers.storage import (
    batch_pool,
    bill,
    bodies,
    bundle_pool,
    catalog,
    checkpoints,
    chunk_index,
    fairqueue,
    index_mapping,
    labels,
    states,
    tokens,
)
from workers.storage.catalog import FUSIONS, LANGUAGES, SEARCH_FIELDS, SHAPING_FIELDS, CollectionConfig

# The offline embedder a collection gets when none is named: the English models read English
# only; French and German get multilingual-e5 (``ops/bench corpora``'s French corpus decided it).
EMBEDDER_FOR_LANGUAGE = {"english": "local-e5", "french": "local-multilingual", "german": "local-multilingual"}


def ensure(name: str, expected_chunks: int | None = None, **requested: Any) -> CollectionConfig:
    """Return the collection, creating it with ``requested`` values over the environment's.

    ``requested`` holds only what the caller asked for explicitly (None = not asked). For an
    existing collection, an explicit value that differs from the stored one is an error that
    names the remedy, never a silent mix. ``expected_chunks`` sizes a new index's shards when
    none are named (``index_mapping.shards_for``); an existing collection ignores it.
    """
    _check_user_name(name)
    requested = {k: v for k, v in requested.items() if v is not None}
    unknown = set(requested) - set(SHAPING_FIELDS) - set(SEARCH_FIELDS)
    if unknown:
        raise CollectionError(f"unknown collection settings: {sorted(unknown)}")
    existing = catalog.find(name)
    if existing is not None:
        _check_same(existing, requested)
        chunk_index.ensure_index(existing)
        return existing
    _refuse_while_dropping(name)
    config = _new_config(name, requested, expected_chunks)
    chunk_index.check_free(config)  # an index of that name another collection owns (an old build's)
    if not catalog.store_new(config):  # created meanwhile by another producer: check against it
        return ensure(name, expected_chunks, **requested)
    chunk_index.ensure_index(config)
    return config


def _check_user_name(name: str) -> None:
    catalog.validate_name(name)
    if "~" in name:  # "<name>~g<n>": a generation a reindex is building, never made by hand
        raise errors.BadName(f"invalid collection name {name!r}: '~' names a generation being built")


def _refuse_while_dropping(name: str) -> None:
    if catalog.dropping(name) is not None:
        raise Conflict(f"collection {name!r} is being dropped and its drop did not finish (OpenSearch was "
                       "unreachable?): drop it again to finish, then create it")


def planned(name: str, expected_chunks: int | None = None, **requested: Any) -> CollectionConfig:
    """The collection as ``ensure`` would return it, stored and created nowhere (an estimate)."""
    _check_user_name(name)
    requested = {k: v for k, v in requested.items() if v is not None}
    existing = catalog.find(name)
    if existing is not None:
        _check_same(existing, requested)
        return existing
    return _new_config(name, requested, expected_chunks)


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


def _new_config(name: str, requested: dict[str, Any], expected_chunks: int | None = None) -> CollectionConfig:
    s = get_settings()
    # The environment's defaults for a new collection; its reranker stays None (the server's,
    # SITUATE_RERANKER, at query time) unless asked.
    values = {f: getattr(s, f) for f in SHAPING_FIELDS + SEARCH_FIELDS if hasattr(s, f) and f != "reranker"}
    values.update(requested)
    values["index_shards"] = values.get("index_shards") or 1  # 0: set below, from the expected size
    generation = uuid.uuid4().hex[:12]
    config = CollectionConfig(name=name, generation=generation, collection_id=generation, created=round(time.time(), 3),
                              index=catalog.index_for(name, 1), **values)
    if not config.embedder:  # not named: the local model that reads the collection's language
        config.embedder = EMBEDDER_FOR_LANGUAGE[config.language]
    if config.embed_context is None:
        config.embed_context = registry.is_model_written(config.contextualizer)
    if "index_shards" not in requested and not s.index_shards:  # 0: follow the expected size
        config.index_shards = index_mapping.shards_for(expected_chunks or s.expected_chunks, config)
    return _checked(config)


def set_replicas(name: str, spec: str) -> CollectionConfig:
    """Change a collection's replicas in place: OpenSearch copies or drops shards while the index
    serves (what replicas hold is the primaries' data: nothing is rebuilt)."""
    config = catalog.load(name)
    if config.index_replicas == spec:
        raise CollectionError(f"collection {name!r} has these settings already: name one to change")
    updated = config.model_copy(update={"index_replicas": spec})
    chunk_index.set_replicas(updated)
    catalog.store(updated)
    return updated


def rebuilt(live: CollectionConfig, changes: dict[str, Any]) -> CollectionConfig:
    """``live`` with ``changes`` (shaping settings), checked as a new collection is: the next
    generation a reindex builds. A new language brings its embedder, and a new contextualizer
    its embedding of contexts and default model, unless those are named too."""
    values = {**live.model_dump(), **changes, "index_generation": live.index_generation + 1,
              "index": catalog.index_for(live.name, live.index_generation + 1), "collection_id": live.owner_id}
    if "language" in changes and "embedder" not in changes and live.embedder == EMBEDDER_FOR_LANGUAGE[live.language]:
        values["embedder"], values["embed_model"] = EMBEDDER_FOR_LANGUAGE[changes["language"]], ""
    if "embedder" in changes and "embed_model" not in changes:
        values["embed_model"] = ""
    if "contextualizer" in changes:
        if "embed_context" not in changes:
            values["embed_context"] = registry.is_model_written(changes["contextualizer"])
        if "model" not in changes:
            values["model"] = ""
    config = CollectionConfig.model_validate(values)
    if config.vectors not in catalog.VECTORS:
        raise CollectionError(f"vectors must be one of {catalog.VECTORS}, not {config.vectors!r}")
    return _checked(config)


def _checked(config: CollectionConfig) -> CollectionConfig:
    """A configuration's settings against the providers and the deployment's allowlists."""
    if config.fusion not in FUSIONS:
        raise CollectionError(f"fusion must be one of {FUSIONS}, not {config.fusion!r}")
    if config.language not in LANGUAGES:
        raise CollectionError(f"language must be one of {LANGUAGES}, not {config.language!r}")
    if config.chunk_overlap >= config.chunk_tokens:
        raise CollectionError("chunk_overlap must be smaller than chunk_tokens")
    if config.vectors not in catalog.VECTORS:
        raise CollectionError(f"vectors must be one of {catalog.VECTORS}, not {config.vectors!r}")
    embedders.check(config.embedder, config.embed_model)
    registry.check_name(config.contextualizer)
    _checked_model(config)
    check_allowed(config.contextualizer, config.model)
    allowlist.check_embedder(config.embedder, config.embed_model)
    if config.reranker:
        allowlist.check_reranker(config.reranker)
    _checked_prompt(config)
    return config


def _checked_model(config: CollectionConfig) -> None:
    """An LLM contextualizer's model: the table's default for Claude, none to guess for servers of
    your own, a GGUF file that exists for llama."""
    if config.contextualizer == registry.SERVED:
        if not config.model:  # a self-hosted model's name is the operator's: no default to guess
            raise CollectionError("the openai contextualizer needs the model your servers serve: --model NAME "
                                  "(the name they answer to, as in GET /v1/models)")
    elif config.contextualizer in registry.LLM_PROVIDERS:
        if not config.model:
            config.model = models.DEFAULT_MODEL
        status, note = models.lifecycle_note(models.get(config.model))  # unknown: an error now, not at the first call
        if status == "retired":
            raise NotAllowed(note)
    if config.contextualizer == "llama":
        from workers.contextualizers import llama

        try:
            llama.model_path(config)  # a missing file: an error now, not on every worker
        except errors.LocalLLMError as e:
            raise CollectionError(str(e)) from None


def _checked_prompt(config: CollectionConfig) -> None:
    """A collection's own prompt and glossary, for a contextualizer that reads them."""
    if config.prompt and registry.is_model_written(config.contextualizer):
        prompts.check_template(config.prompt)
    if config.glossary:
        if not registry.is_model_written(config.contextualizer):
            raise CollectionError(f"a glossary is read by a language model: the {config.contextualizer!r} "
                                  "contextualizer would ignore it")
        try:
            prompts.check_glossary(config.glossary)
        except ValueError as e:
            raise CollectionError(str(e)) from None


def has_model_lifecycle(config: CollectionConfig) -> bool:
    """Whether the collection's model is Claude's, whose end of life the model table knows; a model
    your own servers answer to is the operator's to name and to retire."""
    return config.contextualizer in registry.LLM_PROVIDERS and config.contextualizer != registry.SERVED \
        and bool(config.model)


def model_warning(config: CollectionConfig) -> str:
    """A sentence for the operator when the collection's model is deprecated or retired."""
    if not has_model_lifecycle(config):
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
    if updated.reranker:
        allowlist.check_reranker(updated.reranker)
    if updated.fusion not in FUSIONS:
        raise CollectionError(f"fusion must be one of {FUSIONS}, not {updated.fusion!r}")
    catalog.store(updated)
    return updated


def check_allowed(contextualizer: str, model: str) -> None:
    """The deployment's allowlist (``SITUATE_ALLOWED_MODELS``): which contextualizers, and which
    of their models, a collection may use. A caller cannot pick a costlier model than allowed."""
    allowlist.check_contextualizer(contextualizer, model, contextualizer in registry.LLM_PROVIDERS)


def delete(name: str) -> None:
    """Drop a collection: its tokens, index, settings, per-document state, bodies, checkpoints,
    waiting work and bill.

    A tombstone replaces the catalog entry first (nothing new reaches the collection, and its
    workers' tasks find it gone), then the parts go one by one. If one step fails (OpenSearch
    down), the tombstone stays: the collection is not listed, cannot be re-created, and the next
    drop of the same name resumes where this one stopped. Dropping twice is not an error."""
    config = catalog.find(name)
    if config is not None:
        catalog.mark_dropping(config)
    else:
        config = catalog.dropping(name)
        if config is None:
            raise errors.NoSuchCollection(f"collection {name!r} does not exist")
    tokens.revoke_collection(name)  # before anything else: the tenant is out at once
    _drop_generations(name)
    chunk_index.delete_index(config)
    fairqueue.forget_collection(name)
    batch_pool.forget_collection(name)
    bundle_pool.forget_collection(name)
    states.forget_collection(name)
    checkpoints.forget_collection(name)
    bodies.body_store().forget_collection(name)
    bill.forget_collection(name)
    labels.forget_collection(name)
    catalog.dropped(name)


def delete_left_behind(name: str) -> list[str]:
    """The indexes a collection the catalog no longer knows (Redis lost its data or was flushed)
    left in OpenSearch, deleted: without it, making the collection again finds its index taken.
    Never an index while its collection is listed or being dropped (``delete`` does those)."""
    if catalog.find(name) is not None or catalog.dropping(name) is not None:
        return []
    left = chunk_index.left_behind(name)
    for index in left:
        chunk_index.delete_index_named(index)
    return left


def _drop_generations(name: str) -> None:
    """A reindex's parts: the generation being built (a collection of its own) or the previous
    one kept for a rollback, and the alias over them."""
    for shadow in catalog.shadows_of(name):  # with or without a record (a start cut short)
        delete(shadow)
    record = catalog.reindex_record(name)
    if record is None:
        return
    if record.get("previous"):
        chunk_index.delete_index(CollectionConfig.model_validate(record["previous"]))
    catalog.clear_reindex(name)


def delete_document(name: str, doc_id: str) -> bool:
    """Remove a document from the index and from Redis; False if the collection never had it.

    Only what it saw goes: under the document's lock (a re-submission of the same document waits,
    so it cannot lose its body, which has the same key when the content is the same), the state
    is forgotten only if it is still the submission read, and only chunks of that submission or
    older are deleted. Stages still in flight for it then find nothing to do, and an index task
    writing at that moment finds its document gone and removes what it wrote."""
    config = catalog.load(name)
    with states.document_lock(name, doc_id):
        doc = states.get(name, doc_id)
        seq = doc["seq"] if doc else None
        if doc is not None and not states.forget_if(name, doc_id, doc["seq"]):
            return True  # changed between the two reads: impossible under the lock, but never delete blind
        removed = chunk_index.delete_document(config, doc_id, up_to_seq=seq)
        if doc and doc.get("version"):
            bodies.body_store().delete(name, doc_id, doc["version"])
            checkpoints.release(name, doc_id, doc["version"])
        bodies.body_store().forget_kept(name, doc_id)
    catalog.touched(name, doc_id)
    return doc is not None or removed > 0
