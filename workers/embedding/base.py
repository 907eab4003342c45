"""What every embedder shares: the interface and unit-length vectors."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from workers.settings import get_settings


class Embedder(Protocol):
    name: str
    dimension: int

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        """The chunks of one document, in order; or of several one-chunk documents (a bundle),
        unless the embedder sets ``contextual``: then always one document's, together."""
        ...

    def embed_query(self, text: str) -> np.ndarray: ...


def unit(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    normalized: np.ndarray = vectors / np.clip(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12, None)
    return normalized


def threads() -> int:
    """ONNX / C threads per process (``SITUATE_EMBED_THREADS``; 0 = the library's default):
    ``situate worker`` sets it to cores / processes so pool processes do not oversubscribe."""
    return get_settings().embed_threads
