"""Embedding APIs: Voyage (``embed``, ``contextualized_embed``) and Bedrock (Titan, Cohere).

Requests stay within each model's per-request caps (``workers.models``). The clients honour
their usual endpoint variables (``VOYAGE_BASE_URL`` here, since the Voyage SDK reads none;
``AWS_ENDPOINT_URL_BEDROCK_RUNTIME``), which is how the tests point them at the stand-in. Their
own retries are off: every request goes through ``faults.call``, which waits out a dropped
connection, a timeout, a 429 or a 5xx in place and counts it, and fails a refusal with the
provider's message. The rerankers reuse these clients.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np

from workers import faults, models
from workers.embedding.base import unit
from workers.errors import ConfigurationError
from workers.settings import get_settings


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


def _policy(query: bool) -> faults.Policy | None:
    """A query's embedding is waited on by a person searching (``faults.QUERY``); a document's
    by the pipeline (the documents' patience)."""
    return faults.QUERY if query else None


def voyage_client() -> Any:
    try:
        import voyageai.client
    except ImportError:
        raise ConfigurationError("the voyage embedders need Voyage's SDK: pip install 'situate[voyage]' "
                                 "(the image: build it with --build-arg EXTRAS=voyage)") from None

    s = get_settings()
    return voyageai.client.Client(max_retries=0, timeout=s.provider_timeout_s, base_url=s.voyage_base_url or None)


class Voyage:
    """Voyage ``embed`` with ``input_type`` document/query."""

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
            vectors += self._embed(group, "document")
        return unit(np.array(vectors))

    def embed_query(self, text: str) -> np.ndarray:
        return unit(np.array(self._embed([text], "query")[0]))

    def _embed(self, texts: list[str], input_type: str) -> list[list[float]]:
        embeddings: list[list[float]] = faults.call(
            lambda: self.client.embed(texts, model=self.spec.id, input_type=input_type).embeddings, self.name,
            _policy(input_type == "query"))
        return embeddings


class VoyageContext(Voyage):
    """voyage-context-3: each chunk's vector is computed with the whole document in view, one
    request per document. A document over the per-input cap is cut into consecutive parts,
    each embedded with its own part as context."""

    name = "voyage-context"
    contextual = True  # one document's chunks per request, never several documents' (``stages.embed``)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        # One request per part: the per-input cap is what bounds a part.
        part_spec = dataclasses.replace(self.spec, max_request_tokens=self.spec.max_text_tokens)
        vectors = []
        for part in _batches(texts, part_spec):
            vectors += self._embed(part, "document")
        return unit(np.array(vectors))

    def embed_query(self, text: str) -> np.ndarray:
        return unit(np.array(self._embed([text], "query")[0]))

    def _embed(self, texts: list[str], input_type: str) -> list[list[float]]:
        embeddings: list[list[float]] = faults.call(
            lambda: self.client.contextualized_embed([texts], model=self.spec.id, input_type=input_type).results[0].embeddings,
            self.name, _policy(input_type == "query"))
        return embeddings


def bedrock_runtime() -> Any:
    """boto3 bedrock-runtime with the standard credential chain and endpoint variables, one
    attempt per call (``faults.call`` makes the others)."""
    import boto3
    from botocore.config import Config

    return boto3.client("bedrock-runtime", config=Config(retries={"max_attempts": 1, "mode": "standard"},
                                                        connect_timeout=10,
                                                        read_timeout=get_settings().provider_timeout_s))


def invoke(client: Any, model_id: str, body: dict[str, Any], policy: faults.Policy | None = None) -> dict[str, Any]:
    """One Bedrock ``invoke_model`` (embeddings, rerankers), its answer read whole inside the
    retried call: a connection cut while the body streams is tried again too."""
    def once() -> dict[str, Any]:
        response = client.invoke_model(modelId=model_id, body=json.dumps(body), contentType="application/json",
                                       accept="application/json")
        answer: dict[str, Any] = json.loads(response["body"].read())
        return answer
    return faults.call(once, "bedrock", policy)


class Bedrock:
    """Titan Text Embeddings v2 (one text per request) or Cohere Embed v3 (96 per request)."""

    name = "bedrock"

    def __init__(self, model: str):
        self.spec = models.embedding_model("bedrock", model)
        self.dimension = self.spec.dimension
        self.client = bedrock_runtime()
        self.cohere = self.spec.id.startswith("cohere.")

    def _invoke(self, body: dict[str, Any], query: bool) -> dict[str, Any]:
        return invoke(self.client, self.spec.id, body, _policy(query))

    def _embed(self, texts: list[str], query: bool) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        if self.cohere:
            kind = "search_query" if query else "search_document"
            vectors = []
            for group in _batches(texts, self.spec):
                vectors += self._invoke({"texts": group, "input_type": kind, "truncate": "END"}, query)["embeddings"]
            return unit(np.array(vectors))
        return unit(np.array([self._invoke({"inputText": t, "dimensions": self.dimension, "normalize": True}, query)["embedding"]
                               for t in texts]))

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts, query=False)

    def embed_query(self, text: str) -> np.ndarray:
        return self._embed([text], query=True)[0]
