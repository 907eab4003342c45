"""Contextualizers by name: which one a collection uses, built once per process.

Shipped offline and free (``offline``): ``keywords`` (the default), ``structural``, ``none``.
Language models: ``anthropic`` and ``bedrock`` (Claude's paid APIs), ``openai`` (your own servers
or a hosted API behind the OpenAI protocol) — all three scheduled by ``llm/`` — and ``llama`` (a
local GGUF file in each worker), imported only when a collection asks for them. Your own: ``register``,
from a module named in ``SITUATE_PLUGINS``.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable

from workers.contextualizers.base import Contextualizer
from workers.contextualizers.offline import KeywordContext, NoContext, StructuralContext
from workers.errors import PluginError
from workers.settings import get_settings
from workers.storage.catalog import CollectionConfig


def _anthropic(config: CollectionConfig) -> Contextualizer:
    from workers.contextualizers.llm.scheduler import anthropic_contextualizer

    return anthropic_contextualizer(config)


def _bedrock(config: CollectionConfig) -> Contextualizer:
    from workers.contextualizers.llm.scheduler import bedrock_contextualizer

    return bedrock_contextualizer(config)


def _openai(config: CollectionConfig) -> Contextualizer:
    from workers.contextualizers.llm.scheduler import openai_contextualizer

    return openai_contextualizer(config)


def _llama(config: CollectionConfig) -> Contextualizer:
    from workers.contextualizers.llama import LlamaContextualizer

    return LlamaContextualizer(config)


PROVIDERS: dict[str, Callable[[CollectionConfig], Contextualizer]] = {
    "none": lambda config: NoContext(),
    "structural": lambda config: StructuralContext(config.embed_header),
    "keywords": lambda config: KeywordContext(config.embed_header),
    "anthropic": _anthropic,
    "bedrock": _bedrock,
    "openai": _openai,
    "llama": _llama,
}
# Language models behind an API, scheduled by ``llm/``: a model per collection, the bill, slices
# of a big document on any worker. Claude's models are the table's (``workers.models``); an
# ``openai`` model is the operator's to name (``models.served``).
LLM_PROVIDERS = ("anthropic", "bedrock", "openai")
SERVED = "openai"
# Whose prompt cache belongs to the account: a big document's chunks may be cut into slices that
# any worker takes at once. On servers of your own a document's calls are bounded by its
# replica's slots instead (``llm.replicas``): slices would only run past that bound.
SLICED = ("anthropic", "bedrock")
# Free and instant, with no model to route to: their contexts are written by the chunk stage
# itself, which then hands the document straight to the index (one message a document fewer).
INLINE = ("none", "keywords", "structural")
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
_plugins_lock = threading.RLock()  # reentrant: a plugin that asks for a name while it registers


def load_plugins() -> None:
    """Import ``SITUATE_PLUGINS`` once per process (a worker does at start: a broken plugin stops
    it there, not on its first document).

    Marked loaded only once every module has been imported, under a lock: a thread that comes
    while another imports waits for the registrations instead of finding the names missing, and a
    module that failed to import fails every later call with its cause (``PluginError``), instead
    of leaving a process that believes its plugins loaded and answers "unknown contextualizer"."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    with _plugins_lock:  # another thread may have loaded them while this one waited: then nothing to do
        if not _plugins_loaded:
            for module in plugin_modules():
                try:
                    importlib.import_module(module)
                except Exception as e:
                    raise PluginError(f"plugin {module!r} (SITUATE_PLUGINS) cannot be imported: "
                                      f"{type(e).__name__}: {e}") from e
            _plugins_loaded = True


def plugin_modules() -> list[str]:
    return [m for m in (m.strip() for m in get_settings().plugins.split(",")) if m]


def _after_fork_in_child() -> None:
    """A process forked while another of its parent's threads held the lock would wait on it for
    ever: the child starts with a free one (and loads again if the parent had not finished)."""
    global _plugins_lock
    _plugins_lock = threading.RLock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def check_name(name: str) -> None:
    load_plugins()
    if name not in PROVIDERS:
        plugins = ", ".join(plugin_modules()) or "none"
        raise ValueError(f"unknown contextualizer {name!r}; choose one of {sorted(PROVIDERS)} "
                         f"(plugins in SITUATE_PLUGINS: {plugins})")


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
