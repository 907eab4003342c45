"""Rerankers: reorder the fused candidates by a model that reads query and chunk together.

Chosen per query or by ``SITUATE_RERANKER`` (default ``none``: no packaged cross-encoder
ships its weights on PyPI). The reranker sees the contextualized chunk
(context, then text) — the same text BM25 and the embedder were given to judge.

- ``voyage``: Voyage ``rerank`` (rerank-2.5), ``VOYAGE_API_KEY``, ``VOYAGE_BASE_URL``.
- ``bedrock``: Cohere Rerank 3.5 or Amazon Rerank through bedrock-runtime ``invoke_model``.
- ``cohere``: any Cohere-compatible ``POST /v2/rerank`` (Cohere itself, or a self-hosted
  server that speaks it): ``SITUATE_COHERE_URL``, ``CO_API_KEY``.
- ``onnx``: a local cross-encoder exported to ONNX (``SITUATE_RERANK_ONNX``: the .onnx file;
  its ``tokenizer.json`` beside it). Its first output is the relevance logit.

Model ids come from ``SITUATE_RERANK_MODEL`` (default per provider in ``models``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from workers import faults, models
from workers.contextualizers.base import contextualized_text
from workers.settings import get_credentials, get_settings

NAMES = ("none", "voyage", "bedrock", "cohere", "onnx")


def _in_order(count: int, scored: Iterable[tuple[int, float]]) -> list[float]:
    """Provider results ``(index, relevance_score)``, in any order -> one score per document."""
    out = [0.0] * count
    for index, score in scored:
        out[index] = float(score)
    return out


class Reranker(Protocol):
    name: str

    def scores(self, query: str, documents: list[str]) -> list[float]:
        """One relevance score per document, in the order given (higher is better)."""
        ...


class VoyageReranker:
    name = "voyage"

    def __init__(self, model: str):
        from workers.embedding.remote import voyage_client

        self.model = model or models.DEFAULT_RERANK_MODEL["voyage"]
        self.client = voyage_client()

    def scores(self, query: str, documents: list[str]) -> list[float]:
        results = faults.call(lambda: self.client.rerank(query, documents, model=self.model).results, "voyage",
                              faults.QUERY)
        return _in_order(len(documents), ((r.index, r.relevance_score) for r in results))


class BedrockReranker:
    """Cohere Rerank 3.5 (``api_version`` 2) or Amazon Rerank on Bedrock's runtime."""

    name = "bedrock"

    def __init__(self, model: str):
        from workers.embedding.remote import bedrock_runtime

        self.model = model or models.DEFAULT_RERANK_MODEL["bedrock"]
        self.client = bedrock_runtime()

    def scores(self, query: str, documents: list[str]) -> list[float]:
        body = {"query": query, "documents": documents, "top_n": len(documents)}
        if self.model.startswith("cohere."):
            body["api_version"] = 2
        from workers.embedding.remote import invoke

        results = invoke(self.client, self.model, body, faults.QUERY)["results"]
        return _in_order(len(documents), ((r["index"], r["relevance_score"]) for r in results))


class CohereReranker:
    """Cohere's v2 rerank wire format over plain HTTP."""

    name = "cohere"

    def __init__(self, model: str):
        import httpx

        self.model = model or models.DEFAULT_RERANK_MODEL["cohere"]
        self.url = get_settings().cohere_url.rstrip("/") + "/v2/rerank"
        key = get_credentials().cohere_api_key
        self.http = httpx.Client(timeout=get_settings().provider_timeout_s,
                                 headers={"Authorization": f"Bearer {key}"} if key else {})

    def scores(self, query: str, documents: list[str]) -> list[float]:
        def call() -> dict[str, Any]:
            response = self.http.post(self.url, json={"model": self.model, "query": query, "documents": documents,
                                                      "top_n": len(documents)})
            response.raise_for_status()
            answer: dict[str, Any] = response.json()
            return answer

        results = faults.call(call, "cohere", faults.QUERY)["results"]
        return _in_order(len(documents), ((r["index"], r["relevance_score"]) for r in results))


class OnnxCrossEncoder:
    """A cross-encoder file of your own (e.g. an ms-marco MiniLM exported with optimum):
    (query, passage) pairs in, one logit per pair out. Nothing is downloaded."""

    name = "onnx"
    max_tokens = 512

    def __init__(self, path: str, batch_size: int = 16):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        if not path:
            raise ValueError("the onnx reranker needs SITUATE_RERANK_ONNX=/path/to/model.onnx")
        model = Path(path)
        tokenizer = model.with_name("tokenizer.json")
        if not model.is_file() or not tokenizer.is_file():
            raise ValueError(f"the onnx reranker needs {model} and {tokenizer}")
        self.tokenizer = Tokenizer.from_file(str(tokenizer))
        self.tokenizer.enable_truncation(self.max_tokens)
        self.tokenizer.enable_padding()
        self.session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.batch_size = batch_size

    def scores(self, query: str, documents: list[str]) -> list[float]:
        out: list[float] = []
        for start in range(0, len(documents), self.batch_size):
            encodings = self.tokenizer.encode_batch([(query, d) for d in documents[start:start + self.batch_size]])
            feed = {"input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
                    "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64)}
            if "token_type_ids" in self.inputs:
                feed["token_type_ids"] = np.array([e.type_ids for e in encodings], dtype=np.int64)
            logits = np.asarray(self.session.run(None, feed)[0], dtype=np.float32)
            out += logits.reshape(len(encodings), -1)[:, 0].tolist()
        return out


def check(name: str) -> None:
    if name not in NAMES:
        raise ValueError(f"unknown reranker {name!r}; choose one of {list(NAMES)}")


@lru_cache(maxsize=8)
def get(name: str) -> Reranker:
    check(name)
    model = get_settings().rerank_model
    if name == "voyage":
        return VoyageReranker(model)
    if name == "bedrock":
        return BedrockReranker(model)
    if name == "cohere":
        return CohereReranker(model)
    if name == "onnx":
        return OnnxCrossEncoder(get_settings().rerank_onnx)
    raise ValueError("no reranker to load for 'none'")


def rerank(name: str, query: str, hits: Sequence[Any]) -> list[Any]:
    """``hits`` (search.Hit) reordered by the reranker; its score replaces the fused one, and
    ``ranks["fused"]`` keeps where each hit stood before."""
    if not hits:
        return []
    scores = get(name).scores(query, [contextualized_text(h.context, h.text) for h in hits])
    for position, (hit, score) in enumerate(zip(hits, scores), start=1):
        hit.ranks["fused"] = position
        hit.score = score
    return sorted(hits, key=lambda h: (-h.score, h.ranks["fused"]))
