"""What every embedder shares: the interface and unit-length vectors."""

from __future__ import annotations

import os
from typing import Protocol

import numpy as np


class Embedder(Protocol):
    name: str
    dimension: int

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        """The chunks of *one* document, in order (a contextual embedder needs them together)."""
        ...

    def embed_query(self, text: str) -> np.ndarray: ...


def unit(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    return vectors / np.clip(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12, None)


def threads() -> int:
    """ONNX / C threads per process (``SITUATE_EMBED_THREADS``; 0 = the library's default):
    ``situate worker`` sets it to cores / processes so pool processes do not oversubscribe."""
    return int(os.environ.get("SITUATE_EMBED_THREADS", "0"))
