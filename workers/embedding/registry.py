"""Embedders by name, one instance per process: texts to unit vectors, chosen per collection
(``SITUATE_EMBEDDER``, ``SITUATE_EMBED_MODEL``). Documents and queries are embedded
differently where the model wants it (``input_type``, a ``query:`` prefix), hence two methods.

``embed_documents`` receives the chunks of one document, in order — or, from a bundle of
one-chunk documents, several documents' chunks at once, unless the embedder is ``contextual``:
``voyage-context`` always gets one document's, which lets it embed each chunk in the light of its
whole document, without an LLM.

- ``local-e5`` (the default for English), ``local-bge``, ``local``, ``local-multilingual``: ``local``.
- ``voyage``, ``voyage-context``, ``bedrock``: ``remote``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from workers import models
from workers.embedding.base import Embedder
from workers.settings import get_settings

LOCAL = ("local-e5", "local-bge", "local", "local-multilingual")
NAMES = LOCAL + ("voyage", "voyage-context", "bedrock")
LOCAL_DIMENSION = 384  # every local model


def check(name: str, model: str = "") -> None:
    if name not in NAMES:
        raise ValueError(f"unknown embedder {name!r}; choose one of {list(NAMES)}")
    if name in LOCAL:
        if model:
            raise ValueError(f"the {name} embedder has one model; leave embed_model empty")
    else:
        models.embedding_model(name, model)


def dimension(name: str, model: str = "") -> int:
    check(name, model)
    if name in LOCAL:
        return LOCAL_DIMENSION
    return models.embedding_model(name, model).dimension


@lru_cache(maxsize=8)
def get(name: str, model: str = "") -> Embedder:
    """One instance per process and (embedder, model): models load once."""
    check(name, model)
    batch = get_settings().embed_batch_size
    if name in LOCAL:
        from workers.embedding import local

        if name == "local-e5":
            return local.e5(batch_size=batch)
        if name == "local-bge":
            return local.bge(batch_size=batch)
        if name == "local":
            return local.minilm(batch_size=batch)
        return local.LocalMultilingual(batch_size=batch)
    from workers.embedding import remote

    factories: dict[str, Callable[[str], Embedder]] = {"voyage": remote.Voyage, "voyage-context": remote.VoyageContext,
                                                       "bedrock": remote.Bedrock}
    return factories[name](model)


def for_documents(name: str, model: str = "", tail: float = 0.0) -> Embedder:
    """The embedder a collection's chunks go through: ``get``'s, weighing a long chunk's tail at
    ``tail`` (``stages.tail_weight``: the collection's ``embed_tail`` for a paged document, 0 for a
    text; local encoders, the others read what they read)."""
    embedder = get(name, model)
    from workers.embedding.local import LocalEncoder

    return embedder.reading_tail(tail) if isinstance(embedder, LocalEncoder) else embedder
