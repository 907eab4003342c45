"""Embedding APIs: Voyage (``embed``, ``contextualized_embed``) and Bedrock (Titan, Cohere).

Requests stay within each model's per-request caps (``workers.models``). The clients honour
their usual endpoint variables (``VOYAGE_BASE_URL`` here, since the Voyage SDK reads none;
``AWS_ENDPOINT_URL_BEDROCK_RUNTIME``), which is how the tests point them at the stand-in. A 429
or 5xx is retried with exponential backoff by each client. The rerankers reuse these clients.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np

from workers import models
from workers.embedding.base import unit
from workers.settings import get_settings

MAX_ATTEMPTS = 8


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


def voyage_client() -> Any:
    import voyageai.client

    return voyageai.client.Client(max_retries=MAX_ATTEMPTS, timeout=120, base_url=get_settings().voyage_base_url or None)


class Voyage:
    """Voyage ``embed`` with ``input_type`` document/query; the SDK retries 429 and 503."""

    name = "voyage"

    def __init__(self, model: str):
        self.spec = models.embedding_model(self.name, model)  # the subclass's name: its own table rows
        self.dimension = self.spec.dimension
        self.client = voyage_client()

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = []
        for group in _batches(texts, self.spec):
            vectors += self.client.embed(group, model=self.spec.id, input_type="document").embeddings
        return unit(np.array(vectors))

    def embed_query(self, text: str) -> np.ndarray:
        return unit(np.array(self.client.embed([text], model=self.spec.id, input_type="query").embeddings[0]))


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
        return unit(np.array(vectors))

    def embed_query(self, text: str) -> np.ndarray:
        result = self.client.contextualized_embed([[text]], model=self.spec.id, input_type="query")
        return unit(np.array(result.results[0].embeddings[0]))


def bedrock_runtime() -> Any:
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

    def _invoke(self, body: dict[str, Any]) -> dict[str, Any]:
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
            return unit(np.array(vectors))
        return unit(np.array([self._invoke({"inputText": t, "dimensions": self.dimension, "normalize": True})["embedding"]
                               for t in texts]))

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts, query=False)

    def embed_query(self, text: str) -> np.ndarray:
        return self._embed([text], query=True)[0]
