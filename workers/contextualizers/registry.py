"""Contextualizers by name: which one a collection uses, built once per process.

Shipped offline and free (``offline``): ``keywords`` (the default), ``structural``, ``none``.
Language models: ``anthropic`` and ``bedrock`` (paid APIs, ``claude/``) and ``llama`` (a local
GGUF file, ``llama``), imported only when a collection asks for them. Your own: ``register``,
from a module named in ``SITUATE_PLUGINS``.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable

from workers.contextualizers.base import Contextualizer
from workers.contextualizers.offline import KeywordContext, NoContext, StructuralContext
from workers.settings import get_settings
from workers.storage.catalog import CollectionConfig


def _anthropic(config: CollectionConfig) -> Contextualizer:
    from workers.contextualizers.claude.scheduler import anthropic_contextualizer

    return anthropic_contextualizer(config)


def _bedrock(config: CollectionConfig) -> Contextualizer:
    from workers.contextualizers.claude.scheduler import bedrock_contextualizer

    return bedrock_contextualizer(config)


def _llama(config: CollectionConfig) -> Contextualizer:
    from workers.contextualizers.llama import LlamaContextualizer

    return LlamaContextualizer(config)


PROVIDERS: dict[str, Callable[[CollectionConfig], Contextualizer]] = {
    "none": lambda config: NoContext(),
    "structural": lambda config: StructuralContext(config.embed_header),
    "keywords": lambda config: KeywordContext(config.embed_header),
    "anthropic": _anthropic,
    "bedrock": _bedrock,
    "llama": _llama,
}
LLM_PROVIDERS = ("anthropic", "bedrock")  # paid APIs: model table, rate limits, the bill
MODEL_WRITTEN: tuple[str, ...] = LLM_PROVIDERS + ("llama",)  # contexts a language model wrote: embedded too


def register(name: str, factory: Callable[[CollectionConfig], Contextualizer], model_written: bool = False) -> None:
    """Add a contextualizer of your own, from a module named in ``SITUATE_PLUGINS`` (imported by
    every worker and producer, so both sides know the name). ``model_written``: its contexts
    are embedded with the chunk by default, as a language model's are."""
    global MODEL_WRITTEN
    PROVIDERS[name] = factory
    if model_written and name not in MODEL_WRITTEN:
        MODEL_WRITTEN = MODEL_WRITTEN + (name,)


_plugins_loaded = False


def load_plugins() -> None:
    """Import ``SITUATE_PLUGINS`` once per process (a worker does at start: a broken plugin stops
    it there, not on its first document)."""
    global _plugins_loaded
    if not _plugins_loaded:
        _plugins_loaded = True
        for module in filter(None, (m.strip() for m in get_settings().plugins.split(","))):
            importlib.import_module(module)


def check_name(name: str) -> None:
    load_plugins()
    if name not in PROVIDERS:
        raise ValueError(f"unknown contextualizer {name!r}; choose one of {sorted(PROVIDERS)}")


def is_model_written(name: str) -> bool:
    load_plugins()
    return name in MODEL_WRITTEN


_cache: dict[str, Contextualizer] = {}
_cache_lock = threading.Lock()


def for_collection(config: CollectionConfig) -> Contextualizer:
    key = f"{config.name}:{config.contextualizer}:{config.model}"
    with _cache_lock:  # a worker's threads start many documents of a collection at once: build one
        if key not in _cache:
            check_name(config.contextualizer)
            _cache[key] = PROVIDERS[config.contextualizer](config)
        return _cache[key]
